#include "engine/session.h"

#include <algorithm>
#include <chrono>

namespace tern {
namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
bool cancelled(const GenerateOptions& o) { return o.cancel != nullptr && o.cancel->load(std::memory_order_relaxed); }
}  // namespace

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::kNone: return "none";
    case StopReason::kMaxTokens: return "max_tokens";
    case StopReason::kEndOfGeneration: return "end_of_generation";
    case StopReason::kCallback: return "callback";
    case StopReason::kCancelled: return "cancelled";
  }
  return "unknown";
}

void Session::reset() {
  kv_.truncate(0);
  tokens_.clear();
  last_logits_valid_ = false;
}

Status Session::forward(std::span<const int32_t> ids, bool want_logits, std::vector<float>* logits) {
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
  if (want_logits) p.logit_rows.push_back(n - 1);
  logits->resize(want_logits ? static_cast<size_t>(n_vocab) : 0);
  model_->forward(p, kv_.pool(), logits->data());
  tokens_.insert(tokens_.end(), ids.begin(), ids.end());
  kv_.set_n_tokens(static_cast<int>(tokens_.size()));
  return Status::ok();
}

// Brings the session to hold exactly `prompt` and leaves the logits after its last token in
// *last_logits. Reuses the longest common prefix; at least the last prompt token is always
// recomputed unless its logits are still held.
Status Session::sync_prefix(std::span<const int32_t> prompt, const GenerateOptions& options, GenStats& stats,
                            std::vector<float>* last_logits) {
  if (prompt.empty()) return error("prompt is empty: at least one token is needed");
  if (static_cast<int>(prompt.size()) > model_->n_ctx())
    return error("context overflow: the prompt's " + std::to_string(prompt.size()) +
                 " tokens exceed the context of " + std::to_string(model_->n_ctx()) + " tokens");
  if (!options.reuse_prefix) reset();
  size_t common = 0;
  while (common < tokens_.size() && common < prompt.size() && tokens_[common] == prompt[common]) ++common;
  stats.prompt_tokens = static_cast<int>(prompt.size());
  if (common == prompt.size() && common == tokens_.size() && last_logits_valid_) {
    stats.cached_tokens = static_cast<int>(common);
    *last_logits = last_logits_;
    return Status::ok();
  }
  // Recompute the last prompt token so its logits exist.
  common = std::min(common, prompt.size() - 1);
  tokens_.resize(common);
  kv_.truncate(static_cast<int>(common));
  last_logits_valid_ = false;
  stats.cached_tokens = static_cast<int>(common);

  const int chunk = std::max(1, options.prefill_chunk_tokens);
  const int total = static_cast<int>(prompt.size() - common);
  for (size_t pos = common; pos < prompt.size();) {
    if (cancelled(options)) return error("cancelled during prefill");
    const size_t n = std::min<size_t>(chunk, prompt.size() - pos);
    const bool last = pos + n == prompt.size();
    TERN_RETURN_IF_ERROR(forward(prompt.subspan(pos, n), last, last_logits));
    ++stats.forwards;
    pos += n;
    if (options.on_prefill_progress) options.on_prefill_progress(static_cast<int>(pos - common), total);
  }
  last_logits_ = *last_logits;
  last_logits_valid_ = true;
  return Status::ok();
}

Result<std::vector<float>> Session::prefill(std::span<const int32_t> prompt, const GenerateOptions& options,
                                            GenStats* stats) {
  GenStats local;
  GenStats& s = stats ? *stats : local;
  std::vector<float> logits;
  const double t0 = now_seconds();
  TERN_RETURN_IF_ERROR(sync_prefix(prompt, options, s, &logits));
  s.prefill_seconds = now_seconds() - t0;
  return logits;
}

Result<GenStats> Session::generate(std::span<const int32_t> prompt, const GenerateOptions& options,
                                   std::vector<int32_t>* out) {
  GenStats stats;
  std::vector<float> logits;
  const double t0 = now_seconds();
  TERN_RETURN_IF_ERROR(sync_prefix(prompt, options, stats, &logits));
  const double t1 = now_seconds();
  stats.prefill_seconds = t1 - t0;

  Sampler sampler(options.sampling);
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  stats.stop_reason = StopReason::kMaxTokens;
  for (int i = 0; i < options.max_tokens; ++i) {
    if (cancelled(options)) {
      stats.stop_reason = StopReason::kCancelled;
      break;
    }
    const int32_t token = sampler.sample(logits, history);
    if (i == 0) stats.time_to_first_token_seconds = now_seconds() - t0;
    if (options.is_end_of_generation && options.is_end_of_generation(token)) {
      stats.stop_reason = StopReason::kEndOfGeneration;
      break;
    }
    out->push_back(token);
    history.push_back(token);
    ++stats.generated_tokens;
    const bool keep_going = !options.on_token || options.on_token(token);
    if (!keep_going) {
      stats.stop_reason = StopReason::kCallback;
      break;
    }
    if (i + 1 == options.max_tokens) break;  // the last token needs no forward
    const int32_t one[1] = {token};
    TERN_RETURN_IF_ERROR(forward(one, true, &logits));
    ++stats.forwards;
    last_logits_ = logits;
    last_logits_valid_ = true;
  }
  stats.decode_seconds = now_seconds() - t1;
  return stats;
}

}  // namespace tern
