// Tests for the fast CPU attention (backends/cpu/attention_cpu.h) at every ISA level:
//  - it matches the reference attention (ops_ref) within a float tolerance, over GQA shapes, odd
//    head dims, F16/F32 caches, sliding windows, softcaps, contexts spanning several chunks and
//    batches that mix sequences;
//  - batch invariance: a token's output is bitwise the same decoded alone, prefilled in one
//    call, prefilled in odd-sized chunks, interleaved with another sequence, and with 1 or 3
//    threads; decode (where the AVX-512 kernel reads V straight from the cache when the unit
//    holds few query vectors) against prefill (V converted into scratch) across several chunk and
//    block boundaries, with blocks that do and do not hold whole 16-key tiles.
#include "backends/cpu/attention_cpu.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/ops_ref.h"
#include "core/fp16.h"

namespace tern::cpu {
namespace {

struct Shape {
  int n_heads, n_kv_heads, head_dim;
  DType kv_dtype;
  int sliding_window = 0;
  float softcap = 0.0f;
  int block_tokens = 16;  // KV block size (the kernels look up rows per 16-key tile when it divides)
};

std::string shape_name(const ::testing::TestParamInfo<Shape>& info) {
  const Shape& s = info.param;
  std::string name = "h" + std::to_string(s.n_heads) + "_kv" + std::to_string(s.n_kv_heads) + "_hd" +
                     std::to_string(s.head_dim) + "_" + std::string(dtype_name(s.kv_dtype));
  if (s.sliding_window > 0) name += "_window" + std::to_string(s.sliding_window);
  if (s.softcap > 0) name += "_softcap";
  if (s.block_tokens != 16) name += "_block" + std::to_string(s.block_tokens);
  return name;
}

// A paged cache holding `n_seqs` sequences of `n_positions` random K/V rows each; sequence s owns
// blocks in a shuffled order so block tables are non-trivial.
class Fixture {
 public:
  Fixture(const Shape& shape, int n_seqs, int n_positions, uint32_t seed) : shape_(shape), n_positions_(n_positions) {
    const int block_tokens = shape.block_tokens;
    const int blocks_per_seq = (n_positions + block_tokens - 1) / block_tokens;
    const int n_blocks = n_seqs * blocks_per_seq + 3;  // spare blocks nobody owns
    const int64_t cols = static_cast<int64_t>(shape.n_kv_heads) * shape.head_dim;
    const size_t elt = shape.kv_dtype == DType::F16 ? 2 : 4;
    k_mem_.resize(static_cast<size_t>(n_blocks) * block_tokens * cols * elt);
    v_mem_.resize(k_mem_.size());
    kv_.k = Tensor::view(k_mem_.data(), shape.kv_dtype, int64_t{n_blocks} * block_tokens, cols);
    kv_.v = Tensor::view(v_mem_.data(), shape.kv_dtype, int64_t{n_blocks} * block_tokens, cols);
    kv_.block_tokens = block_tokens;
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t r = 0; r < kv_.k.rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        store(kv_.k, r, c, normal(rng));
        store(kv_.v, r, c, normal(rng));
      }
    std::vector<int32_t> ids(n_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int s = 0; s < n_seqs; ++s)
      tables_.emplace_back(ids.begin() + s * blocks_per_seq, ids.begin() + (s + 1) * blocks_per_seq);
    // Queries scaled so that softmaxes are peaked enough to matter.
    const int64_t q_cols = static_cast<int64_t>(shape.n_heads) * shape.head_dim;
    q_rows_.resize(static_cast<size_t>(n_seqs) * n_positions);
    for (auto& row : q_rows_) {
      row.resize(static_cast<size_t>(q_cols));
      for (float& x : row) x = 2.0f * normal(rng);
    }
    params_.n_heads = shape.n_heads;
    params_.n_kv_heads = shape.n_kv_heads;
    params_.head_dim = shape.head_dim;
    params_.scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
    params_.sliding_window = shape.sliding_window;
    params_.logit_softcap = shape.softcap;
  }

  // A plan for the tokens (sequence, position) in this order.
  BatchPlan plan(const std::vector<std::pair<int, int>>& tokens) const {
    BatchPlan p;
    std::vector<int> seqs;  // sequences in first-use order
    for (auto [s, pos] : tokens)
      if (std::find(seqs.begin(), seqs.end(), s) == seqs.end()) seqs.push_back(s);
    p.block_offsets.push_back(0);
    for (int s : seqs) {
      p.block_ids.insert(p.block_ids.end(), tables_[s].begin(), tables_[s].end());
      p.block_offsets.push_back(static_cast<int32_t>(p.block_ids.size()));
    }
    for (auto [s, pos] : tokens) {
      p.token_ids.push_back(0);
      p.seq_index.push_back(static_cast<int32_t>(std::find(seqs.begin(), seqs.end(), s) - seqs.begin()));
      p.positions.push_back(pos);
      const int bt = shape_.block_tokens;
      p.kv_slots.push_back(tables_[s][pos / bt] * bt + pos % bt);
    }
    return p;
  }

  // Attention outputs for `tokens`, one row each; fast at `isa`, or the reference when isa is empty.
  std::vector<std::vector<float>> run(const std::vector<std::pair<int, int>>& tokens, const Isa* isa,
                                      int n_threads = 1) const {
    const BatchPlan p = plan(tokens);
    const int64_t q_cols = static_cast<int64_t>(shape_.n_heads) * shape_.head_dim;
    std::vector<float> q(tokens.size() * q_cols), out(tokens.size() * q_cols, NAN);
    for (size_t i = 0; i < tokens.size(); ++i)
      std::copy(q_rows_[row_of(tokens[i])].begin(), q_rows_[row_of(tokens[i])].end(), q.begin() + i * q_cols);
    const int64_t n = static_cast<int64_t>(tokens.size());
    Tensor qt = Tensor::view(q.data(), DType::F32, n, q_cols), ot = Tensor::view(out.data(), DType::F32, n, q_cols);
    if (isa == nullptr) {
      ref::attention(qt, kv_, params_, p, ot);
    } else {
      ThreadPool pool(n_threads);
      AttentionScratch scratch;
      attention_fast_isa(*isa, qt, kv_, params_, p, ot, pool, scratch);
    }
    std::vector<std::vector<float>> rows;
    for (int64_t i = 0; i < n; ++i) rows.emplace_back(out.begin() + i * q_cols, out.begin() + (i + 1) * q_cols);
    return rows;
  }

  int n_positions() const { return n_positions_; }

 private:
  static void store(Tensor& t, int64_t r, int64_t c, float x) {
    if (t.dtype == DType::F16) {
      t.row<uint16_t>(r)[c] = f32_to_fp16(x);
    } else {
      t.row<float>(r)[c] = x;
    }
  }
  size_t row_of(std::pair<int, int> token) const { return static_cast<size_t>(token.first) * n_positions_ + token.second; }

  Shape shape_;
  int n_positions_;
  std::vector<uint8_t> k_mem_, v_mem_;
  KvLayerView kv_;
  std::vector<std::vector<int32_t>> tables_;
  std::vector<std::vector<float>> q_rows_;
  AttentionParams params_;
};

std::vector<std::pair<int, int>> positions_of(int seq, int begin, int end) {
  std::vector<std::pair<int, int>> tokens;
  for (int pos = begin; pos < end; ++pos) tokens.emplace_back(seq, pos);
  return tokens;
}

class AttentionTest : public ::testing::TestWithParam<Shape> {};

TEST_P(AttentionTest, MatchesReference) {
  const Shape shape = GetParam();
  Fixture f(shape, 2, 600, 7);  // 600 positions: three chunks of 256
  // A prefill of one sequence's tail plus scattered tokens of the other, in one batch.
  auto tokens = positions_of(0, 230, 300);
  for (int pos : {0, 1, 15, 255, 256, 257, 511, 599}) tokens.emplace_back(1, pos);
  const auto want = f.run(tokens, nullptr);
  for (Isa isa : supported_isas()) {
    const auto got = f.run(tokens, &isa, 2);
    for (size_t i = 0; i < tokens.size(); ++i) {
      for (size_t c = 0; c < want[i].size(); ++c) {
        ASSERT_NEAR(got[i][c], want[i][c], 2e-5f + 2e-5f * std::fabs(want[i][c]))
            << isa_name(isa) << " token (" << tokens[i].first << ", " << tokens[i].second << ") col " << c;
      }
    }
  }
}

TEST_P(AttentionTest, BatchInvariant) {
  const Shape shape = GetParam();
  Fixture f(shape, 2, 300, 11);
  const auto all = positions_of(0, 0, 300);
  for (Isa isa : supported_isas()) {
    SCOPED_TRACE(isa_name(isa));
    const auto whole = f.run(all, &isa, 1);
    // Decode: one token per call.
    for (int pos : {0, 1, 16, 17, 100, 255, 256, 299}) {
      const auto alone = f.run({{0, pos}}, &isa, 1);
      ASSERT_EQ(0, std::memcmp(alone[0].data(), whole[pos].data(), alone[0].size() * sizeof(float))) << "pos " << pos;
    }
    // Chunks of 7 (tiles start at odd positions), with 3 threads.
    for (int begin = 0; begin < 300; begin += 7) {
      const auto part = f.run(positions_of(0, begin, std::min(300, begin + 7)), &isa, 3);
      for (size_t i = 0; i < part.size(); ++i)
        ASSERT_EQ(0, std::memcmp(part[i].data(), whole[begin + i].data(), part[i].size() * sizeof(float)))
            << "pos " << begin + i;
    }
    // Interleaved with another sequence, so tiles are cut at every token.
    std::vector<std::pair<int, int>> mixed;
    for (int pos = 40; pos < 80; ++pos) {
      mixed.emplace_back(0, pos);
      mixed.emplace_back(1, pos);
    }
    const auto got = f.run(mixed, &isa, 2);
    for (size_t i = 0; i < mixed.size(); i += 2)
      ASSERT_EQ(0, std::memcmp(got[i].data(), whole[mixed[i].second].data(), got[i].size() * sizeof(float)))
          << "pos " << mixed[i].second;
  }
}

// Decode (one token per call: a unit of `group` query vectors) against one whole prefill (tiles of
// 16 tokens) at every position near the chunk boundaries of a context that spans three chunks and
// every fifth elsewhere, and prefills cut into chunks of 5 and 33 tokens from an odd offset, so
// that tiles straddle chunk and block boundaries.
TEST_P(AttentionTest, DecodeMatchesPrefillAcrossChunks) {
  const Shape shape = GetParam();
  constexpr int kPositions = 560;
  Fixture f(shape, 1, kPositions, 13);
  const auto all = positions_of(0, 0, kPositions);
  auto near_chunk_boundary = [](int pos) {
    const int off = pos % 256;
    return off < 18 || off > 256 - 18;
  };
  for (Isa isa : supported_isas()) {
    SCOPED_TRACE(isa_name(isa));
    const auto whole = f.run(all, &isa, 2);
    for (int pos = 0; pos < kPositions; ++pos) {
      if (!near_chunk_boundary(pos) && pos % 5 != 0) continue;
      const auto alone = f.run({{0, pos}}, &isa, 1);
      ASSERT_EQ(0, std::memcmp(alone[0].data(), whole[pos].data(), alone[0].size() * sizeof(float))) << "pos " << pos;
    }
    for (int chunk : {5, 33}) {
      for (int begin = 3; begin < kPositions; begin += chunk) {
        const int end = std::min(kPositions, begin + chunk);
        const auto part = f.run(positions_of(0, begin, end), &isa, 2);
        for (size_t i = 0; i < part.size(); ++i)
          ASSERT_EQ(0, std::memcmp(part[i].data(), whole[begin + i].data(), part[i].size() * sizeof(float)))
              << "chunk " << chunk << " pos " << begin + i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         ::testing::Values(Shape{9, 3, 64, DType::F16},         // SmolLM2-135M
                                           Shape{32, 8, 128, DType::F16},       // Llama-3-8B
                                           Shape{4, 4, 24, DType::F32},         // MHA, head_dim % 16 != 0
                                           Shape{6, 1, 40, DType::F16},         // MQA
                                           Shape{4, 2, 64, DType::F16, 100},    // sliding window
                                           Shape{4, 2, 32, DType::F32, 0, 30.0f},  // softcap
                                           Shape{16, 2, 64, DType::F16},        // group 8: decode stages V
                                           Shape{9, 3, 64, DType::F16, 0, 0.0f, 24},      // blocks cut tiles
                                           Shape{8, 2, 128, DType::F32, 200, 0.0f, 8}),  // F32, window, small blocks
                         shape_name);

}  // namespace
}  // namespace tern::cpu
