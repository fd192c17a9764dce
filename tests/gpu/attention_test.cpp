// CUDA paged attention against ref::attention (CPU oracle) over GQA groups (including groups
// larger than one block's 4 heads), head sizes, f16/f32 caches, scattered block tables, decode
// and prefill plans, several sequences in one step, contexts past many 64-position chunks,
// softcap and sliding windows, positions on both sides of the 64-position chunk and 256-position
// span boundaries. Tolerance: ||out - ref|| / ||ref|| <= 2e-5 (fp32 with __expf and a different
// summation order).
//
// Invariance, bit for bit: the split (flash-decoding) and fused modes over several spans; a token
// attended in a large prefill step and alone in a decode step; the two K/V copy loops
// (TERN_CUDA_ATTN_ROW_COPY), which move the same bytes; the span decode kernel
// (TERN_CUDA_ATTN_SPAN) against the chunk kernel at every stage count and head split, and the
// two-chunk span kernel against both; the folded span merge against the merge kernel, including
// repeated steps under CUDA graphs; the chunk split (a block per 1 or 2 chunks of a span, the
// chunk merge) against whole spans, explicitly and as the default picks it; the register-tiled
// kernel for large steps (fused and split) against the chunk kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "attention_test_util.h"
#include "backends/cuda/attention.h"

namespace tern {
namespace {

using gputest::HostTensor;
using namespace gputest::attn;

const Shape kShapes[] = {
    {9, 3, 64, DType::F16},   {32, 8, 128, DType::F16}, {14, 2, 64, DType::F32},  // group 7: two slices
    {4, 4, 80, DType::F16},   {8, 1, 256, DType::F32},                            // MHA, MQA at hd 256
    {8, 2, 128, DType::F16, 30.0f},                                               // softcap
    {8, 2, 64, DType::F16, 0.0f, 37},                                             // sliding window
};

using GpuAttention = gputest::CudaBackendTest;

TEST_F(GpuAttention, DecodeAtManyContextLengths) {
  uint32_t seed = 1;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    Cache cache(*backend_, s, 400, seed++);
    for (int pos : {0, 1, 63, 64, 65, 255, 256, 257, 1000, 4100}) {
      SCOPED_TRACE("position " + std::to_string(pos));
      BatchPlan plan;
      add_sequence(plan, pos, 1, cache.take_blocks(pos + 1));
      const HostTensor q = random_q(1, s, seed++);
      EXPECT_LE(gputest::rel_l2(run_gpu(*backend_, plan, cache, s, q), run_ref(plan, cache, s, q)), 2e-5);
    }
  }
}

TEST_F(GpuAttention, PrefillAndMixedBatches) {
  uint32_t seed = 50;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    Cache cache(*backend_, s, 200, seed++);
    BatchPlan plan;
    add_sequence(plan, 0, 100, cache.take_blocks(100));   // a prefill from scratch
    add_sequence(plan, 50, 9, cache.take_blocks(59));     // a chunk appended to a cached prefix
    add_sequence(plan, 700, 1, cache.take_blocks(701));   // a decode token
    add_sequence(plan, 130, 3, cache.take_blocks(133));   // a speculative verify of 3
    const HostTensor q = random_q(plan.n_tokens(), s, seed++);
    EXPECT_LE(gputest::rel_l2(run_gpu(*backend_, plan, cache, s, q), run_ref(plan, cache, s, q)), 2e-5);
  }
}

TEST_F(GpuAttention, LongContext) {
  const Shape s{32, 8, 128, DType::F16};
  Cache cache(*backend_, s, 2100, 7);
  BatchPlan plan;
  add_sequence(plan, 33000, 1, cache.take_blocks(33001));
  const HostTensor q = random_q(1, s, 8);
  EXPECT_LE(gputest::rel_l2(run_gpu(*backend_, plan, cache, s, q), run_ref(plan, cache, s, q)), 2e-5);
}

TEST_F(GpuAttention, SplitAndFusedModesAreBitIdentical) {
  cuda::CudaBackendOptions split_opts, fused_opts;
  split_opts.attention_split = cuda::AttentionSplit::kAlways;
  fused_opts.attention_split = cuda::AttentionSplit::kNever;
  auto split = gputest::make_cuda(split_opts);
  auto fused = gputest::make_cuda(fused_opts);
  ASSERT_TRUE(split && fused);
  uint32_t seed = 90;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    Cache cache_a(*split, s, 120, seed), cache_b(*fused, s, 120, seed);
    BatchPlan plan;
    const auto blocks = cache_a.take_blocks(800);
    (void)cache_b.take_blocks(800);
    add_sequence(plan, 490, 40, blocks);  // crosses the span boundary at 512
    add_sequence(plan, 799, 1, blocks);   // the same sequence again: a second tile, 4 spans
    const HostTensor q = random_q(plan.n_tokens(), s, seed + 1);
    const auto a = run_gpu(*split, plan, cache_a, s, q);
    const auto b = run_gpu(*fused, plan, cache_b, s, q);
    EXPECT_TRUE(gputest::bitwise_equal(a, b));
    seed += 2;
  }
}

// On a mismatch: how many values differ, the first one's (row, column) and both values.
std::string first_difference(const std::vector<float>& want, const std::vector<float>& got, int64_t cols) {
  if (want.size() != got.size()) return "sizes " + std::to_string(want.size()) + " / " + std::to_string(got.size());
  int64_t n = 0, first = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&want[i], &got[i], sizeof(float)) != 0) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++n;
    }
  }
  if (n == 0) return "no difference";
  return std::to_string(n) + " values differ; first at row " + std::to_string(first / cols) + " column " +
         std::to_string(first % cols) + ": " + std::to_string(want[first]) + " / " + std::to_string(got[first]);
}

// The register-tiled kernel (attention_tiled.h) against the chunk kernel's fused mode, bit for
// bit: kShapes (the f16 shapes at head_dim 64 / 128 take it, the rest fall back) plus the 8B
// shape with a window and softcap; plans of a prefill from scratch over several tensor-core
// tiles, an append crossing a span boundary beside a decode of the same sequence, a mixed batch
// (prefill, chunk, decode, verify), and a long append whose few blocks take the split mode
// (span records and the merge).
TEST_F(GpuAttention, TiledKernelEqualsChunkKernelBitwise) {
  cuda::CudaBackendOptions ref_opts, tiled_opts;
  ref_opts.attention_split = cuda::AttentionSplit::kNever;
  ref_opts.attention_tiled_min_tokens = -1;
  tiled_opts.attention_tiled_min_tokens = 1;
  auto ref = gputest::make_cuda(ref_opts);
  auto tiled = gputest::make_cuda(tiled_opts);
  ASSERT_TRUE(ref && tiled);
  std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
  shapes.push_back({32, 8, 128, DType::F16, 50.0f, 300});
  shapes.push_back({16, 16, 64, DType::F16});  // MHA: 64 tokens per block
  uint32_t seed = 3100;
  for (const Shape& s : shapes) {
    SCOPED_TRACE(describe(s));
    const bool supported = s.cache == DType::F16 && (s.head_dim == 64 || s.head_dim == 128);
    Cache cache_a(*ref, s, 340, seed), cache_b(*tiled, s, 340, seed);
    const int64_t tiled_before = cuda::backend_stats(*tiled).tiled_attentions;
    std::vector<BatchPlan> plans(4);
    {
      const auto blocks = cache_a.take_blocks(300);
      (void)cache_b.take_blocks(300);
      add_sequence(plans[0], 0, 300, blocks);
    }
    {
      const auto blocks = cache_a.take_blocks(800);
      (void)cache_b.take_blocks(800);
      add_sequence(plans[1], 490, 40, blocks);  // crosses the span boundary at 512
      add_sequence(plans[1], 799, 1, blocks);
    }
    {
      const auto b1 = cache_a.take_blocks(100), b2 = cache_a.take_blocks(59), b3 = cache_a.take_blocks(701),
                 b4 = cache_a.take_blocks(133);
      (void)cache_b.take_blocks(100 + 59 + 701 + 133);
      add_sequence(plans[2], 0, 100, b1);
      add_sequence(plans[2], 50, 9, b2);
      add_sequence(plans[2], 700, 1, b3);
      add_sequence(plans[2], 130, 3, b4);
    }
    {
      const auto blocks = cache_a.take_blocks(3070);
      (void)cache_b.take_blocks(3070);
      add_sequence(plans[3], 3000, 70, blocks);  // few blocks, 12 spans: the split mode
    }
    for (size_t i = 0; i < plans.size(); ++i) {
      SCOPED_TRACE("plan " + std::to_string(i));
      const HostTensor q = random_q(plans[i].n_tokens(), s, seed + 1 + static_cast<uint32_t>(i));
      const auto want = run_gpu(*ref, plans[i], cache_a, s, q);
      const auto got = run_gpu(*tiled, plans[i], cache_b, s, q);
      EXPECT_TRUE(gputest::bitwise_equal(want, got)) << first_difference(want, got, q.t.cols);
      EXPECT_LE(gputest::rel_l2(got, run_ref(plans[i], cache_a, s, q)), 2e-5);
    }
    EXPECT_EQ(cuda::backend_stats(*tiled).tiled_attentions > tiled_before, supported);
    EXPECT_EQ(cuda::backend_stats(*ref).tiled_attentions, 0);
    seed += 10;
  }
  const auto st = cuda::backend_stats(*tiled);
  EXPECT_GT(st.tiled_split_attentions, 0);
  EXPECT_LT(st.tiled_split_attentions, st.tiled_attentions);
}

TEST_F(GpuAttention, PrefillRowsEqualDecodeRowsBitwise) {
  const Shape s{32, 8, 128, DType::F16};
  Cache cache(*backend_, s, 100, 3);
  const auto blocks = cache.take_blocks(700);
  const int n = 600;  // enough tiles for the fused mode under kAuto
  BatchPlan prefill;
  add_sequence(prefill, 100, n, blocks);
  const HostTensor q = random_q(n, s, 4);
  const auto all = run_gpu(*backend_, prefill, cache, s, q);
  const int64_t cols = q.t.cols;
  for (int i : {0, 1, 57, 63, 64, 599}) {
    SCOPED_TRACE("row " + std::to_string(i));
    BatchPlan one;
    add_sequence(one, 100 + i, 1, blocks);
    const std::vector<float> qv = gputest::host_values(q.t);
    HostTensor qi = gputest::host_f32(std::vector<float>(qv.begin() + i * cols, qv.begin() + (i + 1) * cols), 1, cols);
    const auto alone = run_gpu(*backend_, one, cache, s, qi);
    EXPECT_TRUE(gputest::bitwise_equal(alone, std::vector<float>(all.begin() + i * cols, all.begin() + (i + 1) * cols)));
  }
}

// The per-row block-table copy (TERN_CUDA_ATTN_ROW_COPY=1, read when a backend is created) loads
// the same K/V rows as the per-piece copy, so every mode must give the same bits with it.
TEST_F(GpuAttention, RowCopyEqualsPieceCopyBitwise) {
  ::setenv("TERN_CUDA_ATTN_ROW_COPY", "1", 1);
  auto rows = gputest::make_cuda();
  cuda::CudaBackendOptions fused_opts;
  fused_opts.attention_split = cuda::AttentionSplit::kNever;
  auto rows_fused = gputest::make_cuda(fused_opts);
  ::unsetenv("TERN_CUDA_ATTN_ROW_COPY");
  ASSERT_TRUE(rows && rows_fused);
  uint32_t seed = 500;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    Cache cache_a(*backend_, s, 120, seed), cache_b(*rows, s, 120, seed), cache_c(*rows_fused, s, 120, seed);
    const auto blocks = cache_a.take_blocks(900);
    (void)cache_b.take_blocks(900);
    (void)cache_c.take_blocks(900);
    BatchPlan plan;
    add_sequence(plan, 490, 45, blocks);
    add_sequence(plan, 899, 1, blocks);
    const HostTensor q = random_q(plan.n_tokens(), s, seed + 1);
    const auto want = run_gpu(*backend_, plan, cache_a, s, q);
    EXPECT_TRUE(gputest::bitwise_equal(run_gpu(*rows, plan, cache_b, s, q), want));
    EXPECT_TRUE(gputest::bitwise_equal(run_gpu(*rows_fused, plan, cache_c, s, q), want));
    seed += 2;
  }
}

// Sets an environment variable for its lifetime, then restores the previous value (the device
// run may set the same variables for the whole binary).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// Runs kShapes' split-mode plans on `want` and on every backend of `got` (same cache contents and
// block tables for all) and expects every result bit for bit equal to want's. Plans: a decode
// batch at positions around the chunk / span boundaries, a verify tile, a chunk crossing a span
// boundary, and with a 9k decode added (many spans; uneven head slices for group 7). Their tiles
// have several spans, so whole-span kernels keep each GQA group in one block (up to 4 q heads)
// unless TERN_CUDA_ATTN_SPAN_HPB forces fewer (SpreadGroupsEqualChunkKernelBitwise).
void expect_split_kernels_equal(Backend& want_backend, const std::vector<std::unique_ptr<Backend>>& got,
                                uint32_t seed, std::span<const Shape> shapes = kShapes) {
  for (const Shape& s : shapes) {
    SCOPED_TRACE(describe(s));
    const bool long_ctx = s.n_heads / s.n_kv_heads >= 4;  // GQA groups of 4+: a 9k decode too
    const int n_blocks = long_ctx ? 800 : 200;
    // One cache per backend, all from the same seed: the same contents and block tables.
    std::vector<std::unique_ptr<Cache>> caches;
    caches.push_back(std::make_unique<Cache>(want_backend, s, n_blocks, seed));
    for (const auto& b : got) caches.push_back(std::make_unique<Cache>(*b, s, n_blocks, seed));
    auto take = [&](int n_tokens) {
      const std::vector<int32_t> blocks = caches[0]->take_blocks(n_tokens);
      for (size_t i = 1; i < caches.size(); ++i) EXPECT_EQ(caches[i]->take_blocks(n_tokens), blocks);
      return blocks;
    };
    std::vector<BatchPlan> plans(1);
    for (int pos : {0, 63, 64, 127, 128, 191, 255, 256, 257, 1000}) add_sequence(plans[0], pos, 1, take(pos + 1));
    add_sequence(plans[0], 130, 3, take(133));   // a speculative verify of 3
    add_sequence(plans[0], 490, 40, take(530));  // crosses the span boundary at 512
    if (long_ctx) {
      plans.emplace_back(plans[0]);
      add_sequence(plans[1], 9000, 1, take(9001));  // 36 more spans
    }
    for (size_t pi = 0; pi < plans.size(); ++pi) {
      SCOPED_TRACE("plan " + std::to_string(pi));
      const HostTensor q = random_q(plans[pi].n_tokens(), s, seed + 1 + static_cast<uint32_t>(pi));
      const auto want = run_gpu(want_backend, plans[pi], *caches[0], s, q);
      for (size_t i = 0; i < got.size(); ++i) {
        SCOPED_TRACE("backend " + std::to_string(i));
        EXPECT_TRUE(gputest::bitwise_equal(run_gpu(*got[i], plans[pi], *caches[i + 1], s, q), want));
      }
    }
    seed += 4;
  }
}

// The span kernel (TERN_CUDA_ATTN_SPAN=1, read when a backend is created) moves K/V differently
// from the chunk kernel and runs the shared per-chunk arithmetic with other block sizes, stage counts and head slices, and folds the same partials
// in its own merge: every result must equal the chunk kernel's bit for bit (backend i: i + 1
// stages).
TEST_F(GpuAttention, SpanKernelEqualsChunkKernelBitwise) {
  cuda::CudaBackendOptions split_opts;
  split_opts.attention_split = cuda::AttentionSplit::kAlways;
  std::unique_ptr<Backend> chunk;
  {
    ScopedEnv off("TERN_CUDA_ATTN_SPAN", "0");
    chunk = gputest::make_cuda(split_opts);
  }
  std::vector<std::unique_ptr<Backend>> spans;
  {
    ScopedEnv on("TERN_CUDA_ATTN_SPAN", "1");
    for (const char* stages : {"1", "2", "3", "4"}) {
      ScopedEnv st("TERN_CUDA_ATTN_SPAN_STAGES", stages);
      spans.push_back(gputest::make_cuda(split_opts));
    }
  }
  ASSERT_TRUE(chunk != nullptr);
  for (const auto& b : spans) ASSERT_TRUE(b != nullptr);
  expect_split_kernels_equal(*chunk, spans, 700);
}

// The span kernels with a GQA group spread over several blocks (1 or 2 q heads per block, forced
// with TERN_CUDA_ATTN_SPAN_HPB, read when a backend is created: since session 7 the backend
// spreads a group only over tiles of one span, so expect_split_kernels_equal's multi-span plans
// would otherwise run whole groups) against the chunk kernel, bit for bit: kernel 2 and the lean
// warp-specialized ring (1779; other shapes drop its flags), whole spans.
TEST_F(GpuAttention, SpreadGroupsEqualChunkKernelBitwise) {
  uint32_t seed = 3400;
  for (const char* hpb : {"1", "2"}) {
    SCOPED_TRACE(std::string("q heads per block ") + hpb);
    ScopedEnv force("TERN_CUDA_ATTN_SPAN_HPB", hpb);
    cuda::CudaBackendOptions o;
    o.attention_split = cuda::AttentionSplit::kAlways;
    o.attention_chunk_split = 0;
    std::unique_ptr<Backend> chunk;
    {
      ScopedEnv off("TERN_CUDA_ATTN_SPAN", "0");
      chunk = gputest::make_cuda(o);
    }
    std::vector<std::unique_ptr<Backend>> got;
    for (int kernel : {2, 1779}) {
      cuda::CudaBackendOptions ok = o;
      ok.attention_span_kernel = kernel;
      got.push_back(gputest::make_cuda(ok));
    }
    ASSERT_TRUE(chunk != nullptr);
    for (const auto& b : got) ASSERT_TRUE(b != nullptr);
    expect_split_kernels_equal(*chunk, got, seed);
    seed += 100;
  }
}

// The two-chunk span kernel (attention_span_pair.cu: segment pairs in registers, two chunks per
// step, both chunks' value chains side by side) against the one-chunk span kernel, both picked by
// the backend option (not the environment), at every stage count it takes (backend i: i + 2
// stages), over the same shapes and plans: bit for bit. Then against the chunk kernel as well.
TEST_F(GpuAttention, PairSpanKernelEqualsSpanKernelBitwise) {
  cuda::CudaBackendOptions span_opts;
  span_opts.attention_split = cuda::AttentionSplit::kAlways;
  span_opts.attention_span_kernel = 1;
  std::unique_ptr<Backend> span = gputest::make_cuda(span_opts);
  cuda::CudaBackendOptions pair_opts = span_opts;
  pair_opts.attention_span_kernel = 2;
  std::vector<std::unique_ptr<Backend>> pairs;
  for (const char* stages : {"2", "3", "4"}) {
    ScopedEnv st("TERN_CUDA_ATTN_SPAN_STAGES", stages);
    pairs.push_back(gputest::make_cuda(pair_opts));
  }
  ASSERT_TRUE(span != nullptr);
  for (const auto& b : pairs) ASSERT_TRUE(b != nullptr);
  expect_split_kernels_equal(*span, pairs, 900);

  cuda::CudaBackendOptions chunk_opts = span_opts;
  chunk_opts.attention_span_kernel = 0;
  std::unique_ptr<Backend> chunk = gputest::make_cuda(chunk_opts);
  ASSERT_TRUE(chunk != nullptr);
  std::vector<std::unique_ptr<Backend>> pair3;
  {
    ScopedEnv st("TERN_CUDA_ATTN_SPAN_STAGES", "3");
    pair3.push_back(gputest::make_cuda(pair_opts));
  }
  expect_split_kernels_equal(*chunk, pair3, 1100);
}

// The group-values kernel (span_kernel 3: a lane owns a dimension of one chunk for the 4 queries
// of a group, probabilities stored in groups of 4, chunk 1's chains handed to chunk 0's lanes by
// shuffle) and the heads-first block order (+ 16: the KV heads of a span launched next to each
// other) against the two-chunk kernel, bit for bit: kernel 3 at every stage count it takes
// (backends 0-2: 2, 3, 4 stages), then 18 and 19 at 3 stages, and with two value dimensions per
// lane (+ 64; at head_dim 128 with f16 caches only, else the same kernel as 3). kShapes' groups of 3 and 7 and the
// verify / prefill tiles put queries of different tokens in one group of 4 (their own ranges).
TEST_F(GpuAttention, GroupSpanKernelEqualsPairKernelBitwise) {
  cuda::CudaBackendOptions pair_opts;
  pair_opts.attention_split = cuda::AttentionSplit::kAlways;
  pair_opts.attention_span_kernel = 2;
  std::unique_ptr<Backend> pair = gputest::make_cuda(pair_opts);
  std::vector<std::unique_ptr<Backend>> got;
  for (int kernel : {3, 3, 3, 18, 19, 3 + 64, 3 + 64 + 16}) {
    cuda::CudaBackendOptions o = pair_opts;
    o.attention_span_kernel = kernel;
    const std::string stages = got.size() < 3 ? std::to_string(got.size() + 2) : "3";
    ScopedEnv st("TERN_CUDA_ATTN_SPAN_STAGES", stages.c_str());
    got.push_back(gputest::make_cuda(o));
  }
  ASSERT_TRUE(pair != nullptr);
  for (const auto& b : got) ASSERT_TRUE(b != nullptr);
  expect_split_kernels_equal(*pair, got, 1900);
}

// The reference of the split-kernel comparisons: kernel 2 (whole spans, one block each, the merge
// kernel) always in split mode, no chunk split, no early K/V copies.
cuda::CudaBackendOptions pair_reference_options() {
  cuda::CudaBackendOptions o;
  o.attention_split = cuda::AttentionSplit::kAlways;
  o.attention_span_kernel = 2;
  o.attention_chunk_split = 0;
  o.attention_early_kv = 0;
  return o;
}

// The chunk split (AttentionArgs::chunk_split: a block per 1 or 2 chunks of a span, each chunk's
// (m, l, a) stored unfolded, the chunk merge folding them into span partials and those into the
// result) against whole-span blocks and the merge kernel, bit for bit: kernels 2, 3 (2 and 4
// stages), 19 and 115 (its persistent flag dropped under the split) at 1 and 2 chunks per
// block, over kShapes and expect_split_kernels_equal's plans (decodes at chunk / span
// boundaries, a verify tile, a prefill chunk across a span boundary, a 9k decode), so parts past
// a tile's last position, tokens of one tile owning different chunks, windows and softcap all
// occur.
TEST_F(GpuAttention, ChunkSplitEqualsPairKernelBitwise) {
  const cuda::CudaBackendOptions pair_opts = pair_reference_options();
  std::unique_ptr<Backend> pair = gputest::make_cuda(pair_opts);
  std::vector<std::unique_ptr<Backend>> got;
  const struct {
    int kernel, split;
    const char* stages;
  } variants[] = {{2, 1, "3"}, {2, 2, "3"}, {3, 1, "2"}, {3, 2, "4"}, {19, 1, "3"}, {115, 1, "3"}, {115, 2, "3"}};
  for (const auto& v : variants) {
    cuda::CudaBackendOptions o = pair_opts;
    o.attention_span_kernel = v.kernel;
    o.attention_chunk_split = v.split;
    o.attention_early_kv = 1;  // (only steps of at most 16 tokens take it)
    ScopedEnv st("TERN_CUDA_ATTN_SPAN_STAGES", v.stages);
    got.push_back(gputest::make_cuda(o));
  }
  ASSERT_TRUE(pair != nullptr);
  for (const auto& b : got) ASSERT_TRUE(b != nullptr);
  expect_split_kernels_equal(*pair, got, 2300);
  for (const auto& b : got) EXPECT_GT(cuda::backend_stats(*b).chunk_splits, 0);
  EXPECT_EQ(cuda::backend_stats(*pair).chunk_splits, 0);
}

// Backends of the folded-merge tests: split mode, span kernel `kernel`, fold_merge `fold`.
std::unique_ptr<Backend> make_span(int kernel, int fold) {
  cuda::CudaBackendOptions o;
  o.attention_split = cuda::AttentionSplit::kAlways;
  o.attention_span_kernel = kernel;
  o.attention_fold_merge = fold;
  return gputest::make_cuda(o);
}

// Runs `plans` (built on caches[0]'s block tables; every cache has the same contents and tables)
// on want and on every backend of got; expects bit-for-bit equal results.
void expect_plans_equal(Backend& want, const std::vector<std::unique_ptr<Backend>>& got,
                        std::vector<std::unique_ptr<Cache>>& caches, const Shape& s, const std::vector<BatchPlan>& plans,
                        uint32_t seed) {
  for (size_t pi = 0; pi < plans.size(); ++pi) {
    SCOPED_TRACE("plan " + std::to_string(pi) + " (" + std::to_string(plans[pi].n_tokens()) + " tokens, last position " +
                 std::to_string(plans[pi].positions.back()) + ")");
    const HostTensor q = random_q(plans[pi].n_tokens(), s, seed + static_cast<uint32_t>(pi));
    const auto want_out = run_gpu(want, plans[pi], *caches[0], s, q);
    for (size_t i = 0; i < got.size(); ++i) {
      SCOPED_TRACE("backend " + std::to_string(i));
      EXPECT_TRUE(gputest::bitwise_equal(run_gpu(*got[i], plans[pi], *caches[i + 1], s, q), want_out));
    }
  }
}

// One cache per backend (want first), all from `seed`; take() hands out the same block tables.
struct Caches {
  std::vector<std::unique_ptr<Cache>> all;
  Caches(Backend& want, const std::vector<std::unique_ptr<Backend>>& got, const Shape& s, int n_blocks, uint32_t seed) {
    all.push_back(std::make_unique<Cache>(want, s, n_blocks, seed));
    for (const auto& b : got) all.push_back(std::make_unique<Cache>(*b, s, n_blocks, seed));
  }
  std::vector<int32_t> take(int n_tokens) {
    const std::vector<int32_t> blocks = all[0]->take_blocks(n_tokens);
    for (size_t i = 1; i < all.size(); ++i) EXPECT_EQ(all[i]->take_blocks(n_tokens), blocks);
    return blocks;
  }
};

// The folded merge (attention_span_merge.cuh: the last span block of a tile merges it; a tile
// of one span merges from shared memory) against the merge kernel, bit for bit, for both span
// kernels: decodes alone at contexts on both sides of the chunk and span boundaries (one tile:
// the one-span path, then the counter), a step of several sequences (decodes, a verify tile,
// prefill chunks crossing span boundaries: several tokens per tile), over kShapes (GQA groups,
// head_dim 64 to 256, f16 / f32 caches, softcap, window). fold 2 folds every step, fold 1 where
// the backend's plan picks it.
TEST_F(GpuAttention, FoldedMergeEqualsMergeKernelBitwise) {
  uint32_t seed = 1300;
  for (int kernel : {2, 1, 19}) {
    SCOPED_TRACE("span kernel " + std::to_string(kernel));
    auto want = make_span(kernel, 0);
    std::vector<std::unique_ptr<Backend>> got;
    got.push_back(make_span(kernel, 2));
    got.push_back(make_span(kernel, 1));
    ASSERT_TRUE(want != nullptr && got[0] != nullptr && got[1] != nullptr);
    for (const Shape& s : kShapes) {
      SCOPED_TRACE(describe(s));
      Caches c(*want, got, s, 520, seed);
      std::vector<BatchPlan> plans;
      for (int pos : {0, 62, 63, 64, 255, 256, 999, 4095}) {
        plans.emplace_back();
        add_sequence(plans.back(), pos, 1, c.take(pos + 1));
      }
      plans.emplace_back();
      BatchPlan& mixed = plans.back();
      add_sequence(mixed, 700, 1, c.take(701));
      add_sequence(mixed, 130, 3, c.take(133));    // a speculative verify of 3
      add_sequence(mixed, 490, 40, c.take(530));   // crosses the span boundary at 512: 5 tiles
      add_sequence(mixed, 10, 20, c.take(30));     // a prefill chunk inside span 0
      add_sequence(mixed, 2, 1, c.take(3));
      const int64_t before = cuda::backend_stats(*got[0]).folded_merges;
      expect_plans_equal(*want, got, c.all, s, plans, seed + 1);
      EXPECT_EQ(cuda::backend_stats(*got[0]).folded_merges, before + static_cast<int64_t>(plans.size()));
      EXPECT_EQ(cuda::backend_stats(*want).folded_merges, 0);
      seed += 2;
    }
  }
}

// Long contexts (128+ spans per tile: the in-block merge takes several batches of the block's
// free shared memory) with the merge folded, against the merge kernel.
TEST_F(GpuAttention, FoldedMergeLongContextBitwise) {
  const Shape shapes[] = {{32, 8, 128, DType::F16}, {9, 3, 64, DType::F16}, {8, 2, 128, DType::F32}};
  uint32_t seed = 1500;
  for (int kernel : {2, 1, 19}) {
    SCOPED_TRACE("span kernel " + std::to_string(kernel));
    auto want = make_span(kernel, 0);
    std::vector<std::unique_ptr<Backend>> got;
    got.push_back(make_span(kernel, 2));
    ASSERT_TRUE(want != nullptr && got[0] != nullptr);
    for (const Shape& s : shapes) {
      SCOPED_TRACE(describe(s));
      Caches c(*want, got, s, 2100, seed);
      std::vector<BatchPlan> plans(2);
      const auto blocks = c.take(33001);
      add_sequence(plans[0], 32768, 1, blocks);
      add_sequence(plans[1], 33000, 1, blocks);
      add_sequence(plans[1], 4000, 4, blocks);  // the same sequence again: a verify tile, 16 spans
      add_sequence(plans[1], 30, 1, blocks);
      expect_plans_equal(*want, got, c.all, s, plans, seed + 1);
      seed += 2;
    }
  }
}

// Persistent span blocks (span_kernel + 32: a block keeps its KV head and walks several spans,
// its K/V ring running on into the next span) against one block per span, bit for bit: one-tile
// plans (long decodes, a verify of 3), for both two-chunk kernels at 3 and 4 stages, plus the
// heads-first order alone and (kernel 3) two value dimensions per lane. First with the grid the backend picks (persistent at the 8B shape's
// 40k / 36k plans), then with 5 blocks per (KV head, head slice) walking ~30 spans each at every
// shape and plan (TERN_CUDA_ATTN_PERSIST_COLS, read when a backend is created).
TEST_F(GpuAttention, PersistentSpanBlocksEqualOneBlockPerSpan) {
  const Shape shapes[] = {{32, 8, 128, DType::F16}, {9, 3, 64, DType::F16}, {14, 2, 64, DType::F32},
                          {8, 1, 256, DType::F32}, {8, 2, 64, DType::F16, 0.0f, 37}};
  uint32_t seed = 2100;
  for (int kernel : {3, 2}) {
    for (const char* cols : {"0", "5"}) {
      SCOPED_TRACE("span kernel " + std::to_string(kernel) + ", persistent columns " + cols);
      ScopedEnv persist_cols("TERN_CUDA_ATTN_PERSIST_COLS", cols);
      cuda::CudaBackendOptions o;
      o.attention_split = cuda::AttentionSplit::kAlways;
      o.attention_fold_merge = 0;
      o.attention_span_kernel = kernel;
      auto want = gputest::make_cuda(o);
      std::vector<std::unique_ptr<Backend>> got;
      for (int v : {kernel + 32, kernel + 32, kernel + 16, kernel == 3 ? kernel + 64 + 32 : kernel + 32}) {
        cuda::CudaBackendOptions ov = o;
        ov.attention_span_kernel = v;
        ScopedEnv st("TERN_CUDA_ATTN_SPAN_STAGES", got.size() == 1 ? "4" : "3");
        got.push_back(gputest::make_cuda(ov));
      }
      ASSERT_TRUE(want != nullptr);
      for (const auto& b : got) ASSERT_TRUE(b != nullptr);
      for (const Shape& s : shapes) {
        SCOPED_TRACE(describe(s));
        Caches c(*want, got, s, 2600, seed);
        const auto blocks = c.take(40001);
        std::vector<BatchPlan> plans(4);
        add_sequence(plans[0], 40000, 1, blocks);
        add_sequence(plans[1], 23000, 1, blocks);
        add_sequence(plans[2], 36000, 3, blocks);  // a verify tile
        add_sequence(plans[3], 1300, 1, blocks);
        expect_plans_equal(*want, got, c.all, s, plans, seed + 1);
        seed += 2;
      }
    }
  }
}

// The split K/V ring (span_kernel + 128, attention_span.cuh kSpanSplitRing: a stage's K half is
// reissued after the scores step, its V half after the values step, each its own cp.async
// group) against kernel 2, bit for bit, over kShapes and expect_split_kernels_equal's plans: 3 +
// 64 + 128 at 2 (registers for 3 blocks per SM), 3 and 4 stages, heads-first, with the chunk
// split at 1 and 2 chunks per block, and with early K/V copies asked for (which drop the ring);
// then + 256 (the values step with 2 of a group's queries per lane, on all 8 warps) at 2, 3 and
// 4 stages and persistent + heads-first (499). Then + 512, the warp-specialized ring
// (attention_span_ws_kernel: producer warps score step s + 1 while consumer warps run step s):
// 755 and 723 (not heads-first) at 3 stages, where it runs (checked by its launch counter), and
// where the launcher falls back to the ring kernel: 2 stages, the chunk split, early K/V.
// Shapes other than head_dim 128 with an f16 cache run kernel 3 without it (the flag is ignored).
TEST_F(GpuAttention, SplitKvRingEqualsPairKernelBitwise) {
  const cuda::CudaBackendOptions pair_opts = pair_reference_options();
  std::unique_ptr<Backend> pair = gputest::make_cuda(pair_opts);
  const struct {
    int kernel, split, early;
    const char* stages;
  } variants[] = {{195, 0, 0, "2"}, {195, 0, 0, "3"}, {195, 0, 0, "4"}, {211, 0, 0, "3"},
                  {243, 1, 0, "3"}, {243, 2, 0, "3"}, {243, 0, 1, "3"}, {451, 0, 0, "2"},
                  {451, 0, 0, "3"}, {451, 0, 0, "4"}, {499, 0, 0, "3"},
                  {755, 0, 0, "3"}, {723, 0, 0, "3"}, {755, 0, 0, "2"},  {755, 1, 0, "3"},
                  {755, 0, 1, "3"}, {1779, 0, 0, "3"}, {1747, 0, 0, "3"}, {1795, 0, 0, "3"},
                  {1779, 0, 0, "2"}};
  std::vector<std::unique_ptr<Backend>> got;
  for (const auto& v : variants) {
    cuda::CudaBackendOptions o = pair_opts;
    o.attention_span_kernel = v.kernel;
    o.attention_chunk_split = v.split;
    o.attention_early_kv = v.early;
    ScopedEnv st("TERN_CUDA_ATTN_SPAN_STAGES", v.stages);
    got.push_back(gputest::make_cuda(o));
  }
  ASSERT_TRUE(pair != nullptr);
  for (const auto& b : got) ASSERT_TRUE(b != nullptr);
  const int64_t ws_before = cuda::attention_span_ws_launches();
  const int64_t lean_before = cuda::attention_span_ws_lean_launches();
  expect_split_kernels_equal(*pair, got, 2700);
  EXPECT_GT(cuda::attention_span_ws_launches(), ws_before) << "the warp-specialized kernel never ran";
  EXPECT_GT(cuda::attention_span_ws_lean_launches(), lean_before) << "its lean form never ran";
}

// The lean warp-specialized ring (1779 = 755 + kSpanWsLean; 1747 without persistent blocks)
// on head-dim-128 f16 shapes kShapes lacks: a GQA group of 3 (a group of 4 queries spans two
// tokens of a tile: two position ranges), a group of 8 (two head slices of 4) and a sliding
// window, against kernel 2 bit for bit, with 755 alongside; the lean form must have run.
TEST_F(GpuAttention, LeanWarpSpecializedRingEqualsPairKernelBitwise) {
  const cuda::CudaBackendOptions pair_opts = pair_reference_options();
  std::unique_ptr<Backend> pair = gputest::make_cuda(pair_opts);
  std::vector<std::unique_ptr<Backend>> got;
  for (int kernel : {755, 1779, 1747}) {
    cuda::CudaBackendOptions o = pair_opts;
    o.attention_span_kernel = kernel;
    got.push_back(gputest::make_cuda(o));
  }
  ASSERT_TRUE(pair != nullptr);
  for (const auto& b : got) ASSERT_TRUE(b != nullptr);
  const Shape shapes[] = {{12, 4, 128, DType::F16}, {16, 2, 128, DType::F16}, {8, 2, 128, DType::F16, 0.0f, 300}};
  const int64_t lean_before = cuda::attention_span_ws_lean_launches();
  expect_split_kernels_equal(*pair, got, 2800, shapes);
  EXPECT_GT(cuda::attention_span_ws_lean_launches(), lean_before) << "the lean form never ran";
}

// The span merge sliced by 32 dimensions (span_kernel + 16384, kSpanMergeSliced; with the lean
// ring: 18163, TERN_CUDA_ATTN_SPLIT_RING=5, the default at head_dim 128 / f16 in sessions 9-11)
// against kernel 2 and its one-block-per-head merge, bit for bit, at 3100 positions (GQA groups 3
// and 8 over several blocks, a window) and at 32k-33k decodes and a verify with persistent
// blocks (the backend's grid and 5 columns walking ~26 spans); each with the serial fold and the
// prescaled one (+ 32768, kSpanMergePrescaled: 13 spans are one group of 8 and 5 alone, 126 an
// odd count of groups, 129 an even one; the window's empty spans take the identity fold). The
// launch counters show the lean kernel and both merges ran.
TEST_F(GpuAttention, LeanRingSlicedMergeBitwise) {
  const cuda::CudaBackendOptions pair_opts = pair_reference_options();
  cuda::CudaBackendOptions sliced_opts = pair_opts;
  sliced_opts.attention_span_kernel = 1779 + 16384;
  cuda::CudaBackendOptions prescaled_opts = pair_opts;
  prescaled_opts.attention_span_kernel = 1779 + 16384 + 32768;
  const int64_t lean_before = cuda::attention_span_ws_lean_launches();
  const int64_t sliced_before = cuda::attention_span_merge_sliced_launches();
  const int64_t prescaled_before = cuda::attention_span_merge_prescaled_launches();
  {
    std::unique_ptr<Backend> pair = gputest::make_cuda(pair_opts);
    std::vector<std::unique_ptr<Backend>> got;
    got.push_back(gputest::make_cuda(sliced_opts));
    got.push_back(gputest::make_cuda(prescaled_opts));
    ASSERT_TRUE(pair != nullptr);
    for (const auto& b : got) ASSERT_TRUE(b != nullptr);
    const Shape shapes[] = {{12, 4, 128, DType::F16}, {16, 2, 128, DType::F16}, {8, 2, 128, DType::F16, 0.0f, 300}};
    expect_split_kernels_equal(*pair, got, 3100, shapes);
  }
  uint32_t seed = 3300;
  for (const char* cols : {"0", "5"}) {
    SCOPED_TRACE(std::string("persistent columns ") + cols);
    ScopedEnv persist_cols("TERN_CUDA_ATTN_PERSIST_COLS", cols);
    auto want = gputest::make_cuda(pair_opts);
    std::vector<std::unique_ptr<Backend>> got;
    got.push_back(gputest::make_cuda(sliced_opts));
    got.push_back(gputest::make_cuda(prescaled_opts));
    ASSERT_TRUE(want != nullptr);
    for (const auto& b : got) ASSERT_TRUE(b != nullptr);
    const Shape s{32, 8, 128, DType::F16};
    Caches c(*want, got, s, 2100, seed);
    const auto blocks = c.take(33001);
    std::vector<BatchPlan> plans(3);
    add_sequence(plans[0], 32768, 1, blocks);
    add_sequence(plans[1], 33000, 1, blocks);
    add_sequence(plans[2], 32000, 3, blocks);  // a verify tile
    expect_plans_equal(*want, got, c.all, s, plans, seed + 1);
    seed += 2;
  }
  EXPECT_GT(cuda::attention_span_ws_lean_launches(), lean_before) << "the lean form never ran";
  EXPECT_GT(cuda::attention_span_merge_sliced_launches(), sliced_before) << "the sliced merge never ran";
  EXPECT_GT(cuda::attention_span_merge_prescaled_launches(), prescaled_before) << "the prescaled fold never ran";
}

// The split K/V ring at long contexts, where blocks are persistent (span_kernel 243 = 115 + 128:
// the ring runs on across a block's spans, both halves of a stage reissued for the next span's
// chunks; 499 = 243 + 256, the values on all 8 warps): 32k-33k decodes, a verify of 3, and a
// step of several sequences (several tiles: one block per span), against kernel 2, bit for bit:
// 243 at 2 and 3 stages, 499 at 3 and 4, with the grid the backend picks and with 5 blocks per
// (KV head, head slice) walking ~26 spans each (TERN_CUDA_ATTN_PERSIST_COLS). Shapes: the 8B
// shape, a sliding window (empty spans), softcap (grid the backend picks only). And the
// warp-specialized ring, 755, 1011 (+ 256, ignored by it) and its lean form 1779 at 3 stages: persistent blocks
// walking spans with the producers a step ahead across span boundaries, its slot buffers
// rewritten under way; the launch counter shows that it ran.
TEST_F(GpuAttention, SplitKvRingLongContextBitwise) {
  const Shape shapes[] = {{32, 8, 128, DType::F16}, {8, 2, 128, DType::F16, 0.0f, 3000}, {8, 2, 128, DType::F16, 30.0f}};
  uint32_t seed = 2900;
  for (const char* cols : {"0", "5"}) {
    SCOPED_TRACE(std::string("persistent columns ") + cols);
    ScopedEnv persist_cols("TERN_CUDA_ATTN_PERSIST_COLS", cols);
    cuda::CudaBackendOptions o;
    o.attention_split = cuda::AttentionSplit::kAlways;
    o.attention_span_kernel = 2;
    auto want = gputest::make_cuda(o);
    std::vector<std::unique_ptr<Backend>> got;
    const struct {
      int kernel;
      const char* stages;
    } variants[] = {{243, "2"}, {243, "3"}, {499, "3"}, {499, "4"}, {755, "3"}, {1011, "3"}, {1779, "3"}};
    for (const auto& v : variants) {
      cuda::CudaBackendOptions ov = o;
      ov.attention_span_kernel = v.kernel;
      ScopedEnv st("TERN_CUDA_ATTN_SPAN_STAGES", v.stages);
      got.push_back(gputest::make_cuda(ov));
    }
    ASSERT_TRUE(want != nullptr);
    for (const auto& b : got) ASSERT_TRUE(b != nullptr);
    const int64_t ws_before = cuda::attention_span_ws_launches();
    const int64_t lean_before = cuda::attention_span_ws_lean_launches();
    for (const Shape& s : shapes) {
      if (cols[0] == '5' && s.softcap > 0.0f) continue;  // (time: the other shapes cover the walk)
      SCOPED_TRACE(describe(s));
      Caches c(*want, got, s, 2100, seed);
      const auto blocks = c.take(33001);
      std::vector<BatchPlan> plans(4);
      add_sequence(plans[0], 32768, 1, blocks);
      add_sequence(plans[1], 33000, 1, blocks);
      add_sequence(plans[2], 32000, 3, blocks);  // a verify tile
      add_sequence(plans[3], 33000, 1, blocks);
      add_sequence(plans[3], 4000, 4, blocks);  // the same sequence again: a verify tile, 16 spans
      add_sequence(plans[3], 30, 1, blocks);
      expect_plans_equal(*want, got, c.all, s, plans, seed + 1);
      seed += 2;
    }
    EXPECT_GT(cuda::attention_span_ws_launches(), ws_before) << "the warp-specialized kernel never ran";
    EXPECT_GT(cuda::attention_span_ws_lean_launches(), lean_before) << "its lean form never ran";
  }
}

// The split K/V ring (243, 499) and its warp-specialized forms (755, lean 1779) under CUDA graphs: a 32k
// decode step (persistent blocks) and a step of several sequences, each with two attention ops,
// run 5 times with the same buffers (replayed as graphs), equal kernel 2's eager results every
// time.
TEST_F(GpuAttention, SplitKvRingRepeatsUnderGraphs) {
  const Shape s{32, 8, 128, DType::F16};
  auto want = make_span(2, 0);
  std::vector<std::unique_ptr<Backend>> got;
  for (int kernel : {243, 499, 755, 1779}) {
    cuda::CudaBackendOptions o;
    o.attention_span_kernel = kernel;
    got.push_back(gputest::make_cuda(o));
  }
  ASSERT_TRUE(want != nullptr);
  for (const auto& b : got) ASSERT_TRUE(b != nullptr);
  Caches c(*want, got, s, 2100, 3100);
  const auto blocks = c.take(33001);
  std::vector<BatchPlan> plans(2);
  add_sequence(plans[0], 32768, 1, blocks);
  add_sequence(plans[1], 33000, 1, blocks);
  add_sequence(plans[1], 1000, 1, blocks);
  add_sequence(plans[1], 300, 3, blocks);
  for (size_t pi = 0; pi < plans.size(); ++pi) {
    SCOPED_TRACE("plan " + std::to_string(pi));
    const BatchPlan& plan = plans[pi];
    const HostTensor q0 = random_q(plan.n_tokens(), s, 3110 + 2 * pi), q1 = random_q(plan.n_tokens(), s, 3111 + 2 * pi);
    auto run_steps = [&](Backend& b, Cache& cache, int n_steps) {
      return run_two_op_steps(b, cache, plan, s, q0, q1, n_steps);
    };
    const auto want_outs = run_steps(*want, *c.all[0], 1);
    for (size_t i = 0; i < got.size(); ++i) {
      SCOPED_TRACE("backend " + std::to_string(i));
      const int64_t graphs_before = cuda::backend_stats(*got[i]).steps_graph;
      const auto outs = run_steps(*got[i], *c.all[i + 1], 5);
      expect_steps_equal(outs, want_outs, "op");
      EXPECT_GE(cuda::backend_stats(*got[i]).steps_graph, graphs_before + 2) << "the steps were not replayed as graphs";
    }
  }
}

// The default backend (kernel and chunk split chosen per shape and plan, early K/V copies) on
// single decodes at short and medium contexts, where default_chunk_split picks the split, and
// kernel 2 with early copies alone, against kernel 2 with whole spans and no early copies: bit
// for bit, and the split must have run. Each plan's token writes a slot of its last chunk, so
// the early copies defer that row to after the PDL wait.
TEST_F(GpuAttention, DefaultChunkSplitEqualsPairKernelBitwise) {
  cuda::CudaBackendOptions pair_opts;
  pair_opts.attention_span_kernel = 2;
  pair_opts.attention_chunk_split = 0;
  pair_opts.attention_early_kv = 0;
  std::unique_ptr<Backend> want = gputest::make_cuda(pair_opts);
  std::vector<std::unique_ptr<Backend>> got;
  got.push_back(gputest::make_cuda());
  cuda::CudaBackendOptions early_opts = pair_opts;  // early K/V copies alone, whole spans
  early_opts.attention_early_kv = 1;
  got.push_back(gputest::make_cuda(early_opts));
  ASSERT_TRUE(want != nullptr && got[0] != nullptr && got[1] != nullptr);
  uint32_t seed = 2500;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    Caches c(*want, got, s, 300, seed);
    const auto blocks = c.take(4097);
    std::vector<BatchPlan> plans;
    for (int pos : {40, 100, 256, 300, 511, 1000, 1023, 1024, 2047, 4095, 4096}) {
      plans.emplace_back();
      add_sequence(plans.back(), pos, 1, blocks);
    }
    plans.emplace_back();
    add_sequence(plans.back(), 1000, 3, blocks);  // a verify tile
    const int64_t before = cuda::backend_stats(*got[0]).chunk_splits;
    expect_plans_equal(*want, got, c.all, s, plans, seed + 1);
    // (head_dim 256 with f32: the two-chunk kernels' 2 stages do not fit, kernel 1 takes whole spans)
    if (!(s.head_dim == 256 && s.cache == DType::F32)) {
      EXPECT_GT(cuda::backend_stats(*got[0]).chunk_splits, before);
    }
    seed += 2;
  }
}

// The folded merge's counters must be back at zero after every launch: the same step (two
// attention ops sharing the counters, as layers do) run several times with the same buffers, so
// the backend replays it as a CUDA graph, equals the merge kernel's results every time.
TEST_F(GpuAttention, FoldedMergeRepeatsUnderGraphs) {
  const Shape s{32, 8, 128, DType::F16};
  for (int kernel : {2, 1, 19}) {
    SCOPED_TRACE("span kernel " + std::to_string(kernel));
    auto want = make_span(kernel, 0);
    std::vector<std::unique_ptr<Backend>> got;
    got.push_back(make_span(kernel, 2));
    got.push_back(make_span(kernel, 1));
    {
      cuda::CudaBackendOptions o;  // the chunk split (kernel 1 serves whole spans: no split)
      o.attention_split = cuda::AttentionSplit::kAlways;
      o.attention_span_kernel = kernel;
      o.attention_chunk_split = 1;
      got.push_back(gputest::make_cuda(o));
    }
    ASSERT_TRUE(want != nullptr && got[0] != nullptr && got[1] != nullptr && got[2] != nullptr);
    Caches c(*want, got, s, 300, 1700 + kernel);
    BatchPlan plan;
    add_sequence(plan, 1000, 1, c.take(1001));
    add_sequence(plan, 300, 9, c.take(309));  // two tiles of 2 spans
    add_sequence(plan, 40, 1, c.take(41));    // one span
    const HostTensor q0 = random_q(plan.n_tokens(), s, 1710), q1 = random_q(plan.n_tokens(), s, 1711);
    auto run_steps = [&](Backend& b, Cache& cache, int n_steps) {
      return run_two_op_steps(b, cache, plan, s, q0, q1, n_steps);
    };
    const auto want_outs = run_steps(*want, *c.all[0], 1);
    for (size_t i = 0; i < got.size(); ++i) {
      SCOPED_TRACE("backend " + std::to_string(i));
      const int64_t graphs_before = cuda::backend_stats(*got[i]).steps_graph;
      const auto outs = run_steps(*got[i], *c.all[i + 1], 5);
      expect_steps_equal(outs, want_outs, "op");
      EXPECT_GE(cuda::backend_stats(*got[i]).steps_graph, graphs_before + 2) << "the steps were not replayed as graphs";
      if (i == 0) {
        EXPECT_GT(cuda::backend_stats(*got[i]).folded_merges, 0);  // fold 2: the counters ran
      }
      if (i == 2 && kernel != 1) {
        EXPECT_GT(cuda::backend_stats(*got[i]).chunk_splits, 0);  // the two-chunk kernels split
      }
    }
  }
}

}  // namespace
}  // namespace tern
