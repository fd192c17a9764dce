// Sampling candidates on the device (top_candidates.cu) equal the host reference
// (core/top_candidates.h) bit for bit: ids, logits and flags, over rows of 1 to ~260k columns
// with ties, NaNs (leading and not), infinities, -0 / +0 and ascending rows, several rows per call
// and row ranges; the normalizer within 1e-6. And a sampled Session on the GPU gives the same
// tokens with the candidates as with the whole logits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/top_candidates.h"
#include "engine/session.h"
#include "gpu_model_util.h"
#include "gpu_test_util.h"

namespace tern {
namespace {

using gputest::DeviceTensor;

struct Result {
  std::vector<int32_t> ids;
  std::vector<float> logits;
  std::vector<uint32_t> flags;
  std::vector<double> sums;
};

Result run(Backend* b, const Tensor& x, const float* rows_host, int count, const std::vector<float>& temps) {
  const int rows = static_cast<int>(x.rows);
  Result r;
  r.ids.assign(static_cast<size_t>(rows) * count, -7);
  r.logits.assign(r.ids.size(), -7.0f);
  r.flags.assign(static_cast<size_t>(rows), 77u);
  r.sums.assign(static_cast<size_t>(rows), -1.0);
  const CandidateRows out{rows, count, r.ids.data(), r.logits.data(), r.flags.data(), temps.data(), r.sums.data()};
  if (b != nullptr) {
    b->top_candidates(x, out);
  } else {
    for (int i = 0; i < rows; ++i) top_candidates_row(rows_host + static_cast<int64_t>(i) * x.cols, x.cols, out, i);
  }
  return r;
}

using GpuTopCandidates = gputest::CudaBackendTest;

TEST_F(GpuTopCandidates, EqualTheHostReference) {
  Backend& b = *backend_;
  const float nan = std::nanf(""), inf = INFINITY;
  for (const int64_t cols : {int64_t{1}, int64_t{7}, int64_t{4095}, int64_t{4097}, int64_t{8192}, int64_t{8193},
                             int64_t{49152}, int64_t{128256}, int64_t{151936}, int64_t{262147}}) {
    SCOPED_TRACE(testing::Message() << "cols " << cols);
    const int rows = 11;
    std::vector<float> x = gputest::random_floats(static_cast<size_t>(rows * cols), 70 + static_cast<uint32_t>(cols), 3.0f);
    auto at = [&](int r, int64_t c) -> float& { return x[static_cast<size_t>(r * cols + c % cols)]; };
    // 0: random; 1: half-steps (ties everywhere); 2: a leading NaN; 3: NaNs elsewhere, +-inf;
    // 4: all -inf; 5: all equal; 6: ascending (every chunk beats the list); 7: all NaN;
    // 8: -0 and +0 as the max; 9: a language model's peaks; 10: +inf twice.
    for (int64_t c = 0; c < cols; ++c) {
      at(1, c) = std::round(at(1, c) * 2.0f) / 2.0f;
      at(4, c) = -inf;
      at(5, c) = 1.25f;
      at(6, c) = static_cast<float>(c) * 1e-3f;
      at(7, c) = nan;
      at(8, c) = (c % 3 == 0) ? -1.0f : (c % 3 == 1 ? -0.0f : 0.0f);
    }
    at(2, 0) = nan;
    at(3, cols / 5) = nan;
    at(3, cols / 4) = inf;
    at(3, cols / 3) = -inf;
    at(3, cols - 1) = nan;
    for (int i = 0; i < 5; ++i) at(9, (i * 7919) % cols) += 14.0f - 2.0f * i;
    at(10, cols / 2) = inf;
    at(10, cols - 1) = inf;
    DeviceTensor dx = gputest::device_copy(b, gputest::host_f32(x, rows, cols).t);
    std::vector<float> temps(rows);
    for (int r = 0; r < rows; ++r) temps[r] = r % 3 == 0 ? 0.0f : (r % 3 == 1 ? 0.7f : 1.3f);
    for (const int count : {1, 3, 64, 100, 256, 1000, 1024}) {
      if (count > cols) continue;
      SCOPED_TRACE(testing::Message() << "count " << count);
      const Result want = run(nullptr, dx.t, x.data(), count, temps);
      const Result got = run(&b, dx.t, nullptr, count, temps);
      ASSERT_EQ(got.ids, want.ids);
      EXPECT_EQ(std::memcmp(got.logits.data(), want.logits.data(), want.logits.size() * sizeof(float)), 0);
      EXPECT_EQ(got.flags, want.flags);
      for (int r = 0; r < rows; ++r) {
        if (temps[r] <= 0.0f) {
          EXPECT_EQ(got.sums[r], 0.0) << "row " << r;
        } else if (std::isfinite(want.sums[r])) {
          EXPECT_NEAR(got.sums[r] / want.sums[r], 1.0, 1e-6) << "row " << r;
        } else {
          EXPECT_FALSE(std::isfinite(got.sums[r])) << "row " << r;
        }
      }
      // Without normalizers, and a row range of a larger tensor (the logits workspace is sliced).
      const Tensor part = dx.t.slice_rows(3, 5);
      std::vector<int32_t> ids(static_cast<size_t>(5) * count);
      std::vector<float> logits(ids.size());
      std::vector<uint32_t> flags(5);
      b.top_candidates(part, CandidateRows{5, count, ids.data(), logits.data(), flags.data(), nullptr, nullptr});
      EXPECT_TRUE(std::equal(ids.begin(), ids.end(), want.ids.begin() + 3 * count));
      EXPECT_TRUE(std::equal(flags.begin(), flags.end(), want.flags.begin() + 3));
    }
  }
}

// The whole chain on the GPU: candidates per step, the per-row temperatures, the fallback's row
// copy (Model::copy_logit_row), graph replays of steps ending in the candidates' launches.
TEST_F(GpuTopCandidates, SampledSessionEqualsTheWholeLogitsPath) {
  auto file = gputest::synthesized("tiny-llama", "q4_k_m");
  ASSERT_NE(file, nullptr);
  gputest::Loaded m = gputest::load_on(file, gputest::make_cuda(), 1024);
  const int V = m.model->config().n_vocab;
  const std::vector<int32_t> prompt = gputest::prompt_ids(30, V, 5);
  int picks = 0, fallbacks = 0;
  for (const float t : {0.5f, 1.0f}) {
    for (const int k : {0, 20}) {
      for (const float p : {1.0f, 0.9f}) {
        GenerateOptions o;
        o.max_tokens = 24;
        o.reuse_prefix = false;
        o.sampling.temperature = t;
        o.sampling.top_k = k;
        o.sampling.top_p = p;
        o.sampling.seed = 17;
        Session a(*m.model, *m.kv), c(*m.model, *m.kv);
        o.device_candidates = false;
        auto whole = a.generate(prompt, o);
        o.device_candidates = true;
        auto cand = c.generate(prompt, o);
        ASSERT_TRUE(whole.is_ok() && cand.is_ok());
        EXPECT_EQ(cand.value().tokens, whole.value().tokens) << "T " << t << " k " << k << " p " << p;
        picks += cand.value().stats.candidate_picks;
        fallbacks += cand.value().stats.candidate_fallbacks;
      }
    }
  }
  std::printf("GPU session: %d picks from candidates, %d fallbacks\n", picks, fallbacks);
  EXPECT_GT(picks + fallbacks, 0);
}

}  // namespace
}  // namespace tern
