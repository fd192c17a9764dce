// Which attention steps the register-tiled kernel takes and how it cuts them (attention_tiled.h
// attention_tiled_supports / plan_attention_tiled): host logic only, so it runs without a GPU and
// CI checks it. The kernel's bits are checked on a device by GpuAttention.TiledKernel*.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "backends/cuda/attention_tiled.h"

namespace tern {
namespace {

constexpr int kSms = 132;  // H100 / H200
constexpr size_t kCap = size_t{256} << 20;

// An f16 attention of the shape, its caches 16-byte aligned, for a step of n_tokens tokens whose
// largest position is max_position (every token at it: the most partial slots).
cuda::AttentionArgs args(int n_heads, int n_kv_heads, int head_dim, int n_tokens, int max_position) {
  cuda::AttentionArgs a;
  std::memset(&a, 0, sizeof(a));
  a.n_heads = n_heads;
  a.n_kv_heads = n_kv_heads;
  a.head_dim = head_dim;
  a.kv_dtype = DType::F16;
  a.k_cache = reinterpret_cast<const void*>(uintptr_t{1} << 20);
  a.v_cache = reinterpret_cast<const void*>(uintptr_t{2} << 20);
  a.k_cache_stride = a.v_cache_stride = int64_t{n_kv_heads} * head_dim;
  a.plan.n_tokens = n_tokens;
  a.plan.n_tc_tiles = (n_tokens + cuda::kAttnTcTileTokens - 1) / cuda::kAttnTcTileTokens;
  a.plan.n_partials = n_tokens * (max_position / cuda::kAttnSpanTokens + 1);
  return a;
}

TEST(AttentionTiledPlan, SupportsF16CachesAtHeadDim64And128WithAlignedRows) {
  EXPECT_TRUE(cuda::attention_tiled_supports(args(32, 8, 128, 512, 600)));
  EXPECT_TRUE(cuda::attention_tiled_supports(args(9, 3, 64, 512, 600)));
  cuda::AttentionArgs a = args(32, 8, 128, 512, 600);
  a.kv_dtype = DType::F32;
  EXPECT_FALSE(cuda::attention_tiled_supports(a));
  EXPECT_FALSE(cuda::attention_tiled_supports(args(4, 4, 80, 512, 600)));
  EXPECT_FALSE(cuda::attention_tiled_supports(args(8, 1, 256, 512, 600)));
  a = args(32, 8, 128, 512, 600);
  a.k_cache_stride = 1028;  // rows not 16-byte aligned
  EXPECT_FALSE(cuda::attention_tiled_supports(a));
  a = args(32, 8, 128, 512, 600);
  a.v_cache = reinterpret_cast<const void*>((uintptr_t{2} << 20) + 8);
  EXPECT_FALSE(cuda::attention_tiled_supports(a));
}

// 64 query rows per block: 16 tokens of a 4-head group, 21 of 3, 32 of 2, 64 of 1; larger
// groups take slices of 4 heads.
TEST(AttentionTiledPlan, TokensPerBlockFillSixtyFourRows) {
  const struct {
    int heads, kv, tokens;
  } cases[] = {{32, 8, 16}, {9, 3, 21}, {16, 8, 32}, {16, 16, 64}, {14, 2, 16}};
  for (const auto& c : cases) {
    cuda::AttentionArgs a = args(c.heads, c.kv, 64, 4096, 4095);
    cuda::plan_attention_tiled(a, 4095, kSms, kCap);
    EXPECT_EQ(a.tiled, c.tokens) << c.heads << "/" << c.kv;
  }
}

TEST(AttentionTiledPlan, FusedWhenTheBlocksMakeAWave) {
  for (int n : {512, 4096}) {
    cuda::AttentionArgs a = args(32, 8, 128, n, 30000 + n);
    cuda::plan_attention_tiled(a, 30000 + n, kSms, kCap);
    EXPECT_EQ(a.split, 0) << n;
    EXPECT_EQ(a.tiled_spans, 0) << n;
    EXPECT_EQ(a.tiled_groups, 1) << n;
  }
}

// A short append to a long context: 40 blocks of rows on 132 SMs, so span groups (about two
// waves of blocks, at least two spans each) that cover every span of the context.
TEST(AttentionTiledPlan, SplitOverSpanGroupsWhenTheRowsAreFew) {
  cuda::AttentionArgs a = args(32, 8, 128, 70, 3069);
  cuda::plan_attention_tiled(a, 3069, kSms, kCap);
  EXPECT_EQ(a.split, 1);
  EXPECT_EQ(a.tiled_spans, 2);
  EXPECT_EQ(a.tiled_groups, 6);  // 12 spans
  for (int n : {1, 16, 33, 100, 263}) {
    for (int max_pos : {0, 255, 256, 3000, 32767, 131071}) {
      cuda::AttentionArgs b = args(32, 8, 128, n, max_pos);
      cuda::plan_attention_tiled(b, max_pos, kSms, size_t{1} << 40);
      const int spans = max_pos / cuda::kAttnSpanTokens + 1;
      if (b.split == 0) {
        EXPECT_EQ(b.tiled_groups, 1);
        continue;
      }
      SCOPED_TRACE(std::to_string(n) + " tokens at " + std::to_string(max_pos));
      EXPECT_GE(b.tiled_spans, 2);
      EXPECT_GE(int64_t{b.tiled_groups} * b.tiled_spans, spans);
      EXPECT_LT(int64_t{b.tiled_groups - 1} * b.tiled_spans, spans);
    }
  }
}

// Span records past the cap: fused, however few the blocks.
TEST(AttentionTiledPlan, FusedWhenTheRecordsWouldPassTheCap) {
  cuda::AttentionArgs a = args(32, 8, 128, 70, 3069);
  cuda::plan_attention_tiled(a, 3069, kSms, size_t{1} << 20);
  EXPECT_EQ(a.split, 0);
  EXPECT_EQ(a.tiled_groups, 1);
}

}  // namespace
}  // namespace tern
