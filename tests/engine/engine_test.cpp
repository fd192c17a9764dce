// The Engine thread: events in order, results equal to a Session's, shared prefixes across
// requests, queue bound, cancellation and shutdown.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>

#include "../common/chat_model_fixture.h"
#include "engine_harness.h"

namespace tern {
namespace {

using testing::Collected;

EngineRequest make_request(std::vector<int32_t> prompt, int max_tokens, std::shared_ptr<Collected> sink) {
  return testing::collect_request(std::move(prompt), max_tokens, std::move(sink));
}

using EngineTest = testing::DefaultChatModel;

TEST_F(EngineTest, ServesRequestsWithEventsAndSharedPrefixes) {
  const std::string system = "You are a coding agent. You may call tools: read_file, write_file, run_tests. Be brief.";
  const auto p1 = chat(system, "What does ls do?"), p2 = chat(system, "What does cat do?");
  // The reference: a plain Session on a separate pool.
  KvPoolConfig kc = m_.kv->config();
  auto ref_pool = std::move(KvPool::create(*m_.backend, kc)).value();
  Session ref(*m_.model, *ref_pool, tok_.get());
  GenerateOptions o;
  o.max_tokens = 12;
  o.reuse_prefix = false;
  auto want2 = ref.generate(p2, o);
  ASSERT_TRUE(want2.is_ok());

  Engine engine(*m_.model, *m_.kv, *tok_);
  auto c1 = std::make_shared<Collected>(), c2 = std::make_shared<Collected>();
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(engine.submit(make_request(p1, 12, c1)).is_ok());
  ASSERT_TRUE(engine.submit(make_request(p2, 12, c2)).is_ok());
  c1->done.get_future().wait();
  c2->done.get_future().wait();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  for (auto* c : {c1.get(), c2.get()}) {
    ASSERT_GE(c->events.size(), 2u);
    EXPECT_EQ(c->events.front().kind, EngineEvent::Kind::kStarted);
    EXPECT_EQ(c->events.back().kind, EngineEvent::Kind::kFinished);
  }
  const EngineEvent& fin2 = c2->events.back();
  EXPECT_EQ(fin2.tokens, want2.value().tokens);
  std::string text;
  for (const auto& e : c2->events)
    if (e.kind == EngineEvent::Kind::kText) text += e.text;
  EXPECT_EQ(text, want2.value().text);
  // The second request found the system prompt's blocks.
  const int bt = m_.kv->config().block_tokens;
  size_t common = 0;
  while (p1[common] == p2[common]) ++common;
  EXPECT_EQ(fin2.stats.cached_tokens, static_cast<int>(common) / bt * bt);
  EXPECT_EQ(engine.metrics().requests_finished.load(), 2);
  EXPECT_EQ(engine.metrics().cached_tokens.load(), fin2.stats.cached_tokens);

  // Step times are engine wall time, one interval per step, so they fit in the run's wall time
  // (per-request sums overlapped while both requests ran), and every computed prompt token and
  // at most every generated token is counted once.
  const EngineMetrics& m = engine.metrics();
  const EngineEvent& fin1 = c1->events.back();
  EXPECT_GT(m.prefill_seconds.load(), 0.0);
  EXPECT_GT(m.decode_seconds.load(), 0.0);
  EXPECT_LE(m.prefill_seconds.load() + m.decode_seconds.load(), wall);
  EXPECT_EQ(m.prefill_step_tokens.load(), fin1.stats.prompt_tokens - fin1.stats.cached_tokens +
                                              fin2.stats.prompt_tokens - fin2.stats.cached_tokens);
  EXPECT_GT(m.decode_step_tokens.load(), 0);
  EXPECT_LE(m.decode_step_tokens.load(), m.generated_tokens.load());
}

TEST_F(EngineTest, RefusesOversizedPromptsAndFullQueues) {
  Engine engine(*m_.model, *m_.kv, *tok_, EngineOptions{1, 1, 512});
  auto sink = std::make_shared<Collected>();
  std::vector<int32_t> huge(m_.model->n_ctx(), 100);
  Status s = engine.submit(make_request(huge, 4, sink));
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("prompt too long"), std::string::npos) << s.message();

  // One long request occupies the engine; the queue holds one more; the third is refused.
  auto a = std::make_shared<Collected>(), b = std::make_shared<Collected>(), c = std::make_shared<Collected>();
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  EngineRequest long_request = make_request(chat("s", "Write a long story."), 400, a);
  long_request.cancel = cancel;
  ASSERT_TRUE(engine.submit(std::move(long_request)).is_ok());
  // Wait until it is running (the queue is empty again).
  while (engine.metrics().queue_depth.load() != 0) std::this_thread::yield();
  ASSERT_TRUE(engine.submit(make_request(chat("s", "hi"), 2, b)).is_ok());
  Status full = engine.submit(make_request(chat("s", "hi"), 2, c));
  EXPECT_FALSE(full.is_ok());
  EXPECT_NE(full.message().find("busy"), std::string::npos) << full.message();
  // Cancelling the running request frees the engine for the queued one.
  cancel->store(true);
  a->done.get_future().wait();
  b->done.get_future().wait();
  EXPECT_EQ(a->events.back().kind, EngineEvent::Kind::kFinished);
  EXPECT_EQ(a->events.back().stats.stop_reason, StopReason::kCancelled);
  EXPECT_LT(a->events.back().stats.generated_tokens, 400);
  EXPECT_EQ(b->events.back().kind, EngineEvent::Kind::kFinished);
}

TEST_F(EngineTest, CancelBeforeTheFirstTokenStillFinishesAsCancelled) {
  // A request cancelled while (or before) its prompt is prefilled ends like any cancelled
  // request: a kFinished event with stop reason cancelled, not an error.
  Engine engine(*m_.model, *m_.kv, *tok_);
  auto a = std::make_shared<Collected>();
  EngineRequest r = make_request(chat("s", "Write a long story."), 16, a);
  r.cancel = std::make_shared<std::atomic<bool>>(true);
  ASSERT_TRUE(engine.submit(std::move(r)).is_ok());
  a->done.get_future().wait();
  ASSERT_FALSE(a->events.empty());
  EXPECT_EQ(a->events.back().kind, EngineEvent::Kind::kFinished);
  EXPECT_EQ(a->events.back().stats.stop_reason, StopReason::kCancelled);
  EXPECT_EQ(a->events.back().stats.generated_tokens, 0);
  EXPECT_EQ(engine.metrics().requests_cancelled.load(), 1);
}

}  // namespace
}  // namespace tern
