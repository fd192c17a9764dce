// The host-RAM tier: copies of blocks the device pool evicted, LRU under a byte cap.
// Exclusive of the device pool: a block restored from here leaves the tier (the device holds it
// again), so host memory only ever holds blocks the device has given up. Engine thread only.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "kv/block_key.h"

namespace tern {

// A block's KV copied to host memory: segments in file order (layer 0 K, layer 0 V, ...).
struct KvBlockBlob {
  BlockKey key;
  std::vector<uint8_t> payload;
};
using KvBlobPtr = std::shared_ptr<const KvBlockBlob>;

// Host memory for one segment of a block's payload (layer 0 K, layer 0 V, ...).
struct HostSegment {
  void* data = nullptr;
  size_t bytes = 0;
};

class KvHostTier {
 public:
  explicit KvHostTier(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  bool contains(BlockHash hash) const { return index_.count(hash) != 0; }
  // Inserts `blob` as most recently used (an exact duplicate replaces the old copy) and returns
  // the blobs evicted to stay under the cap, least recently used first, for a lower tier. A blob
  // larger than the whole cap is returned at once.
  std::vector<KvBlobPtr> put(KvBlobPtr blob);
  // Removes and returns the blob for `key.hash` when its key matches exactly (null otherwise).
  KvBlobPtr take(const BlockKey& key);

  uint64_t bytes() const { return bytes_; }
  uint64_t max_bytes() const { return max_bytes_; }
  size_t n_blocks() const { return index_.size(); }

 private:
  uint64_t max_bytes_;
  uint64_t bytes_ = 0;
  std::list<KvBlobPtr> lru_;  // front = least recently used
  std::unordered_map<BlockHash, std::list<KvBlobPtr>::iterator> index_;
};

}  // namespace tern
