#include "kv/kv_pool.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "core/bytes.h"

namespace tern {

BlockHash root_block_hash(uint64_t salt) {
  // splitmix64 finaliser: a well-mixed start for the chain.
  uint64_t z = salt + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

BlockHash hash_block(BlockHash parent, std::span<const int32_t> tokens) {
  // FNV-1a over the parent hash and the token ids, then a final mix. 64-bit: collisions among
  // the few million blocks a server ever sees are ~1e-7 likely; the SSD tier re-verifies tokens.
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  };
  mix(parent);
  mix(tokens.size());
  for (int32_t t : tokens) mix(static_cast<uint32_t>(t));
  return root_block_hash(h);
}

Result<std::unique_ptr<KvPool>> KvPool::create(Backend& backend, const KvPoolConfig& config) {
  if (config.dtype != DType::F16 && config.dtype != DType::F32)
    return error("kv cache dtype: expected f16 or f32, got " + std::string(dtype_name(config.dtype)));
  if (config.n_layers <= 0 || config.n_kv_heads <= 0 || config.head_dim <= 0 || config.block_tokens <= 0 ||
      config.n_blocks <= 0)
    return error("kv cache: every size must be positive");
  std::unique_ptr<KvPool> pool(new KvPool());
  pool->config_ = config;
  pool->backend_ = &backend;
  const int64_t rows = static_cast<int64_t>(config.n_blocks) * config.block_tokens;
  const int64_t cols = static_cast<int64_t>(config.n_kv_heads) * config.head_dim;
  size_t bytes = 0;  // one layer's K (or V)
  if (__builtin_mul_overflow(row_bytes(config.dtype, cols), static_cast<size_t>(rows), &bytes) ||
      bytes > SIZE_MAX / 2 / static_cast<size_t>(config.n_layers)) {
    return error("kv cache: " + std::to_string(config.n_blocks) + " blocks of " + std::to_string(config.block_tokens) +
                 " tokens exceed any memory");
  }
  // What the pool takes in all, for the message when it does not fit (the allocations made so
  // far are freed with the pool).
  const uint64_t total = 2 * static_cast<uint64_t>(bytes) * static_cast<uint64_t>(config.n_layers);
  auto too_large = [&](const std::string& why) {
    return error("kv cache: " + std::to_string(config.n_blocks) + " blocks of " + std::to_string(config.block_tokens) +
                 " tokens (" + human_bytes(total) + " for " + std::to_string(config.n_layers) +
                 " layers) do not fit: " + why + "; a smaller context (--ctx) or KV budget (--kv-mem) needs less");
  };
  // Told before anything is allocated where the backend knows its free memory (a host pool
  // larger than the available RAM would be zero-filled into swap or the OOM killer otherwise).
  if (const std::optional<MemoryInfo> mem = backend.memory_info(); mem && total > mem->free_bytes) {
    return too_large("only " + human_bytes(mem->free_bytes) + " of the " + std::string(backend.name()) +
                     " backend's " + human_bytes(mem->total_bytes) + " are free");
  }
  for (int l = 0; l < config.n_layers; ++l) {
    KvLayerView view;
    view.block_tokens = config.block_tokens;
    for (Tensor* t : {&view.k, &view.v}) {
      try {
        pool->buffers_.push_back(backend.alloc(bytes));
      } catch (const OutOfMemory& e) {
        return too_large(e.what());
      }
      *t = Tensor::view(pool->buffers_.back()->data(), config.dtype, rows, cols, backend.device());
    }
    pool->layers_.push_back(view);
  }
  pool->blocks_.resize(config.n_blocks);
  for (int32_t b = config.n_blocks - 1; b >= 0; --b) pool->free_.push_back(b);
  return pool;
}

size_t KvPool::bytes_per_token() const {
  return 2 * static_cast<size_t>(config_.n_layers) *
         row_bytes(config_.dtype, int64_t{config_.n_kv_heads} * config_.head_dim);
}

void KvPool::lru_push_back(int32_t b) {
  BlockState& s = blocks_[b];
  s.lru_prev = lru_tail_;
  s.lru_next = -1;
  if (lru_tail_ >= 0) blocks_[lru_tail_].lru_next = b;
  lru_tail_ = b;
  if (lru_head_ < 0) lru_head_ = b;
  ++n_cached_;
}

void KvPool::lru_remove(int32_t b) {
  BlockState& s = blocks_[b];
  if (s.lru_prev >= 0) blocks_[s.lru_prev].lru_next = s.lru_next; else lru_head_ = s.lru_next;
  if (s.lru_next >= 0) blocks_[s.lru_next].lru_prev = s.lru_prev; else lru_tail_ = s.lru_prev;
  s.lru_prev = s.lru_next = -1;
  --n_cached_;
}

void KvPool::unregister(int32_t b) {
  BlockState& s = blocks_[b];
  TERN_CHECK(s.registered);
  auto it = index_.find(s.hash);
  TERN_CHECK(it != index_.end() && it->second == b);
  index_.erase(it);
  s.registered = false;
  s.keyed = false;
}

void KvPool::unregister_block(int32_t block) {
  TERN_CHECK(blocks_[block].refcount > 0);
  if (blocks_[block].registered) unregister(block);
}

std::optional<int32_t> KvPool::allocate() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (lru_head_ >= 0) {
    b = lru_head_;
    lru_remove(b);
    // The content is still intact here: a tier takes its copy before the block is reused.
    if (tiers_ && blocks_[b].keyed) tiers_->on_evicted(*this, b, blocks_[b].key);
    unregister(b);
    ++stats_.evictions;
  } else {
    return std::nullopt;
  }
  blocks_[b].refcount = 1;
  return b;
}

void KvPool::retain(int32_t block) {
  TERN_CHECK(blocks_[block].refcount > 0);
  ++blocks_[block].refcount;
}

void KvPool::release(int32_t block) {
  BlockState& s = blocks_[block];
  TERN_CHECK(s.refcount > 0);
  if (--s.refcount > 0) return;
  if (s.registered) {
    lru_push_back(block);
  } else {
    free_.push_back(block);
  }
}

bool KvPool::register_block(int32_t block, BlockHash hash) {
  BlockState& s = blocks_[block];
  TERN_CHECK(s.refcount > 0);
  if (s.registered) return s.hash == hash;
  if (!index_.emplace(hash, block).second) return false;
  s.registered = true;
  s.hash = hash;
  ++stats_.registrations;
  return true;
}

std::optional<int32_t> KvPool::acquire_cached(BlockHash hash) {
  auto it = index_.find(hash);
  if (it == index_.end()) return std::nullopt;
  const int32_t b = it->second;
  BlockState& s = blocks_[b];
  if (s.refcount == 0) lru_remove(b);
  ++s.refcount;
  ++stats_.hits_blocks;
  return b;
}

bool KvPool::register_block(int32_t block, const BlockKey& key) {
  if (!register_block(block, key.hash)) return false;
  BlockState& s = blocks_[block];
  if (!s.keyed) {
    s.keyed = true;
    s.key = key;
    if (tiers_) tiers_->on_registered(*this, block, key);
  }
  return true;
}

std::optional<int32_t> KvPool::acquire_cached(const BlockKey& key, bool* restored) {
  if (restored != nullptr) *restored = false;
  if (std::optional<int32_t> b = acquire_cached(key.hash)) return b;
  if (!tiers_ || !tiers_->contains(key.hash)) return std::nullopt;  // a miss never evicts
  const std::optional<int32_t> b = tiers_->restore(*this, key);
  if (!b) return std::nullopt;
  // Registering re-offers the block to write-behind, which skips it when the SSD already has it.
  const bool registered = register_block(*b, key);
  TERN_CHECK(registered);  // the index missed this hash a moment ago
  ++stats_.restored_blocks;
  if (restored != nullptr) *restored = true;
  return b;
}

std::vector<int32_t> KvPool::acquire_cached_chain(std::span<const BlockKey> keys, std::vector<bool>* restored) {
  std::vector<int32_t> out;
  if (restored != nullptr) restored->clear();
  size_t i = 0;
  while (i < keys.size()) {
    if (std::optional<int32_t> b = acquire_cached(keys[i].hash)) {
      out.push_back(*b);
      if (restored != nullptr) restored->push_back(false);
      ++i;
      continue;
    }
    // The run of keys only the tiers hold (a miss everywhere ends the chain and evicts nothing).
    size_t end = i;
    while (end < keys.size() && tiers_ && !index_.count(keys[end].hash) && tiers_->contains(keys[end].hash)) ++end;
    if (end == i) break;
    const std::vector<int32_t> got = tiers_->restore_run(*this, keys.subspan(i, end - i));
    // Every block restored is registered, even past a failed one: its KV stays cached.
    size_t n_leading = 0;
    bool leading = true;
    for (size_t j = 0; j < got.size(); ++j) {
      if (got[j] < 0) {
        leading = false;
        continue;
      }
      const bool registered = register_block(got[j], keys[i + j]);
      TERN_CHECK(registered);  // the index missed these hashes a moment ago
      ++stats_.restored_blocks;
      if (leading) {
        out.push_back(got[j]);
        if (restored != nullptr) restored->push_back(true);
        ++n_leading;
      } else {
        release(got[j]);
      }
    }
    if (n_leading < end - i) break;
    i = end;
  }
  return out;
}

KvTierIdentity KvPool::tier_identity(const KvTierOptions& options) const {
  KvTierIdentity id;
  id.model_id = options.model_id;
  id.model_fingerprint = options.model_fingerprint;
  id.tokenizer_fingerprint = options.tokenizer_fingerprint;
  id.dtype = config_.dtype;
  id.n_layers = config_.n_layers;
  id.n_kv_heads = config_.n_kv_heads;
  id.head_dim = config_.head_dim;
  id.block_tokens = config_.block_tokens;
  return id;
}

void KvPool::enable_tiers(const KvTierOptions& options) {
  tiers_.reset();  // finishes the old tiers' writes first
  tiers_ = KvTiers::create(options, tier_identity(options));
}

Tensor KvPool::block_segment(int32_t block, int segment) const {
  const KvLayerView& l = layers_[segment / 2];
  const Tensor& t = segment % 2 == 0 ? l.k : l.v;
  return t.slice_rows(static_cast<int64_t>(block) * config_.block_tokens, config_.block_tokens);
}

void KvPool::copy_block_to_host(int32_t block, uint8_t* dst) const {
  std::vector<Backend::DeviceToHost> copies;
  copies.reserve(2 * static_cast<size_t>(config_.n_layers));
  for (int seg = 0; seg < 2 * config_.n_layers; ++seg) {
    const Tensor t = block_segment(block, seg);
    copies.push_back({t, dst});
    dst += t.bytes();
  }
  backend_->copy_to_host_n(copies);
}

void KvPool::copy_block_from_host(const uint8_t* src, int32_t block) {
  copy_blocks_from_host(std::span<const uint8_t* const>(&src, 1), std::span<const int32_t>(&block, 1));
}

void KvPool::copy_blocks_from_host(std::span<const uint8_t* const> srcs, std::span<const int32_t> blocks) {
  TERN_CHECK(srcs.size() == blocks.size());
  std::vector<Backend::HostToDevice> copies;
  copies.reserve(blocks.size() * 2 * static_cast<size_t>(config_.n_layers));
  for (size_t i = 0; i < blocks.size(); ++i) {
    const uint8_t* src = srcs[i];
    for (int seg = 0; seg < 2 * config_.n_layers; ++seg) {
      const Tensor t = block_segment(blocks[i], seg);
      copies.push_back({src, t});
      src += t.bytes();
    }
  }
  backend_->copy_from_host_n(copies);
}

void KvPool::copy_block(int32_t src, int32_t dst) {
  for (int seg = 0; seg < 2 * config_.n_layers; ++seg) {
    Tensor t = block_segment(dst, seg);
    backend_->copy_on_device(block_segment(src, seg), t);
  }
}

std::vector<HostSegment> KvPool::block_host_segments(int32_t block) const {
  std::vector<HostSegment> segs;
  if (backend_->device() != Device::kCpu) return segs;
  for (int seg = 0; seg < 2 * config_.n_layers; ++seg) {
    const Tensor t = block_segment(block, seg);
    segs.push_back({t.data, t.bytes()});
  }
  return segs;
}

Status KvSequence::reserve(int n_tokens) {
  const int bt = pool_->config().block_tokens;
  const int need = (n_tokens + bt - 1) / bt - static_cast<int>(blocks_.size());
  if (need <= 0) return Status::ok();
  if (need > pool_->n_available_blocks()) {
    return error("kv cache full: " + std::to_string(n_tokens) + " tokens need " + std::to_string(need) +
                 " more blocks of " + std::to_string(bt) + " tokens; " + std::to_string(pool_->n_available_blocks()) +
                 " of " + std::to_string(pool_->n_blocks()) + " blocks are free or evictable");
  }
  for (int i = 0; i < need; ++i) blocks_.push_back(*pool_->allocate());
  return Status::ok();
}

void KvSequence::set_n_tokens(int n) {
  TERN_CHECK(n >= 0 && n <= static_cast<int>(blocks_.size()) * pool_->config().block_tokens);
  n_tokens_ = n;
}

void KvSequence::truncate(int n) {
  TERN_CHECK(n >= 0);
  n_tokens_ = std::min(n_tokens_, n);
  const int bt = pool_->config().block_tokens;
  const size_t keep = static_cast<size_t>((n + bt - 1) / bt);
  while (blocks_.size() > keep) {
    pool_->release(blocks_.back());
    blocks_.pop_back();
  }
}

void KvSequence::append_shared_block(int32_t block) {
  const int bt = pool_->config().block_tokens;
  TERN_CHECK(n_tokens_ % bt == 0 && static_cast<int>(blocks_.size()) * bt == n_tokens_);
  blocks_.push_back(block);
  n_tokens_ += bt;
}

void KvSequence::replace_block(size_t i, int32_t block) {
  TERN_CHECK(i < blocks_.size());
  pool_->release(blocks_[i]);
  blocks_[i] = block;
}

int64_t KvSequence::slot(int pos) const {
  const int bt = pool_->config().block_tokens;
  TERN_CHECK(pos >= 0 && pos / bt < static_cast<int>(blocks_.size()));
  return static_cast<int64_t>(blocks_[pos / bt]) * bt + pos % bt;
}

}  // namespace tern
