// Seeded sampling is token-identical with speculation on and off (spec/verify.h, the coupled rule
// for point-mass drafts), and the coupled rule and rejection sampling keep the target's output
// distribution. Unit tests of verify_draft on synthetic rows, then the n-gram and suffix drafters
// through Session on the default model (the Engine's case is in batching_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../common/chat_model_fixture.h"
#include "engine/session.h"
#include "spec/ngram_drafter.h"
#include "spec/suffix_drafter.h"
#include "spec/verify.h"
#include "tokenizer/tokenizer.h"

namespace tern {
namespace {

constexpr int kVocab = 12;

// k + 1 synthetic logit rows, fixed for a test (the target's rows after [pending] + draft).
std::vector<std::vector<float>> make_rows(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.5f);
  std::vector<std::vector<float>> rows(n, std::vector<float>(kVocab));
  for (auto& r : rows)
    for (float& v : r) v = g(rng);
  return rows;
}

std::function<LogitRow(int)> rows_fn(const std::vector<std::vector<float>>& rows) {
  return [&rows](int i) { return LogitRow(rows[static_cast<size_t>(i)], -1); };
}

// Plain decoding over the rows: the token at history.size() + i for every i.
std::vector<int32_t> plain_tokens(Sampler& s, const std::vector<std::vector<float>>& rows,
                                  std::vector<int32_t> history) {
  std::vector<int32_t> out;
  for (const auto& r : rows) {
    out.push_back(s.sample(r, history));
    history.push_back(out.back());
  }
  return out;
}

// For every seed and every draft that agrees with plain decoding on a prefix of length j and then
// differs: j tokens accepted, and the next token is plain decoding's. A draft agreeing everywhere
// is fully accepted with plain decoding's bonus token.
TEST(CoupledVerify, EmitsExactlyThePlainTokens) {
  const int k = 5;
  const auto rows = make_rows(k + 1, 7);
  for (const float t : {0.6f, 1.0f, 1.7f}) {
    for (uint64_t seed = 0; seed < 200; ++seed) {
      SamplerParams p;
      p.temperature = t;
      p.top_k = seed % 3 == 0 ? 6 : 0;
      p.top_p = seed % 4 == 1 ? 0.9f : 1.0f;
      p.seed = seed;
      Sampler s(p);
      std::vector<int32_t> history = {1, 2, 3, 4};
      const std::vector<int32_t> plain = plain_tokens(s, rows, history);
      for (int j = 0; j <= k; ++j) {
        Draft d;
        d.tokens.assign(plain.begin(), plain.begin() + j);
        if (j < k) d.tokens.push_back((plain[j] + 1 + static_cast<int32_t>(seed % 5)) % kVocab);
        ASSERT_TRUE(coupled_verify(d, s));
        const VerifyOutcome v = verify_draft(d, rows_fn(rows), s, history);
        ASSERT_EQ(v.n_accepted, j) << "seed " << seed << " T " << t;
        ASSERT_EQ(v.next, plain[j]) << "seed " << seed << " T " << t;
        ASSERT_EQ(history.size(), 4u);
      }
    }
  }
}

double chi2_critical(int df) {  // Wilson-Hilferty, p = 0.001
  const double z = 3.09, a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

double chi_square(const std::vector<double>& p, const std::vector<int>& counts, int n, int* df) {
  double chi2 = 0;
  int cells = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * n;
    if (e < 5) continue;  // rows here give every token e >= 5 at the sizes used
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
    ++cells;
  }
  *df = cells - 1;
  return chi2;
}

// The target's distribution of row r (no truncation), from the sampler itself.
std::vector<double> target_probs(const std::vector<float>& row, float t) {
  SamplerParams p;
  p.temperature = t;
  Sampler s(p);
  const Candidates c = s.distribution(row, {});
  std::vector<double> out(kVocab, 0.0);
  for (size_t i = 0; i < c.size(); ++i) out[c.ids[i]] = c.logits[i];
  return out;
}

// The first emitted token (the draft token when accepted, else the verifier's) follows the
// target's distribution over seeds, for a point-mass draft (coupled) and for a draft with a
// distribution q != p (rejection sampling); the acceptance rates are p(d) and sum min(p, q).
TEST(SeededVerify, FirstTokenFollowsTheTargetDistribution) {
  const float t = 1.3f;
  std::vector<std::vector<float>> rows = make_rows(2, 11);
  for (float& v : rows[0]) v *= 0.3f;  // flat enough that every cell has mass
  const std::vector<double> p = target_probs(rows[0], t);
  const int32_t likely = static_cast<int32_t>(std::max_element(p.begin(), p.end()) - p.begin());
  // q: a different distribution over the vocabulary, heavy on a token the target finds unlikely.
  Candidates q;
  for (int i = 0; i < kVocab; ++i) {
    q.ids.push_back(i);
    q.logits.push_back(1.0f / (kVocab + 4));
  }
  const int32_t unlikely = static_cast<int32_t>(std::min_element(p.begin(), p.end()) - p.begin());
  q.logits[unlikely] += 4.0f / (kVocab + 4);
  const int n = 40000;
  for (const bool point_mass : {true, false}) {
    std::vector<int> counts(kVocab, 0);
    int accepted = 0;
    for (int i = 0; i < n; ++i) {
      SamplerParams sp;
      sp.temperature = t;
      sp.seed = 5000 + static_cast<uint64_t>(i);
      Sampler s(sp);
      std::vector<int32_t> history = {9, 9, 9};
      Draft d;
      if (point_mass) {
        d.tokens = {likely};
      } else {
        // The draft token drawn from q with a uniform independent of the verifier's streams.
        d.tokens = {Sampler::draw_at(q, Sampler::uniform_at(sp.seed ^ 0x5DEECE66Dull, history.size(), Sampler::Stream::kDraw))};
        d.probs = {q};
      }
      ASSERT_EQ(coupled_verify(d, s), point_mass);
      const VerifyOutcome v = verify_draft(d, rows_fn(rows), s, history);
      accepted += v.n_accepted;
      ++counts[v.n_accepted == 1 ? d.tokens[0] : v.next];
    }
    int df = 0;
    const double chi2 = chi_square(p, counts, n, &df);
    EXPECT_LT(chi2, chi2_critical(df)) << (point_mass ? "coupled" : "rejection") << ": chi2 " << chi2 << " df " << df;
    double want_accept = 0;
    if (point_mass) {
      want_accept = p[likely];
    } else {
      for (int i = 0; i < kVocab; ++i) want_accept += std::min(p[i], static_cast<double>(q.logits[i]));
    }
    const double sd = std::sqrt(want_accept * (1 - want_accept) / n);
    EXPECT_NEAR(static_cast<double>(accepted) / n, want_accept, 5 * sd) << (point_mass ? "coupled" : "rejection");
  }
}

using SeededSpeculation = testing::DefaultChatModel;

// Sampled output with a fixed seed is the same with the n-gram and suffix drafters as without,
// for several seeds, temperatures, top-k and top-p, and prefill chunk sizes.
TEST_F(SeededSpeculation, SampledTokensAreIdenticalWithNgramAndSuffixDrafters) {
  const auto prompt = chat(
      "Here is a file:\n```python\ndef area(width, height):\n    return width * height\n\n"
      "def perimeter(width, height):\n    return 2 * (width + height)\n```\n"
      "Repeat the file exactly, inside a python code block.");
  struct Config {
    uint64_t seed;
    float temperature;
    int top_k;
    float top_p;
    int chunk;
  };
  const std::vector<Config> configs = {
      {1, 0.7f, 0, 1.0f, 512}, {2, 1.0f, 0, 1.0f, 7}, {3, 0.8f, 40, 1.0f, 64},
      {4, 1.0f, 0, 0.9f, 512}, {5, 1.3f, 50, 0.95f, 64},
  };
  int proposed = 0, accepted = 0, rejected_steps = 0;
  for (const Config& c : configs) {
    GenerateOptions base;
    base.max_tokens = 40;
    base.reuse_prefix = false;
    base.prefill_chunk_tokens = c.chunk;
    base.sampling.seed = c.seed;
    base.sampling.temperature = c.temperature;
    base.sampling.top_k = c.top_k;
    base.sampling.top_p = c.top_p;
    Session plain(*m_.model, *m_.kv, tok_.get());
    auto ref = plain.generate(prompt, base);
    ASSERT_TRUE(ref.is_ok()) << ref.status().message();
    auto corpus = std::make_shared<SuffixCorpus>();
    {
      // An earlier, differently seeded answer: the suffix drafter proposes text that is often,
      // not always, what this seed samples.
      GenerateOptions other = base;
      other.sampling.seed = c.seed + 100;
      Session s(*m_.model, *m_.kv, tok_.get());
      auto earlier = s.generate(prompt, other);
      ASSERT_TRUE(earlier.is_ok());
      std::vector<int32_t> text = prompt;
      text.insert(text.end(), earlier.value().tokens.begin(), earlier.value().tokens.end());
      corpus->add(text);
    }
    for (const std::string name : {"ngram", "suffix"}) {
      NgramDrafter ngram;
      SuffixDrafter suffix(corpus);
      GenerateOptions o = base;
      o.drafter = name == "ngram" ? static_cast<DraftSource*>(&ngram) : static_cast<DraftSource*>(&suffix);
      Session s(*m_.model, *m_.kv, tok_.get());
      auto r = s.generate(prompt, o);
      ASSERT_TRUE(r.is_ok()) << r.status().message();
      EXPECT_EQ(r.value().tokens, ref.value().tokens) << name << " seed " << c.seed << " T " << c.temperature;
      EXPECT_EQ(r.value().text, ref.value().text) << name << " seed " << c.seed;
      proposed += r.value().stats.drafts_proposed;
      accepted += r.value().stats.drafts_accepted;
      rejected_steps += r.value().stats.drafts_accepted < r.value().stats.drafts_proposed;
    }
  }
  // The test means something only if drafts were proposed, accepted and rejected.
  EXPECT_GT(proposed, 0);
  EXPECT_GT(accepted, 0);
  EXPECT_GT(rejected_steps, 0);
  std::printf("  drafts %d/%d accepted\n", accepted, proposed);
}

}  // namespace
}  // namespace tern
