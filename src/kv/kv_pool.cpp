#include "kv/kv_pool.h"

#include <algorithm>
#include <string>

namespace tern {

Result<std::unique_ptr<KvPool>> KvPool::create(Backend& backend, const KvPoolConfig& config) {
  if (config.dtype != DType::F16 && config.dtype != DType::F32)
    return error("kv cache dtype: expected f16 or f32, got " + std::string(dtype_name(config.dtype)));
  if (config.n_layers <= 0 || config.n_kv_heads <= 0 || config.head_dim <= 0 || config.block_tokens <= 0 ||
      config.n_blocks <= 0)
    return error("kv cache: every size must be positive");
  std::unique_ptr<KvPool> pool(new KvPool());
  pool->config_ = config;
  const int64_t rows = static_cast<int64_t>(config.n_blocks) * config.block_tokens;
  const int64_t cols = static_cast<int64_t>(config.n_kv_heads) * config.head_dim;
  const size_t bytes = row_bytes(config.dtype, cols) * static_cast<size_t>(rows);
  for (int l = 0; l < config.n_layers; ++l) {
    KvLayerView view;
    view.block_tokens = config.block_tokens;
    for (Tensor* t : {&view.k, &view.v}) {
      pool->buffers_.push_back(backend.alloc(bytes));
      *t = Tensor::view(pool->buffers_.back()->data(), config.dtype, rows, cols, backend.device());
    }
    pool->layers_.push_back(view);
  }
  pool->refcounts_.assign(config.n_blocks, 0);
  for (int32_t b = config.n_blocks - 1; b >= 0; --b) pool->free_.push_back(b);
  return pool;
}

size_t KvPool::bytes_per_token() const {
  return 2 * static_cast<size_t>(config_.n_layers) * row_bytes(config_.dtype, int64_t{config_.n_kv_heads} * config_.head_dim);
}

std::optional<int32_t> KvPool::allocate() {
  if (free_.empty()) return std::nullopt;
  const int32_t b = free_.back();
  free_.pop_back();
  refcounts_[b] = 1;
  return b;
}

void KvPool::retain(int32_t block) {
  TERN_CHECK(refcounts_[block] > 0);
  ++refcounts_[block];
}

void KvPool::release(int32_t block) {
  TERN_CHECK(refcounts_[block] > 0);
  if (--refcounts_[block] == 0) free_.push_back(block);
}

Status KvSequence::reserve(int n_tokens) {
  const int bt = pool_->config().block_tokens;
  const int need = (n_tokens + bt - 1) / bt - static_cast<int>(blocks_.size());
  if (need <= 0) return Status::ok();
  if (need > pool_->n_free_blocks()) {
    return error("kv cache full: " + std::to_string(n_tokens) + " tokens need " + std::to_string(need) +
                 " more blocks of " + std::to_string(bt) + " tokens, " + std::to_string(pool_->n_free_blocks()) +
                 " free of " + std::to_string(pool_->n_blocks()));
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

int64_t KvSequence::slot(int pos) const {
  const int bt = pool_->config().block_tokens;
  TERN_CHECK(pos >= 0 && pos / bt < static_cast<int>(blocks_.size()));
  return static_cast<int64_t>(blocks_[pos / bt]) * bt + pos % bt;
}

}  // namespace tern
