// The opt-in tensor-core prefill attention (src/backends/cuda/attention_tc.h) against the CPU
// reference (ref::attention), over GQA groups 1, 3, 4, 7 (two head slices, the second partly
// idle) and 8, head_dim 64 and 128, odd lengths, 16-token KV blocks and 64-key tiles crossed at
// odd offsets, chunks appended to a cached context, a decode row sharing the step, several
// sequences, softcap and sliding windows.
//
// Tolerance: ||out - ref|| / ||ref|| <= 5e-3. The kernel rounds q and the probabilities to f16
// (relative 2^-11 each) and sums in the tensor cores' order, so the expected error is ~1e-3
// (measured figures are printed); a fragment, masking or paging mistake gives errors of order 1.
// Shapes the kernel does not take (f32 caches, head_dim 80) must fall back to the batch-invariant
// kernel, which meets that kernel's own 2e-5.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "attention_test_util.h"

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
    {14, 2, 128, DType::F16},                      // group 7: slices of 4 and 3 heads
    {8, 1, 64, DType::F16},                        // MQA, group 8: two slices
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

// The per-row block-table copy (TERN_CUDA_ATTN_ROW_COPY=1) must give the per-piece copy's bits
// (the same bytes land in the same places), for head_dim 64 (two rows per warp step) and 128,
// and for blocks of 1, 3 and 4 warps.
TEST_F(GpuAttentionTc, RowCopyEqualsPieceCopyBitwise) {
  ::setenv("TERN_CUDA_ATTN_ROW_COPY", "1", 1);
  auto rows = gputest::make_cuda(tc_options());
  ::unsetenv("TERN_CUDA_ATTN_ROW_COPY");
  ASSERT_NE(rows, nullptr);
  uint32_t seed = 600;
  for (const Shape& s : kTcShapes) {
    SCOPED_TRACE(describe(s));
    Cache cache_a(*backend_, s, 120, seed), cache_b(*rows, s, 120, seed);
    const auto blocks = cache_a.take_blocks(700);
    (void)cache_b.take_blocks(700);
    BatchPlan plan;
    add_sequence(plan, 600, 77, blocks);
    const HostTensor q = random_q(plan.n_tokens(), s, seed + 1);
    const auto want = run_gpu(*backend_, plan, cache_a, s, q);
    EXPECT_TRUE(gputest::bitwise_equal(run_gpu(*rows, plan, cache_b, s, q), want));
    seed += 2;
  }
}

}  // namespace
}  // namespace tern
