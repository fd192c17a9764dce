// Whole models at real layer shapes on the CUDA backend: two layers of Llama-3-8B (d 4096, ff
// 14336, 32 query / 8 KV heads of 128) over a 4,096-token vocabulary. The tiny models of
// model_test.cpp have rows of at most 2,048, so their decode products never take the kernels
// the benchmarks time; these do: the multi-row quantized GEMV with its mixed-type q/k/v launch
// (Q4_K_M), the q8_0 rows, the streamed float GEMV (F16), the chunk-split decode attention with
// the fused rope and the warp-specialized ring past a few thousand positions.
//
// On the GPU alone, bit for bit:
//   fused launches (the default) against separate ops, over a prefill and decode steps;
//   a Session: whole against chunked prefill, and speculation with prefix reuse against plain
//   decoding (greedy tokens), at ~700 and ~5,000 positions.
// Against the CPU reference, Q4_K_M: the tolerance of model_test.cpp's quantized mixes.
#include <gtest/gtest.h>

#include "gpu_model_util.h"
#include "gpu_test_util.h"
#include "session_check.h"

namespace tern {
namespace {

using gputest::Loaded;

synth::ModelShape llama3_8b_two_layers() {
  const synth::ModelShape* full = synth::find_preset("llama3-8b");
  EXPECT_NE(full, nullptr);
  synth::ModelShape s = full != nullptr ? *full : synth::ModelShape{};
  s.name = "llama3-8b-2-layers";
  s.n_layers = 2;
  s.n_vocab = 4096;
  return s;
}

class GpuRealShapes : public ::testing::Test {
 protected:
  void SetUp() override { TERN_REQUIRE_GPU(); }
};

TEST_F(GpuRealShapes, FusedLaunchesEqualSeparateOps) {
  for (const char* mix : {"q4_k_m", "q8_0", "f16"}) {
    SCOPED_TRACE(mix);
    auto file = gputest::synthesized(llama3_8b_two_layers(), mix);
    ASSERT_NE(file, nullptr);
    cuda::CudaBackendOptions off;
    off.fuse_gemv = false;
    Loaded fused = gputest::load_on(file, gputest::make_cuda()), sep = gputest::load_on(file, gputest::make_cuda(off));
    ASSERT_TRUE(fused.model && sep.model);
    const int V = fused.model->config().n_vocab;
    const auto ids = gputest::prompt_ids(300, V, 5);
    const auto a = gputest::forward(fused, ids), b = gputest::forward(sep, ids);
    ASSERT_TRUE(gputest::bitwise_equal(a, b));
    int32_t next = gputest::argmax(a.data() + (ids.size() - 1) * V, V);
    for (int step = 0; step < 8; ++step) {
      const auto x = gputest::forward(fused, {next}), y = gputest::forward(sep, {next});
      ASSERT_TRUE(gputest::bitwise_equal(x, y)) << "decode step " << step;
      next = gputest::argmax(x.data(), V);
    }
  }
}

// Chunked prefill, prefix reuse and speculation change speed only: the same prefill logits and
// the same greedy tokens.
TEST_F(GpuRealShapes, SessionInvariants) {
  struct Case {
    const char* mix;
    int period, repeats;  // the prompt: `period` random ids, repeated (n-gram drafts then hit)
  };
  for (const Case& c : {Case{"q4_k_m", 175, 4}, Case{"q8_0", 175, 4}, Case{"f16", 175, 4}, Case{"q4_k_m", 1250, 4}}) {
    const int n_prompt = c.period * c.repeats;
    SCOPED_TRACE(std::string(c.mix) + " prompt " + std::to_string(n_prompt));
    auto file = gputest::synthesized(llama3_8b_two_layers(), c.mix);
    ASSERT_NE(file, nullptr);
    // A pool for three sequences: two sessions live at once, plus the blocks a finished
    // speculative session leaves in the prefix index for the next one.
    const int n_ctx = n_prompt + 256;
    Loaded m = gputest::load_on(file, gputest::make_cuda(), n_ctx, DType::F16, 3 * n_ctx);
    ASSERT_TRUE(m.model);
    const int V = m.model->config().n_vocab;
    std::vector<int32_t> prompt;
    const std::vector<int32_t> period = gputest::prompt_ids(c.period, V, 21);
    for (int i = 0; i < c.repeats; ++i) prompt.insert(prompt.end(), period.begin(), period.end());
    gputest::expect_session_invariants(m, prompt, 97, 40);
  }
}

// The GPU's Q4_K_M logits against the CPU reference kernels: a short prefill, then greedy steps
// with the reference's tokens (both sides see the same inputs).
TEST_F(GpuRealShapes, QuantizedLogitsMatchCpuReference) {
  auto file = gputest::synthesized(llama3_8b_two_layers(), "q4_k_m");
  ASSERT_NE(file, nullptr);
  Loaded ref = gputest::load_on(file, gputest::cpu_reference(), 64);
  Loaded gpu = gputest::load_on(file, gputest::make_cuda(), 64);
  ASSERT_TRUE(ref.model && gpu.model);
  const int V = ref.model->config().n_vocab;
  std::vector<int32_t> ids = gputest::prompt_ids(9, V, 3);
  for (int step = 0; step < 3; ++step) {
    const auto lr = gputest::forward(ref, ids), lg = gputest::forward(gpu, ids);
    for (size_t r = 0; r < ids.size(); ++r) {
      SCOPED_TRACE("step " + std::to_string(step) + " row " + std::to_string(r));
      const std::vector<float> a(lg.begin() + r * V, lg.begin() + (r + 1) * V);
      const std::vector<float> b(lr.begin() + r * V, lr.begin() + (r + 1) * V);
      const double err = gputest::rel_l2(a, b);
      EXPECT_LE(err, 5e-2);
      const int best_ref = gputest::argmax(b.data(), V), best_gpu = gputest::argmax(a.data(), V);
      EXPECT_GE(b[best_gpu], b[best_ref] - 0.25f) << "relative l2 " << err;
    }
    ids = {gputest::argmax(lr.data() + (lr.size() / V - 1) * V, V)};
  }
}

}  // namespace
}  // namespace tern
