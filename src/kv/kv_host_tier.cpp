#include "kv/kv_host_tier.h"

namespace tern {

std::vector<KvBlobPtr> KvHostTier::put(KvBlobPtr blob) {
  std::vector<KvBlobPtr> evicted;
  if (blob->payload.size() > max_bytes_) {
    evicted.push_back(std::move(blob));
    return evicted;
  }
  if (auto it = index_.find(blob->key.hash); it != index_.end()) {
    bytes_ -= (*it->second)->payload.size();
    lru_.erase(it->second);
    index_.erase(it);
  }
  while (bytes_ + blob->payload.size() > max_bytes_) {
    KvBlobPtr old = std::move(lru_.front());
    lru_.pop_front();
    index_.erase(old->key.hash);
    bytes_ -= old->payload.size();
    evicted.push_back(std::move(old));
  }
  bytes_ += blob->payload.size();
  const BlockHash hash = blob->key.hash;
  lru_.push_back(std::move(blob));
  index_[hash] = std::prev(lru_.end());
  return evicted;
}

KvBlobPtr KvHostTier::take(const BlockKey& key) {
  auto it = index_.find(key.hash);
  if (it == index_.end() || (*it->second)->key != key) return nullptr;
  KvBlobPtr blob = std::move(*it->second);
  lru_.erase(it->second);
  index_.erase(it);
  bytes_ -= blob->payload.size();
  return blob;
}

}  // namespace tern
