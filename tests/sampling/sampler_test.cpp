#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>

#include "core/argmax.h"

namespace tern {
namespace {

// A history of `position` tokens (no penalties in the tests that use it, so only its length
// matters: the absolute position whose uniform the draw uses).
std::span<const int32_t> at_position(size_t position) {
  static const std::vector<int32_t> zeros(1 << 20, 0);
  return std::span<const int32_t>(zeros).first(position);
}

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  Sampler s(SamplerParams{});
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(s.sample(logits, {}), 1);
}

// core/argmax.h is the one definition of the greedy pick (host sampler and every backend's
// argmax_rows): a left-to-right scan with a strict '>'.
TEST(Sampler, FirstArgmaxEdgeCases) {
  const float nan = std::nanf(""), inf = INFINITY;
  auto pick = [](std::vector<float> v) { return first_argmax(v.data(), v.size()); };
  EXPECT_EQ(pick({1.0f, 3.0f, 3.0f, 2.0f}), 1);      // ties: the lowest index
  EXPECT_EQ(pick({nan, 5.0f, 7.0f}), 0);             // a leading NaN is never replaced
  EXPECT_EQ(pick({1.0f, nan, 0.5f, nan}), 0);        // other NaNs never win
  EXPECT_EQ(pick({-1.0f, nan, 2.0f}), 2);
  EXPECT_EQ(pick({-inf, -inf, -inf}), 0);            // all equal: index 0
  EXPECT_EQ(pick({-inf, -3.0f, inf, inf}), 2);
  EXPECT_EQ(pick({-0.0f, 0.0f}), 0);                 // -0 == +0: a tie
  EXPECT_EQ(pick({4.0f}), 0);
}

// A step that computed only each row's argmax serves an argmax_only sampler; a sampler that
// needs the logits (penalties, temperature) never sees an argmax-only row (the driver asks for
// the logits), and given logits it ignores the argmax.
TEST(Sampler, LogitRowServesArgmaxOnlySamplers) {
  Sampler greedy(SamplerParams{});
  EXPECT_TRUE(greedy.argmax_only());
  EXPECT_EQ(greedy.sample(LogitRow{{}, 7}, {}), 7);
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f};
  EXPECT_EQ(greedy.sample(LogitRow{logits, 1}, {}), 1);
  EXPECT_EQ(greedy.sample(LogitRow{logits, -1}, {}), 1);  // argmax not computed: from the logits

  SamplerParams penalised;
  penalised.repeat_penalty = 4.0f;
  Sampler p(penalised);
  EXPECT_FALSE(p.argmax_only());
  EXPECT_EQ(p.sample(LogitRow{logits, 1}, std::vector<int32_t>{1}), 0);  // 2.0 / 4 < 0.5
  SamplerParams warm;
  warm.temperature = 0.7f;
  EXPECT_FALSE(Sampler(warm).argmax_only());
  SamplerParams presence;
  presence.presence_penalty = 0.1f;
  EXPECT_FALSE(Sampler(presence).argmax_only());
}

TEST(Sampler, RepeatPenaltyChangesGreedyChoice) {
  SamplerParams p;
  p.repeat_penalty = 2.0f;
  Sampler s(p);
  const std::vector<float> logits = {1.0f, 1.5f, 0.0f};
  const std::vector<int32_t> history = {1};  // 1.5 / 2 = 0.75 < 1.0
  EXPECT_EQ(s.sample(logits, history), 0);
}

TEST(Sampler, PresenceAndFrequencyPenalties) {
  SamplerParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  Sampler s(p);
  const std::vector<float> logits = {1.0f, 1.6f};
  // token 1 seen twice: 1.6 - 0.5 - 2 * 0.25 = 0.6 < 1.0
  EXPECT_EQ(s.sample(logits, std::vector<int32_t>{1, 1}), 0);
  // seen once: 1.6 - 0.75 = 0.85 < 1.0 still
  EXPECT_EQ(s.sample(logits, std::vector<int32_t>{1}), 0);
  EXPECT_EQ(s.sample(logits, std::vector<int32_t>{}), 1);
}

TEST(Sampler, TopKKeepsOnlyTheBest) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 2;
  Sampler s(p);
  const std::vector<float> logits = {3.0f, 0.0f, 2.9f, 2.8f};
  Candidates c = s.distribution(logits, {});
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c.ids[0], 0);
  EXPECT_EQ(c.ids[1], 2);
  EXPECT_NEAR(c.logits[0] + c.logits[1], 1.0f, 1e-6);
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingMass) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_p = 0.7f;
  Sampler s(p);
  // probabilities 0.5, 0.3, 0.2
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  Candidates c = s.distribution(logits, {});
  ASSERT_EQ(c.size(), 2u);
  EXPECT_NEAR(c.logits[0], 0.625f, 1e-5);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.min_p = 0.5f;
  Sampler s(p);
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  Candidates c = s.distribution(logits, {});
  ASSERT_EQ(c.size(), 2u);  // 0.2 < 0.5 * 0.5
}

TEST(Sampler, SeedReproducesAndDiffers) {
  SamplerParams p;
  p.temperature = 1.0f;
  std::vector<float> logits(50);
  for (int i = 0; i < 50; ++i) logits[i] = std::sin(static_cast<float>(i));
  auto draw = [&](uint64_t seed) {
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> ids;
    for (int i = 0; i < 32; ++i) ids.push_back(s.sample(logits, at_position(i)));
    return ids;
  };
  EXPECT_EQ(draw(7), draw(7));
  EXPECT_NE(draw(7), draw(8));
}

// The empirical distribution of draws matches softmax(logits / T) (chi-square, fixed seed).
TEST(Sampler, DrawsFollowTheDistribution) {
  SamplerParams p;
  p.temperature = 0.7f;
  Sampler s(p);
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -0.5f, -2.0f};
  std::vector<double> expected(logits.size());
  double z = 0;
  for (size_t i = 0; i < logits.size(); ++i) z += expected[i] = std::exp(logits[i] / p.temperature);
  const int n = 200000;
  std::vector<int> counts(logits.size());
  for (int i = 0; i < n; ++i) ++counts[s.sample(logits, at_position(i))];
  double chi2 = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double e = n * expected[i] / z;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  EXPECT_LT(chi2, 18.47);  // p = 0.001 for 4 degrees of freedom
}

// A draw is a function of (seed, logits, history): the order of draws, or which positions were
// drawn before, changes nothing (what makes seeded sampling token-identical with speculation).
TEST(Sampler, EachDrawDependsOnlyOnSeedAndPosition) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  std::vector<float> logits(50);
  for (int i = 0; i < 50; ++i) logits[i] = std::cos(0.7f * static_cast<float>(i));
  Sampler forward(p), backward(p);
  std::vector<int32_t> a(64), b(64);
  for (int i = 0; i < 64; ++i) a[i] = forward.sample(logits, at_position(i));
  for (int i = 63; i >= 0; i -= 1) b[i] = backward.sample(logits, at_position(i));
  EXPECT_EQ(a, b);
  // The history's contents do not move the uniform (penalties off): only its length does.
  const std::vector<int32_t> other(10, 3);
  EXPECT_EQ(Sampler(p).sample(logits, other), a[10]);
  EXPECT_EQ(forward.uniform_at(10), Sampler::uniform_at(42, 10, Sampler::Stream::kDraw));
  EXPECT_NE(forward.uniform_at(10), forward.uniform_at(10, Sampler::Stream::kAccept));
}

// The counter-based uniforms are uniform along positions, across seeds, and on both streams
// (20 equal bins, chi-square at p = 0.001 with 19 degrees of freedom: 43.82).
TEST(Sampler, PositionUniformsAreUniform) {
  const int n = 100000, bins = 20;
  auto chi2 = [&](const std::function<double(int)>& u) {
    std::vector<int> counts(bins, 0);
    for (int i = 0; i < n; ++i) {
      const double v = u(i);
      EXPECT_TRUE(v >= 0.0 && v < 1.0);
      ++counts[static_cast<int>(v * bins)];
    }
    double c = 0;
    const double e = static_cast<double>(n) / bins;
    for (int k : counts) c += (k - e) * (k - e) / e;
    return c;
  };
  using S = Sampler::Stream;
  EXPECT_LT(chi2([](int i) { return Sampler::uniform_at(7, static_cast<uint64_t>(i), S::kDraw); }), 43.82);
  EXPECT_LT(chi2([](int i) { return Sampler::uniform_at(7, static_cast<uint64_t>(i), S::kAccept); }), 43.82);
  EXPECT_LT(chi2([](int i) { return Sampler::uniform_at(static_cast<uint64_t>(i), 100, S::kDraw); }), 43.82);
  // Neighbouring positions are not correlated: the pair (u_i, u_i+1) falls in 4 x 5 cells evenly.
  EXPECT_LT(chi2([](int i) {
              const double a = Sampler::uniform_at(3, static_cast<uint64_t>(i), S::kDraw);
              const double b = Sampler::uniform_at(3, static_cast<uint64_t>(i) + 1, S::kDraw);
              return (std::floor(a * 4) * 5 + std::floor(b * 5) + 0.5) / 20.0;
            }),
            43.82);
  // The two streams at one position are not correlated either.
  EXPECT_LT(chi2([](int i) {
              const double a = Sampler::uniform_at(3, static_cast<uint64_t>(i), S::kDraw);
              const double b = Sampler::uniform_at(3, static_cast<uint64_t>(i), S::kAccept);
              return (std::floor(a * 4) * 5 + std::floor(b * 5) + 0.5) / 20.0;
            }),
            43.82);
}

}  // namespace
}  // namespace tern
