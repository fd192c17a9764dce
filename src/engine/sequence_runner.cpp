#include "engine/sequence_runner.h"

#include <algorithm>
#include <chrono>

#include "spec/verify.h"

namespace tern {
namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void begin_plan(BatchPlan& plan) {
  plan.token_ids.clear();
  plan.seq_index.clear();
  plan.positions.clear();
  plan.kv_slots.clear();
  plan.block_offsets.assign(1, 0);
  plan.block_ids.clear();
  plan.logit_rows.clear();
}

SequenceRunner::SequenceRunner(Session& session, std::span<const int32_t> prompt, const GenerateOptions& options,
                               Mode mode)
    : session_(&session),
      prompt_(prompt),
      options_(&options),
      mode_(mode),
      n_vocab_(session.model_->config().n_vocab),
      sampler_(options.sampling),
      stops_(options.stop_strings),
      think_(options.think_open, options.think_close, false) {
  result_.stats.prompt_tokens = static_cast<int>(prompt.size());
  t_start_ = now_seconds();
}

std::span<const int32_t> SequenceRunner::target() const {
  return resuming_ ? std::span<const int32_t>(resume_tokens_) : prompt_;
}

int SequenceRunner::tokens_to_prefill() const {
  const int n = static_cast<int>(target().size());
  if (phase_ == Phase::kSync) return n;
  if (phase_ == Phase::kPrefill) return n - static_cast<int>(session_->tokens_.size());
  return 0;
}

LogitRow SequenceRunner::row(const StepOutputs& out, int i) const {
  const int r = first_logit_row_ + i;
  LogitRow row;
  if (!out.logits.empty()) row.logits = out.logits.subspan(static_cast<size_t>(r) * n_vocab_, n_vocab_);
  if (!out.argmax.empty()) row.argmax = out.argmax[r];
  if (const CandidateRows* c = out.candidates; c != nullptr) {
    const size_t first = static_cast<size_t>(r) * static_cast<size_t>(c->count);
    row.candidates.ids = std::span<const int32_t>(c->ids + first, static_cast<size_t>(c->count));
    row.candidates.logits = std::span<const float>(c->logits + first, static_cast<size_t>(c->count));
    row.candidates.flags = c->flags[r];
    if (c->exp_sums != nullptr && c->temperatures[r] > 0.0f) {
      row.candidates.exp_sum = c->exp_sums[r];
      row.candidates.sum_temperature = c->temperatures[r];
    }
    row.candidates.n_vocab = n_vocab_;
  }
  if (out.fetch_logits != nullptr) row.fetch_logits = [&out, r] { return out.fetch_logits(r); };
  return row;
}

OutputNeed SequenceRunner::need() const {
  if (mode_ == Mode::kPrefillOnly) return OutputNeed::kLogits;
  if (!options_->device_candidates) return needs_logits() ? OutputNeed::kLogits : OutputNeed::kArgmax;
  // Rejection sampling (a draft with a distribution) verifies with whole distributions; the
  // coupled rule for point-mass drafts samples each row as plain decoding does (spec/verify.h).
  const bool verifying = phase_ == Phase::kDecode && !draft_.tokens.empty() && !forced_ &&
                         !coupled_verify(draft_, sampler_);
  return sampler_.need(verifying);
}

Status SequenceRunner::sync() {
  TERN_CHECK(phase_ == Phase::kSync);
  Session& s = *session_;
  const int n_ctx = s.model_->n_ctx();
  if (!synced_once_) {
    if (prompt_.empty()) return error("prompt is empty: at least one token is needed");
    if (static_cast<int>(prompt_.size()) > n_ctx)
      return error("context overflow: the prompt's " + std::to_string(prompt_.size()) +
                   " tokens exceed the context of " + std::to_string(n_ctx) + " tokens");
    if (!options_->reuse_prefix) s.reset();
  }
  const std::span<const int32_t> want = target();
  const size_t cached = s.match_prefix(want, options_->reuse_prefix, needs_logits());
  // A resumed sequence reports the cache hits of its first sync: that is what the client saw.
  // Progress counts against the first sync too: a re-prefill after a preemption of the prompt's
  // prefill carries on from where the client was told it stood.
  if (!synced_once_) {
    result_.stats.cached_tokens = static_cast<int>(cached);
    result_.stats.restored_tokens = s.restored_tokens_;
    prefill_base_ = static_cast<int>(cached);
    prefill_total_ = static_cast<int>(want.size() - cached);
  }
  synced_once_ = true;
  if (cached == want.size()) {
    finish_prefill(s.last_row());  // the session already held exactly this prompt, logits included
  } else {
    phase_ = Phase::kPrefill;
  }
  return Status::ok();
}

Result<int> SequenceRunner::plan_prefill(BatchPlan& plan, int max_tokens) {
  TERN_CHECK(phase_ == Phase::kPrefill && planned_rows_ == 0);
  Session& s = *session_;
  const std::span<const int32_t> want = target();
  const size_t pos = s.tokens_.size();
  const int n = std::min({max_tokens, static_cast<int>(want.size() - pos), s.kv_room_tokens()});
  if (n <= 0) return 0;
  feed_.assign(want.begin() + static_cast<std::ptrdiff_t>(pos), want.begin() + static_cast<std::ptrdiff_t>(pos + n));
  first_logit_row_ = static_cast<int>(plan.logit_rows.size());
  TERN_RETURN_IF_ERROR(s.plan_rows(feed_, false, plan));
  n_logit_rows_ = 1;
  planned_rows_ = n;
  return n;
}

Result<SequenceRunner::DecodePlan> SequenceRunner::plan_decode(BatchPlan& plan, bool allow_draft) {
  TERN_CHECK(phase_ == Phase::kDecode && planned_rows_ == 0);
  Session& s = *session_;
  const GenerateOptions& o = *options_;
  const int n_ctx = s.model_->n_ctx();
  // Room first, so that a step without KV for this sequence changes nothing. A thinking budget
  // may force its close tokens in with the pending one.
  const int room = s.kv_room_tokens();
  const bool may_force = o.think_budget_tokens >= 0 && !think_closed_by_budget_;
  if (room < 1 + (may_force ? static_cast<int>(think_close_ids_.size()) : 0)) return DecodePlan::kNoRoom;

  if (!commit(pending_, false)) {
    end_generation();
    return DecodePlan::kFinished;
  }
  if (static_cast<int>(s.tokens_.size()) + 1 > n_ctx) {
    result_.stats.stop_reason = StopReason::kContextFull;
    end_generation();
    return DecodePlan::kFinished;
  }
  // The feed is [pending] + a draft: forced think-close tokens, or a drafter's proposal.
  draft_ = Draft{};
  forced_ = false;
  if (may_force && think_.inside() && think_.tokens() >= o.think_budget_tokens) {
    draft_.tokens = think_close_ids_;
    forced_ = think_closed_by_budget_ = true;
  } else if (o.drafter != nullptr && allow_draft) {
    const int limit = std::min({o.max_tokens - result_.stats.generated_tokens,
                                n_ctx - static_cast<int>(s.tokens_.size()) - 1, room - 1});
    if (limit > 0) draft_ = o.drafter->draft(history_, std::min(o.max_draft_tokens, limit));
  }
  const int k = static_cast<int>(draft_.tokens.size());
  feed_.clear();
  feed_.push_back(pending_);
  feed_.insert(feed_.end(), draft_.tokens.begin(), draft_.tokens.end());
  base_ = s.tokens_.size();
  const bool all_logits = k > 0 && !forced_;
  first_logit_row_ = static_cast<int>(plan.logit_rows.size());
  TERN_RETURN_IF_ERROR(s.plan_rows(feed_, all_logits, plan));
  n_logit_rows_ = all_logits ? k + 1 : 1;
  planned_rows_ = k + 1;
  return DecodePlan::kPlanned;
}

Status SequenceRunner::consume(const StepOutputs& out) {
  TERN_CHECK(planned_rows_ > 0);
  const size_t rows = static_cast<size_t>(first_logit_row_ + n_logit_rows_);
  const OutputNeed need_now = need();
  TERN_CHECK(out.logits.size() >= rows * n_vocab_ ||
             (out.argmax.size() >= rows && (need_now == OutputNeed::kArgmax ||
                                            (need_now == OutputNeed::kCandidates && out.candidates != nullptr))));
  Session& s = *session_;
  planned_rows_ = 0;
  const LogitRow last = row(out, n_logit_rows_ - 1);
  s.commit_rows(feed_, last);
  ++result_.stats.forwards;

  if (phase_ == Phase::kPrefill) {
    s.register_full_blocks();
    // A resumed decode rebuilds KV the client already saw prefilled: no progress to report.
    const int done = static_cast<int>(s.tokens_.size()) - prefill_base_;
    if (!resuming_ && done > 0 && options_->on_prefill_progress)
      options_->on_prefill_progress(std::min(done, prefill_total_), prefill_total_);
    if (s.tokens_.size() == target().size()) finish_prefill(last);
    return Status::ok();
  }

  TERN_CHECK(phase_ == Phase::kDecode);
  const GenerateOptions& o = *options_;
  const int k = static_cast<int>(draft_.tokens.size());
  int n_accepted = 0;
  int32_t next = -1;
  if (forced_) {
    n_accepted = k;
    std::vector<int32_t> h = history_;
    h.insert(h.end(), draft_.tokens.begin(), draft_.tokens.end());
    next = sampler_.sample(last, h);
  } else if (k > 0) {
    const VerifyOutcome v = verify_draft(draft_, [&](int i) { return row(out, i); }, sampler_, history_);
    n_accepted = v.n_accepted;
    next = v.next;
    result_.stats.drafts_proposed += k;
    result_.stats.drafts_accepted += n_accepted;
    o.drafter->commit(k, n_accepted);
    if (n_accepted < k) {
      s.truncate(base_ + 1 + n_accepted);  // drop the rejected drafts' KV
      const LogitRow r = row(out, n_accepted);
      s.last_logits_.assign(r.logits.begin(), r.logits.end());
      s.last_argmax_ = r.argmax;
      s.last_logits_valid_ = true;
    }
  } else {
    next = sampler_.sample(last, history_);
    if (o.drafter != nullptr) o.drafter->commit(0, 0);
  }
  s.register_full_blocks();
  for (int i = 0; i < n_accepted; ++i) {
    if (!commit(draft_.tokens[i], forced_)) {
      // Stopped inside the accepted run: keep KV only up to the token before the stop point.
      s.truncate(base_ + 1 + i);
      end_generation();
      return Status::ok();
    }
  }
  pending_ = next;
  return Status::ok();
}

void SequenceRunner::finish_prefill(const LogitRow& last) {
  if (resuming_) {
    // Rebuilt after a preemption: the pending token was sampled before it, decoding goes on.
    resuming_ = false;
    resume_tokens_.clear();
    phase_ = Phase::kDecode;
    return;
  }
  t_prefill_end_ = now_seconds();
  result_.stats.prefill_seconds = t_prefill_end_ - t_start_;
  if (mode_ == Mode::kPrefillOnly) {
    phase_ = Phase::kDone;
    return;
  }
  start_decode(last);
}

void SequenceRunner::start_decode(const LogitRow& last) {
  const GenerateOptions& o = *options_;
  const tok::Tokenizer* tokenizer = session_->tokenizer_;
  history_.assign(prompt_.begin(), prompt_.end());
  if (tokenizer != nullptr) stream_.emplace(*tokenizer);
  // Thinking budget: is the prompt's generation prefix already inside a <think> block?
  if (o.think_budget_tokens >= 0 && tokenizer != nullptr) {
    think_close_ids_ = tokenizer->encode(o.think_close, false, true);
    const size_t tail = std::min<size_t>(prompt_.size(), 32);
    const std::string tail_text = tokenizer->decode(prompt_.subspan(prompt_.size() - tail));
    const size_t open = tail_text.rfind(trim_space(o.think_open));
    const size_t close = tail_text.rfind(trim_space(o.think_close));
    think_ = ThinkTracker(o.think_open, o.think_close,
                          open != std::string::npos && (close == std::string::npos || close < open));
  }
  if (o.drafter != nullptr) o.drafter->prefill(prompt_);
  decode_started_ = true;
  phase_ = Phase::kDecode;
  if (o.max_tokens <= 0) {
    result_.stats.stop_reason = StopReason::kMaxTokens;
    end_generation();
    return;
  }
  pending_ = sampler_.sample(last, history_);
  result_.stats.time_to_first_token_seconds = now_seconds() - t_start_;
}

bool SequenceRunner::commit(int32_t token, bool forced) {
  const GenerateOptions& o = *options_;
  const tok::Tokenizer* tokenizer = session_->tokenizer_;
  GenStats& stats = result_.stats;
  if (!forced && tokenizer != nullptr && tokenizer->is_eog(token)) {
    stats.stop_reason = StopReason::kEndOfGeneration;
    return false;
  }
  result_.tokens.push_back(token);
  history_.push_back(token);
  ++stats.generated_tokens;
  if (stream_) {
    const std::string piece = stream_->push(token);
    const std::string emit = stops_.feed(piece);
    if (!emit.empty()) {
      result_.text += emit;
      if (o.on_text) o.on_text(emit);
    }
    think_.on_text(piece);
  }
  think_.on_token();
  if (stops_.stopped()) {
    stats.stop_reason = StopReason::kStopString;
    return false;
  }
  if (o.should_stop && o.should_stop(result_.text, stats.generated_tokens)) {
    stats.stop_reason = StopReason::kCallback;
    return false;
  }
  if (stats.generated_tokens >= o.max_tokens) {
    stats.stop_reason = StopReason::kMaxTokens;
    return false;
  }
  return true;
}

void SequenceRunner::end_generation() {
  const GenerateOptions& o = *options_;
  if (decode_started_ && o.drafter != nullptr) o.drafter->end(history_);
  if (stream_) {
    const std::string rest = stops_.stopped() ? std::string() : stops_.feed(stream_->flush()) + stops_.flush();
    if (!rest.empty()) {
      result_.text += rest;
      if (o.on_text) o.on_text(rest);
    }
  }
  result_.stats.candidate_picks = static_cast<int>(sampler_.candidate_stats().exact);
  result_.stats.candidate_fallbacks = static_cast<int>(sampler_.candidate_stats().fallback);
  const double now = now_seconds();
  if (decode_started_) {
    result_.stats.decode_seconds = now - t_prefill_end_;
  } else {
    result_.stats.prefill_seconds = now - t_start_;
  }
  phase_ = Phase::kDone;
}

void SequenceRunner::preempt() {
  TERN_CHECK((phase_ == Phase::kPrefill || phase_ == Phase::kDecode) && planned_rows_ == 0);
  Session& s = *session_;
  if (phase_ == Phase::kDecode) {
    // The KV to rebuild: prompt + every committed token (the pending one is not in KV yet).
    resume_tokens_ = s.tokens_;
    resuming_ = true;
  }
  // Full blocks stay registered and cached, so the re-prefill is mostly prefix-index hits.
  s.reset();
  phase_ = Phase::kSync;
}

void SequenceRunner::finish(StopReason reason) {
  TERN_CHECK(planned_rows_ == 0);
  if (phase_ == Phase::kDone) return;
  result_.stats.stop_reason = reason;
  end_generation();
}

}  // namespace tern
