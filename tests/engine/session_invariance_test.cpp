// Greedy output and logits must be bitwise identical whether a prompt is prefilled in one chunk
// or many, whether KV from an earlier call is reused, and with 1 or 2 threads (default model).
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "../common/model_fixture.h"
#include "core/argmax.h"
#include "engine/session.h"

namespace tern {
namespace {

std::vector<int32_t> prompt_ids(int n, int32_t seed) {
  // Deterministic ids spread over the vocabulary (no tokenizer needed).
  std::vector<int32_t> ids(n);
  uint32_t x = static_cast<uint32_t>(seed) * 2654435761u + 1;
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    ids[i] = static_cast<int32_t>((x >> 8) % 20000) + 100;
  }
  return ids;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class SessionInvariance : public ::testing::Test {
 protected:
  void SetUp() override {
    m_ = testing::load_test_model(testing::default_model_path());
    ASSERT_NE(m_.model, nullptr);
  }
  testing::LoadedTestModel m_;
};

TEST_F(SessionInvariance, ChunkedPrefillIsBitIdentical) {
  const auto prompt = prompt_ids(300, 1);  // spans two attention chunks of 256
  GenerateOptions whole;
  whole.prefill_chunk_tokens = 512;
  GenerateOptions chunked;
  chunked.prefill_chunk_tokens = 7;
  Session a(*m_.model, *m_.kv);
  auto la = a.prefill(prompt, whole);
  ASSERT_TRUE(la.is_ok()) << la.status().message();
  Session b(*m_.model, *m_.kv);
  auto lb = b.prefill(prompt, chunked);
  ASSERT_TRUE(lb.is_ok()) << lb.status().message();
  EXPECT_TRUE(bitwise_equal(la.value(), lb.value()));

  whole.max_tokens = chunked.max_tokens = 24;
  auto ga = a.generate(prompt, whole);
  auto gb = b.generate(prompt, chunked);
  ASSERT_TRUE(ga.is_ok() && gb.is_ok());
  EXPECT_EQ(ga.value().tokens, gb.value().tokens);
  EXPECT_EQ(ga.value().tokens.size(), 24u);
}

TEST_F(SessionInvariance, ReusedPrefixIsBitIdentical) {
  auto turn1 = prompt_ids(120, 2);
  GenerateOptions o;
  o.max_tokens = 16;
  o.prefill_chunk_tokens = 64;
  Session warm(*m_.model, *m_.kv);
  auto g1 = warm.generate(turn1, o);
  ASSERT_TRUE(g1.is_ok());
  const std::vector<int32_t> out1 = g1.value().tokens;
  // Turn 2 = turn 1 + its answer + new user tokens: the warm session reuses its KV.
  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), out1.begin(), out1.end());
  const auto extra = prompt_ids(40, 3);
  turn2.insert(turn2.end(), extra.begin(), extra.end());

  auto warm_gen = warm.generate(turn2, o);
  ASSERT_TRUE(warm_gen.is_ok());
  EXPECT_GE(warm_gen.value().stats.cached_tokens, static_cast<int>(turn1.size() + out1.size() - 1));

  Session cold(*m_.model, *m_.kv);
  GenerateOptions fresh = o;
  fresh.reuse_prefix = false;
  auto cold_gen = cold.generate(turn2, fresh);
  ASSERT_TRUE(cold_gen.is_ok());
  EXPECT_EQ(cold_gen.value().stats.cached_tokens, 0);
  EXPECT_EQ(warm_gen.value().tokens, cold_gen.value().tokens);

  // Divergence: a prompt that shares only part of the held tokens trims and still matches.
  std::vector<int32_t> branch(turn2.begin(), turn2.begin() + 50);
  const auto tail = prompt_ids(10, 4);
  branch.insert(branch.end(), tail.begin(), tail.end());
  auto lw = warm.prefill(branch, o);
  Session cold2(*m_.model, *m_.kv);
  auto lc = cold2.prefill(branch, o);
  ASSERT_TRUE(lw.is_ok() && lc.is_ok());
  EXPECT_TRUE(bitwise_equal(lw.value(), lc.value()));
}

// Greedy decoding moves only each row's argmax to the host (Model::Outputs). Its picks must be the
// argmax of the logits a full forward returns, and a session left holding only an argmax must
// recompute the last logits for a request that samples from them.
TEST_F(SessionInvariance, GreedyWithoutLogitsPicksTheirArgmax) {
  const auto prompt = prompt_ids(40, 7);
  GenerateOptions o;
  o.max_tokens = 8;
  Session full(*m_.model, *m_.kv);
  auto logits = full.prefill(prompt, o);  // prefill-only: the logits cross to the host
  ASSERT_TRUE(logits.is_ok()) << logits.status().message();
  Session greedy(*m_.model, *m_.kv);
  auto g = greedy.generate(prompt, o);
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  ASSERT_FALSE(g.value().tokens.empty());
  EXPECT_EQ(g.value().tokens.front(), first_argmax(logits.value().data(), logits.value().size()));

  // Exactly the held tokens again: greedy reuses the held argmax, sampling recomputes the logits;
  // both match a fresh session.
  const std::vector<int32_t> held = greedy.tokens();
  GenerateOptions warm = o;
  warm.sampling.temperature = 0.8f;
  warm.sampling.seed = 42;
  for (const GenerateOptions& opt : {o, warm}) {
    Session reuse(*m_.model, *m_.kv);
    ASSERT_TRUE(reuse.generate(held, o).is_ok());  // leaves an argmax-only last result
    const std::vector<int32_t> now = reuse.tokens();
    auto again = reuse.generate(now, opt);
    Session fresh(*m_.model, *m_.kv);
    auto ref = fresh.generate(now, opt);
    ASSERT_TRUE(again.is_ok() && ref.is_ok());
    EXPECT_EQ(again.value().tokens, ref.value().tokens) << "temperature " << opt.sampling.temperature;
  }
}

TEST(SessionThreads, OneAndTwoThreadsAreBitIdentical) {
  auto one = testing::load_test_model(testing::default_model_path(), 1);
  auto two = testing::load_test_model(testing::default_model_path(), 2);
  ASSERT_NE(one.model, nullptr);
  ASSERT_NE(two.model, nullptr);
  const auto prompt = prompt_ids(64, 5);
  GenerateOptions o;
  Session a(*one.model, *one.kv), b(*two.model, *two.kv);
  auto la = a.prefill(prompt, o), lb = b.prefill(prompt, o);
  ASSERT_TRUE(la.is_ok() && lb.is_ok());
  EXPECT_TRUE(bitwise_equal(la.value(), lb.value()));
}

TEST_F(SessionInvariance, ContextOverflowIsAClearError) {
  const auto prompt = prompt_ids(m_.model->n_ctx() + 5, 6);
  Session s(*m_.model, *m_.kv);
  GenerateOptions o;
  auto r = s.prefill(prompt, o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("exceed the context"), std::string::npos) << r.status().message();
}

TEST_F(SessionInvariance, BadTokenIdIsAnError) {
  Session s(*m_.model, *m_.kv);
  GenerateOptions o;
  const std::vector<int32_t> prompt = {1, 2, m_.model->config().n_vocab};
  auto r = s.prefill(prompt, o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("outside the vocabulary"), std::string::npos);
}

TEST_F(SessionInvariance, CancelStopsPrefill) {
  std::atomic<bool> cancel{true};
  GenerateOptions o;
  o.cancel = &cancel;
  Session s(*m_.model, *m_.kv);
  auto r = s.prefill(prompt_ids(32, 7), o);
  EXPECT_FALSE(r.is_ok());
}

}  // namespace
}  // namespace tern
