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
