// Continuous batching in the Engine: many requests share each forward pass, and each one's
// greedy tokens equal what it gets alone through a Session (batch-invariant kernels); a long
// prefill is chunked between decode steps; cancellation frees a slot; a KV pool too small for
// everyone defers admission and preempts, and still every request's tokens are exact.
#include <gtest/gtest.h>

#include <algorithm>

#include "../common/chat_model_fixture.h"
#include "engine/engine.h"
#include "engine_harness.h"

namespace tern {
namespace {

using testing::Collected;
using testing::EventLog;
using Kind = EngineEvent::Kind;

const char* kAgentSystem =
    "You are a coding agent working in a repository. You can call tools: read_file(path), "
    "write_file(path, text), run_tests(). Think before acting and keep answers short.";
const char* kTutorSystem = "You are a patient maths tutor. Explain each step.";

class BatchingTest : public testing::DefaultChatModel {
 protected:
  // What the prompt gives alone: a fresh Session, no reuse, no speculation.
  GenResult solo(const std::vector<int32_t>& prompt, int max_tokens, const SamplerParams& sampling = {}) {
    Session s(*m_.model, *m_.kv, tok_.get());
    GenerateOptions o;
    o.max_tokens = max_tokens;
    o.sampling = sampling;
    o.reuse_prefix = false;
    auto r = s.generate(prompt, o);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    return r.is_ok() ? std::move(r).value() : GenResult{};
  }
  // A pool of n_blocks for the engine, apart from the one the solo references use.
  std::unique_ptr<KvPool> engine_pool(int n_blocks) {
    KvPoolConfig kc = m_.kv->config();
    kc.n_blocks = n_blocks;
    return std::move(KvPool::create(*m_.backend, kc)).value();
  }
  static std::shared_ptr<Collected> sink(int id) {
    auto c = std::make_shared<Collected>();
    c->id = id;
    return c;
  }

};

struct Case {
  std::vector<int32_t> prompt;
  int max_tokens;
  bool speculate;
};

// Submits every case at once, waits for all, and checks each against its solo run.
void expect_all_equal_solo(const std::vector<Case>& cases, const std::vector<GenResult>& want,
                           const std::vector<std::shared_ptr<Collected>>& got) {
  for (size_t i = 0; i < cases.size(); ++i) {
    const Collected& c = *got[i];
    ASSERT_FALSE(c.events.empty());
    EXPECT_EQ(c.events.front().kind, Kind::kStarted) << "request " << i;
    ASSERT_EQ(c.last().kind, Kind::kFinished) << "request " << i << ": " << c.last().text;
    EXPECT_EQ(c.last().tokens, want[i].tokens) << "request " << i;
    EXPECT_EQ(c.text(), want[i].text) << "request " << i;
    EXPECT_EQ(c.last().stats.stop_reason, want[i].stats.stop_reason) << "request " << i;
  }
}

TEST_F(BatchingTest, ConcurrentGreedyRequestsEqualTheirSoloRuns) {
  const std::vector<Case> cases = {
      {chat(kAgentSystem, "List the files you would read first."), 40, true},
      {chat(kAgentSystem, "The tests fail with KeyError: 'name'. What next?"), 24, false},
      {chat(kTutorSystem, "What is 17 times 23?"), 32, true},
      {chat(kAgentSystem, "Write a shell command that counts lines in every .py file."), 48, true},
      {chat(kTutorSystem, "Why is the sum of two odd numbers even?"), 16, false},
      {chat("Answer in one word.", "Capital of France?"), 8, true},
  };
  std::vector<GenResult> want;
  for (const Case& c : cases) want.push_back(solo(c.prompt, c.max_tokens));

  auto pool = engine_pool(m_.kv->n_blocks());
  // Small prefill chunks, so that prompts prefill across several steps next to decoders.
  Engine engine(*m_.model, *pool, *tok_, EngineOptions{8, 64, 48});
  std::vector<std::shared_ptr<Collected>> got;
  for (size_t i = 0; i < cases.size(); ++i) {
    got.push_back(sink(static_cast<int>(i)));
    ASSERT_TRUE(engine.submit(testing::collect_request(cases[i].prompt, cases[i].max_tokens, got.back(), nullptr,
                                                       cases[i].speculate))
                    .is_ok());
  }
  for (auto& c : got) c->done.get_future().wait();
  expect_all_equal_solo(cases, want, got);

  // The requests really shared forward passes: they took part in more forwards than were run.
  int64_t participations = 0;
  for (auto& c : got) participations += c->last().stats.forwards;
  EXPECT_GT(participations, engine.metrics().steps.load());
  EXPECT_EQ(engine.metrics().requests_finished.load(), static_cast<int64_t>(cases.size()));

  // Requests sharing the agent system prompt reused its blocks, whichever prefilled first.
  const int bt = pool->config().block_tokens;
  const auto& a = cases[0].prompt;
  for (size_t i : {size_t{1}, size_t{3}}) {
    size_t common = 0;
    while (a[common] == cases[i].prompt[common]) ++common;
    const int shared = static_cast<int>(common) / bt * bt;
    const int first = std::min(got[0]->events.front().stats.cached_tokens, got[i]->events.front().stats.cached_tokens);
    const int later = std::max(got[0]->events.front().stats.cached_tokens, got[i]->events.front().stats.cached_tokens);
    EXPECT_EQ(first, 0) << "request " << i;
    EXPECT_GE(later, shared) << "request " << i;
  }
  engine.shutdown(true);
  EXPECT_EQ(pool->n_used_blocks(), 0) << "every request's KV went back to the pool";
}

TEST_F(BatchingTest, LongPrefillIsInterleavedWithDecoding) {
  const auto short_prompt = chat(kTutorSystem, "Count from one to forty in words, separated by commas.");
  std::string doc;
  for (int i = 0; i < 60; ++i) doc += "Line " + std::to_string(i) + ": the quick brown fox jumps over the lazy dog. ";
  const auto long_prompt = chat(kAgentSystem, "Summarise this file:\n" + doc);
  constexpr int kChunk = 128;
  ASSERT_GT(static_cast<int>(long_prompt.size()), 6 * kChunk);
  const GenResult want_short = solo(short_prompt, 80), want_long = solo(long_prompt, 8);
  ASSERT_GE(want_short.stats.generated_tokens, 40) << "the decoder must outlast the long prefill";

  auto pool = engine_pool(m_.kv->n_blocks());
  Engine engine(*m_.model, *pool, *tok_, EngineOptions{8, 64, kChunk});
  auto log = std::make_shared<EventLog>();
  auto a = sink(0), b = sink(1);
  std::promise<void> decoding;
  a->hook = [&decoding](Collected& c, const EngineEvent& e) {
    if (e.kind == Kind::kText && c.count(Kind::kText) == 1) decoding.set_value();
  };
  ASSERT_TRUE(engine.submit(testing::collect_request(short_prompt, 80, a, log, false)).is_ok());
  decoding.get_future().wait();  // the short request is decoding
  ASSERT_TRUE(engine.submit(testing::collect_request(long_prompt, 8, b, log, false)).is_ok());
  a->done.get_future().wait();
  b->done.get_future().wait();

  EXPECT_EQ(a->last().tokens, want_short.tokens);
  EXPECT_EQ(b->last().tokens, want_long.tokens);
  // The long prompt took one chunk per step...
  const int n_chunks = (static_cast<int>(long_prompt.size()) + kChunk - 1) / kChunk;
  EXPECT_EQ(b->count(Kind::kPrefillProgress), n_chunks);
  // ...and the decoder produced text between its first and its last chunk.
  std::vector<int> progress_at;
  int texts_between = 0, texts_seen = 0;
  for (size_t i = 0; i < log->order.size(); ++i) {
    if (log->order[i] == std::make_pair(1, Kind::kPrefillProgress)) progress_at.push_back(static_cast<int>(i));
  }
  ASSERT_EQ(static_cast<int>(progress_at.size()), n_chunks);
  for (int i = progress_at.front(); i < progress_at.back(); ++i) {
    if (log->order[i] == std::make_pair(0, Kind::kText)) ++texts_between;
  }
  for (const auto& [id, kind] : log->order) texts_seen += id == 0 && kind == Kind::kText;
  EXPECT_GE(texts_between, n_chunks - 2) << "of " << texts_seen << " text events";
}

TEST_F(BatchingTest, CancelMidBatchFreesTheSlot) {
  const auto p_long = chat(kTutorSystem, "Count from one to forty in words, separated by commas.");
  const auto p_cancel = chat(kAgentSystem, "Describe, step by step, how you would fix a failing test.");
  const auto p_third = chat("Answer briefly.", "Name three prime numbers.");
  const GenResult want_long = solo(p_long, 64), want_cancel = solo(p_cancel, 64), want_third = solo(p_third, 12);
  ASSERT_EQ(want_long.stats.generated_tokens, 64) << "the first request must outlast the others";

  auto pool = engine_pool(m_.kv->n_blocks());
  // Two slots: the third request can only start once the cancelled one has left.
  Engine engine(*m_.model, *pool, *tok_, EngineOptions{2, 64, 512});
  auto log = std::make_shared<EventLog>();
  auto a = sink(0), b = sink(1), c = sink(2);
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  b->hook = [cancel](Collected& self, const EngineEvent& e) {
    if (e.kind == Kind::kText && self.count(Kind::kText) == 4) cancel->store(true);
  };
  // No speculation here: the first request must not race through its tokens in a few steps.
  EngineRequest rb = testing::collect_request(p_cancel, 64, b, log, false);
  rb.cancel = cancel;
  ASSERT_TRUE(engine.submit(testing::collect_request(p_long, 64, a, log, false)).is_ok());
  ASSERT_TRUE(engine.submit(std::move(rb)).is_ok());
  ASSERT_TRUE(engine.submit(testing::collect_request(p_third, 12, c, log, false)).is_ok());
  for (auto* s : {a.get(), b.get(), c.get()}) s->done.get_future().wait();

  EXPECT_EQ(a->last().tokens, want_long.tokens);
  EXPECT_EQ(c->last().tokens, want_third.tokens);
  ASSERT_EQ(b->last().kind, Kind::kFinished);
  EXPECT_EQ(b->last().stats.stop_reason, StopReason::kCancelled);
  const auto& cut = b->last().tokens;
  ASSERT_LT(cut.size(), want_cancel.tokens.size());
  EXPECT_TRUE(std::equal(cut.begin(), cut.end(), want_cancel.tokens.begin())) << "the tokens before the cancel are exact";
  // The third started after the cancelled one finished, while the first was still decoding.
  auto at = [&](int id, Kind kind) {
    return std::find(log->order.begin(), log->order.end(), std::make_pair(id, kind)) - log->order.begin();
  };
  EXPECT_GT(at(2, Kind::kStarted), at(1, Kind::kFinished));
  EXPECT_LT(at(2, Kind::kStarted), at(0, Kind::kFinished));
  EXPECT_EQ(engine.metrics().requests_cancelled.load(), 1);
  engine.shutdown(true);
  EXPECT_EQ(engine.metrics().running.load(), 0);
  EXPECT_EQ(pool->n_used_blocks(), 0);
}

TEST_F(BatchingTest, SmallKvPoolDefersAdmissionAndStaysExact) {
  // Four requests need about 4 x 4 blocks for their prompts and 7 each at their longest; the
  // pool has 12, so they cannot all run at once.
  const std::vector<Case> cases = {
      {chat(kAgentSystem, "List the files you would read first."), 48, true},
      {chat(kTutorSystem, "What is 17 times 23?"), 48, false},
      {chat(kAgentSystem, "Write a shell command that counts lines in every .py file."), 48, true},
      {chat(kTutorSystem, "Count from one to twenty in words."), 48, false},
  };
  std::vector<GenResult> want;
  for (const Case& c : cases) want.push_back(solo(c.prompt, c.max_tokens));
  auto pool = engine_pool(12);
  Engine engine(*m_.model, *pool, *tok_, EngineOptions{8, 64, 64});
  int max_running = 0;
  std::vector<std::shared_ptr<Collected>> got;
  for (size_t i = 0; i < cases.size(); ++i) {
    got.push_back(sink(static_cast<int>(i)));
    got.back()->hook = [&engine, &max_running](Collected&, const EngineEvent&) {
      max_running = std::max(max_running, engine.metrics().running.load());  // engine thread only
    };
    ASSERT_TRUE(engine.submit(testing::collect_request(cases[i].prompt, cases[i].max_tokens, got.back(), nullptr,
                                                       cases[i].speculate))
                    .is_ok());
  }
  for (auto& c : got) c->done.get_future().wait();
  expect_all_equal_solo(cases, want, got);
  EXPECT_TRUE(max_running < 4 || engine.metrics().requests_preempted.load() > 0)
      << "the pool was never short: max running " << max_running;
  engine.shutdown(true);
  EXPECT_EQ(pool->n_used_blocks(), 0);
}

TEST_F(BatchingTest, PreemptedRequestsResumeExactly) {
  // Two long generations whose prompts fit the pool together but whose outputs do not: one is
  // preempted (KV released) and later resumes where it was.
  const auto p1 = chat(kTutorSystem, "Count from one to forty in words, separated by commas.");
  const auto p2 = chat(kAgentSystem, "Count from one to forty in words, separated by commas.");
  const int n = 120;
  const GenResult w1 = solo(p1, n), w2 = solo(p2, n);
  ASSERT_EQ(w1.stats.generated_tokens, n);
  ASSERT_EQ(w2.stats.generated_tokens, n);
  const int bt = m_.kv->config().block_tokens;
  const int fits_one = (static_cast<int>(std::max(p1.size(), p2.size())) + n + bt - 1) / bt;
  auto pool = engine_pool(fits_one + 4);  // both prompts fit, both outputs do not
  Engine engine(*m_.model, *pool, *tok_, EngineOptions{8, 64, 512});
  auto a = sink(0), b = sink(1);
  ASSERT_TRUE(engine.submit(testing::collect_request(p1, n, a, nullptr, true)).is_ok());
  ASSERT_TRUE(engine.submit(testing::collect_request(p2, n, b, nullptr, false)).is_ok());
  a->done.get_future().wait();
  b->done.get_future().wait();
  ASSERT_EQ(a->last().kind, Kind::kFinished) << a->last().text;
  ASSERT_EQ(b->last().kind, Kind::kFinished) << b->last().text;
  EXPECT_EQ(a->last().tokens, w1.tokens);
  EXPECT_EQ(b->last().tokens, w2.tokens);
  EXPECT_EQ(a->text(), w1.text);
  EXPECT_EQ(b->text(), w2.text);
  EXPECT_GE(engine.metrics().requests_preempted.load(), 1);
  EXPECT_EQ(b->count(Kind::kStarted), 1);
  engine.shutdown(true);
  EXPECT_EQ(pool->n_used_blocks(), 0);
}

// Seeded sampling gives the same tokens batched, with speculation on or off: each draw's uniform
// depends only on (seed, position), and point-mass drafts are verified by the coupled rule
// (spec/verify.h), so neither the cost model's timing nor the other requests of a step matter.
TEST_F(BatchingTest, SeededSampledRequestsEqualTheirSoloRunsWithSpeculation) {
  const char* kQuote =
      "Here is a file:\n```python\ndef area(width, height):\n    return width * height\n\n"
      "def perimeter(width, height):\n    return 2 * (width + height)\n```\n"
      "Repeat the file exactly, inside a python code block.";
  struct SampledCase {
    Case c;
    SamplerParams sampling;
  };
  auto params = [](uint64_t seed, float t, int k, float p) {
    SamplerParams s;
    s.seed = seed;
    s.temperature = t;
    s.top_k = k;
    s.top_p = p;
    return s;
  };
  const std::vector<SampledCase> cases = {
      // Low temperatures on the quoting prompt: the sample mostly quotes, so drafts get accepted
      // (and sometimes rejected) whatever widths the cost model picks.
      {{chat(kAgentSystem, kQuote), 48, true}, params(1, 0.4f, 0, 1.0f)},
      {{chat(kAgentSystem, kQuote), 48, false}, params(1, 0.4f, 0, 1.0f)},
      {{chat(kTutorSystem, kQuote), 48, true}, params(2, 0.6f, 40, 1.0f)},
      {{chat(kAgentSystem, kQuote), 48, true}, params(3, 0.5f, 0, 0.9f)},
      // Flatter ones: drafts whose target probability is far from 0 and 1, where a verifier that
      // is only distribution-exact (rejection sampling) would pick other tokens.
      {{chat(kAgentSystem, kQuote), 48, true}, params(5, 1.0f, 0, 1.0f)},
      {{chat(kTutorSystem, kQuote), 48, true}, params(6, 1.2f, 0, 1.0f)},
      {{chat(kAgentSystem, kQuote), 48, true}, params(7, 0.9f, 0, 0.95f)},
      {{chat(kAgentSystem, "List the files you would read first."), 24, true}, params(4, 1.2f, 20, 0.95f)},
      {{chat(kTutorSystem, "What is 17 times 23?"), 24, true}, SamplerParams{}},  // greedy next to them
  };
  std::vector<Case> plain_cases;
  std::vector<GenResult> want;
  for (const SampledCase& c : cases) {
    plain_cases.push_back(c.c);
    want.push_back(solo(c.c.prompt, c.c.max_tokens, c.sampling));
  }
  EXPECT_EQ(want[0].tokens, want[1].tokens);  // the same request twice, solo
  auto pool = engine_pool(m_.kv->n_blocks());
  Engine engine(*m_.model, *pool, *tok_, EngineOptions{16, 64, 48});
  std::vector<std::shared_ptr<Collected>> got;
  for (size_t i = 0; i < cases.size(); ++i) {
    got.push_back(sink(static_cast<int>(i)));
    EngineRequest r = testing::collect_request(cases[i].c.prompt, cases[i].c.max_tokens, got.back(), nullptr,
                                               cases[i].c.speculate);
    r.params.sampling = cases[i].sampling;
    ASSERT_TRUE(engine.submit(std::move(r)).is_ok());
  }
  for (auto& c : got) c->done.get_future().wait();
  expect_all_equal_solo(plain_cases, want, got);
  int proposed = 0, accepted = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (cases[i].sampling.temperature <= 0.0f) continue;
    proposed += got[i]->last().stats.drafts_proposed;
    accepted += got[i]->last().stats.drafts_accepted;
  }
  std::printf("  sampled requests: drafts %d/%d accepted\n", accepted, proposed);
  EXPECT_GT(proposed, 0) << "the sampled requests must have speculated for the test to mean anything";
  EXPECT_GT(accepted, 0);
  engine.shutdown(true);
}

}  // namespace
}  // namespace tern
