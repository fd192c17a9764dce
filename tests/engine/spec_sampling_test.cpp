// Speculative sampling keeps the target's output distribution (rejection rule), for a point-mass
// drafter (n-gram) and for a draft model whose distribution differs from the target's. Tiny random
// models sharing a 256-token vocabulary: llama_tiny is the target, qwen3_tiny the draft.
// The exact distribution of the second generated token, sum_t1 p(t1) p(t2 | t1), is computed from
// the target's logits; the empirical one over 4000 seeded runs must pass a chi-square test
// (p = 0.001), in every mode: no speculation, a point-mass draft (what lookup drafters propose;
// verified by the coupled rule, spec/verify.h, so its tokens are also plain decoding's), and a
// draft model (rejection sampling).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "../common/model_fixture.h"
#include "engine/draft_model_source.h"
#include "engine/session.h"

namespace tern {
namespace {

std::vector<double> softmax(const std::vector<float>& logits, float temperature) {
  std::vector<double> p(logits.size());
  double mx = -1e300, z = 0;
  for (float l : logits) mx = std::max(mx, static_cast<double>(l) / temperature);
  for (size_t i = 0; i < p.size(); ++i) z += p[i] = std::exp(logits[i] / temperature - mx);
  for (double& v : p) v /= z;
  return p;
}

// Wilson-Hilferty approximation of the chi-square quantile at p = 0.001.
double chi2_critical(int df) {
  const double z = 3.09, a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

double chi_square(const std::vector<double>& expected_p, const std::map<int32_t, int>& counts, int n, int* df) {
  // Merge cells with expected count < 5 into one.
  double chi2 = 0, rest_expected = 0, rest_observed = 0;
  int cells = 0;
  for (size_t t = 0; t < expected_p.size(); ++t) {
    const double e = expected_p[t] * n;
    const auto it = counts.find(static_cast<int32_t>(t));
    const double o = it == counts.end() ? 0.0 : it->second;
    if (e < 5) {
      rest_expected += e;
      rest_observed += o;
      continue;
    }
    chi2 += (o - e) * (o - e) / e;
    ++cells;
  }
  if (rest_expected > 0) {
    chi2 += (rest_observed - rest_expected) * (rest_observed - rest_expected) / rest_expected;
    ++cells;
  }
  *df = cells - 1;
  return chi2;
}

// A point-mass drafter (like n-gram lookup) that always proposes the same token.
class FixedDrafter final : public DraftSource {
 public:
  explicit FixedDrafter(int32_t token) : token_(token) {}
  std::string_view name() const override { return "fixed"; }
  void prefill(std::span<const int32_t>) override {}
  Draft draft(std::span<const int32_t>, int max_tokens) override {
    Draft d;
    if (max_tokens > 0) d.tokens.push_back(token_);
    return d;
  }
  void commit(int, int) override {}

 private:
  int32_t token_;
};

TEST(SpeculativeSampling, SecondTokenDistributionIsUnchanged) {
  const std::string data = TERN_TEST_DATA;
  auto target = testing::load_test_model(data + "/models/llama_tiny.gguf", 1, false, 0);
  auto draft = testing::load_test_model(data + "/models/qwen3_tiny.gguf", 1, false, 0);
  ASSERT_NE(target.model, nullptr);
  ASSERT_NE(draft.model, nullptr);
  const std::vector<int32_t> prompt = {17, 42, 17, 42, 17, 99, 17, 42, 17};
  const float temperature = 1.5f;  // flatter: more distinct outcomes, more rejections

  // Exact marginal of the second token.
  Session exact(*target.model, *target.kv);
  GenerateOptions o;
  auto first = exact.prefill(prompt, o);
  ASSERT_TRUE(first.is_ok());
  const std::vector<double> p1 = softmax(first.value(), temperature);
  std::vector<double> p2(p1.size(), 0.0);
  std::vector<int32_t> ctx = prompt;
  ctx.push_back(0);
  for (size_t t1 = 0; t1 < p1.size(); ++t1) {
    ctx.back() = static_cast<int32_t>(t1);
    auto l = exact.prefill(ctx, o);
    ASSERT_TRUE(l.is_ok());
    const std::vector<double> cond = softmax(l.value(), temperature);
    for (size_t t2 = 0; t2 < p2.size(); ++t2) p2[t2] += p1[t1] * cond[t2];
  }

  const int n = 4000;
  // The point-mass draft proposes the likeliest second token: accepted often, rejected often.
  const int32_t likely = static_cast<int32_t>(std::max_element(p2.begin(), p2.end()) - p2.begin());
  for (const std::string mode : {"plain", "point-mass", "draft-model"}) {
    std::map<int32_t, int> counts;
    int proposed = 0, accepted = 0;
    Session s(*target.model, *target.kv);
    for (int i = 0; i < n; ++i) {
      GenerateOptions g;
      g.max_tokens = 2;
      g.sampling.temperature = temperature;
      g.sampling.seed = 1000 + i;
      FixedDrafter fixed(likely);
      std::unique_ptr<DraftModelSource> dm;
      if (mode == "point-mass") g.drafter = &fixed;
      if (mode == "draft-model") {
        dm = std::make_unique<DraftModelSource>(*draft.model, *draft.kv, g.sampling);
        g.drafter = dm.get();
      }
      auto r = s.generate(prompt, g);
      ASSERT_TRUE(r.is_ok()) << r.status().message();
      ASSERT_EQ(r.value().tokens.size(), 2u);
      ++counts[r.value().tokens[1]];
      proposed += r.value().stats.drafts_proposed;
      accepted += r.value().stats.drafts_accepted;
    }
    int df = 0;
    const double chi2 = chi_square(p2, counts, n, &df);
    EXPECT_LT(chi2, chi2_critical(df)) << mode << ": chi2 " << chi2 << " with " << df << " degrees of freedom";
    if (mode != "plain") {
      EXPECT_GT(proposed, n / 2) << mode;
      EXPECT_GT(accepted, 0) << mode;
      EXPECT_LT(accepted, proposed) << mode << ": the test needs rejections to exercise the residual draw";
    }
    std::printf("  %s: chi2 %.1f (df %d, critical %.1f), drafts %d/%d accepted\n", mode.c_str(), chi2, df,
                chi2_critical(df), accepted, proposed);
  }
}

TEST(DraftModel, SameModelDraftIsAlwaysAcceptedUnderGreedyAndChangesNothing) {
  const std::string data = TERN_TEST_DATA;
  auto target = testing::load_test_model(data + "/models/llama_tiny.gguf", 1, false, 0);
  auto draft = testing::load_test_model(data + "/models/llama_tiny.gguf", 1, false, 0);
  ASSERT_NE(target.model, nullptr);
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6};
  GenerateOptions o;
  o.max_tokens = 40;
  Session plain(*target.model, *target.kv);
  auto ref = plain.generate(prompt, o);
  ASSERT_TRUE(ref.is_ok());
  DraftModelSource dm(*draft.model, *draft.kv, o.sampling);
  o.drafter = &dm;
  o.max_draft_tokens = 5;
  Session spec(*target.model, *target.kv);
  auto r = spec.generate(prompt, o);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r.value().tokens, ref.value().tokens);
  EXPECT_EQ(r.value().stats.drafts_accepted, r.value().stats.drafts_proposed);
  EXPECT_LT(r.value().stats.forwards, ref.value().stats.forwards / 3);
}

TEST(DraftModel, DifferentDraftModelChangesNoGreedyToken) {
  const std::string data = TERN_TEST_DATA;
  auto target = testing::load_test_model(data + "/models/llama_tiny.gguf", 1, false, 0);
  auto draft = testing::load_test_model(data + "/models/qwen3_tiny.gguf", 1, false, 0);
  ASSERT_NE(target.model, nullptr);
  ASSERT_NE(draft.model, nullptr);
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6};
  for (int chunk : {1, 7, 64}) {
    GenerateOptions o;
    o.max_tokens = 40;
    o.prefill_chunk_tokens = chunk;
    Session plain(*target.model, *target.kv);
    auto ref = plain.generate(prompt, o);
    DraftModelSource dm(*draft.model, *draft.kv, o.sampling);
    o.drafter = &dm;
    Session spec(*target.model, *target.kv);
    auto r = spec.generate(prompt, o);
    ASSERT_TRUE(ref.is_ok() && r.is_ok());
    EXPECT_EQ(r.value().tokens, ref.value().tokens) << "chunk " << chunk;
    EXPECT_GT(r.value().stats.drafts_proposed, 0);
  }
}

// A draft model that drafts greedily proposes point masses, so a seeded sampled target keeps its
// tokens exactly (the coupled rule, spec/verify.h).
TEST(DraftModel, GreedyDraftModelKeepsSeededSampledTokens) {
  const std::string data = TERN_TEST_DATA;
  auto target = testing::load_test_model(data + "/models/llama_tiny.gguf", 1, false, 0);
  // The target itself as the draft: its argmax is often, not always, the sampled token.
  auto draft = testing::load_test_model(data + "/models/llama_tiny.gguf", 1, false, 0);
  ASSERT_NE(target.model, nullptr);
  ASSERT_NE(draft.model, nullptr);
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6};
  int proposed = 0, accepted = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    GenerateOptions o;
    o.max_tokens = 32;
    o.sampling.temperature = seed % 2 ? 0.8f : 1.2f;
    o.sampling.top_k = seed % 3 == 0 ? 30 : 0;
    o.sampling.seed = seed;
    Session plain(*target.model, *target.kv);
    auto ref = plain.generate(prompt, o);
    DraftModelSource dm(*draft.model, *draft.kv, SamplerParams{});  // greedy drafts
    o.drafter = &dm;
    Session spec(*target.model, *target.kv);
    auto r = spec.generate(prompt, o);
    ASSERT_TRUE(ref.is_ok() && r.is_ok());
    EXPECT_EQ(r.value().tokens, ref.value().tokens) << "seed " << seed;
    proposed += r.value().stats.drafts_proposed;
    accepted += r.value().stats.drafts_accepted;
  }
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, proposed);
  std::printf("  greedy draft model: drafts %d/%d accepted\n", accepted, proposed);
}

}  // namespace
}  // namespace tern
