// The batch-invariant tensor-core attention (src/backends/cuda/attention_mma.h).
//
// Against the CPU reference (ref::attention): GQA groups 1, 3, 4, 7, 8 and 9 (two head slices),
// head_dim 64 and 128, odd lengths, chunks on cached contexts, decode rows in the same step,
// softcap, sliding windows, pool block sizes 1 / 48 / 64 / 256 and a 30k-token context. Tolerance
// rel. L2 <= 2e-5, the f32 kernels' own bound: q and p enter the tensor cores as f16 hi + lo
// pairs (~22 bits), K and V are exact, so the error is the f32 sums' and ex2's (printed).
// Bit for bit, the contract itself: its split mode (span partials and a merge) against its fused
// mode on every plan; rows computed in a whole prefill against the same rows appended on a
// cached prefix, one token per step, or next to other sequences; whole models whose prefill is
// chunked or token by token; a Session's reuse and speculation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "attention_test_util.h"
#include "gpu_model_util.h"
#include "session_check.h"

namespace tern {
namespace {

using gputest::HostTensor;
using namespace gputest::attn;

constexpr double kMmaTolerance = 2e-5;

// mode: 1 per plan, 3 split only, 4 fused only (CudaBackendOptions::attention_mma).
std::unique_ptr<Backend> make_mma(int mode) {
  cuda::CudaBackendOptions o;
  o.attention_mma = mode;
  return gputest::make_cuda(o);
}

const Shape kMmaShapes[] = {
    {32, 8, 128, DType::F16},          // Llama-3-8B: group 4
    {9, 3, 64, DType::F16},            // SmolLM2: group 3
    {14, 2, 128, DType::F16},          // group 7: split slices of 4 and 3 heads
    {8, 1, 64, DType::F16},            // MQA, group 8
    {18, 2, 64, DType::F16},           // group 9: fused slices of 5 and 4 heads
    {4, 4, 128, DType::F16},           // MHA
    {8, 2, 128, DType::F16, 30.0f},    // softcap
    {8, 2, 64, DType::F16, 0.0f, 37},  // sliding window
};

// A step mixing a prefill from scratch, a chunk on a cached context, a decode row and a chunk
// starting one before a 64-key tile.
BatchPlan mixed_plan(Cache& cache) {
  BatchPlan plan;
  add_sequence(plan, 0, 77, cache.take_blocks(77));
  add_sequence(plan, 1000, 37, cache.take_blocks(1037));
  add_sequence(plan, 300, 1, cache.take_blocks(301));
  add_sequence(plan, 63, 130, cache.take_blocks(193));
  return plan;
}

class GpuAttentionMma : public ::testing::Test {
 protected:
  void SetUp() override {
    TERN_REQUIRE_GPU();
    split_ = make_mma(3);
    fused_ = make_mma(4);
    ASSERT_NE(split_, nullptr);
    ASSERT_NE(fused_, nullptr);
  }
  // Runs the plan in both modes: each must meet the reference, and they must agree bit for bit.
  std::vector<float> expect_close_and_equal(const BatchPlan& plan, Cache& cache, const Shape& s, uint32_t seed,
                                            const std::string& what) {
    const HostTensor q = random_q(plan.n_tokens(), s, seed);
    const cuda::CudaBackendStats s0 = cuda::backend_stats(*split_), f0 = cuda::backend_stats(*fused_);
    const auto a = run_gpu(*split_, plan, cache, s, q);
    const auto b = run_gpu(*fused_, plan, cache, s, q);
    const cuda::CudaBackendStats s1 = cuda::backend_stats(*split_), f1 = cuda::backend_stats(*fused_);
    EXPECT_EQ(s1.mma_split_attentions, s0.mma_split_attentions + 1) << what << ": not the split mode";
    EXPECT_EQ(f1.mma_attentions, f0.mma_attentions + 1) << what << ": not the tensor-core kernel";
    EXPECT_EQ(f1.mma_split_attentions, f0.mma_split_attentions) << what << ": not the fused mode";
    const auto ref = run_ref(plan, cache, s, q);
    const double ea = gputest::rel_l2(a, ref), eb = gputest::rel_l2(b, ref);
    std::printf("[ mma attn ] %-46s rel L2 split %.2e fused %.2e\n", what.c_str(), ea, eb);
    EXPECT_LE(ea, kMmaTolerance) << what;
    EXPECT_LE(eb, kMmaTolerance) << what;
    EXPECT_TRUE(gputest::bitwise_equal(a, b)) << what << ": split and fused modes differ";
    return a;
  }
  std::unique_ptr<Backend> split_, fused_;
};

TEST_F(GpuAttentionMma, BothModesMatchReferenceAndEachOther) {
  uint32_t seed = 300;
  for (const Shape& s : kMmaShapes) {
    SCOPED_TRACE(describe(s));
    Cache cache(*split_, s, 260, seed++);
    expect_close_and_equal(mixed_plan(cache), cache, s, seed++, "mixed " + describe(s));
  }
}

// Every row of a prefill against the reference on its own: a wrong row or head cannot hide in an
// L2 over the whole output.
TEST_F(GpuAttentionMma, EveryRowIsClose) {
  const Shape s{32, 8, 128, DType::F16};
  Cache cache(*split_, s, 40, 21);
  BatchPlan plan;
  add_sequence(plan, 5, 200, cache.take_blocks(205));
  const HostTensor q = random_q(plan.n_tokens(), s, 22);
  const auto got = run_gpu(*fused_, plan, cache, s, q);
  const auto ref = run_ref(plan, cache, s, q);
  const int64_t hd = s.head_dim;
  double worst = 0.0;
  for (int t = 0; t < plan.n_tokens(); ++t) {
    for (int h = 0; h < s.n_heads; ++h) {
      const int64_t o = (int64_t{t} * s.n_heads + h) * hd;
      const std::vector<float> a(got.begin() + o, got.begin() + o + hd), b(ref.begin() + o, ref.begin() + o + hd);
      const double e = gputest::rel_l2(a, b);
      worst = std::max(worst, e);
      EXPECT_LE(e, 4 * kMmaTolerance) << "token " << t << " head " << h;
    }
  }
  std::printf("[ mma attn ] worst row rel L2 %.2e\n", worst);
}

// Rows do not depend on their step: the last rows of a whole prefill equal the same rows appended
// on the cached first part next to another sequence, and each of them decoded alone.
TEST_F(GpuAttentionMma, RowsDoNotDependOnTheirStep) {
  auto backend = make_mma(1);
  ASSERT_NE(backend, nullptr);
  uint32_t seed = 800;
  for (const Shape& s : {Shape{32, 8, 128, DType::F16}, Shape{8, 2, 64, DType::F16, 0.0f, 37},
                         Shape{8, 2, 128, DType::F16, 30.0f}, Shape{9, 3, 64, DType::F16}}) {
    SCOPED_TRACE(describe(s));
    Cache cache(*backend, s, 120, seed);
    const int n = 600;  // spans 0-2 and a partial third
    const auto blocks = cache.take_blocks(n), other = cache.take_blocks(300);
    BatchPlan whole, tail;
    add_sequence(whole, 0, n, blocks);
    add_sequence(tail, 250, 37, other);
    add_sequence(tail, 500, n - 500, blocks);
    const HostTensor q = random_q(n, s, seed + 1);
    const int64_t cols = q.t.cols;
    const float* qv = reinterpret_cast<const float*>(q.bytes.data());
    HostTensor q_tail = random_q(37 + n - 500, s, seed + 2);  // 37 rows of the other sequence, then q's rows 500..
    std::copy(qv + 500 * cols, qv + n * cols, reinterpret_cast<float*>(q_tail.bytes.data()) + 37 * cols);
    const auto a = run_gpu(*backend, whole, cache, s, q);
    const auto b = run_gpu(*backend, tail, cache, s, q_tail);
    EXPECT_TRUE(gputest::bitwise_equal(std::vector<float>(a.begin() + 500 * cols, a.end()),
                                       std::vector<float>(b.begin() + 37 * cols, b.end())));
    for (const int t : {500, 511, 512, 599}) {  // a decode step of one token
      BatchPlan one;
      add_sequence(one, t, 1, blocks);
      HostTensor q_one = random_q(1, s, seed + 3);
      std::copy(qv + t * cols, qv + (t + 1) * cols, reinterpret_cast<float*>(q_one.bytes.data()));
      const auto c = run_gpu(*backend, one, cache, s, q_one);
      EXPECT_TRUE(gputest::bitwise_equal(std::vector<float>(a.begin() + t * cols, a.begin() + (t + 1) * cols), c))
          << "decode row " << t;
    }
    seed += 4;
  }
}

// Pool block sizes other than 16 (shift-and-mask and division lookups, tiles inside one block or
// across several), and a chunk and a decode row on a 30k-token context in both modes.
TEST_F(GpuAttentionMma, PoolBlockSizesAndLongContext) {
  const Shape s{8, 2, 128, DType::F16};
  uint32_t seed = 900;
  for (const int bt : {1, 48, 64, 256}) {
    Cache cache(*split_, s, 3000 / bt + 8, seed, bt);
    BatchPlan plan;
    add_sequence(plan, 1000, 150, cache.take_blocks(1150), bt);
    add_sequence(plan, 3, 70, cache.take_blocks(73), bt);
    expect_close_and_equal(plan, cache, s, seed + 1, "block_tokens " + std::to_string(bt) + " " + describe(s));
    seed += 2;
  }
  const Shape m{4, 1, 128, DType::F16};
  Cache cache(*split_, m, 30900 / 256 + 2, seed, 256);
  const auto blocks = cache.take_blocks(30790);
  BatchPlan chunk, decode;
  add_sequence(chunk, 30720, 70, blocks, 256);
  add_sequence(decode, 30789, 1, blocks, 256);
  expect_close_and_equal(chunk, cache, m, seed + 1, "30720 + 70 " + describe(m));
  expect_close_and_equal(decode, cache, m, seed + 2, "decode at 30789 " + describe(m));
}

// Shapes the contract does not take (f32 caches, head_dim 80) run attention.h's kernels.
TEST_F(GpuAttentionMma, UnsupportedShapesKeepTheDefaultKernels) {
  uint32_t seed = 400;
  for (const Shape& s : {Shape{8, 2, 128, DType::F32}, Shape{4, 4, 80, DType::F16}}) {
    SCOPED_TRACE(describe(s));
    Cache cache(*split_, s, 40, seed++);
    BatchPlan plan;
    add_sequence(plan, 10, 90, cache.take_blocks(100));
    const HostTensor q = random_q(plan.n_tokens(), s, seed++);
    const int64_t before = cuda::backend_stats(*split_).mma_attentions;
    EXPECT_LE(gputest::rel_l2(run_gpu(*split_, plan, cache, s, q), run_ref(plan, cache, s, q)), 2e-5);
    EXPECT_EQ(cuda::backend_stats(*split_).mma_attentions, before);
  }
}

// Whole models with the contract on: a one-step prefill equals the same prompt chunked and token
// by token, and a Session's chunking, prefix reuse and speculation change no logit.
TEST_F(GpuAttentionMma, WholeModelsAreBitInvariant) {
  using gputest::forward;
  using gputest::Loaded;
  using gputest::load_on;
  using gputest::prompt_ids;
  // The whole prefill in the fused mode, the chunks per plan, the single tokens split.
  for (const char* preset : {"tiny-llama", "tiny-qwen3"}) {  // head_dim 64, 128
    SCOPED_TRACE(preset);
    auto file = gputest::synthesized(preset, "q4_k_m");
    ASSERT_NE(file, nullptr);
    Loaded whole = load_on(file, make_mma(4)), chunked = load_on(file, make_mma(1)), single = load_on(file, make_mma(3));
    const int V = whole.model->config().n_vocab;
    const auto ids = prompt_ids(300, V, 9);
    const auto all = forward(whole, ids);
    EXPECT_GT(cuda::backend_stats(*whole.backend).mma_attentions, 0);
    std::vector<float> parts = forward(chunked, std::vector<int32_t>(ids.begin(), ids.begin() + 170));
    const auto rest = forward(chunked, std::vector<int32_t>(ids.begin() + 170, ids.end()));
    parts.insert(parts.end(), rest.begin(), rest.end());
    EXPECT_TRUE(gputest::bitwise_equal(all, parts));
    std::vector<float> one_by_one;
    for (int32_t id : ids) {
      const auto l = forward(single, {id});
      one_by_one.insert(one_by_one.end(), l.begin(), l.end());
    }
    EXPECT_TRUE(gputest::bitwise_equal(all, one_by_one));
    EXPECT_GT(cuda::backend_stats(*single.backend).mma_split_attentions, 0);
  }
  auto file = gputest::synthesized("tiny-llama", "q4_k_m");
  ASSERT_NE(file, nullptr);
  Loaded m = load_on(file, make_mma(1), 2048);
  const int V = m.model->config().n_vocab;
  std::vector<int32_t> prompt = prompt_ids(40, V, 21);
  for (int i = 0; i < 3; ++i) prompt.insert(prompt.end(), prompt.begin(), prompt.begin() + 40);
  gputest::expect_session_invariants(m, prompt, 13, 40);
}

}  // namespace
}  // namespace tern
