// Helpers of the attention tests (attention_test.cpp, attention_tc_test.cpp): a random paged KV
// cache on the host and the device with block tables drawn from a shuffled pool, plans of
// several sequences, and one attention op run on the device and on the CPU reference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/ops_ref.h"
#include "core/fp16.h"
#include "gpu_test_util.h"

namespace tern::gputest::attn {

constexpr int kBlockTokens = 16;

struct Shape {
  int n_heads, n_kv_heads, head_dim;
  DType cache;
  float softcap = 0.0f;
  int window = 0;
};

inline std::string describe(const Shape& s) {
  return "heads=" + std::to_string(s.n_heads) + "/" + std::to_string(s.n_kv_heads) + " hd=" +
         std::to_string(s.head_dim) + " " + std::string(dtype_name(s.cache)) +
         (s.softcap > 0 ? " softcap" : "") + (s.window > 0 ? " window=" + std::to_string(s.window) : "");
}

// A KV cache filled with random values, on the host and the device, and per-sequence block
// tables drawn from a shuffled pool (so sequences interleave in memory), of block_tokens rows
// per block (kBlockTokens unless a test picks another pool block size).
class Cache {
 public:
  Cache(Backend& b, const Shape& s, int n_blocks, uint32_t seed, int block_tokens = kBlockTokens)
      : shape_(s), n_blocks_(n_blocks), block_tokens_(block_tokens) {
    const int64_t rows = int64_t{n_blocks} * block_tokens, cols = int64_t{s.n_kv_heads} * s.head_dim;
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
    const int n = (n_tokens + block_tokens_ - 1) / block_tokens_;
    EXPECT_LE(n, static_cast<int>(free_.size()));
    std::vector<int32_t> out(free_.end() - n, free_.end());
    free_.resize(free_.size() - n);
    return out;
  }
  KvLayerView host_view() { return {host_[0].t, host_[1].t, block_tokens_}; }
  KvLayerView dev_view() { return {dev_[0].t, dev_[1].t, block_tokens_}; }
  int block_tokens() const { return block_tokens_; }

 private:
  Shape shape_;
  int n_blocks_;
  int block_tokens_;
  HostTensor host_[2];
  DeviceTensor dev_[2];
  std::vector<int32_t> free_;
};

// Appends tokens [first_pos, first_pos + n) of a sequence with `blocks` to plan.
inline void add_sequence(BatchPlan& p, int first_pos, int n, const std::vector<int32_t>& blocks,
                         int block_tokens = kBlockTokens) {
  if (p.block_offsets.empty()) p.block_offsets.push_back(0);
  const int seq = p.n_seqs();
  p.block_ids.insert(p.block_ids.end(), blocks.begin(), blocks.end());
  p.block_offsets.push_back(static_cast<int32_t>(p.block_ids.size()));
  for (int i = 0; i < n; ++i) {
    const int pos = first_pos + i;
    p.token_ids.push_back(1);
    p.seq_index.push_back(seq);
    p.positions.push_back(pos);
    p.kv_slots.push_back(blocks[pos / block_tokens] * block_tokens + pos % block_tokens);
  }
}

inline AttentionParams params_of(const Shape& s) {
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
inline std::vector<float> run_gpu(Backend& b, const BatchPlan& plan, Cache& cache, const Shape& s, const HostTensor& q) {
  DeviceTensor dq = gputest::device_copy(b, q.t);
  DeviceTensor out = gputest::device_empty(b, DType::F32, q.t.rows, q.t.cols);
  b.begin_step(plan);
  b.attention(dq.t, cache.dev_view(), params_of(s), out.t);
  return gputest::download(b, out.t);
}

inline std::vector<float> run_ref(const BatchPlan& plan, Cache& cache, const Shape& s, const HostTensor& q) {
  std::vector<float> out(static_cast<size_t>(q.t.rows * q.t.cols));
  Tensor t = Tensor::view(out.data(), DType::F32, q.t.rows, q.t.cols);
  cpu::ref::attention(q.t, cache.host_view(), params_of(s), plan, t);
  return out;
}

// n_steps steps of `plan` on b, each two attention ops (q0, then q1, into outputs of their own):
// the outputs in step order. The backend replays repeated steps as CUDA graphs.
inline std::vector<std::vector<float>> run_two_op_steps(Backend& b, Cache& cache, const BatchPlan& plan, const Shape& s,
                                                        const HostTensor& q0, const HostTensor& q1, int n_steps) {
  DeviceTensor dq0 = gputest::device_copy(b, q0.t), dq1 = gputest::device_copy(b, q1.t);
  DeviceTensor out0 = gputest::device_empty(b, DType::F32, plan.n_tokens(), q0.t.cols);
  DeviceTensor out1 = gputest::device_empty(b, DType::F32, plan.n_tokens(), q0.t.cols);
  std::vector<std::vector<float>> outs;
  for (int step = 0; step < n_steps; ++step) {
    b.begin_step(plan);
    b.attention(dq0.t, cache.dev_view(), params_of(s), out0.t);
    b.attention(dq1.t, cache.dev_view(), params_of(s), out1.t);
    outs.push_back(gputest::download(b, out0.t));
    outs.push_back(gputest::download(b, out1.t));
  }
  return outs;
}

// Each step's two outputs (outs, in step order) equal the reference step's (want: one step), bit
// for bit; `op` names the pair's members in failure traces.
inline void expect_steps_equal(const std::vector<std::vector<float>>& outs, const std::vector<std::vector<float>>& want,
                               const std::string& op) {
  for (size_t k = 0; k < outs.size(); ++k) {
    SCOPED_TRACE("step " + std::to_string(k / 2) + " " + op + " " + std::to_string(k % 2));
    EXPECT_TRUE(gputest::bitwise_equal(outs[k], want[k % 2]));
  }
}

inline HostTensor random_q(int n, const Shape& s, uint32_t seed) {
  const int64_t cols = int64_t{s.n_heads} * s.head_dim;
  return gputest::host_f32(gputest::random_floats(static_cast<size_t>(n * cols), seed, 2.0f), n, cols);
}

}  // namespace tern::gputest::attn
