#include "kv/kv_tiers.h"

#include <chrono>
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
  if (options.host_bytes > 0) t->host_ = std::make_unique<KvHostTier>(options.host_bytes);
  if (!options.disk_dir.empty()) {
    KvDiskTierOptions d;
    d.dir = options.disk_dir;
    d.max_bytes = options.disk_bytes;
    d.max_pending_bytes = options.disk_max_pending_bytes;
    d.warn = t->options_.warn;
    d.fault_errno = options.disk_fault_errno;
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
  auto blob = std::make_shared<KvBlockBlob>();
  blob->key = key;
  blob->payload.resize(pool.block_payload_bytes());
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
  const double t0 = now_seconds();
  std::optional<int32_t> block;
  if (host_) {
    if (KvBlobPtr blob = host_->take(key)) {
      block = pool.allocate();
      if (!block) {
        for (KvBlobPtr& old : host_->put(std::move(blob))) to_disk(std::move(old));
        return std::nullopt;
      }
      pool.copy_block_from_host(blob->payload.data(), *block);
      ++stats_.restored_from_host_blocks;
    }
  }
  if (!block && disk_) {
    if (KvBlobPtr blob = disk_->queued(key)) {
      block = pool.allocate();
      if (!block) return std::nullopt;
      pool.copy_block_from_host(blob->payload.data(), *block);
      ++stats_.restored_from_host_blocks;  // it never left host memory
    }
  }
  if (!block && disk_ && disk_->contains(key.hash)) {
    block = pool.allocate();
    if (!block) return std::nullopt;
    std::vector<HostSegment> segs = pool.block_host_segments(*block);
    bool ok;
    if (!segs.empty()) {
      ok = disk_->read(key, segs);  // straight into the pool
    } else {
      staging_.resize(pool.block_payload_bytes());
      const size_t seg_bytes = identity_.segment_bytes();
      for (size_t off = 0; off < staging_.size(); off += seg_bytes) segs.push_back({staging_.data() + off, seg_bytes});
      ok = disk_->read(key, segs);
      if (ok) pool.copy_block_from_host(staging_.data(), *block);
    }
    if (!ok) {
      pool.release(*block);  // unregistered: back to the free list
      return std::nullopt;
    }
    ++stats_.restored_from_disk_blocks;
  }
  if (block) {
    stats_.restored_bytes += pool.block_payload_bytes();
    stats_.restore_seconds += now_seconds() - t0;
  }
  return block;
}

}  // namespace tern
