// Sampling from a row's candidates (core/top_candidates.h, sampling/candidate_sampling.cpp) picks
// the token sampling from the whole row picks (both with the position's uniform), or fetches the
// row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/argmax.h"
#include "core/top_candidates.h"
#include "sampling/sampler.h"

namespace tern {
namespace {

// A history of `position` tokens (penalties are off here, so only its length matters: the
// absolute position whose uniform the draw uses).
std::span<const int32_t> at_position(size_t position) {
  static const std::vector<int32_t> zeros(1 << 20, 0);
  return std::span<const int32_t>(zeros).first(position);
}

// Candidates of one row, computed by the reference at a given count and temperature.
struct RowCandidates {
  std::vector<int32_t> ids;
  std::vector<float> logits;
  uint32_t flags = 0;
  double exp_sum = 0.0;
  float temperature = 0.0f;

  RowCandidates(const std::vector<float>& x, int count, float t) : ids(count), logits(count), temperature(t) {
    const CandidateRows out{1, count, ids.data(), logits.data(), &flags, &temperature, &exp_sum};
    top_candidates_row(x.data(), static_cast<int64_t>(x.size()), out, 0);
  }
  // A LogitRow without the logits; fetches counts how often the sampler fell back to them.
  LogitRow row(const std::vector<float>& x, int* fetches, double sum_scale = 1.0) const {
    LogitRow r;
    r.candidates.ids = ids;
    r.candidates.logits = logits;
    r.candidates.flags = flags;
    r.candidates.exp_sum = temperature > 0.0f ? exp_sum * sum_scale : 0.0;
    r.candidates.sum_temperature = temperature;
    r.candidates.n_vocab = static_cast<int64_t>(x.size());
    r.fetch_logits = [&x, fetches] {
      ++*fetches;
      return std::span<const float>(x);
    };
    return r;
  }
};

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

// The reference against a plain sort of (logit, id) with NaN last.
TEST(TopCandidates, ReferenceEqualsAFullSort) {
  const float nan = std::nanf(""), inf = INFINITY;
  std::mt19937 rng(7);
  for (const int64_t n : {int64_t{1}, int64_t{2}, int64_t{17}, int64_t{1000}, int64_t{50000}}) {
    for (int variant = 0; variant < 6; ++variant) {
      std::vector<float> x(static_cast<size_t>(n));
      std::normal_distribution<float> g(0.0f, 3.0f);
      for (float& v : x) v = g(rng);
      if (variant == 1) for (float& v : x) v = std::round(v);  // many ties
      if (variant == 2) std::fill(x.begin(), x.end(), 0.5f);
      if (variant == 3) {
        x[static_cast<size_t>(n / 2)] = nan;
        x.back() = inf;
        x[0] = -inf;
      }
      if (variant == 4) {
        x[0] = nan;
        for (size_t j = 1; j < x.size(); j += 3) x[j] = -0.0f;
        for (size_t j = 2; j < x.size(); j += 3) x[j] = 0.0f;
      }
      if (variant == 5) std::fill(x.begin(), x.end(), nan);
      std::vector<int32_t> order(static_cast<size_t>(n));
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        const float va = x[a], vb = x[b];
        if ((va != va) != (vb != vb)) return vb != vb;  // NaN last
        if (va != va || va == vb) return a < b;
        return va > vb;
      });
      for (const int count : {1, 7, 64, 1024}) {
        if (count > n) continue;
        SCOPED_TRACE(testing::Message() << "n " << n << " variant " << variant << " count " << count);
        const RowCandidates c(x, count, 0.8f);
        bool has_nan = false;
        for (float v : x) has_nan = has_nan || v != v;
        EXPECT_EQ(c.flags, (has_nan ? kRowHasNan : 0u) | (x[0] != x[0] ? kFirstIsNan : 0u));
        for (int i = 0; i < count; ++i) {
          ASSERT_EQ(c.ids[i], order[i]) << i;
          EXPECT_TRUE(same_bits(c.logits[i], x[c.ids[i]]));
        }
        CandidateRows rows;
        rows.rows = 1;
        rows.count = count;
        rows.ids = const_cast<int32_t*>(c.ids.data());
        rows.flags = const_cast<uint32_t*>(&c.flags);
        EXPECT_EQ(candidates_argmax(rows, 0), first_argmax(x.data(), x.size()));
      }
    }
  }
}

// The normalizer is the host sampler's up to summation order.
TEST(TopCandidates, ExpSumIsTheSoftmaxNormalizer) {
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 4.0f);
  std::vector<float> x(30000);
  for (float& v : x) v = g(rng);
  for (const float t : {0.2f, 0.7f, 1.0f, 3.0f}) {
    const RowCandidates c(x, 16, t);
    float mx = -INFINITY;
    for (float v : x) mx = std::max(mx, v / t);
    std::vector<double> terms;
    for (float v : x) terms.push_back(std::exp(v / t - mx));
    std::sort(terms.begin(), terms.end(), std::greater<>());
    double sum = 0.0;
    for (double e : terms) sum += e;
    EXPECT_NEAR(c.exp_sum / sum, 1.0, 1e-12) << t;
  }
  const RowCandidates none(x, 16, 0.0f);
  EXPECT_EQ(none.exp_sum, 0.0);
}

std::vector<float> make_row(std::mt19937& rng, int n, int kind) {
  std::vector<float> x(static_cast<size_t>(n));
  switch (kind) {
    case 0: {  // broad
      std::normal_distribution<float> g(0.0f, 2.0f);
      for (float& v : x) v = g(rng);
      break;
    }
    case 1: {  // peaked, like a confident language model
      std::normal_distribution<float> g(0.0f, 2.5f);
      for (float& v : x) v = g(rng);
      std::uniform_int_distribution<int> pick(0, n - 1);
      for (int i = 0; i < 5; ++i) x[static_cast<size_t>(pick(rng))] += 12.0f - 2.0f * i;
      break;
    }
    case 2: {  // quantized: many exact ties everywhere
      std::normal_distribution<float> g(0.0f, 3.0f);
      for (float& v : x) v = std::round(g(rng) * 2.0f) / 2.0f;
      break;
    }
    default: {  // a few distinct levels: ties at every cut
      std::uniform_int_distribution<int> level(0, 3);
      for (float& v : x) v = static_cast<float>(level(rng));
      break;
    }
  }
  return x;
}

struct Totals {
  int exact = 0, fallback = 0;
};

// Runs the same sampler over rows twice, from the whole rows and from their candidates, several
// draws per row (each at its own position, so with its own uniform), and expects the same tokens.
Totals compare_paths(const SamplerParams& p, int n, int kind, int rows, uint32_t seed) {
  Sampler whole(p), cand(p);
  EXPECT_EQ(cand.need(), OutputNeed::kCandidates);
  std::mt19937 rng(seed);
  const int count = std::min(cand.candidates_wanted(), n);
  for (int r = 0; r < rows; ++r) {
    const std::vector<float> x = make_row(rng, n, kind);
    const RowCandidates c(x, count, cand.exp_sum_temperature());
    for (int d = 0; d < 3; ++d) {
      int fetches = 0;
      const std::span<const int32_t> h = at_position(static_cast<size_t>(r) * 3 + d);
      const int32_t a = whole.sample(x, h);
      const int32_t b = cand.sample(c.row(x, &fetches), h);
      EXPECT_EQ(a, b) << "row " << r << " draw " << d << " T " << p.temperature << " k " << p.top_k << " p " << p.top_p
                      << " min_p " << p.min_p << " kind " << kind;
    }
    // The distribution (speculative sampling) too, where the candidates give it.
    int fetches = 0;
    const Candidates da = whole.distribution(x, {});
    const Candidates db = cand.distribution(c.row(x, &fetches), {});
    EXPECT_EQ(da.ids, db.ids);
    EXPECT_TRUE(da.logits.size() == db.logits.size() &&
                std::memcmp(da.logits.data(), db.logits.data(), da.logits.size() * sizeof(float)) == 0);
  }
  return Totals{static_cast<int>(cand.candidate_stats().exact), static_cast<int>(cand.candidate_stats().fallback)};
}

TEST(CandidateSampling, SameTokensAsTheWholeRow) {
  Totals all;
  Totals by_kind[4];
  uint32_t seed = 1;
  for (const float t : {0.3f, 0.8f, 1.0f, 1.7f}) {
    for (const int k : {0, 1, 3, 40, 300}) {
      for (const float top_p : {1.0f, 0.5f, 0.9f, 0.97f}) {
        for (const float min_p : {0.0f, 0.05f, 0.3f}) {
          for (const int kind : {0, 1, 2, 3}) {
            SamplerParams p;
            p.temperature = t;
            p.top_k = k;
            p.top_p = top_p;
            p.min_p = min_p;
            p.seed = seed * 7919u;
            const Totals got = compare_paths(p, kind == 3 ? 700 : 3000, kind, 2, seed++);
            all.exact += got.exact;
            all.fallback += got.fallback;
            by_kind[kind].exact += got.exact;
            by_kind[kind].fallback += got.fallback;
          }
        }
      }
    }
  }
  // Both paths are exercised: mostly exact on real-looking rows, falling back on ties.
  std::printf("candidate path: %d exact, %d fallbacks; by kind:", all.exact, all.fallback);
  for (const Totals& t : by_kind) std::printf(" %d/%d", t.exact, t.fallback);
  std::printf("\n");
  EXPECT_GT(by_kind[1].exact, 4 * by_kind[1].fallback);
  EXPECT_GT(by_kind[3].fallback, 0);
}

// A vocabulary no larger than the candidates: they are the whole row, always exact.
TEST(CandidateSampling, WholeRowAsCandidatesIsAlwaysExact) {
  SamplerParams p;
  p.temperature = 0.9f;
  const Totals t = compare_paths(p, 200, 0, 20, 11);
  EXPECT_EQ(t.fallback, 0);
  p.top_p = 0.8f;
  p.top_k = 250;
  EXPECT_EQ(compare_paths(p, 200, 3, 20, 12).fallback, 0);
}

// The proofs fall back where they cannot decide, and the token is still the whole row's.
TEST(CandidateSampling, FallbacksTrigger) {
  // A NaN anywhere: the whole row's sort has no defined order; never from candidates.
  {
    SamplerParams p;
    p.temperature = 1.0f;
    p.top_k = 5;
    std::mt19937 rng(5);
    std::vector<float> x = make_row(rng, 3000, 1);
    x[2999] = std::nanf("");
    const RowCandidates c(x, 64, 0.0f);
    EXPECT_EQ(c.flags, kRowHasNan);
    Sampler s(p);
    int fetches = 0;
    (void)s.sample(c.row(x, &fetches), {});
    EXPECT_EQ(fetches, 1);
  }
  // top_k cut inside a tie that reaches the last candidate.
  {
    SamplerParams p;
    p.temperature = 0.5f;
    p.top_k = 10;
    std::vector<float> x(4000, 1.0f);
    x[17] = 3.0f;
    Sampler whole(p), s(p);
    const RowCandidates c(x, s.candidates_wanted(), 0.0f);
    int fetches = 0;
    EXPECT_EQ(s.sample(c.row(x, &fetches), {}), whole.sample(x, {}));
    EXPECT_EQ(fetches, 1);
  }
  // min_p whose threshold lies below the last candidate.
  {
    SamplerParams p;
    p.temperature = 1.0f;
    p.min_p = 0.01f;
    std::vector<float> x(4000, 0.0f);
    Sampler whole(p), s(p);
    const RowCandidates c(x, s.candidates_wanted(), s.exp_sum_temperature());
    int fetches = 0;
    EXPECT_EQ(s.sample(c.row(x, &fetches), {}), whole.sample(x, {}));
    EXPECT_EQ(fetches, 1);
  }
  // Plain temperature on a flat row: the draw lands past the candidates.
  {
    SamplerParams p;
    p.temperature = 1.0f;
    std::vector<float> x(100000, 0.0f);
    Sampler whole(p), s(p);
    const RowCandidates c(x, s.candidates_wanted(), s.exp_sum_temperature());
    int fetches = 0;
    EXPECT_EQ(s.sample(c.row(x, &fetches), {}), whole.sample(x, {}));
    EXPECT_EQ(fetches, 1);
  }
  // No normalizer (the step computed none, or at another temperature): top_p cannot be decided.
  {
    SamplerParams p;
    p.temperature = 0.7f;
    p.top_p = 0.9f;
    std::mt19937 rng(9);
    const std::vector<float> x = make_row(rng, 3000, 1);
    Sampler whole(p), s(p);
    const RowCandidates c(x, 64, 0.6f);
    int fetches = 0;
    EXPECT_EQ(s.sample(c.row(x, &fetches), {}), whole.sample(x, {}));
    EXPECT_EQ(fetches, 1);
  }
}

// The backend's normalizer may differ from the host's by rounding: within the allowed slack the
// tokens are the same (decided or fallen back), never different.
TEST(CandidateSampling, NormalizerRoundingNeverChangesATokenWithinTheSlack) {
  for (const double scale : {1.0 - 9e-6, 1.0 - 1e-7, 1.0 + 1e-7, 1.0 + 9e-6}) {
    SamplerParams p;
    p.temperature = 0.9f;
    p.top_p = 0.92f;
    for (const bool plain : {false, true}) {
      if (plain) p.top_p = 1.0f;
      Sampler whole(p), s(p);
      std::mt19937 rng(21);
      for (int r = 0; r < 100; ++r) {
        const std::vector<float> x = make_row(rng, 4000, r % 2);
        const RowCandidates c(x, s.candidates_wanted(), s.exp_sum_temperature());
        int fetches = 0;
        ASSERT_EQ(s.sample(c.row(x, &fetches, scale), at_position(r)), whole.sample(x, at_position(r)))
            << scale << " row " << r;
      }
      EXPECT_GT(s.candidate_stats().exact, 25u);  // the proofs do decide most rows
    }
  }
}

TEST(CandidateSampling, NeedsFollowTheParameters) {
  SamplerParams p;
  EXPECT_EQ(Sampler(p).need(), OutputNeed::kArgmax);
  p.repeat_penalty = 1.1f;
  EXPECT_EQ(Sampler(p).need(), OutputNeed::kLogits);  // greedy with a penalty
  p.temperature = 0.8f;
  EXPECT_EQ(Sampler(p).need(), OutputNeed::kLogits);  // penalties touch the whole row
  p.repeat_penalty = 1.0f;
  EXPECT_EQ(Sampler(p).need(), OutputNeed::kCandidates);
  EXPECT_EQ(Sampler(p).need(true), OutputNeed::kLogits);  // the whole distribution, untruncated
  EXPECT_GT(Sampler(p).exp_sum_temperature(), 0.0f);
  p.top_k = 40;
  EXPECT_EQ(Sampler(p).need(true), OutputNeed::kCandidates);
  EXPECT_EQ(Sampler(p).candidates_wanted(), 64);
  EXPECT_EQ(Sampler(p).exp_sum_temperature(), 0.0f);  // top-k decides by comparisons
  p.top_k = kMaxCandidates;
  EXPECT_EQ(Sampler(p).need(), OutputNeed::kLogits);  // no room for the margin
}

}  // namespace
}  // namespace tern
