// Paged KV memory: per layer, K and V pools of n_blocks blocks of block_tokens token rows each,
// [n_blocks * block_tokens, n_kv_heads * head_dim] in F16 (default) or F32, allocated on the
// backend's device. Blocks are refcounted so sequences can share a prefix; a block returns to the
// free list when its count drops to zero.
// Invariant: a block is either free (refcount 0, on the free list) or referenced (refcount > 0).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/status.h"
#include "ops/backend.h"

namespace tern {

struct KvPoolConfig {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_tokens = 16;      // tokens per block
  int n_blocks = 0;           // blocks per layer
  DType dtype = DType::F16;   // F16 or F32
};

class KvPool {
 public:
  static Result<std::unique_ptr<KvPool>> create(Backend& backend, const KvPoolConfig& config);

  const KvPoolConfig& config() const { return config_; }
  KvLayerView& layer(int l) { return layers_[l]; }

  // Bytes of K and V across all layers for one token.
  size_t bytes_per_token() const;
  int n_free_blocks() const { return static_cast<int>(free_.size()); }
  int n_blocks() const { return config_.n_blocks; }

  // Takes a free block (refcount 1), or nullopt when none is free.
  std::optional<int32_t> allocate();
  void retain(int32_t block);
  void release(int32_t block);
  int refcount(int32_t block) const { return refcounts_[block]; }

 private:
  KvPoolConfig config_;
  std::vector<std::unique_ptr<Buffer>> buffers_;  // K and V per layer
  std::vector<KvLayerView> layers_;
  std::vector<int32_t> refcounts_;
  std::vector<int32_t> free_;  // a stack; lowest ids are handed out first
};

// A sequence's view of the pool: its block table and token count. Trimming is truncating the
// table. Owns one reference on each of its blocks.
class KvSequence {
 public:
  explicit KvSequence(KvPool& pool) : pool_(&pool) {}
  ~KvSequence() { truncate(0); }
  KvSequence(const KvSequence&) = delete;
  KvSequence& operator=(const KvSequence&) = delete;

  KvPool& pool() const { return *pool_; }
  int n_tokens() const { return n_tokens_; }
  const std::vector<int32_t>& blocks() const { return blocks_; }
  // Makes room for n_tokens tokens in total. Error (with sizes) when the pool is out of blocks;
  // on error nothing changes.
  Status reserve(int n_tokens);
  // Marks tokens [0, n) valid (after a forward wrote them). Precondition: reserved.
  void set_n_tokens(int n);
  // Drops tokens >= n and releases every block past the one holding token n - 1 (reserved ones too).
  void truncate(int n);
  // KV slot of position pos: block * block_tokens + offset.
  int64_t slot(int pos) const;

 private:
  KvPool* pool_;
  std::vector<int32_t> blocks_;
  int n_tokens_ = 0;
};

}  // namespace tern
