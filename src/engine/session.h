// A Session is a conversation handle over one KV sequence (the seed engine's persistent prefix
// cache, generalised). generate(prompt):
//   1. finds the longest cached prefix: the session's own tokens first, then the pool's prefix
//      index (blocks other sessions computed: the same system prompt and tools);
//   2. trims to it (never writing into a block another sequence may share);
//   3. prefills the new suffix in chunks, cancellable between chunks, with progress;
//   4. decodes, verifying drafts from a DraftSource in one batched forward when one is given.
// The steps themselves live in SequenceRunner (engine/sequence_runner.h), which the Engine's
// scheduler also drives, many at once; generate() is a loop running one runner alone.
// Greedy output does not depend on chunking, reuse or speculation: every kernel is
// batch-invariant (docs/ARCHITECTURE.md). Full blocks are registered in the prefix index as soon
// as they hold committed tokens.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kv/kv_pool.h"
#include "models/model.h"
#include "sampling/sampler.h"
#include "engine/step_outputs.h"
#include "spec/draft_source.h"
#include "tokenizer/tokenizer.h"

namespace tern {

enum class StopReason : uint8_t { kNone, kMaxTokens, kContextFull, kEndOfGeneration, kStopString, kCallback, kCancelled };
const char* stop_reason_name(StopReason r);

struct GenerateOptions {
  int max_tokens = 128;                 // generated tokens at most
  int prefill_chunk_tokens = 512;       // tokens per prefill forward
  bool reuse_prefix = true;             // false: drop held KV and skip the index (fair baselines)
  SamplerParams sampling;
  std::vector<std::string> stop_strings;  // generation ends before the first one (not emitted)
  // Called with each piece of text as it becomes final (stop strings already held back).
  std::function<void(std::string_view)> on_text;
  // Caller stop predicate, checked after each committed token: (text so far, tokens generated).
  std::function<bool(std::string_view, int)> should_stop;
  // Called after each prefill chunk with (tokens done, tokens to prefill).
  std::function<void(int, int)> on_prefill_progress;
  const std::atomic<bool>* cancel = nullptr;  // checked between forwards
  DraftSource* drafter = nullptr;       // speculative decoding when set
  int max_draft_tokens = 10;            // per verify forward
  // Sample from each row's best candidates, computed where the logits are, whenever that provably
  // picks the token the whole row would (sampling/candidate_sampling.cpp); false: always move the
  // whole row to the host (A/B tests). Tokens are the same either way.
  bool device_candidates = true;
  // Thinking budget: after this many generated tokens inside <think>, the engine closes the block
  // itself (think_close) and the answer follows. -1 = no budget.
  int think_budget_tokens = -1;
  std::string think_open = "<think>";
  std::string think_close = "\n</think>\n\n";
};

struct GenStats {
  int prompt_tokens = 0;
  int cached_tokens = 0;      // prompt tokens whose KV was reused (own or shared blocks)
  int restored_tokens = 0;    // of cached_tokens, those restored from host RAM or SSD (KV tiers)
  int generated_tokens = 0;
  int forwards = 0;
  int drafts_proposed = 0;
  int drafts_accepted = 0;
  // Sampler picks decided from the step's candidates alone / that fetched the whole row
  // (GenerateOptions::device_candidates; sampling/candidate_sampling.cpp).
  int candidate_picks = 0;
  int candidate_fallbacks = 0;
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
  double time_to_first_token_seconds = 0.0;  // Engine: from submit, so queue_seconds included
  double queue_seconds = 0.0;                 // Engine: submit to admission; 0 for a Session
  StopReason stop_reason = StopReason::kNone;
};

struct GenResult {
  std::string text;             // generated text (stop string excluded)
  std::vector<int32_t> tokens;  // generated token ids (forced think-close tokens included)
  GenStats stats;
};

struct SessionOptions {
  uint64_t salt = 0;         // namespaces the prefix index (tenant); mixed with the model fingerprint
  bool share_blocks = true;  // register full blocks in the prefix index and look prompts up there
};

class Session {
 public:
  // tokenizer may be null (no text, stop strings or thinking budget).
  Session(Model& model, KvPool& pool, const tok::Tokenizer* tokenizer = nullptr, SessionOptions options = {});

  Result<GenResult> generate(std::span<const int32_t> prompt, const GenerateOptions& options);
  // Prefills `prompt` (reusing what it can) and returns the logits of its last token.
  Result<std::vector<float>> prefill(std::span<const int32_t> prompt, const GenerateOptions& options,
                                     GenStats* stats = nullptr);

  // Tokens whose KV the session holds, in order.
  const std::vector<int32_t>& tokens() const { return tokens_; }
  void reset();

 private:
  // The runner does the generation steps through the helpers below.
  friend class SequenceRunner;

  // Appends `ids` at positions tokens_.size()... as one more sequence of `plan` and reserves
  // their KV; logits for every row if all_logits, else for the last. Errors: a token outside the
  // vocabulary, the context or the KV pool overflowing (then nothing changes).
  Status plan_rows(std::span<const int32_t> ids, bool all_logits, BatchPlan& plan);
  // After the forward: the rows planned by plan_rows are in KV; last_row = the last row's result
  // (logits, or only their argmax when the step was argmax-only).
  void commit_rows(std::span<const int32_t> ids, const LogitRow& last_row);
  // The result after tokens_.back(). Precondition: last_logits_valid_.
  LogitRow last_row() const { return LogitRow{last_logits_, last_argmax_}; }
  // Tokens that can be appended before the KV pool runs out (own spare slots + available blocks).
  int kv_room_tokens() const;
  // Trims to the longest prefix of `prompt` that is cached (own tokens, then the prefix index
  // when use_index) and returns its length. All of it, with last_logits_ valid, when the
  // session already holds exactly `prompt` and its last result has what the caller needs (the
  // logits when need_logits, else the argmax suffices); otherwise at most prompt.size() - 1 (the
  // last token is always computed, for its logits).
  size_t match_prefix(std::span<const int32_t> prompt, bool use_index, bool need_logits);
  // Drops tokens >= n (never leaves a shared/registered block to be written into).
  void truncate(size_t n);
  void register_full_blocks();

  Model* model_;
  KvSequence kv_;
  const tok::Tokenizer* tokenizer_;
  SessionOptions options_;
  BlockHash root_hash_;
  std::vector<int32_t> tokens_;
  std::vector<BlockHash> hashes_;   // chain hash of each full block of tokens_
  std::vector<float> last_logits_;  // the logits after tokens_.back() (empty: only the argmax)
  int32_t last_argmax_ = -1;        // their argmax, when computed
  bool last_logits_valid_ = false;  // last_logits_ / last_argmax_ describe tokens_.back()
  int restored_tokens_ = 0;         // of match_prefix's result, tokens restored from a KV tier
  BatchPlan plan_;                  // generate()'s step
  StepRunner step_;                 // generate()'s step outputs
};

}  // namespace tern
