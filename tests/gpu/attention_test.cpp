// CUDA paged attention against ref::attention (CPU oracle) over GQA groups (including groups
// larger than one block's 4 heads), head sizes, f16/f32 caches, scattered block tables, decode
// and prefill plans, several sequences in one step, contexts past many 64-position chunks,
// softcap and sliding windows. Tolerance: ||out - ref|| / ||ref|| <= 2e-5 (fp32 with __expf and
// a different summation order).
//
// Invariance, bit for bit: the split (flash-decoding) and fused modes; a token attended in a
// large prefill step and alone in a decode step.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "backends/cpu/ops_ref.h"
#include "core/fp16.h"
#include "gpu_test_util.h"

namespace tern {
namespace {

using gputest::DeviceTensor;
using gputest::HostTensor;

constexpr int kBlockTokens = 16;

struct Shape {
  int n_heads, n_kv_heads, head_dim;
  DType cache;
  float softcap = 0.0f;
  int window = 0;
};

std::string describe(const Shape& s) {
  return "heads=" + std::to_string(s.n_heads) + "/" + std::to_string(s.n_kv_heads) + " hd=" +
         std::to_string(s.head_dim) + " " + std::string(dtype_name(s.cache)) +
         (s.softcap > 0 ? " softcap" : "") + (s.window > 0 ? " window=" + std::to_string(s.window) : "");
}

// A KV cache filled with random values, on the host and the device, and per-sequence block
// tables drawn from a shuffled pool (so sequences interleave in memory).
class Cache {
 public:
  Cache(Backend& b, const Shape& s, int n_blocks, uint32_t seed) : shape_(s), n_blocks_(n_blocks) {
    const int64_t rows = int64_t{n_blocks} * kBlockTokens, cols = int64_t{s.n_kv_heads} * s.head_dim;
    for (int which = 0; which < 2; ++which) {
      const auto vals = gputest::random_floats(static_cast<size_t>(rows * cols), seed + which);
      HostTensor& h = host_[which];
      h.bytes.resize(row_bytes(s.cache, cols) * rows);
      for (size_t i = 0; i < vals.size(); ++i) {
        if (s.cache == DType::F16) {
          reinterpret_cast<uint16_t*>(h.bytes.data())[i] = f32_to_fp16(vals[i]);
        } else {
          reinterpret_cast<float*>(h.bytes.data())[i] = vals[i];
        }
      }
      h.t = Tensor::view(h.bytes.data(), s.cache, rows, cols);
      dev_[which] = gputest::device_copy(b, h.t);
    }
    free_.resize(n_blocks);
    std::iota(free_.begin(), free_.end(), 0);
    std::mt19937 rng(seed);
    std::shuffle(free_.begin(), free_.end(), rng);
  }
  std::vector<int32_t> take_blocks(int n_tokens) {
    const int n = (n_tokens + kBlockTokens - 1) / kBlockTokens;
    EXPECT_LE(n, static_cast<int>(free_.size()));
    std::vector<int32_t> out(free_.end() - n, free_.end());
    free_.resize(free_.size() - n);
    return out;
  }
  KvLayerView host_view() { return {host_[0].t, host_[1].t, kBlockTokens}; }
  KvLayerView dev_view() { return {dev_[0].t, dev_[1].t, kBlockTokens}; }

 private:
  Shape shape_;
  int n_blocks_;
  HostTensor host_[2];
  DeviceTensor dev_[2];
  std::vector<int32_t> free_;
};

// Appends tokens [first_pos, first_pos + n) of a sequence with `blocks` to plan.
void add_sequence(BatchPlan& p, int first_pos, int n, const std::vector<int32_t>& blocks) {
  if (p.block_offsets.empty()) p.block_offsets.push_back(0);
  const int seq = p.n_seqs();
  p.block_ids.insert(p.block_ids.end(), blocks.begin(), blocks.end());
  p.block_offsets.push_back(static_cast<int32_t>(p.block_ids.size()));
  for (int i = 0; i < n; ++i) {
    const int pos = first_pos + i;
    p.token_ids.push_back(1);
    p.seq_index.push_back(seq);
    p.positions.push_back(pos);
    p.kv_slots.push_back(blocks[pos / kBlockTokens] * kBlockTokens + pos % kBlockTokens);
  }
}

AttentionParams params_of(const Shape& s) {
  AttentionParams p;
  p.n_heads = s.n_heads;
  p.n_kv_heads = s.n_kv_heads;
  p.head_dim = s.head_dim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  p.sliding_window = s.window;
  p.logit_softcap = s.softcap;
  return p;
}

// Runs the plan on the device; returns out [n_tokens, n_heads * head_dim].
std::vector<float> run_gpu(Backend& b, const BatchPlan& plan, Cache& cache, const Shape& s, const HostTensor& q) {
  DeviceTensor dq = gputest::device_copy(b, q.t);
  DeviceTensor out = gputest::device_empty(b, DType::F32, q.t.rows, q.t.cols);
  b.begin_step(plan);
  b.attention(dq.t, cache.dev_view(), params_of(s), out.t);
  return gputest::download(b, out.t);
}

std::vector<float> run_ref(const BatchPlan& plan, Cache& cache, const Shape& s, const HostTensor& q) {
  std::vector<float> out(static_cast<size_t>(q.t.rows * q.t.cols));
  Tensor t = Tensor::view(out.data(), DType::F32, q.t.rows, q.t.cols);
  cpu::ref::attention(q.t, cache.host_view(), params_of(s), plan, t);
  return out;
}

HostTensor random_q(int n, const Shape& s, uint32_t seed) {
  const int64_t cols = int64_t{s.n_heads} * s.head_dim;
  return gputest::host_f32(gputest::random_floats(static_cast<size_t>(n * cols), seed, 2.0f), n, cols);
}

const Shape kShapes[] = {
    {9, 3, 64, DType::F16},   {32, 8, 128, DType::F16}, {14, 2, 64, DType::F32},  // group 7: two slices
    {4, 4, 80, DType::F16},   {8, 1, 256, DType::F32},                            // MHA, MQA at hd 256
    {8, 2, 128, DType::F16, 30.0f},                                               // softcap
    {8, 2, 64, DType::F16, 0.0f, 37},                                             // sliding window
};

class GpuAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    TERN_REQUIRE_GPU();
    backend_ = gputest::make_cuda();
    ASSERT_NE(backend_, nullptr);
  }
  std::unique_ptr<Backend> backend_;
};

TEST_F(GpuAttention, DecodeAtManyContextLengths) {
  uint32_t seed = 1;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    Cache cache(*backend_, s, 400, seed++);
    for (int pos : {0, 1, 63, 64, 65, 1000, 4100}) {
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
    const auto blocks = cache_a.take_blocks(300);
    (void)cache_b.take_blocks(300);
    add_sequence(plan, 200, 40, blocks);
    add_sequence(plan, 299, 1, blocks);  // the same sequence again: a second tile reading it
    const HostTensor q = random_q(plan.n_tokens(), s, seed + 1);
    const auto a = run_gpu(*split, plan, cache_a, s, q);
    const auto b = run_gpu(*fused, plan, cache_b, s, q);
    EXPECT_TRUE(gputest::bitwise_equal(a, b));
    seed += 2;
  }
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

}  // namespace
}  // namespace tern
