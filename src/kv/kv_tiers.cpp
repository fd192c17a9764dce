#include "kv/kv_tiers.h"

#include <chrono>
#include <algorithm>
#include <cstdio>

#include "kv/kv_pool.h"

namespace tern {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::unique_ptr<KvTiers> KvTiers::create(const KvTierOptions& options, const KvTierIdentity& identity) {
  std::unique_ptr<KvTiers> t(new KvTiers());
  t->options_ = options;
  if (!t->options_.warn) t->options_.warn = [](const std::string& m) { std::fprintf(stderr, "tern: %s\n", m.c_str()); };
  t->identity_ = identity;
  t->recycler_ = KvBlobRecycler::create(options.idle_buffer_bytes);
  if (options.host_bytes > 0) t->host_ = std::make_unique<KvHostTier>(options.host_bytes);
  if (!options.disk_dir.empty()) {
    KvDiskTierOptions d;
    d.dir = options.disk_dir;
    d.max_bytes = options.disk_bytes;
    d.max_pending_bytes = options.disk_max_pending_bytes;
    d.warn = t->options_.warn;
    d.fault_errno = options.disk_fault_errno;
    d.max_readers = options.disk_readers;
    auto disk = KvDiskTier::open(std::move(d), identity);
    if (disk.is_ok()) {
      t->disk_ = std::move(disk).value();
    } else {
      t->options_.warn("kv disk cache off: " + disk.status().message());
    }
  }
  return t;
}

KvBlobPtr KvTiers::copy_out(KvPool& pool, int32_t block, const BlockKey& key) const {
  std::shared_ptr<KvBlockBlob> blob = recycler_->make(key, pool.block_payload_bytes());
  pool.copy_block_to_host(block, blob->payload.data());
  return blob;
}

void KvTiers::to_disk(KvBlobPtr blob) {
  if (disk_ && !disk_->contains(blob->key.hash)) disk_->enqueue(std::move(blob));
}

bool KvTiers::contains(BlockHash hash) const {
  return (host_ && host_->contains(hash)) || (disk_ && disk_->contains(hash));
}

void KvTiers::on_registered(KvPool& pool, int32_t block, const BlockKey& key) {
  if (!options_.write_behind || !disk_ || !disk_->writable() || disk_->contains(key.hash)) return;
  disk_->enqueue(copy_out(pool, block, key));
}

void KvTiers::on_evicted(KvPool& pool, int32_t block, const BlockKey& key) {
  if (host_) {
    if (host_->contains(key.hash)) return;
    ++stats_.spilled_to_host_blocks;
    for (KvBlobPtr& old : host_->put(copy_out(pool, block, key))) to_disk(std::move(old));
  } else if (disk_ && disk_->writable() && !disk_->contains(key.hash)) {
    disk_->enqueue(copy_out(pool, block, key));
  }
}

std::optional<int32_t> KvTiers::restore(KvPool& pool, const BlockKey& key) {
  const std::vector<int32_t> got = restore_run(pool, std::span<const BlockKey>(&key, 1));
  if (got.empty() || got[0] < 0) return std::nullopt;
  return got[0];
}

std::vector<int32_t> KvTiers::restore_run(KvPool& pool, std::span<const BlockKey> keys) {
  const double t0 = now_seconds();
  // Host copies are taken out first: allocating device blocks may spill into host RAM and push
  // them out. A block still queued for the SSD is served from its queued copy.
  std::vector<KvBlobPtr> blobs;
  std::vector<uint8_t> taken_from_host;
  for (const BlockKey& key : keys) {
    KvBlobPtr blob = host_ ? host_->take(key) : nullptr;
    const bool from_host = blob != nullptr;
    if (!blob && disk_) blob = disk_->queued(key);
    if (!blob && !(disk_ && disk_->contains(key.hash))) break;
    blobs.push_back(std::move(blob));
    taken_from_host.push_back(from_host);
  }
  std::vector<int32_t> blocks;
  while (blocks.size() < blobs.size()) {
    const std::optional<int32_t> b = pool.allocate();
    if (!b) break;
    blocks.push_back(*b);
  }
  for (size_t j = blocks.size(); j < blobs.size(); ++j) {  // no device block for them: back they go
    if (taken_from_host[j]) {
      for (KvBlobPtr& old : host_->put(std::move(blobs[j]))) to_disk(std::move(old));
    }
  }
  const size_t n = blocks.size();

  // Copies from host memory, as one transfer.
  std::vector<const uint8_t*> srcs;
  std::vector<int32_t> dsts;
  std::vector<BlockKey> disk_keys;
  std::vector<int32_t> disk_blocks;
  std::vector<size_t> disk_index;
  for (size_t j = 0; j < n; ++j) {
    if (blobs[j]) {
      srcs.push_back(blobs[j]->payload.data());
      dsts.push_back(blocks[j]);
      ++stats_.restored_from_host_blocks;  // a queued copy never left host memory either
    } else {
      disk_keys.push_back(keys[j]);
      disk_blocks.push_back(blocks[j]);
      disk_index.push_back(j);
    }
  }
  if (!dsts.empty()) pool.copy_blocks_from_host(srcs, dsts);

  // SSD reads, several in flight: straight into the pool when it is host memory.
  if (!disk_keys.empty()) {
    std::vector<uint8_t> ok;
    if (!pool.block_host_segments(disk_blocks[0]).empty()) {
      std::vector<std::vector<HostSegment>> segs;
      segs.reserve(disk_blocks.size());
      for (int32_t b : disk_blocks) segs.push_back(pool.block_host_segments(b));
      ok = disk_->read_many(disk_keys, segs);
    } else {
      read_via_staging(pool, disk_keys, disk_blocks, ok);
    }
    for (size_t d = 0; d < disk_keys.size(); ++d) {
      if (ok[d]) {
        ++stats_.restored_from_disk_blocks;
      } else {
        pool.release(disk_blocks[d]);  // unregistered: back to the free list
        blocks[disk_index[d]] = -1;
      }
    }
  }
  for (int32_t b : blocks) {
    if (b >= 0) stats_.restored_bytes += pool.block_payload_bytes();
  }
  stats_.restore_seconds += now_seconds() - t0;
  return blocks;
}

void KvTiers::read_via_staging(KvPool& pool, std::span<const BlockKey> keys, std::span<const int32_t> blocks,
                               std::vector<uint8_t>& ok) {
  // Groups of blocks bounded in bytes: the staging buffer stays small whatever the prefix length,
  // and each group is still enough reads to keep every reader busy.
  constexpr uint64_t kStagingBytes = 64ull << 20;
  const size_t block_bytes = pool.block_payload_bytes();
  const size_t seg_bytes = identity_.segment_bytes();
  const size_t per_group = std::max<size_t>(1, kStagingBytes / block_bytes);
  ok.assign(keys.size(), 0);
  for (size_t first = 0; first < keys.size(); first += per_group) {
    const size_t count = std::min(per_group, keys.size() - first);
    staging_.resize(count * block_bytes);
    std::vector<std::vector<HostSegment>> segs(count);
    for (size_t j = 0; j < count; ++j) {
      for (size_t off = 0; off < block_bytes; off += seg_bytes) segs[j].push_back({staging_.data() + j * block_bytes + off, seg_bytes});
    }
    const std::vector<uint8_t> got = disk_->read_many(keys.subspan(first, count), segs);
    std::vector<const uint8_t*> srcs;
    std::vector<int32_t> dsts;
    for (size_t j = 0; j < count; ++j) {
      ok[first + j] = got[j];
      if (got[j]) {
        srcs.push_back(staging_.data() + j * block_bytes);
        dsts.push_back(blocks[first + j]);
      }
    }
    if (!dsts.empty()) pool.copy_blocks_from_host(srcs, dsts);
  }
}

}  // namespace tern
