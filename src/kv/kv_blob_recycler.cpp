#include "kv/kv_blob_recycler.h"

namespace tern {

std::shared_ptr<KvBlobRecycler> KvBlobRecycler::create(uint64_t max_idle_bytes) {
  return std::shared_ptr<KvBlobRecycler>(new KvBlobRecycler(max_idle_bytes));
}

std::shared_ptr<KvBlockBlob> KvBlobRecycler::make(const BlockKey& key, size_t payload_bytes) {
  auto* blob = new KvBlockBlob{key, {}};
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Every block of a pool has the same size, so any idle buffer fits; one of another size
    // (a pool re-created with another layout) is dropped.
    while (!idle_.empty() && blob->payload.empty()) {
      std::vector<uint8_t>& b = idle_.back();
      idle_bytes_ -= b.size();
      if (b.size() == payload_bytes) {
        blob->payload = std::move(b);
        ++reused_;
      }
      idle_.pop_back();
    }
  }
  if (blob->payload.size() != payload_bytes) blob->payload.resize(payload_bytes);
  std::weak_ptr<KvBlobRecycler> self = weak_from_this();
  return std::shared_ptr<KvBlockBlob>(blob, [self](KvBlockBlob* b) {
    if (std::shared_ptr<KvBlobRecycler> r = self.lock()) r->give_back(std::move(b->payload));
    delete b;
  });
}

void KvBlobRecycler::give_back(std::vector<uint8_t>&& payload) {
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_bytes_ + payload.size() > max_idle_bytes_) return;  // freed with its blob
  idle_bytes_ += payload.size();
  idle_.push_back(std::move(payload));
}

uint64_t KvBlobRecycler::idle_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return idle_bytes_;
}

uint64_t KvBlobRecycler::reused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reused_;
}

}  // namespace tern
