#include "kv/kv_pool.h"

#include <gtest/gtest.h>

#include "backends/cpu/cpu_backend.h"

namespace tern {
namespace {

KvPoolConfig small_config(int n_blocks) {
  KvPoolConfig c;
  c.n_layers = 2;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.block_tokens = 4;
  c.n_blocks = n_blocks;
  return c;
}

TEST(KvPool, BytesPerToken) {
  cpu::CpuBackend backend({1, false});
  auto pool = KvPool::create(backend, small_config(4));
  ASSERT_TRUE(pool.is_ok());
  EXPECT_EQ(pool.value()->bytes_per_token(), 2u * 2 * 2 * 8 * 2);  // K+V, layers, heads, dim, f16
}

TEST(KvPool, ReserveTruncateAndRelease) {
  cpu::CpuBackend backend({1, false});
  auto pool = std::move(KvPool::create(backend, small_config(4))).value();
  {
    KvSequence seq(*pool);
    ASSERT_TRUE(seq.reserve(9).is_ok());  // 3 blocks of 4
    EXPECT_EQ(seq.blocks().size(), 3u);
    EXPECT_EQ(pool->n_free_blocks(), 1);
    seq.set_n_tokens(9);
    EXPECT_EQ(seq.slot(5), seq.blocks()[1] * 4 + 1);
    seq.truncate(4);
    EXPECT_EQ(seq.blocks().size(), 1u);
    EXPECT_EQ(pool->n_free_blocks(), 3);
    EXPECT_EQ(seq.n_tokens(), 4);
  }
  EXPECT_EQ(pool->n_free_blocks(), 4);
}

TEST(KvPool, FullPoolIsAnErrorWithSizesAndChangesNothing) {
  cpu::CpuBackend backend({1, false});
  auto pool = std::move(KvPool::create(backend, small_config(2))).value();
  KvSequence seq(*pool);
  ASSERT_TRUE(seq.reserve(4).is_ok());
  Status s = seq.reserve(13);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("kv cache full"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("13 tokens"), std::string::npos) << s.message();
  EXPECT_EQ(seq.blocks().size(), 1u);
  EXPECT_EQ(pool->n_free_blocks(), 1);
}

TEST(KvPool, SharedBlocksSurviveUntilLastRelease) {
  cpu::CpuBackend backend({1, false});
  auto pool = std::move(KvPool::create(backend, small_config(2))).value();
  const int32_t b = *pool->allocate();
  pool->retain(b);
  pool->release(b);
  EXPECT_EQ(pool->refcount(b), 1);
  EXPECT_EQ(pool->n_free_blocks(), 1);
  pool->release(b);
  EXPECT_EQ(pool->n_free_blocks(), 2);
}

TEST(KvPool, RejectsBadConfig) {
  cpu::CpuBackend backend({1, false});
  KvPoolConfig c = small_config(2);
  c.dtype = DType::Q4_0;
  EXPECT_FALSE(KvPool::create(backend, c).is_ok());
  c = small_config(0);
  EXPECT_FALSE(KvPool::create(backend, c).is_ok());
}

}  // namespace
}  // namespace tern

namespace tern {
namespace {

TEST(PrefixIndex, CachedBlocksAreFoundAndEvictedLeastRecentlyUsedFirst) {
  cpu::CpuBackend backend({1, false});
  auto pool = std::move(KvPool::create(backend, small_config(3))).value();
  const std::vector<int32_t> t1 = {1, 2, 3, 4}, t2 = {5, 6, 7, 8};
  const BlockHash h1 = hash_block(root_block_hash(0), t1);
  const BlockHash h2 = hash_block(h1, t2);
  const int32_t a = *pool->allocate(), b = *pool->allocate();
  EXPECT_TRUE(pool->register_block(a, h1));
  EXPECT_TRUE(pool->register_block(b, h2));
  pool->release(a);  // cached, least recently used
  pool->release(b);
  EXPECT_EQ(pool->n_cached_blocks(), 2);
  EXPECT_EQ(pool->n_available_blocks(), 3);

  // A hit revives the block and takes a reference.
  auto hit = pool->acquire_cached(h1);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(*hit, a);
  EXPECT_EQ(pool->refcount(a), 1);
  EXPECT_EQ(pool->n_cached_blocks(), 1);
  pool->release(a);  // now a is more recent than b

  // Allocation takes the free block first, then evicts b (the LRU one), not a.
  const int32_t c = *pool->allocate();
  EXPECT_NE(c, a);
  EXPECT_NE(c, b);
  const int32_t d = *pool->allocate();
  EXPECT_EQ(d, b);
  EXPECT_EQ(pool->stats().evictions, 1);
  EXPECT_FALSE(pool->contains(h2));
  EXPECT_TRUE(pool->contains(h1));
  // In-use blocks are never evicted.
  const int32_t e = *pool->allocate();
  EXPECT_EQ(e, a);
  EXPECT_FALSE(pool->allocate().has_value());
}

TEST(PrefixIndex, DuplicateHashKeepsTheFirstBlock) {
  cpu::CpuBackend backend({1, false});
  auto pool = std::move(KvPool::create(backend, small_config(2))).value();
  const BlockHash h = hash_block(root_block_hash(1), std::vector<int32_t>{9, 9, 9, 9});
  const int32_t a = *pool->allocate(), b = *pool->allocate();
  EXPECT_TRUE(pool->register_block(a, h));
  EXPECT_FALSE(pool->register_block(b, h));
  EXPECT_FALSE(pool->is_registered(b));
  pool->release(b);
  EXPECT_EQ(pool->n_free_blocks(), 1);  // unregistered -> free, not cached
}

TEST(PrefixIndex, HashDependsOnParentAndSalt) {
  const std::vector<int32_t> t = {1, 2, 3, 4};
  EXPECT_NE(hash_block(root_block_hash(0), t), hash_block(root_block_hash(1), t));
  EXPECT_NE(hash_block(hash_block(root_block_hash(0), t), t), hash_block(root_block_hash(0), t));
  EXPECT_EQ(hash_block(root_block_hash(7), t), hash_block(root_block_hash(7), t));
}

}  // namespace
}  // namespace tern
