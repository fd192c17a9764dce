// The real default model (SmolLM2-135M-Instruct Q4_1) on the GPU, end to end through the Session.
// The GPU machine has no model files, so these skip unless the file is there: TERN_MODEL names
// it (bench/gpu/run_device.sh default-model, which carries it in two parts).
//
// The GPU's quantized GEMVs round the activations per 32 elements (gemv.h) to int16 by default
// (CudaBackendOptions::act_bits = 16: q = rint(x * 32512 / amax), the CPU fast path's default
// precision) or to int8 (act_bits = 8, llama.cpp's). Both run here, each with its own tolerance:
// - 16 bits, kTolerance16: the CPU at 16 bits is within 0.010 of the transformers truth on these
//   prompts (bench/RESULTS.md "Accuracy of the fast CPU path"); the GPU's rounding is the same or
//   finer (k-quants: a scale per 32 elements where the CPU has one per 256).
// - 8 bits, kTolerance8: on the H200 (session 12) the worst logit difference from the truth was
//   0.81, the CPU's at 8 bits 1.06. Rounding to 8 bits makes the logits chaotic at that scale: a
//   tiny change in a layer's input moves some elements to the next integer, so the GPU and the
//   CPU at 8 bits still differ by 0.55-1.0, and greedy continuations part wherever two tokens are
//   that close.
// The checks, at each precision's tolerance:
// - against the transformers goldens (tests/data/goldens, as DefaultModelGolden checks the CPU):
//   the logits within the tolerance, and greedy 32-token continuations equal to the truth's up to
//   a step where the truth's top-2 gap is below it;
// - against the CPU backend (16-bit activations, its default): the logits within the tolerance,
//   and greedy continuations equal up to a step where the CPU's own logits for the two tokens are
//   closer than it.
// A wrong kernel (a rope, a norm, an attention mask) moves logits by far more and parts runs at
// wide gaps. Each test prints its measures (worst logit difference, identical continuations).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "../common/goldens.h"
#include "engine/session.h"
#include "gpu_model_util.h"
#include "gpu_test_util.h"

namespace tern {
namespace {

using nlohmann::json;

// The CPU fast path's tolerance (golden_logits_test.cpp). Measured (H200, session 13): 0.0123
// against transformers, 0.0131 against the CPU; greedy runs identical 11 / 12 against each (the
// one divergence at a top-2 gap of 0.0004 / 0.0015).
constexpr double kTolerance16 = 0.03;
constexpr double kTolerance8 = 1.5;  // measured (H200): 0.81 against transformers, 0.84 against the CPU

std::string default_model() {
  if (const char* env = std::getenv("TERN_MODEL"); env != nullptr && *env) return env;
  return TERN_DEFAULT_MODEL;
}

// The parameter: CudaBackendOptions::act_bits.
class GpuDefaultModel : public ::testing::TestWithParam<int> {
 protected:
  int bits() const { return GetParam(); }
  double tolerance() const { return bits() == 16 ? kTolerance16 : kTolerance8; }
  std::unique_ptr<Backend> make_gpu() const {
    cuda::CudaBackendOptions o;
    o.act_bits = bits();
    return gputest::make_cuda(o);
  }
  void SetUp() override {
    TERN_REQUIRE_GPU();
    path_ = default_model();
    if (!std::filesystem::exists(path_)) GTEST_SKIP() << "default model " << path_ << " not here (set TERN_MODEL)";
    auto file = gguf::File::open(path_);
    ASSERT_TRUE(file.is_ok()) << file.status().message();
    file_ = std::make_shared<const gguf::File>(std::move(file).value());
    index_ = testing::load_golden_index(gputest::test_data_dir());
  }
  // The golden cases of the default model.
  std::vector<json> cases() const {
    std::vector<json> out;
    for (const json& c : index_["cases"]) {
      if (index_["models"][c["model"].get<std::string>()]["file"] == "@default") out.push_back(c);
    }
    return out;
  }
  std::string path_;
  std::shared_ptr<const gguf::File> file_;
  json index_;
};

std::vector<int32_t> greedy(Session& s, const std::vector<int32_t>& prompt, int n) {
  GenerateOptions o;
  o.max_tokens = n;
  auto gen = s.generate(prompt, o);
  EXPECT_TRUE(gen.is_ok()) << (gen.is_ok() ? "" : gen.status().message());
  return gen.is_ok() ? gen.value().tokens : std::vector<int32_t>{};
}

std::vector<float> last_logits(Session& s, const std::vector<int32_t>& prompt) {
  auto logits = s.prefill(prompt, GenerateOptions{});
  EXPECT_TRUE(logits.is_ok()) << (logits.is_ok() ? "" : logits.status().message());
  return logits.is_ok() ? logits.value() : std::vector<float>{};
}

TEST_P(GpuDefaultModel, LogitsAndGreedyRunsAgainstTransformers) {
  gputest::Loaded gpu = gputest::load_on(file_, make_gpu(), 512);
  ASSERT_NE(gpu.model, nullptr);
  const int n_vocab = gpu.model->config().n_vocab;
  double worst = 0;
  int n_cases = 0, identical = 0;
  for (const json& c : cases()) {
    const std::vector<int32_t> ids = c["prompt_ids"];
    Session s(*gpu.model, *gpu.kv);
    const std::vector<float> ours = last_logits(s, ids);
    ASSERT_EQ(static_cast<int>(ours.size()), n_vocab);
    worst = std::max(worst, testing::check_case_logits(gputest::test_data_dir(), c, ours, n_vocab, tolerance()));
    ++n_cases;

    const json& g = c["greedy"];
    const std::vector<int32_t> want = g["ids"], runner_up = g["runner_up_ids"];
    const std::vector<double> gaps = g["top2_gaps"];
    const std::vector<int32_t> got = greedy(s, ids, static_cast<int>(want.size()));
    ASSERT_EQ(got.size(), want.size()) << c["id"];
    bool same = true;
    for (size_t i = 0; i < want.size(); ++i) {
      if (got[i] == want[i]) continue;
      same = false;
      // The pick may be the truth's third token too (seen at 8 bits at a 0.0004 gap).
      EXPECT_LT(gaps[i], tolerance()) << c["id"] << ": diverged at step " << i << " where the top-2 gap is " << gaps[i];
      std::printf("  %s: diverged from transformers at step %zu (true top-2 gap %.4f, %s)\n",
                  c["id"].get<std::string>().c_str(), i, gaps[i],
                  got[i] == runner_up[i] ? "to the runner-up" : "to another token");
      break;
    }
    identical += same ? 1 : 0;
  }
  EXPECT_GE(n_cases, 10);
  std::printf("  default model on the GPU, %d-bit activations: worst |logit diff| vs transformers %.4f over %d "
              "prompts; greedy %zu-token runs identical %d / %d\n",
              bits(), worst, n_cases, cases().empty() ? size_t{0} : cases()[0]["greedy"]["ids"].size(), identical, n_cases);
}

TEST_P(GpuDefaultModel, LogitsAndGreedyRunsAgainstTheCpu) {
  constexpr int kTokens = 64;
  gputest::Loaded gpu = gputest::load_on(file_, make_gpu(), 512);
  ASSERT_NE(gpu.model, nullptr);
  cpu::CpuBackendOptions co;  // the fast path at its defaults (16-bit activations)
  co.n_threads = static_cast<int>(std::max(1u, std::min(16u, std::thread::hardware_concurrency())));
  gputest::Loaded cpu = gputest::load_on(file_, std::make_unique<cpu::CpuBackend>(co), 512);
  ASSERT_NE(cpu.model, nullptr);
  double worst = 0;
  int n_cases = 0, identical = 0;
  for (const json& c : cases()) {
    const std::vector<int32_t> ids = c["prompt_ids"];
    Session sg(*gpu.model, *gpu.kv), sc(*cpu.model, *cpu.kv);
    const std::vector<float> lg = last_logits(sg, ids), lc = last_logits(sc, ids);
    ASSERT_EQ(lg.size(), lc.size());
    double diff = 0;
    for (size_t v = 0; v < lg.size(); ++v) diff = std::max(diff, static_cast<double>(std::abs(lg[v] - lc[v])));
    worst = std::max(worst, diff);
    EXPECT_LE(diff, tolerance()) << c["id"];
    ++n_cases;

    const std::vector<int32_t> got = greedy(sg, ids, kTokens), want = greedy(sc, ids, kTokens);
    bool same = got == want;
    for (size_t i = 0; i < std::min(got.size(), want.size()) && !same; ++i) {
      if (got[i] == want[i]) continue;
      // The CPU's own logits at the divergent step: the two tokens must be a near-tie there.
      std::vector<int32_t> prefix = ids;
      prefix.insert(prefix.end(), want.begin(), want.begin() + static_cast<std::ptrdiff_t>(i));
      Session s2(*cpu.model, *cpu.kv);
      const std::vector<float> at = last_logits(s2, prefix);
      const double gap = at[want[i]] - at[got[i]];
      EXPECT_LT(gap, tolerance()) << c["id"] << ": the GPU left the CPU at step " << i << " where the CPU's gap is "
                                     << gap;
      std::printf("  %s: GPU and CPU diverged at step %zu (CPU gap %.5f)\n", c["id"].get<std::string>().c_str(),
                  i, gap);
      break;
    }
    identical += same ? 1 : 0;
  }
  EXPECT_GE(n_cases, 10);
  std::printf("  default model, GPU (%d-bit activations) against the CPU: worst |logit diff| %.5f over %d "
              "prompts; greedy %d-token runs identical %d / %d\n",
              bits(), worst, n_cases, kTokens, identical, n_cases);
}

INSTANTIATE_TEST_SUITE_P(ActBits, GpuDefaultModel, ::testing::Values(16, 8),
                         [](const ::testing::TestParamInfo<int>& info) { return "x" + std::to_string(info.param); });

}  // namespace
}  // namespace tern
