// Session: the KV bookkeeping of one conversation (token list, block hashes, trims, prefix
// matching, planning and committing rows). The generation steps are SequenceRunner's;
// generate() and prefill() drive one runner alone, one forward per step.
#include "engine/session.h"

#include <algorithm>

#include "engine/sequence_runner.h"

namespace tern {
namespace {
bool cancelled(const GenerateOptions& o) { return o.cancel != nullptr && o.cancel->load(std::memory_order_relaxed); }
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
      KvPool& pool = kv_.pool();
      const int32_t b = kv_.blocks()[n / bt];
      if (pool.refcount(b) == 1) {
        pool.unregister_block(b);
      } else if (const std::optional<int32_t> copy = pool.allocate()) {
        // Copy-on-write: a private copy of the shared block (bit-identical KV), so the tokens
        // before n in it are kept rather than recomputed.
        pool.copy_block(b, *copy);
        kv_.replace_block(n / bt, *copy);
      } else {
        n = n / bt * bt;  // no block to copy into: recompute from the block's start
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
    BlockKey key;
    key.tokens.assign(tokens_.begin() + static_cast<std::ptrdiff_t>(i * bt), tokens_.begin() + static_cast<std::ptrdiff_t>((i + 1) * bt));
    key.hash = hash_block(parent, key.tokens);
    key.parent = parent;
    key.root = root_hash_;
    key.first_position = static_cast<int32_t>(i * bt);
    kv_.pool().register_block(kv_.blocks()[i], key);
    hashes_.push_back(key.hash);
  }
}

int Session::kv_room_tokens() const {
  const KvPool& pool = kv_.pool();
  const int bt = pool.config().block_tokens;
  const int spare = static_cast<int>(kv_.blocks().size()) * bt - static_cast<int>(tokens_.size());
  return std::max(0, spare) + pool.n_available_blocks() * bt;
}

Status Session::plan_rows(std::span<const int32_t> ids, bool all_logits, BatchPlan& p) {
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
  const int32_t seq = p.n_seqs();
  const int32_t row0 = p.n_tokens();
  for (int i = 0; i < n; ++i) {
    p.token_ids.push_back(ids[i]);
    p.seq_index.push_back(seq);
    p.positions.push_back(start + i);
    p.kv_slots.push_back(static_cast<int32_t>(kv_.slot(start + i)));
  }
  p.block_ids.insert(p.block_ids.end(), kv_.blocks().begin(), kv_.blocks().end());
  p.block_offsets.push_back(static_cast<int32_t>(p.block_ids.size()));
  for (int i = all_logits ? 0 : n - 1; i < n; ++i) p.logit_rows.push_back(row0 + i);
  return Status::ok();
}

void Session::commit_rows(std::span<const int32_t> ids, const LogitRow& last_row) {
  tokens_.insert(tokens_.end(), ids.begin(), ids.end());
  kv_.set_n_tokens(static_cast<int>(tokens_.size()));
  last_logits_.assign(last_row.logits.begin(), last_row.logits.end());
  last_argmax_ = last_row.argmax;
  last_logits_valid_ = true;
}

size_t Session::match_prefix(std::span<const int32_t> prompt, bool use_index, bool need_logits) {
  restored_tokens_ = 0;
  size_t common = 0;
  while (common < tokens_.size() && common < prompt.size() && tokens_[common] == prompt[common]) ++common;
  // The last result is reusable if it holds what this caller samples from.
  if (last_logits_valid_ && need_logits && last_logits_.empty()) last_logits_valid_ = false;
  if (common == prompt.size() && common == tokens_.size() && last_logits_valid_) return common;
  // The last prompt token is always computed (its logits start the decode).
  truncate(std::min(common, prompt.size() - 1));

  // Extend with blocks from the prefix index (other sessions' work on the same prefix, restored
  // from a lower tier when the device no longer holds it), a batch of keys at a time so that a
  // run of restored blocks is read together.
  KvPool& pool = kv_.pool();
  const size_t bt = static_cast<size_t>(pool.config().block_tokens);
  bool last_restored = false;
  if (use_index && options_.share_blocks && tokens_.size() % bt == 0) {
    constexpr size_t kKeysPerBatch = 256;
    std::vector<BlockKey> keys;
    std::vector<bool> restored;  // per block: from host RAM or SSD rather than the device pool
    for (size_t i = tokens_.size() / bt; (i + 1) * bt <= prompt.size();) {
      keys.clear();
      for (; (i + 1) * bt <= prompt.size() && keys.size() < kKeysPerBatch; ++i) {
        BlockKey key;
        key.parent = i == 0 ? root_hash_ : keys.empty() ? hashes_[i - 1] : keys.back().hash;
        key.tokens.assign(prompt.begin() + static_cast<std::ptrdiff_t>(i * bt),
                          prompt.begin() + static_cast<std::ptrdiff_t>((i + 1) * bt));
        key.hash = hash_block(key.parent, key.tokens);
        key.root = root_hash_;
        key.first_position = static_cast<int32_t>(i * bt);
        keys.push_back(std::move(key));
      }
      const std::vector<int32_t> blocks = pool.acquire_cached_chain(keys, &restored);
      for (size_t j = 0; j < blocks.size(); ++j) {
        if (restored[j]) restored_tokens_ += static_cast<int>(bt);
        last_restored = restored[j];
        kv_.append_shared_block(blocks[j]);
        tokens_.insert(tokens_.end(), keys[j].tokens.begin(), keys[j].tokens.end());
        hashes_.push_back(keys[j].hash);
        last_logits_valid_ = false;
      }
      if (blocks.size() < keys.size()) break;
    }
  }
  // A prompt that ends on a block boundary may now be held whole, but the last token's logits
  // are still needed: keep all but that token (copy-on-write of the last block if it is shared)
  // and compute just the one.
  if (tokens_.size() == prompt.size() && !last_logits_valid_) {
    truncate(prompt.size() - 1);
    // The tokens cut off the last block are computed, not restored (1, or the whole block when
    // there was no room for a copy).
    if (last_restored) restored_tokens_ -= static_cast<int>(prompt.size() - tokens_.size());
  }
  return tokens_.size();
}

namespace {

// Runs `runner` alone to completion: one forward per step.
Status drive(SequenceRunner& runner, Model& model, KvPool& pool, BatchPlan& plan, StepRunner& step,
             const GenerateOptions& options) {
  TERN_RETURN_IF_ERROR(runner.sync());
  SequenceRunner* const runners[] = {&runner};
  while (!runner.done()) {
    begin_plan(plan);
    if (runner.phase() == SequenceRunner::Phase::kPrefill) {
      if (cancelled(options)) return error("cancelled during prefill");
      TERN_ASSIGN_OR_RETURN(const int n, runner.plan_prefill(plan, std::max(1, options.prefill_chunk_tokens)));
      if (n == 0)
        return error("KV cache full: " + std::to_string(runner.tokens_to_prefill()) +
                     " prompt tokens still to compute and no free block in a pool of " +
                     std::to_string(pool.n_blocks()));
    } else {
      if (cancelled(options)) {
        runner.finish(StopReason::kCancelled);
        break;
      }
      TERN_ASSIGN_OR_RETURN(const SequenceRunner::DecodePlan d, runner.plan_decode(plan));
      if (d == SequenceRunner::DecodePlan::kFinished) break;
      if (d == SequenceRunner::DecodePlan::kNoRoom)
        return error("KV cache full: no free block for the next token in a pool of " + std::to_string(pool.n_blocks()));
    }
    // A greedy runner needs only each row's argmax, a sampling one the row's candidates: the
    // logits stay on the device unless the runner needs them (StepRunner).
    TERN_ASSIGN_OR_RETURN(const StepOutputs out, step.forward(model, plan, pool, runners));
    TERN_RETURN_IF_ERROR(runner.consume(out));
  }
  return Status::ok();
}

}  // namespace

Result<std::vector<float>> Session::prefill(std::span<const int32_t> prompt, const GenerateOptions& options,
                                            GenStats* stats) {
  SequenceRunner runner(*this, prompt, options, SequenceRunner::Mode::kPrefillOnly);
  TERN_RETURN_IF_ERROR(drive(runner, *model_, kv_.pool(), plan_, step_, options));
  if (stats != nullptr) *stats = runner.stats();
  return last_logits_;
}

Result<GenResult> Session::generate(std::span<const int32_t> prompt, const GenerateOptions& options) {
  SequenceRunner runner(*this, prompt, options);
  TERN_RETURN_IF_ERROR(drive(runner, *model_, kv_.pool(), plan_, step_, options));
  return std::move(runner.result());
}

}  // namespace tern
