// The opt-in tensor-core prefill attention (src/backends/cuda/attention_tc.h) against the CPU
// reference (ref::attention), over GQA groups 1, 3, 4, 7, 8 and 9 (two head slices, 5 and 4),
// head_dim 64 and 128, odd lengths, 16-token KV blocks and 64-key tiles crossed at odd offsets,
// chunks appended to a cached context (up to 30k), a decode row sharing the step, several
// sequences, softcap and sliding windows, every block shape (TERN_CUDA_ATTN_TC_VARIANT), pool
// block sizes 1 / 48 / 64 / 256, and rows that must not depend on the step they are computed in.
//
// Tolerance: ||out - ref|| / ||ref|| <= 5e-3. The kernel rounds q and the probabilities to f16
// (relative 2^-11 each) and sums in the tensor cores' order, so the expected error is ~1e-3
// (measured figures are printed); a fragment, masking or paging mistake gives errors of order 1.
// Shapes the kernel does not take (f32 caches, head_dim 80) must fall back to the batch-invariant
// kernel, which meets that kernel's own 2e-5.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "attention_test_util.h"
#include "backends/cuda/attention_tc.h"

namespace tern {
namespace {

using gputest::HostTensor;
using namespace gputest::attn;

constexpr double kTcTolerance = 5e-3;

cuda::CudaBackendOptions tc_options() {
  cuda::CudaBackendOptions o;
  o.tc_prefill = true;
  o.tc_attention = true;
  o.tc_prefill_min_tokens = 1;  // every step takes the tensor-core kernel, small ones too
  return o;
}

class GpuAttentionTc : public ::testing::Test {
 protected:
  void SetUp() override {
    TERN_REQUIRE_GPU();
    backend_ = gputest::make_cuda(tc_options());
    ASSERT_NE(backend_, nullptr);
  }
  // Runs the plan through the tensor-core kernel and checks it against the reference.
  void expect_close(const BatchPlan& plan, Cache& cache, const Shape& s, uint32_t seed, const std::string& what) {
    const HostTensor q = random_q(plan.n_tokens(), s, seed);
    const int64_t before = cuda::backend_stats(*backend_).tc_attentions;
    const double err = gputest::rel_l2(run_gpu(*backend_, plan, cache, s, q), run_ref(plan, cache, s, q));
    EXPECT_EQ(cuda::backend_stats(*backend_).tc_attentions, before + 1) << what << ": not the tensor-core kernel";
    std::printf("[ tc attn ] %-44s rel L2 %.2e\n", what.c_str(), err);
    EXPECT_LE(err, kTcTolerance) << what;
  }
  std::unique_ptr<Backend> backend_;
};

const Shape kTcShapes[] = {
    {32, 8, 128, DType::F16},                      // Llama-3-8B: group 4
    {9, 3, 64, DType::F16},                        // group 3
    {14, 2, 128, DType::F16},                      // group 7: 7 heads x 18 tokens per block
    {8, 1, 64, DType::F16},                        // MQA, group 8
    {18, 2, 64, DType::F16},                       // group 9: slices of 5 and 4 heads
    {4, 4, 128, DType::F16},                       // MHA
    {8, 2, 128, DType::F16, 30.0f},                // softcap
    {8, 2, 64, DType::F16, 0.0f, 37},              // sliding window
};

TEST_F(GpuAttentionTc, PrefillMatchesReference) {
  uint32_t seed = 300;
  for (const Shape& s : kTcShapes) {
    SCOPED_TRACE(describe(s));
    Cache cache(*backend_, s, 260, seed++);
    BatchPlan plan;
    add_sequence(plan, 0, 77, cache.take_blocks(77));      // from scratch, odd length
    add_sequence(plan, 1000, 37, cache.take_blocks(1037));  // a chunk on a cached context
    add_sequence(plan, 300, 1, cache.take_blocks(301));     // a decode row in the same step
    add_sequence(plan, 63, 130, cache.take_blocks(193));    // starts one before a 64-key tile
    expect_close(plan, cache, s, seed++, "mixed " + describe(s));
  }
}

// A 2k-token-style append on a long cached context, Llama-3-8B shape, at a small scale.
TEST_F(GpuAttentionTc, ChunkOnLongCachedContext) {
  const Shape s{32, 8, 128, DType::F16};
  Cache cache(*backend_, s, 220, 11);
  BatchPlan plan;
  add_sequence(plan, 3001, 150, cache.take_blocks(3151));
  expect_close(plan, cache, s, 12, "3001 + 150 " + describe(s));
}

// Every position of a prefill, one tile at a time, against the reference row by row: finds a
// wrong row or head that an L2 over the whole output could hide.
TEST_F(GpuAttentionTc, EveryRowIsClose) {
  const Shape s{32, 8, 128, DType::F16};
  Cache cache(*backend_, s, 40, 21);
  BatchPlan plan;
  add_sequence(plan, 5, 200, cache.take_blocks(205));
  const HostTensor q = random_q(plan.n_tokens(), s, 22);
  const auto got = run_gpu(*backend_, plan, cache, s, q);
  const auto ref = run_ref(plan, cache, s, q);
  const int64_t hd = s.head_dim;
  double worst = 0.0;
  for (int t = 0; t < plan.n_tokens(); ++t) {
    for (int h = 0; h < s.n_heads; ++h) {
      const int64_t o = (int64_t{t} * s.n_heads + h) * hd;
      const std::vector<float> a(got.begin() + o, got.begin() + o + hd), b(ref.begin() + o, ref.begin() + o + hd);
      const double e = gputest::rel_l2(a, b);
      worst = std::max(worst, e);
      EXPECT_LE(e, 2 * kTcTolerance) << "token " << t << " head " << h;
    }
  }
  std::printf("[ tc attn ] worst row rel L2 %.2e\n", worst);
}

TEST_F(GpuAttentionTc, UnsupportedShapesFallBack) {
  uint32_t seed = 400;
  for (const Shape& s : {Shape{8, 2, 128, DType::F32}, Shape{4, 4, 80, DType::F16}}) {
    SCOPED_TRACE(describe(s));
    Cache cache(*backend_, s, 40, seed++);
    BatchPlan plan;
    add_sequence(plan, 10, 90, cache.take_blocks(100));
    const HostTensor q = random_q(plan.n_tokens(), s, seed++);
    const int64_t before = cuda::backend_stats(*backend_).tc_attentions;
    EXPECT_LE(gputest::rel_l2(run_gpu(*backend_, plan, cache, s, q), run_ref(plan, cache, s, q)), 2e-5);
    EXPECT_EQ(cuda::backend_stats(*backend_).tc_attentions, before);
  }
}

// A backend whose tensor-core attention takes block shape `variant` (TERN_CUDA_ATTN_TC_VARIANT,
// read when a backend is created).
std::unique_ptr<Backend> make_variant(int variant) {
  ::setenv("TERN_CUDA_ATTN_TC_VARIANT", std::to_string(variant).c_str(), 1);
  auto b = gputest::make_cuda(tc_options());
  ::unsetenv("TERN_CUDA_ATTN_TC_VARIANT");
  return b;
}

// Every block shape (attention_tc.cu kVariants: 64, 128 or 256 rows per block, so 8 .. 256
// tokens per block and different sub-tiles of the plan's 128-token tiles) meets the tolerance,
// and shapes with the same score chunk give the same bits: a row's arithmetic does not depend on
// which block or warp computes it. At head_dim 128 the 32-row warps (variants 0, 2, 3) take
// 32-key score chunks, the 16-row warps (1, 4, 5) 64-key chunks; at head_dim 64 all take 64.
TEST_F(GpuAttentionTc, BlockShapesMatchReferenceAndEachOther) {
  const int n = cuda::attention_tc_variants();
  ASSERT_GE(n, 2);
  std::vector<std::unique_ptr<Backend>> backends;
  for (int v = 0; v < n; ++v) {
    backends.push_back(make_variant(v));
    ASSERT_NE(backends.back(), nullptr);
  }
  uint32_t seed = 700;
  for (const Shape& s : kTcShapes) {
    SCOPED_TRACE(describe(s));
    std::vector<std::vector<float>> got;
    std::vector<float> ref;
    for (int v = 0; v < n; ++v) {
      Cache cache(*backends[v], s, 200, seed);
      BatchPlan plan;
      add_sequence(plan, 0, 203, cache.take_blocks(203));     // two plan tiles, the second short
      add_sequence(plan, 500, 1, cache.take_blocks(501));     // a decode row
      add_sequence(plan, 900, 129, cache.take_blocks(1029));  // 128 + 1 tokens on a cached context
      add_sequence(plan, 40, 45, cache.take_blocks(85));
      const HostTensor q = random_q(plan.n_tokens(), s, seed + 1);
      const int64_t before = cuda::backend_stats(*backends[v]).tc_attentions;
      got.push_back(run_gpu(*backends[v], plan, cache, s, q));
      EXPECT_EQ(cuda::backend_stats(*backends[v]).tc_attentions, before + 1) << "variant " << v;
      if (v == 0) ref = run_ref(plan, cache, s, q);
      const double err = gputest::rel_l2(got.back(), ref);
      std::printf("[ tc attn ] variant %d %-34s rel L2 %.2e\n", v, describe(s).c_str(), err);
      EXPECT_LE(err, kTcTolerance) << "variant " << v;
    }
    for (int v = 1; v < n; ++v) {
      const bool chunk32 = v == 2 || v == 3;
      const int same_as = s.head_dim == 128 && !chunk32 ? 1 : 0;
      if (v == same_as) continue;
      EXPECT_TRUE(gputest::bitwise_equal(got[v], got[same_as])) << "variant " << v << " vs " << same_as;
    }
    seed += 2;
  }
}

// Each row's arithmetic is its own: the last 100 rows of a 200-token prefill give the same bits
// when computed in the same step as the first 100 (other tiles, other blocks, other warps) and
// when appended alone on the cached first 100, next to another sequence.
TEST_F(GpuAttentionTc, RowsDoNotDependOnTheirStep) {
  uint32_t seed = 800;
  for (const Shape& s : {Shape{32, 8, 128, DType::F16}, Shape{8, 2, 64, DType::F16, 0.0f, 37},
                         Shape{8, 2, 128, DType::F16, 30.0f}, Shape{9, 3, 64, DType::F16}}) {
    SCOPED_TRACE(describe(s));
    Cache cache(*backend_, s, 60, seed);
    const auto blocks = cache.take_blocks(200), other = cache.take_blocks(300);
    BatchPlan whole, tail;
    add_sequence(whole, 0, 200, blocks);
    add_sequence(tail, 250, 37, other);
    add_sequence(tail, 100, 100, blocks);
    const HostTensor q = random_q(200, s, seed + 1);
    const int64_t cols = q.t.cols;
    HostTensor q_tail = random_q(137, s, seed + 2);  // 37 rows of the other sequence, then q's rows 100..199
    std::copy(reinterpret_cast<const float*>(q.bytes.data()) + 100 * cols,
              reinterpret_cast<const float*>(q.bytes.data()) + 200 * cols,
              reinterpret_cast<float*>(q_tail.bytes.data()) + 37 * cols);
    const auto a = run_gpu(*backend_, whole, cache, s, q);
    const auto b = run_gpu(*backend_, tail, cache, s, q_tail);
    EXPECT_TRUE(gputest::bitwise_equal(std::vector<float>(a.begin() + 100 * cols, a.end()),
                                       std::vector<float>(b.begin() + 37 * cols, b.end())));
    seed += 3;
  }
}

// Pool block sizes other than 16 (the block-table lookup takes a shift and mask for powers of
// two, a division otherwise; a 64-key tile may lie in one block, or cross several), and a chunk
// on a 30k-token cached context (the 2k append's shape at fewer heads and tokens).
TEST_F(GpuAttentionTc, PoolBlockSizesAndLongPrefix) {
  const Shape s{8, 2, 128, DType::F16};
  uint32_t seed = 900;
  for (const int bt : {1, 48, 64, 256}) {
    Cache cache(*backend_, s, 3000 / bt + 8, seed, bt);
    BatchPlan plan;
    add_sequence(plan, 1000, 150, cache.take_blocks(1150), bt);
    add_sequence(plan, 3, 70, cache.take_blocks(73), bt);
    expect_close(plan, cache, s, seed + 1, "block_tokens " + std::to_string(bt) + " " + describe(s));
    seed += 2;
  }
  const Shape m{4, 1, 128, DType::F16};
  Cache cache(*backend_, m, 30900 / 256 + 2, seed, 256);
  BatchPlan plan;
  add_sequence(plan, 30720, 70, cache.take_blocks(30790), 256);
  expect_close(plan, cache, m, seed + 1, "30720 + 70 " + describe(m));
}

}  // namespace
}  // namespace tern
