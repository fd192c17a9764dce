// The fused decode attention (attention.h "fused decode", attention_fused.cuh: the layer's rope of
// q and k and its K/V cache write inside the chunk-split attention launch) against the separate
// launches (rope + K/V write, attention, chunk merge), bit for bit: the
// attention output of every step and both caches after them, over GQA groups (a group of 7: two head
// slices, only slice 0 writes the cache), head_dim 64 to 256, f16 and f32 caches, softcap,
// sliding windows, partial and NeoX rotations, decodes at contexts on both sides of chunk and
// span boundaries (1 and 2 chunks per block), steps of several sequences, and steps that must
// not fuse (a verify tile), the early work before the PDL wait, and the compact decode kernel.
// Then the same under CUDA graph replays.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "attention_test_util.h"

namespace tern {
namespace {

using gputest::HostTensor;
using namespace gputest::attn;

struct RopeShape {
  int n_rot;  // 0: head_dim
  bool neox;
  float mscale;
};

struct Case {
  Shape s;
  RopeShape r;
};

const Case kCases[] = {
    {{32, 8, 128, DType::F16}, {0, false, 1.0f}},                  // the 8B shape
    {{9, 3, 64, DType::F16}, {0, true, 1.0f}},                     // SmolLM2's
    {{14, 2, 64, DType::F32}, {32, false, 1.0f}},                  // group 7, partial rotation
    {{4, 4, 80, DType::F16}, {48, true, 1.25f}},                   // MHA, odd head_dim
    {{8, 1, 256, DType::F32}, {0, true, 1.0f}},                    // MQA at 256
    {{8, 2, 128, DType::F16, 30.0f}, {0, false, 1.0f}},            // softcap
    {{8, 2, 64, DType::F16, 0.0f, 37}, {0, false, 1.0f}},          // sliding window
};

// One layer's device inputs: q, k, v rows and the rotation's inverse frequencies.
struct LayerInputs {
  gputest::DeviceTensor q, k, v, inv_freq, out;
  RopeParams rope;
};

LayerInputs upload(Backend& b, const Case& c, int n, uint32_t seed) {
  const Shape& s = c.s;
  const int64_t q_cols = int64_t{s.n_heads} * s.head_dim, kv_cols = int64_t{s.n_kv_heads} * s.head_dim;
  LayerInputs in;
  const HostTensor q = gputest::host_f32(gputest::random_floats(static_cast<size_t>(n * q_cols), seed, 2.0f), n, q_cols);
  const HostTensor k = gputest::host_f32(gputest::random_floats(static_cast<size_t>(n * kv_cols), seed + 1), n, kv_cols);
  const HostTensor v = gputest::host_f32(gputest::random_floats(static_cast<size_t>(n * kv_cols), seed + 2), n, kv_cols);
  const int n_rot = c.r.n_rot > 0 ? c.r.n_rot : s.head_dim;
  std::vector<float> freq(static_cast<size_t>(n_rot / 2));
  for (int i = 0; i < n_rot / 2; ++i) freq[i] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / n_rot);
  const HostTensor f = gputest::host_f32(freq, 1, n_rot / 2);
  in.q = gputest::device_copy(b, q.t);
  in.k = gputest::device_copy(b, k.t);
  in.v = gputest::device_copy(b, v.t);
  in.inv_freq = gputest::device_copy(b, f.t);
  in.out = gputest::device_empty(b, DType::F32, n, q_cols);
  in.rope.n_rot = n_rot;
  in.rope.neox = c.r.neox;
  in.rope.mscale = c.r.mscale;
  in.rope.inv_freq = in.inv_freq.t;
  return in;
}

// The layer's ops as the models record them: rope(q), rope(k), kv_write, attention.
void record_layer(Backend& b, const Case& c, LayerInputs& in, KvLayerView kv) {
  b.rope(in.q.t, c.s.n_heads, c.s.head_dim, in.rope);
  b.rope(in.k.t, c.s.n_kv_heads, c.s.head_dim, in.rope);
  b.kv_write(in.k.t, in.v.t, kv);
  b.attention(in.q.t, kv, params_of(c.s), in.out.t);
}

// Runs the step on b; returns the attention output.
std::vector<float> run_step(Backend& b, const Case& c, const BatchPlan& plan, Cache& cache, uint32_t seed) {
  LayerInputs in = upload(b, c, plan.n_tokens(), seed);
  b.begin_step(plan);
  record_layer(b, c, in, cache.dev_view());
  return gputest::download(b, in.out.t);
}

// Where two outputs first differ, and how many elements do (a failure's message).
std::string first_difference(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return "sizes " + std::to_string(got.size()) + " / " + std::to_string(want.size());
  size_t n = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && n++ == 0) first = i;
  }
  if (n == 0) return "equal";
  return std::to_string(n) + " of " + std::to_string(got.size()) + " differ, first at " + std::to_string(first) + ": " +
         std::to_string(got[first]) + " vs " + std::to_string(want[first]);
}

// The K and V caches (raw elements in a float vector: f16 caches fill its first half).
std::vector<float> caches_of(Backend& b, Cache& cache) {
  const KvLayerView kv = cache.dev_view();
  std::vector<float> all = gputest::download(b, kv.k);
  const std::vector<float> v = gputest::download(b, kv.v);
  all.insert(all.end(), v.begin(), v.end());
  return all;
}

// early: CudaBackendOptions::attention_fused_early_kv (0 none, 1 the first K/V copies before the
// PDL wait, 2 those and the rope's rotation factors).
// compact: CudaBackendOptions::attention_compact (0 off; 1 / 2 the compact decode kernel with the
// rope launch kept / taken in, where it applies: f16 caches, head_dim 64 / 128, groups up to 4;
// 3 takes it in at head_dim <= 64 only, the default).
std::unique_ptr<Backend> make_fused(int fused, int chunk_split, int early = 0, int compact = 0) {
  cuda::CudaBackendOptions o;
  o.attention_fused_decode = fused;
  o.attention_chunk_split = chunk_split;
  o.attention_fused_early_kv = early;
  o.attention_compact = compact;
  return gputest::make_cuda(o);
}

TEST(GpuAttentionFused, FusedDecodeEqualsSeparateLaunchesBitwise) {
  TERN_REQUIRE_GPU();
  auto want = make_fused(0, -1);
  ASSERT_TRUE(want != nullptr);
  std::vector<std::unique_ptr<Backend>> got;
  std::vector<bool> fuses, earlies, compacts;
  auto add = [&](int fused, int chunk_split, int early = 0, int compact = 0) {
    got.push_back(make_fused(fused, chunk_split, early, compact));
    compacts.push_back(compact != 0);
    fuses.push_back(fused != 0 && compact == 0);
    earlies.push_back(early > 0 && fused == 3);  // (with the fused rope only)
  };
  add(3, -1);  // the default chunk split per plan
  add(3, 1);   // one chunk per block everywhere it applies
  add(3, 2);   // two chunks per block
  add(0, 2);   // no fusion, two chunks per block
  // The first K/V copies (1) and the rotation factors (2) before the PDL wait, fused rope only.
  add(3, -1, 1);
  add(3, -1, 2);
  add(3, 1, 2);
  add(3, 2, 1);
  add(0, -1, 2);  // (no fused rope: nothing moves)
  // The compact decode kernel (attention_compact.cu), the rope launch kept (1) or taken in (2),
  // where it applies (the other shapes run the fused decode of `fused`).
  add(3, -1, 2, 1);
  add(3, 1, 0, 2);
  add(3, 2, 2, 2);
  add(0, -1, 0, 2);
  add(3, -1, 2, 3);  // the default: taken in at head_dim 64, kept at 128
  for (const auto& b : got) ASSERT_TRUE(b != nullptr);
  uint32_t seed = 4100;
  for (const Case& c : kCases) {
    SCOPED_TRACE(describe(c.s) + " n_rot " + std::to_string(c.r.n_rot) + (c.r.neox ? " neox" : ""));
    std::vector<std::unique_ptr<Cache>> caches;
    caches.push_back(std::make_unique<Cache>(*want, c.s, 600, seed));
    for (const auto& b : got) caches.push_back(std::make_unique<Cache>(*b, c.s, 600, seed));
    auto take = [&](int n_tokens) {
      const std::vector<int32_t> blocks = caches[0]->take_blocks(n_tokens);
      for (size_t i = 1; i < caches.size(); ++i) EXPECT_EQ(caches[i]->take_blocks(n_tokens), blocks);
      return blocks;
    };
    std::vector<BatchPlan> plans;
    const auto blocks = take(4097);
    for (int pos : {0, 1, 40, 63, 64, 65, 127, 128, 200, 255, 256, 300, 511, 1000, 1023, 1024, 1300, 1600, 2047, 4095, 4096}) {
      plans.emplace_back();
      add_sequence(plans.back(), pos, 1, blocks);
    }
    plans.emplace_back();  // a batched decode: five sequences, one token each
    add_sequence(plans.back(), 1000, 1, take(1001));
    add_sequence(plans.back(), 130, 1, take(131));
    add_sequence(plans.back(), 2600, 1, take(2601));
    add_sequence(plans.back(), 5, 1, take(6));
    add_sequence(plans.back(), 64, 1, take(65));
    plans.emplace_back();  // a verify tile next to a decode: not fused
    add_sequence(plans.back(), 700, 3, take(703));
    add_sequence(plans.back(), 300, 1, take(301));
    std::vector<int64_t> before, before_early, before_compact;
    for (const auto& b : got) before_compact.push_back(cuda::backend_stats(*b).compact_attentions);
    for (const auto& b : got) before.push_back(cuda::backend_stats(*b).fused_attentions);
    for (const auto& b : got) before_early.push_back(cuda::backend_stats(*b).fused_early_kv);
    for (size_t pi = 0; pi < plans.size(); ++pi) {
      SCOPED_TRACE("plan " + std::to_string(pi) + " (" + std::to_string(plans[pi].n_tokens()) + " tokens, last position " +
                   std::to_string(plans[pi].positions.back()) + ")");
      const uint32_t step_seed = seed + 10 + static_cast<uint32_t>(pi) * 3;
      const auto want_out = run_step(*want, c, plans[pi], *caches[0], step_seed);
      for (size_t i = 0; i < got.size(); ++i) {
        SCOPED_TRACE("backend " + std::to_string(i));
        const auto out = run_step(*got[i], c, plans[pi], *caches[i + 1], step_seed);
        EXPECT_TRUE(gputest::bitwise_equal(out, want_out)) << first_difference(out, want_out);
      }
    }
    // Every plan wrote its tokens' rows (later plans read the earlier ones'): the caches after all.
    const auto want_caches = caches_of(*want, *caches[0]);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(gputest::bitwise_equal(caches_of(*got[i], *caches[i + 1]), want_caches)) << "caches, backend " << i;
    }
    // (head_dim 256 with f32: the two-chunk kernels do not fit, no chunk split, nothing fuses)
    if (!(c.s.head_dim == 256 && c.s.cache == DType::F32)) {
      for (size_t i = 0; i < got.size(); ++i) {
        const cuda::CudaBackendStats st = cuda::backend_stats(*got[i]);
        // At least 6 of the 17 single decodes fuse under every setting here: the default chunk
        // split (default_chunk_split) sends the longer contexts of the ring's shapes (head dim 128,
        // f16) to whole spans, leaving 9 fused there (H200, session 7).
        if (fuses[i]) {
          EXPECT_GT(st.fused_attentions, before[i] + 5) << "backend " << i;
        }
        const bool compact_applies = c.s.cache == DType::F16 && (c.s.head_dim == 64 || c.s.head_dim == 128) &&
                                     c.s.n_heads <= 4 * c.s.n_kv_heads;
        if (compacts[i] && compact_applies) {
          EXPECT_GT(st.compact_attentions, before_compact[i] + 5) << "backend " << i;
        } else {
          EXPECT_EQ(st.compact_attentions, before_compact[i]) << "backend " << i;
        }
        if (earlies[i] && !(compacts[i] && compact_applies)) {
          EXPECT_GT(st.fused_early_kv, before_early[i] + 5) << "backend " << i;
        } else {
          EXPECT_EQ(st.fused_early_kv, before_early[i]) << "backend " << i;
        }
      }
    }
    EXPECT_EQ(cuda::backend_stats(*want).fused_attentions, 0);
    seed += 100;
  }
}

// A batched decode step of two layers (two fused launches) run 5 times with the same buffers, so
// it replays as a CUDA graph, equals the separate launches' result every time, with the early
// work before the PDL wait and with the compact kernel.
TEST(GpuAttentionFused, FusedDecodeRepeatsUnderGraphs) {
  TERN_REQUIRE_GPU();
  const Case c{{32, 8, 128, DType::F16}, {0, false, 1.0f}};
  // (mode, attention_fused_early_kv, attention_compact)
  const std::vector<std::tuple<int, int, int>> configs = {{3, 0, 0}, {3, 2, 0}, {3, 1, 0},
                                                          {3, 2, 1}, {0, 0, 2}, {3, 2, 3}};
  for (const auto& [mode, early, compact] : configs) {
    SCOPED_TRACE("mode " + std::to_string(mode) + " early " + std::to_string(early) + " compact " +
                 std::to_string(compact));
    auto want = make_fused(0, -1);
    auto got = make_fused(mode, -1, early, compact);
    ASSERT_TRUE(want != nullptr && got != nullptr);
    Cache want_cache(*want, c.s, 300, 4700), got_cache(*got, c.s, 300, 4700);
    BatchPlan plan;
    for (int ctx : {1000, 300, 129}) {
      const auto blocks = want_cache.take_blocks(ctx + 1);
      EXPECT_EQ(got_cache.take_blocks(ctx + 1), blocks);
      add_sequence(plan, ctx, 1, blocks);
    }
    auto run_steps = [&](Backend& b, Cache& cache, int n_steps) {
      LayerInputs l0 = upload(b, c, plan.n_tokens(), 4710), l1 = upload(b, c, plan.n_tokens(), 4720);
      const HostTensor q0 = gputest::host_f32(gputest::download(b, l0.q.t), plan.n_tokens(), l0.q.t.cols);
      const HostTensor q1 = gputest::host_f32(gputest::download(b, l1.q.t), plan.n_tokens(), l1.q.t.cols);
      const HostTensor k0 = gputest::host_f32(gputest::download(b, l0.k.t), plan.n_tokens(), l0.k.t.cols);
      const HostTensor k1 = gputest::host_f32(gputest::download(b, l1.k.t), plan.n_tokens(), l1.k.t.cols);
      std::vector<std::vector<float>> outs;
      for (int step = 0; step < n_steps; ++step) {
        // The separate rope rotates q and k in place: every step starts from the same inputs.
        b.copy_from_host(q0.t.data, l0.q.t);
        b.copy_from_host(q1.t.data, l1.q.t);
        b.copy_from_host(k0.t.data, l0.k.t);
        b.copy_from_host(k1.t.data, l1.k.t);
        b.begin_step(plan);
        record_layer(b, c, l0, cache.dev_view());
        record_layer(b, c, l1, cache.dev_view());
        outs.push_back(gputest::download(b, l0.out.t));
        outs.push_back(gputest::download(b, l1.out.t));
      }
      return outs;
    };
    const auto want_outs = run_steps(*want, want_cache, 1);
    const int64_t graphs_before = cuda::backend_stats(*got).steps_graph;
    const auto outs = run_steps(*got, got_cache, 5);
    expect_steps_equal(outs, want_outs, "layer");
    EXPECT_GE(cuda::backend_stats(*got).steps_graph, graphs_before + 2) << "the steps were not replayed as graphs";
    if (compact != 0) {
      EXPECT_GE(cuda::backend_stats(*got).compact_attentions, 10);
      const bool rope_in = compact == 2 || (compact == 3 && c.s.head_dim <= 64);
      EXPECT_EQ(cuda::backend_stats(*got).fused_attentions, rope_in ? cuda::backend_stats(*got).compact_attentions : 0);
    } else if (mode != 0) {
      EXPECT_GE(cuda::backend_stats(*got).fused_attentions, 10);
    }
    if (early > 0 && compact == 0) {
      EXPECT_GE(cuda::backend_stats(*got).fused_early_kv, 10);
    }
  }
}

}  // namespace
}  // namespace tern
