// Paged KV memory with a prefix index.
//
// Per layer, K and V pools of n_blocks blocks of block_tokens token rows each,
// [n_blocks * block_tokens, n_kv_heads * head_dim] in F16 (default) or F32, on the backend's device.
//
// Blocks are refcounted and content-addressed: a full block can be registered under a hash of
// (parent block hash, its tokens, namespace), so any later sequence whose prompt starts with the
// same tokens finds and shares it (across turns, sessions and requests). A block is in exactly one
// of three states:
//   free      refcount 0, not registered, on the free list;
//   cached    refcount 0, registered, on the LRU list (its KV is kept for future hits);
//   in use    refcount > 0 (registered or not).
// allocate() takes a free block, else evicts the least recently used cached block. A registered
// block is never written while registered (its content is its identity): a sequence writes only
// into blocks it holds alone, unregistering one first when it trims into it.
//
// Tiers (kv_tiers.h, optional): blocks registered with their full BlockKey can move below the
// device: write-behind to the SSD at registration, to host RAM on eviction, and back on a lookup
// miss through acquire_cached(key). Blocks registered by hash alone stay device-only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "kv/block_key.h"
#include "kv/kv_tiers.h"
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

struct KvPoolStats {
  int64_t hits_blocks = 0;     // blocks found through the prefix index
  int64_t evictions = 0;       // cached blocks evicted to make room
  int64_t registrations = 0;   // blocks registered in the index
  int64_t restored_blocks = 0; // index misses served from a lower tier (host RAM or SSD)
};

class KvPool {
 public:
  static Result<std::unique_ptr<KvPool>> create(Backend& backend, const KvPoolConfig& config);

  const KvPoolConfig& config() const { return config_; }
  KvLayerView& layer(int l) { return layers_[l]; }

  // Bytes of K and V across all layers for one token.
  size_t bytes_per_token() const;
  int n_blocks() const { return config_.n_blocks; }
  int n_free_blocks() const { return static_cast<int>(free_.size()); }
  int n_cached_blocks() const { return n_cached_; }
  // Blocks allocate() can hand out: free plus evictable cached ones.
  int n_available_blocks() const { return n_free_blocks() + n_cached_; }
  int n_used_blocks() const { return n_blocks() - n_available_blocks(); }
  const KvPoolStats& stats() const { return stats_; }

  // Takes a block (refcount 1): a free one, else the least recently used cached one (which
  // leaves the index). nullopt when every block is in use.
  std::optional<int32_t> allocate();
  void retain(int32_t block);
  // Drops a reference; at zero the block becomes cached (if registered) or free.
  void release(int32_t block);
  int refcount(int32_t block) const { return blocks_[block].refcount; }

  // Registers an in-use, full block under `hash`. If another block already holds that hash the
  // index keeps the existing one and this block stays unregistered; returns whether it registered.
  bool register_block(int32_t block, BlockHash hash);
  bool is_registered(int32_t block) const { return blocks_[block].registered; }
  // Removes an in-use block from the index, so that its owner may rewrite it (a trim into it).
  void unregister_block(int32_t block);
  // Finds the block registered under `hash` and takes a reference on it (reviving a cached one).
  std::optional<int32_t> acquire_cached(BlockHash hash);

  // Tier-aware forms. register_block keeps the key so that the block can leave the device and
  // come back; acquire_cached asks the tiers on an index miss and restores the block into a
  // fresh one (registered under key.hash), setting *restored.
  bool register_block(int32_t block, const BlockKey& key);
  std::optional<int32_t> acquire_cached(const BlockKey& key, bool* restored = nullptr);
  // acquire_cached over a chain of keys (keys[i + 1].parent == keys[i].hash), stopping at the
  // first miss: the blocks of the longest prefix found, one reference each. Consecutive tier hits
  // are restored together, so the SSD reads of a long prefix overlap instead of going one by one.
  // restored (optional) gets one flag per returned block: it came from a tier.
  std::vector<int32_t> acquire_cached_chain(std::span<const BlockKey> keys, std::vector<bool>* restored = nullptr);

  // Attaches host-RAM / SSD tiers (replacing any). The pool supplies dtype and layout to the
  // identity; unusable SSD directories are warned about and left out (never an error).
  void enable_tiers(const KvTierOptions& options);
  KvTiers* tiers() { return tiers_.get(); }
  // The identity a tier's files must match, from the pool's layout and the given model identity.
  KvTierIdentity tier_identity(const KvTierOptions& options) const;

  // Block payload copies for the tiers, in file order (layer 0 K, layer 0 V, layer 1 K, ...).
  size_t block_payload_bytes() const { return bytes_per_token() * static_cast<size_t>(config_.block_tokens); }
  void copy_block_to_host(int32_t block, uint8_t* dst) const;
  void copy_block_from_host(const uint8_t* src, int32_t block);
  // srcs[i] into blocks[i], as one backend transfer (one wait on a device backend, not one per
  // segment).
  void copy_blocks_from_host(std::span<const uint8_t* const> srcs, std::span<const int32_t> blocks);
  // dst's KV = src's, on the device (copy-on-write of a shared block a sequence must write into).
  void copy_block(int32_t src, int32_t dst);
  // The block's segments as host memory, when the pool lives in host memory (CPU backend);
  // empty otherwise.
  std::vector<HostSegment> block_host_segments(int32_t block) const;
  // True if `hash` is registered (no reference taken).
  bool contains(BlockHash hash) const { return index_.count(hash) != 0; }

 private:
  struct BlockState {
    int32_t refcount = 0;
    bool registered = false;
    BlockHash hash = 0;
    int32_t lru_prev = -1, lru_next = -1;  // cached blocks only; head = least recently used
    bool keyed = false;  // key is valid: the block may move to a lower tier
    BlockKey key;
  };
  // Rows of `block` in layer l's K or V, in file order: segment 2l = K, 2l + 1 = V.
  Tensor block_segment(int32_t block, int segment) const;
  void lru_push_back(int32_t b);
  void lru_remove(int32_t b);
  void unregister(int32_t b);

  KvPoolConfig config_;
  Backend* backend_ = nullptr;
  std::vector<std::unique_ptr<Buffer>> buffers_;  // K and V per layer
  std::vector<KvLayerView> layers_;
  std::vector<BlockState> blocks_;
  std::vector<int32_t> free_;  // a stack; lowest ids are handed out first
  int32_t lru_head_ = -1, lru_tail_ = -1;
  int n_cached_ = 0;
  std::unordered_map<BlockHash, int32_t> index_;
  KvPoolStats stats_;
  std::unique_ptr<KvTiers> tiers_;  // last member: destroyed first, finishing queued SSD writes
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
  // Makes room for n_tokens tokens in total. Error (with sizes) when the pool cannot supply the
  // blocks; on error nothing changes.
  Status reserve(int n_tokens);
  // Marks tokens [0, n) valid (after a forward wrote them). Precondition: reserved.
  void set_n_tokens(int n);
  // Drops tokens >= n and releases every block past the one holding token n - 1 (reserved ones too).
  void truncate(int n);
  // Appends a block found in the index (the caller acquired its reference). Precondition: the
  // sequence ends on a block boundary.
  void append_shared_block(int32_t block);
  // Puts `block` (the caller's reference moves in) at table index i, releasing the one there:
  // copy-on-write swaps a shared block for a private copy.
  void replace_block(size_t i, int32_t block);
  // KV slot of position pos: block * block_tokens + offset.
  int64_t slot(int pos) const;

 private:
  KvPool* pool_;
  std::vector<int32_t> blocks_;
  int n_tokens_ = 0;
};

}  // namespace tern
