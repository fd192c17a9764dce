// Sampling from the step's candidates (GenerateOptions::device_candidates, StepRunner) gives the
// same tokens as sampling from the whole logits, for a Session and for requests batched in the
// Engine next to greedy ones, with speculation on and off (default model: a 49152-token
// vocabulary).
#include <gtest/gtest.h>

#include "../common/chat_model_fixture.h"
#include "engine/engine.h"
#include "engine/session.h"
#include "engine_harness.h"
#include "spec/ngram_drafter.h"

namespace tern {
namespace {

class CandidateSteps : public testing::DefaultChatModel {
 protected:
  GenResult solo(const std::vector<int32_t>& prompt, const SamplerParams& sampling, int max_tokens, bool candidates,
                 bool speculate = false) {
    Session s(*m_.model, *m_.kv, tok_.get());
    NgramDrafter drafter;
    GenerateOptions o;
    o.max_tokens = max_tokens;
    o.reuse_prefix = false;
    o.sampling = sampling;
    o.device_candidates = candidates;
    if (speculate) o.drafter = &drafter;
    auto r = s.generate(prompt, o);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    return r.is_ok() ? std::move(r).value() : GenResult{};
  }

};

std::vector<SamplerParams> samplers() {
  std::vector<SamplerParams> v;
  auto add = [&](float t, int k, float p, float min_p, uint64_t seed) {
    SamplerParams s;
    s.temperature = t;
    s.top_k = k;
    s.top_p = p;
    s.min_p = min_p;
    s.seed = seed;
    v.push_back(s);
  };
  add(1.0f, 0, 1.0f, 0.0f, 1);      // the server's default: plain temperature
  add(0.8f, 40, 1.0f, 0.0f, 2);
  add(0.7f, 0, 0.9f, 0.0f, 3);
  add(1.0f, 0, 1.0f, 0.1f, 4);
  add(0.9f, 50, 0.95f, 0.05f, 5);
  add(1.5f, 0, 0.97f, 0.0f, 6);
  return v;
}

TEST_F(CandidateSteps, SessionTokensEqualTheWholeLogitsPath) {
  const auto prompt = chat("Write a short poem about the sea.");
  int picks = 0, fallbacks = 0;
  for (const SamplerParams& p : samplers()) {
    const GenResult whole = solo(prompt, p, 32, false);
    const GenResult cand = solo(prompt, p, 32, true);
    EXPECT_EQ(cand.tokens, whole.tokens) << "T " << p.temperature << " k " << p.top_k << " p " << p.top_p;
    EXPECT_EQ(cand.text, whole.text);
    EXPECT_EQ(whole.stats.candidate_picks + whole.stats.candidate_fallbacks, 0);
    picks += cand.stats.candidate_picks;
    fallbacks += cand.stats.candidate_fallbacks;
    std::printf("  T %.2f top_k %d top_p %.2f min_p %.2f: %d picks, %d fallbacks\n", p.temperature, p.top_k, p.top_p,
                p.min_p, cand.stats.candidate_picks, cand.stats.candidate_fallbacks);
  }
  std::printf("session: %d picks from candidates, %d fallbacks\n", picks, fallbacks);
  EXPECT_GT(picks, 4 * fallbacks);
}

// Speculative sampling verifies drafts against whole distributions: from the candidates when a
// stage truncated inside them, from fetched rows otherwise (plain temperature asks for logits).
TEST_F(CandidateSteps, SpeculativeSamplingEqualsTheWholeLogitsPath) {
  const auto prompt = chat("Repeat after me: the cat sat on the mat, the cat sat on the mat, the cat sat on the mat.");
  int picks = 0;
  for (const SamplerParams& p : samplers()) {
    const GenResult whole = solo(prompt, p, 32, false, true);
    const GenResult cand = solo(prompt, p, 32, true, true);
    EXPECT_EQ(cand.tokens, whole.tokens) << "T " << p.temperature << " k " << p.top_k << " p " << p.top_p;
    picks += cand.stats.candidate_picks;
    EXPECT_GT(whole.stats.drafts_proposed, 0);
  }
  EXPECT_GT(picks, 0);
}

// Requests of every kind share steps (the richest need wins: argmax < candidates < logits);
// each one's tokens are its solo whole-logits run's.
TEST_F(CandidateSteps, BatchedRequestsEqualTheirSoloWholeLogitsRuns) {
  struct Case {
    std::vector<int32_t> prompt;
    SamplerParams sampling;
    bool speculate;
  };
  std::vector<Case> cases;
  const std::vector<SamplerParams> s = samplers();
  const char* users[] = {"Count from one to twenty.", "Name three colours.", "What is the capital of Spain?",
                         "Tell me a joke.", "Describe a cat.", "List four fruits."};
  // Sampled requests do not speculate: whether the engine drafts in a step depends on what else
  // runs in it (plan_decode's allow_draft), and drafting changes how a sampler draws.
  for (size_t i = 0; i < s.size(); ++i) cases.push_back({chat(users[i]), s[i], false});
  cases.push_back({chat("Count from one to twenty."), SamplerParams{}, true});  // greedy
  SamplerParams penalised = s[1];
  penalised.repeat_penalty = 1.2f;
  cases.push_back({chat("Name three colours."), penalised, false});  // needs the logits

  KvPoolConfig kc = m_.kv->config();
  auto pool = std::move(KvPool::create(*m_.backend, kc)).value();
  Engine engine(*m_.model, *pool, *tok_, EngineOptions{8, 64, 64});
  std::vector<std::shared_ptr<testing::Collected>> got;
  for (size_t i = 0; i < cases.size(); ++i) {
    got.push_back(std::make_shared<testing::Collected>());
    got.back()->id = static_cast<int>(i);
    EngineRequest r = testing::collect_request(cases[i].prompt, 24, got.back(), nullptr, cases[i].speculate);
    r.params.sampling = cases[i].sampling;
    ASSERT_TRUE(engine.submit(std::move(r)).is_ok());
  }
  for (auto& c : got) c->done.get_future().wait();
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_EQ(got[i]->last().kind, EngineEvent::Kind::kFinished) << i;
    Session solo_session(*m_.model, *m_.kv, tok_.get());
    GenerateOptions o;
    o.max_tokens = 24;
    o.reuse_prefix = false;
    o.sampling = cases[i].sampling;
    o.device_candidates = false;
    auto want = solo_session.generate(cases[i].prompt, o);
    ASSERT_TRUE(want.is_ok());
    EXPECT_EQ(got[i]->last().tokens, want.value().tokens) << "request " << i;
  }
  engine.shutdown(true);
}

}  // namespace
}  // namespace tern
