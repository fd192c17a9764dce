// A Session is a conversation handle over one KV sequence. generate() reuses the longest common
// prefix of the new prompt with the tokens the session already holds (trimming on divergence),
// prefills only the new suffix in chunks (cancellable between chunks, with progress), then
// decodes token by token. Greedy output does not depend on the chunk size or on reuse: every
// kernel is batch-invariant (docs/ARCHITECTURE.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "kv/kv_pool.h"
#include "models/model.h"
#include "sampling/sampler.h"

namespace tern {

enum class StopReason : uint8_t { kNone, kMaxTokens, kEndOfGeneration, kCallback, kCancelled };
const char* stop_reason_name(StopReason r);

struct GenerateOptions {
  int max_tokens = 128;                 // generated tokens at most
  int prefill_chunk_tokens = 512;       // tokens per prefill forward
  bool reuse_prefix = true;             // false: drop held KV first (fair baselines)
  SamplerParams sampling;
  std::function<bool(int32_t)> is_end_of_generation;  // e.g. Tokenizer::is_eog; not emitted
  // Called with each generated token; return false to stop (the token is kept).
  std::function<bool(int32_t)> on_token;
  // Called after each prefill chunk with (tokens done, tokens to prefill).
  std::function<void(int, int)> on_prefill_progress;
  const std::atomic<bool>* cancel = nullptr;  // checked between forwards
};

struct GenStats {
  int prompt_tokens = 0;
  int cached_tokens = 0;      // prompt tokens whose KV was reused
  int generated_tokens = 0;
  int forwards = 0;
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
  double time_to_first_token_seconds = 0.0;
  StopReason stop_reason = StopReason::kNone;
};

class Session {
 public:
  Session(Model& model, KvPool& pool) : model_(&model), kv_(pool) {}

  // Generates a continuation of `prompt`; appends generated tokens to *out.
  Result<GenStats> generate(std::span<const int32_t> prompt, const GenerateOptions& options,
                            std::vector<int32_t>* out);
  // Prefills `prompt` (reusing the held prefix) and returns the logits of its last token.
  Result<std::vector<float>> prefill(std::span<const int32_t> prompt, const GenerateOptions& options,
                                     GenStats* stats = nullptr);

  // Tokens whose KV the session holds, in order.
  const std::vector<int32_t>& tokens() const { return tokens_; }
  void reset();

 private:
  // Runs tokens at positions [tokens_.size(), ...), appending them; logits of the last one.
  Status forward(std::span<const int32_t> ids, bool want_logits, std::vector<float>* logits);
  Status sync_prefix(std::span<const int32_t> prompt, const GenerateOptions& options, GenStats& stats,
                     std::vector<float>* last_logits);

  Model* model_;
  KvSequence kv_;
  std::vector<int32_t> tokens_;
  std::vector<float> last_logits_;  // logits after tokens_.back(), when valid
  bool last_logits_valid_ = false;
  BatchPlan plan_;
};

}  // namespace tern
