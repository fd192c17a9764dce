// The compact chunk-split decode kernel (attention_compact.cu, CudaBackendOptions::
// attention_compact) against the two-chunk kernels' chunk split (the default kernel of each shape
// with the chunk split forced, one and two chunks per block), bit for bit: decodes alone at
// contexts on both sides of the chunk and span boundaries, a step of 3 sequences of different
// lengths, and repeated steps replayed as CUDA graphs. Shapes: SmolLM2 (9 / 3 heads of 64) and
// Llama-3-8B (32 / 8 of 128), plus a sliding window and a softcap. The compact kernel must have run.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "attention_test_util.h"
#include "backends/cuda/attention.h"

namespace tern {
namespace {

using gputest::HostTensor;
using namespace gputest::attn;

using GpuAttentionCompact = gputest::CudaBackendTest;

const Shape kCompactShapes[] = {
    {9, 3, 64, DType::F16},
    {32, 8, 128, DType::F16},
    {8, 2, 64, DType::F16, 0.0f, 37},   // sliding window: chunks with no valid position
    {8, 2, 128, DType::F16, 30.0f},     // softcap
};

std::unique_ptr<Backend> make_split(int chunk_split, int compact) {
  cuda::CudaBackendOptions o;
  o.attention_split = cuda::AttentionSplit::kAlways;
  o.attention_chunk_split = chunk_split;
  o.attention_compact = compact;
  return gputest::make_cuda(o);
}

// One cache per backend, the same contents and block tables.
struct CompactCaches {
  std::vector<std::unique_ptr<Cache>> all;
  CompactCaches(const std::vector<Backend*>& bs, const Shape& s, int n_blocks, uint32_t seed) {
    for (Backend* b : bs) all.push_back(std::make_unique<Cache>(*b, s, n_blocks, seed));
  }
  std::vector<int32_t> take(int n_tokens) {
    const std::vector<int32_t> blocks = all[0]->take_blocks(n_tokens);
    for (size_t i = 1; i < all.size(); ++i) EXPECT_EQ(all[i]->take_blocks(n_tokens), blocks);
    return blocks;
  }
};

// Decode plans: one token at each context length (position ctx - 1), and 3 sequences in a step.
std::vector<BatchPlan> compact_plans(CompactCaches& c) {
  std::vector<BatchPlan> plans;
  const auto blocks = c.take(2048);
  for (int ctx : {1, 2, 63, 64, 65, 66, 128, 200, 256, 257, 1024, 1025, 1300, 2047, 2048}) {
    plans.emplace_back();
    add_sequence(plans.back(), ctx - 1, 1, blocks);
  }
  const auto b1 = c.take(1300), b2 = c.take(65);
  plans.emplace_back();
  add_sequence(plans.back(), 2046, 1, blocks);
  add_sequence(plans.back(), 1299, 1, b1);
  add_sequence(plans.back(), 64, 1, b2);
  return plans;
}

TEST_F(GpuAttentionCompact, EqualsChunkSplitKernelsBitwise) {
  uint32_t seed = 7100;
  for (const Shape& s : kCompactShapes) {
    SCOPED_TRACE(describe(s));
    for (int split : {1, 2}) {
      SCOPED_TRACE("chunk split " + std::to_string(split));
      auto want = make_split(split, 0);
      auto got = make_split(split, 1);
      ASSERT_TRUE(want != nullptr && got != nullptr);
      CompactCaches c({want.get(), got.get()}, s, 400, seed);
      const std::vector<BatchPlan> plans = compact_plans(c);
      for (size_t pi = 0; pi < plans.size(); ++pi) {
        SCOPED_TRACE("plan " + std::to_string(pi) + " last position " + std::to_string(plans[pi].positions.back()));
        const HostTensor q = random_q(plans[pi].n_tokens(), s, seed + 10 + static_cast<uint32_t>(pi));
        const auto want_out = run_gpu(*want, plans[pi], *c.all[0], s, q);
        const auto got_out = run_gpu(*got, plans[pi], *c.all[1], s, q);
        EXPECT_TRUE(gputest::bitwise_equal(got_out, want_out));
        // and both near the CPU reference (a wrong record layout would fail here too)
        const auto ref = run_ref(plans[pi], *c.all[0], s, q);
        double num = 0, den = 0;
        for (size_t i = 0; i < ref.size(); ++i) {
          num += (got_out[i] - ref[i]) * (got_out[i] - ref[i]);
          den += ref[i] * ref[i];
        }
        EXPECT_LE(std::sqrt(num / std::max(den, 1e-30)), 2e-5);
      }
      EXPECT_GT(cuda::backend_stats(*got).compact_attentions, 0);
      EXPECT_EQ(cuda::backend_stats(*want).compact_attentions, 0);
      EXPECT_GT(cuda::backend_stats(*want).chunk_splits, 0);
      seed += 100;
    }
  }
}

// The default backend (chunk split picked per plan) with the compact kernel, replaying steps of
// two attention ops as CUDA graphs, against the default without it.
TEST_F(GpuAttentionCompact, RepeatsUnderGraphs) {
  for (const Shape& s : {kCompactShapes[0], kCompactShapes[1]}) {
    SCOPED_TRACE(describe(s));
    cuda::CudaBackendOptions off, on;
    off.attention_compact = 0;
    on.attention_compact = 1;
    auto want = gputest::make_cuda(off);
    auto got = gputest::make_cuda(on);
    ASSERT_TRUE(want != nullptr && got != nullptr);
    CompactCaches c({want.get(), got.get()}, s, 400, 7900);
    const auto blocks = c.take(2048), b1 = c.take(1300), b2 = c.take(300);
    std::vector<BatchPlan> plans(3);
    add_sequence(plans[0], 1023, 1, blocks);
    add_sequence(plans[1], 199, 1, blocks);
    add_sequence(plans[2], 1299, 1, blocks);
    add_sequence(plans[2], 1100, 1, b1);
    add_sequence(plans[2], 260, 1, b2);
    for (size_t pi = 0; pi < plans.size(); ++pi) {
      SCOPED_TRACE("plan " + std::to_string(pi));
      const BatchPlan& plan = plans[pi];
      const HostTensor q0 = random_q(plan.n_tokens(), s, 7910 + 2 * pi), q1 = random_q(plan.n_tokens(), s, 7911 + 2 * pi);
      const auto want_outs = run_two_op_steps(*want, *c.all[0], plan, s, q0, q1, 1);
      const int64_t graphs_before = cuda::backend_stats(*got).steps_graph;
      const auto outs = run_two_op_steps(*got, *c.all[1], plan, s, q0, q1, 5);
      expect_steps_equal(outs, want_outs, "op");
      EXPECT_GE(cuda::backend_stats(*got).steps_graph, graphs_before + 2) << "the steps were not replayed as graphs";
    }
    EXPECT_GT(cuda::backend_stats(*got).compact_attentions, 0);
  }
}

}  // namespace
}  // namespace tern
