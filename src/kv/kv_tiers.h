// The tiers below the device KV pool: host RAM, then SSD. KvPool calls them at three points and
// nothing above the pool needs to know they exist:
//   registration  a full block just got its hash: with write-behind, its KV is copied once and
//                 queued for the SSD writer thread (so a stable prefix is on disk after its first
//                 turn, not only when memory runs out);
//   eviction      the device pool reuses a cached block: its KV moves to host RAM (and from there,
//                 as host RAM overflows, to the SSD if not already there) instead of being lost;
//   lookup miss   the prefix index has no block for a hash: the host tier, then the SSD tier, is
//                 asked for the same key and the block is restored into a fresh device block.
// Copies go through the Backend (copy_to_host / copy_from_host), except that SSD reads land
// straight in the pool's memory when it is host memory (the CPU backend): a restore then costs
// one preadv and a checksum pass.
// Multi-tenant safety comes from the key: the chain root mixes the model fingerprint and the
// tenant salt, every file stores and re-checks it, so no prefix crosses namespaces.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kv/block_key.h"
#include "kv/kv_blob_recycler.h"
#include "kv/kv_block_file.h"
#include "kv/kv_disk_tier.h"
#include "kv/kv_host_tier.h"

namespace tern {

class KvPool;

struct KvTierOptions {
  uint64_t host_bytes = 0;     // host-RAM tier cap in bytes; 0 = no host tier
  std::string disk_dir;        // SSD tier root; "" = no SSD tier
  uint64_t disk_bytes = 0;     // SSD tier cap in bytes
  bool write_behind = true;    // queue every registered block for the SSD at once, not only on spill
  uint64_t disk_max_pending_bytes = 256ull << 20;  // write-behind queue cap (beyond it, writes wait for a spill)
  int disk_readers = 4;        // SSD reads in flight while restoring a run of blocks
  uint64_t idle_buffer_bytes = 64ull << 20;  // block buffers kept for reuse (kv_blob_recycler.h)
  // Identity stored in and checked against every file (dtype and layout come from the pool).
  std::string model_id;
  uint64_t model_fingerprint = 0;
  uint64_t tokenizer_fingerprint = 0;
  std::function<void(const std::string&)> warn;   // default: a line on stderr
  std::function<int(DiskOp)> disk_fault_errno;    // tests only: fault injection
};

struct KvTierStats {
  uint64_t spilled_to_host_blocks = 0;    // device evictions copied to host RAM
  uint64_t restored_from_host_blocks = 0;
  uint64_t restored_from_disk_blocks = 0;
  uint64_t restored_bytes = 0;
  double restore_seconds = 0.0;           // time spent restoring (copies, reads, checksums)
};

class KvTiers {
 public:
  // Opens the tiers the options ask for. An SSD directory that cannot be used is warned about
  // and left out: serving goes on without it.
  static std::unique_ptr<KvTiers> create(const KvTierOptions& options, const KvTierIdentity& identity);

  // True when a lower tier holds a block for `hash` (checked before a device block is taken
  // for a restore, so that a miss never evicts anything).
  bool contains(BlockHash hash) const;

  void on_registered(KvPool& pool, int32_t block, const BlockKey& key);
  void on_evicted(KvPool& pool, int32_t block, const BlockKey& key);
  // Restores the KV stored for `key` into a freshly allocated device block (refcount 1, not yet
  // registered); nullopt on a miss or when the pool has no block to give. A host copy is taken
  // out before the block is allocated, since the allocation may itself spill into host RAM.
  std::optional<int32_t> restore(KvPool& pool, const BlockKey& key);
  // restore() for a chain of keys, as one operation: host copies go to the device in one
  // transfer and the SSD files are read several at a time. Returns one entry per key attempted
  // (a prefix of keys: it stops where the tiers or the pool run out): the block (refcount 1, not
  // registered) or -1 where that block failed its checks (warned, deleted; later ones may
  // still have succeeded).
  std::vector<int32_t> restore_run(KvPool& pool, std::span<const BlockKey> keys);

  KvHostTier* host() { return host_.get(); }
  KvDiskTier* disk() { return disk_.get(); }
  const KvTierStats& stats() const { return stats_; }
  const KvBlobRecycler& recycler() const { return *recycler_; }

 private:
  KvBlobPtr copy_out(KvPool& pool, int32_t block, const BlockKey& key) const;
  void to_disk(KvBlobPtr blob);

  KvTierOptions options_;
  KvTierIdentity identity_;
  std::shared_ptr<KvBlobRecycler> recycler_;
  std::unique_ptr<KvHostTier> host_;
  std::unique_ptr<KvDiskTier> disk_;
  // SSD reads into a pool that is not host memory: into staging_, then one copy to the device.
  void read_via_staging(KvPool& pool, std::span<const BlockKey> keys, std::span<const int32_t> blocks,
                        std::vector<uint8_t>& ok);

  std::vector<uint8_t> staging_;
  KvTierStats stats_;
};

}  // namespace tern
