#include "engine/session.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "engine/stop_matcher.h"
#include "spec/verify.h"

namespace tern {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
bool cancelled(const GenerateOptions& o) { return o.cancel != nullptr && o.cancel->load(std::memory_order_relaxed); }

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Tracks whether generation is inside a <think> block and how many tokens it has spent there.
class ThinkTracker {
 public:
  ThinkTracker(std::string_view open, std::string_view close, bool inside)
      : open_(trim(open)), close_(trim(close)), inside_(inside) {}
  void on_text(std::string_view delta) {
    tail_.append(delta);
    if (tail_.size() > 256) tail_.erase(0, tail_.size() - 64);
    if (inside_ && !close_.empty() && tail_.find(close_) != std::string::npos) {
      inside_ = false;
      tail_.clear();
    } else if (!inside_ && !open_.empty() && tail_.find(open_) != std::string::npos) {
      inside_ = true;
      tokens_ = 0;
      tail_.clear();
    }
  }
  void on_token() {
    if (inside_) ++tokens_;
  }
  bool inside() const { return inside_; }
  int tokens() const { return tokens_; }

 private:
  std::string open_, close_, tail_;
  bool inside_;
  int tokens_ = 0;
};

}  // namespace

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::kNone: return "none";
    case StopReason::kMaxTokens: return "max_tokens";
    case StopReason::kContextFull: return "context_full";
    case StopReason::kEndOfGeneration: return "end_of_generation";
    case StopReason::kStopString: return "stop_string";
    case StopReason::kCallback: return "callback";
    case StopReason::kCancelled: return "cancelled";
  }
  return "unknown";
}

Session::Session(Model& model, KvPool& pool, const tok::Tokenizer* tokenizer, SessionOptions options)
    : model_(&model),
      kv_(pool),
      tokenizer_(tokenizer),
      options_(options),
      root_hash_(root_block_hash(model.config().fingerprint ^ (options.salt * 0x9e3779b97f4a7c15ull))) {}

void Session::reset() { truncate(0); }

void Session::truncate(size_t n) {
  const int bt = kv_.pool().config().block_tokens;
  if (n < tokens_.size()) {
    // A block another sequence shares is never written again: cut back to its start instead. A
    // registered block only this session holds leaves the index and is rewritten in place.
    if (n % bt != 0) {
      const int32_t b = kv_.blocks()[n / bt];
      if (kv_.pool().refcount(b) > 1) {
        n = n / bt * bt;
      } else {
        kv_.pool().unregister_block(b);
      }
    }
    tokens_.resize(n);
    last_logits_valid_ = false;
  }
  kv_.truncate(static_cast<int>(tokens_.size()));  // also frees blocks reserved past the end
  hashes_.resize(std::min(hashes_.size(), tokens_.size() / bt));
}

void Session::register_full_blocks() {
  if (!options_.share_blocks) return;
  const int bt = kv_.pool().config().block_tokens;
  const size_t n_full = tokens_.size() / bt;
  while (hashes_.size() < n_full) {
    const size_t i = hashes_.size();
    const BlockHash parent = i == 0 ? root_hash_ : hashes_[i - 1];
    const BlockHash h = hash_block(parent, std::span<const int32_t>(tokens_).subspan(i * bt, bt));
    kv_.pool().register_block(kv_.blocks()[i], h);
    hashes_.push_back(h);
  }
}

Status Session::forward(std::span<const int32_t> ids, bool all_logits) {
  const int start = static_cast<int>(tokens_.size());
  const int n = static_cast<int>(ids.size());
  const int n_vocab = model_->config().n_vocab;
  for (int32_t id : ids) {
    if (id < 0 || id >= n_vocab)
      return error("token id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
  }
  if (start + n > model_->n_ctx())
    return error("context overflow: " + std::to_string(start + n) + " tokens exceed the context of " +
                 std::to_string(model_->n_ctx()) + " tokens");
  TERN_RETURN_IF_ERROR(kv_.reserve(start + n));
  BatchPlan& p = plan_;
  p.token_ids.assign(ids.begin(), ids.end());
  p.seq_index.assign(n, 0);
  p.positions.resize(n);
  p.kv_slots.resize(n);
  for (int i = 0; i < n; ++i) {
    p.positions[i] = start + i;
    p.kv_slots[i] = static_cast<int32_t>(kv_.slot(start + i));
  }
  p.block_offsets = {0, static_cast<int32_t>(kv_.blocks().size())};
  p.block_ids = kv_.blocks();
  p.logit_rows.clear();
  for (int i = all_logits ? 0 : n - 1; i < n; ++i) p.logit_rows.push_back(i);
  logits_.resize(p.logit_rows.size() * static_cast<size_t>(n_vocab));
  model_->forward(p, kv_.pool(), logits_.data());
  tokens_.insert(tokens_.end(), ids.begin(), ids.end());
  kv_.set_n_tokens(static_cast<int>(tokens_.size()));
  last_logits_.assign(logits_.end() - n_vocab, logits_.end());
  last_logits_valid_ = true;
  return Status::ok();
}

Status Session::sync_prefix(std::span<const int32_t> prompt, const GenerateOptions& options, GenStats& stats) {
  if (prompt.empty()) return error("prompt is empty: at least one token is needed");
  if (static_cast<int>(prompt.size()) > model_->n_ctx())
    return error("context overflow: the prompt's " + std::to_string(prompt.size()) +
                 " tokens exceed the context of " + std::to_string(model_->n_ctx()) + " tokens");
  stats.prompt_tokens = static_cast<int>(prompt.size());
  if (!options.reuse_prefix) reset();
  size_t common = 0;
  while (common < tokens_.size() && common < prompt.size() && tokens_[common] == prompt[common]) ++common;
  if (common == prompt.size() && common == tokens_.size() && last_logits_valid_) {
    stats.cached_tokens = static_cast<int>(common);
    return Status::ok();
  }
  // The last prompt token is always computed (its logits start the decode).
  truncate(std::min(common, prompt.size() - 1));

  // Extend with blocks from the prefix index (other sessions' work on the same prefix).
  KvPool& pool = kv_.pool();
  const size_t bt = static_cast<size_t>(pool.config().block_tokens);
  if (options.reuse_prefix && options_.share_blocks && tokens_.size() % bt == 0) {
    for (size_t i = tokens_.size() / bt; (i + 1) * bt < prompt.size(); ++i) {
      const BlockHash parent = i == 0 ? root_hash_ : hashes_[i - 1];
      const BlockHash h = hash_block(parent, prompt.subspan(i * bt, bt));
      const std::optional<int32_t> block = pool.acquire_cached(h);
      if (!block) break;
      kv_.append_shared_block(*block);
      tokens_.insert(tokens_.end(), prompt.begin() + static_cast<std::ptrdiff_t>(i * bt),
                     prompt.begin() + static_cast<std::ptrdiff_t>((i + 1) * bt));
      hashes_.push_back(h);
      last_logits_valid_ = false;
    }
  }
  const size_t cached = tokens_.size();
  stats.cached_tokens = static_cast<int>(cached);

  const size_t chunk = static_cast<size_t>(std::max(1, options.prefill_chunk_tokens));
  const int total = static_cast<int>(prompt.size() - cached);
  for (size_t pos = cached; pos < prompt.size();) {
    if (cancelled(options)) return error("cancelled during prefill");
    const size_t n = std::min(chunk, prompt.size() - pos);
    TERN_RETURN_IF_ERROR(forward(prompt.subspan(pos, n), false));
    register_full_blocks();
    ++stats.forwards;
    pos += n;
    if (options.on_prefill_progress) options.on_prefill_progress(static_cast<int>(pos - cached), total);
  }
  return Status::ok();
}

Result<std::vector<float>> Session::prefill(std::span<const int32_t> prompt, const GenerateOptions& options,
                                            GenStats* stats) {
  GenStats local;
  GenStats& s = stats ? *stats : local;
  const double t0 = now_seconds();
  TERN_RETURN_IF_ERROR(sync_prefix(prompt, options, s));
  s.prefill_seconds = now_seconds() - t0;
  return last_logits_;
}

Result<GenResult> Session::generate(std::span<const int32_t> prompt, const GenerateOptions& options) {
  GenResult result;
  GenStats& stats = result.stats;
  const double t0 = now_seconds();
  TERN_RETURN_IF_ERROR(sync_prefix(prompt, options, stats));
  const double t1 = now_seconds();
  stats.prefill_seconds = t1 - t0;

  const int n_vocab = model_->config().n_vocab;
  Sampler sampler(options.sampling);
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  StopMatcher stops(options.stop_strings);
  std::optional<tok::StreamDecoder> stream;
  if (tokenizer_ != nullptr) stream.emplace(*tokenizer_);

  // Thinking budget: is the prompt's generation prefix already inside a <think> block?
  std::vector<int32_t> think_close_ids;
  bool inside_think = false;
  if (options.think_budget_tokens >= 0 && tokenizer_ != nullptr) {
    think_close_ids = tokenizer_->encode(options.think_close, false, true);
    const size_t tail = std::min<size_t>(prompt.size(), 32);
    const std::string tail_text = tokenizer_->decode(prompt.subspan(prompt.size() - tail));
    const size_t open = tail_text.rfind(trim(options.think_open));
    const size_t close = tail_text.rfind(trim(options.think_close));
    inside_think = open != std::string::npos && (close == std::string::npos || close < open);
  }
  ThinkTracker think(options.think_open, options.think_close, inside_think);
  bool think_closed_by_budget = false;

  if (options.drafter != nullptr) options.drafter->prefill(prompt);

  // Commits one generated token: text, stop checks. Returns false when generation must end.
  auto commit = [&](int32_t token, bool forced) -> bool {
    if (!forced && tokenizer_ != nullptr && tokenizer_->is_eog(token)) {
      stats.stop_reason = StopReason::kEndOfGeneration;
      return false;
    }
    result.tokens.push_back(token);
    history.push_back(token);
    ++stats.generated_tokens;
    if (stream) {
      const std::string piece = stream->push(token);
      const std::string emit = stops.feed(piece);
      if (!emit.empty()) {
        result.text += emit;
        if (options.on_text) options.on_text(emit);
      }
      think.on_text(piece);
    }
    think.on_token();
    if (stops.stopped()) {
      stats.stop_reason = StopReason::kStopString;
      return false;
    }
    if (options.should_stop && options.should_stop(result.text, stats.generated_tokens)) {
      stats.stop_reason = StopReason::kCallback;
      return false;
    }
    if (stats.generated_tokens >= options.max_tokens) {
      stats.stop_reason = StopReason::kMaxTokens;
      return false;
    }
    return true;
  };

  int32_t pending = options.max_tokens > 0 ? sampler.sample(last_logits_, history) : -1;
  stats.time_to_first_token_seconds = now_seconds() - t0;
  bool running = options.max_tokens > 0;
  if (!running) stats.stop_reason = StopReason::kMaxTokens;
  while (running) {
    if (cancelled(options)) {
      stats.stop_reason = StopReason::kCancelled;
      break;
    }
    if (!commit(pending, false)) break;
    if (static_cast<int>(tokens_.size()) + 1 > model_->n_ctx()) {
      stats.stop_reason = StopReason::kContextFull;
      break;
    }
    // The feed is [pending] + a draft: forced think-close tokens, or a drafter's proposal.
    Draft draft;
    bool forced = false;
    if (!think_closed_by_budget && think.inside() && options.think_budget_tokens >= 0 &&
        think.tokens() >= options.think_budget_tokens) {
      draft.tokens = think_close_ids;
      forced = think_closed_by_budget = true;
    } else if (options.drafter != nullptr) {
      const int room = std::min(options.max_tokens - stats.generated_tokens,
                                model_->n_ctx() - static_cast<int>(tokens_.size()) - 1);
      if (room > 0) draft = options.drafter->draft(history, std::min(options.max_draft_tokens, room));
    }
    const int k = static_cast<int>(draft.tokens.size());
    std::vector<int32_t> feed;
    feed.reserve(k + 1);
    feed.push_back(pending);
    feed.insert(feed.end(), draft.tokens.begin(), draft.tokens.end());
    const size_t base = tokens_.size();
    TERN_RETURN_IF_ERROR(forward(feed, k > 0 && !forced));
    ++stats.forwards;

    int n_accepted = 0;
    int32_t next = -1;
    if (forced) {
      n_accepted = k;
      next = sampler.sample(last_logits_, [&] {
        std::vector<int32_t> h = history;
        h.insert(h.end(), draft.tokens.begin(), draft.tokens.end());
        return h;
      }());
    } else if (k > 0) {
      auto row = [&](int i) { return std::span<const float>(logits_).subspan(static_cast<size_t>(i) * n_vocab, n_vocab); };
      const VerifyOutcome v = verify_draft(draft, row, sampler, history);
      n_accepted = v.n_accepted;
      next = v.next;
      stats.drafts_proposed += k;
      stats.drafts_accepted += n_accepted;
      options.drafter->commit(k, n_accepted);
      if (n_accepted < k) {
        truncate(base + 1 + n_accepted);  // drop the rejected drafts' KV
        last_logits_.assign(row(n_accepted).begin(), row(n_accepted).end());
        last_logits_valid_ = true;
      }
    } else {
      next = sampler.sample(last_logits_, history);
      if (options.drafter != nullptr) options.drafter->commit(0, 0);
    }
    register_full_blocks();
    for (int i = 0; i < n_accepted && running; ++i) {
      if (!commit(draft.tokens[i], forced)) {
        // Stopped inside the accepted run: keep KV only up to the token before the stop point.
        running = false;
        truncate(base + 1 + i);
      }
    }
    if (!running) break;
    pending = next;
  }
  if (options.drafter != nullptr) options.drafter->end(history);
  if (stream) {
    const std::string rest = stops.stopped() ? std::string() : stops.feed(stream->flush()) + stops.flush();
    if (!rest.empty()) {
      result.text += rest;
      if (options.on_text) options.on_text(rest);
    }
  }
  stats.decode_seconds = now_seconds() - t1;
  return result;
}

}  // namespace tern
