// The Engine's thread and scheduler (continuous batching; the policy is described in engine.h).
// A step: reap cancelled requests, admit queued ones while the KV pool can hold them, plan (every
// decoder's pending token + draft, oldest first, then prefill chunks within the token budget),
// one forward, then each runner applies its logits. Events for a request are emitted in order on
// this thread: kStarted (once its prefix is matched), kPrefillProgress*, kText*, then exactly one
// of kFinished / kError.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <tuple>

#include "engine/sequence_runner.h"
#include "spec/cost_aware_drafter.h"
#include "spec/ngram_drafter.h"

namespace tern {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool is_set(const std::shared_ptr<std::atomic<bool>>& flag) {
  return flag != nullptr && flag->load(std::memory_order_relaxed);
}

size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

int div_up(int a, int b) { return (a + b - 1) / b; }

}  // namespace

struct Engine::Active {
  EngineRequest request;
  double submitted_s = 0, admitted_s = 0;
  uint64_t rank = 0;  // admission order; preemption takes the highest
  Session session;
  NgramDrafter ngram;
  CostAwareDrafter governed{ngram};  // the n-gram drafter under the speculation cost model
  GenerateOptions options;
  SequenceRunner runner;
  bool started = false;   // kStarted emitted
  bool parked = false;    // preempted during this step: moves to preempted_ after it
  bool planned = false;   // rows in this step's plan
  int prefill_waits = 0;  // consecutive steps its prefill got no tokens
  bool over = false;      // finished or failed: removed after this step

  Active(Engine& e, Queued&& q, const GenerateOptions& o)
      : request(std::move(q.request)),
        submitted_s(q.submitted_s),
        admitted_s(now_seconds()),
        session(*e.model_, *e.pool_, e.tokenizer_, SessionOptions{request.params.cache_salt, true}),
        options(o),
        runner(session, request.prompt, options) {}
};

Engine::Engine(Model& model, KvPool& pool, const tok::Tokenizer& tokenizer, EngineOptions options)
    : model_(&model), pool_(&pool), tokenizer_(&tokenizer), options_(options) {
  options_.max_running = std::max(1, options_.max_running);
  metrics_.kv_blocks_free = pool.n_available_blocks();
  thread_ = std::thread([this] { run(); });
}

Engine::~Engine() { shutdown(false); }

Status Engine::submit(EngineRequest request) {
  if (request.prompt.empty()) return error("prompt is empty");
  const int n_ctx = model_->n_ctx();
  const int need = static_cast<int>(request.prompt.size()) + 1;
  if (need > n_ctx)
    return error("prompt too long: " + std::to_string(request.prompt.size()) + " tokens, the context holds " +
                 std::to_string(n_ctx) + " (and at least one token must be generated)");
  const int bt = pool_->config().block_tokens;
  if (div_up(need, bt) > pool_->n_blocks())
    return error("prompt too long for the KV cache: " + std::to_string(request.prompt.size()) + " tokens need " +
                 std::to_string(div_up(need, bt)) + " blocks, the pool has " + std::to_string(pool_->n_blocks()));
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) return error("server is shutting down");
  if (static_cast<int>(queue_.size()) >= options_.max_queued) {
    ++metrics_.requests_rejected;
    return error("server busy: " + std::to_string(queue_.size()) + " requests queued (the limit)");
  }
  queue_.push_back(Queued{std::move(request), now_seconds()});
  metrics_.queue_depth = static_cast<int>(queue_.size()) + n_preempted_;
  wake_.notify_one();
  return Status::ok();
}

void Engine::shutdown(bool drain) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!thread_.joinable()) return;
    stopping_ = true;
    drain_ = drain;
  }
  wake_.notify_all();
  thread_.join();
}

void Engine::run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty() || !running_.empty() || !preempted_.empty(); });
      if (stopping_ && !drain_) break;
      if (stopping_ && queue_.empty() && running_.empty() && preempted_.empty()) break;
    }
    step();
  }
  // Not draining: running (and preempted) requests end as cancelled, queued ones are refused.
  for (auto* list : {&running_, &preempted_}) {
    for (auto& a : *list) {
      a->runner.finish(StopReason::kCancelled);
      finish(*a);
    }
    list->clear();
  }
  std::deque<Queued> refused;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    refused.swap(queue_);
  }
  for (auto& q : refused) {
    EngineEvent e;
    e.kind = EngineEvent::Kind::kError;
    e.text = "server shutting down";
    if (q.request.on_event) q.request.on_event(std::move(e));
  }
  update_gauges();
}

void Engine::emit_started(Active& a) {
  if (a.started) return;
  a.started = true;
  EngineEvent e;
  e.kind = EngineEvent::Kind::kStarted;
  e.stats = a.runner.stats();
  e.stats.queue_seconds = a.admitted_s - a.submitted_s;
  if (a.request.on_event) a.request.on_event(std::move(e));
}

void Engine::finish(Active& a) {
  emit_started(a);
  a.over = true;
  GenResult& r = a.runner.result();
  GenStats& s = r.stats;
  s.queue_seconds = a.admitted_s - a.submitted_s;
  if (s.time_to_first_token_seconds > 0) s.time_to_first_token_seconds += s.queue_seconds;
  ++(s.stop_reason == StopReason::kCancelled ? metrics_.requests_cancelled : metrics_.requests_finished);
  metrics_.prompt_tokens += s.prompt_tokens;
  metrics_.cached_tokens += s.cached_tokens;
  metrics_.restored_tokens += s.restored_tokens;
  metrics_.generated_tokens += s.generated_tokens;
  metrics_.drafts_proposed += s.drafts_proposed;
  metrics_.drafts_accepted += s.drafts_accepted;
  EngineEvent e;
  e.kind = EngineEvent::Kind::kFinished;
  e.stats = s;
  e.tokens = std::move(r.tokens);
  if (a.request.on_event) a.request.on_event(std::move(e));
  a.session.reset();  // the slot's KV goes back to the pool now, not when the Active is dropped
}

void Engine::fail(Active& a, const Status& status) {
  emit_started(a);
  a.over = true;
  ++metrics_.requests_failed;
  EngineEvent e;
  e.kind = EngineEvent::Kind::kError;
  e.text = status.message();
  if (a.request.on_event) a.request.on_event(std::move(e));
  a.session.reset();
}

void Engine::preempt(Active& a) {
  a.runner.preempt();
  a.parked = true;
  ++metrics_.requests_preempted;
}

void Engine::reap_cancelled() {
  for (auto* list : {&running_, &preempted_}) {
    for (auto& a : *list) {
      if (!is_set(a->request.cancel)) continue;
      a->runner.finish(StopReason::kCancelled);
      finish(*a);
    }
    std::erase_if(*list, [](const std::unique_ptr<Active>& a) { return a->over; });
  }
  std::vector<Queued> cancelled;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (is_set(it->request.cancel)) {
        cancelled.push_back(std::move(*it));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // A request cancelled while queued ends like any cancelled one: started, then finished.
  for (auto& q : cancelled) {
    GenerateOptions none;
    Active a(*this, std::move(q), none);
    a.runner.finish(StopReason::kCancelled);
    finish(a);
  }
}

bool Engine::kv_admits(std::span<const int32_t> target) const {
  if (running_.empty()) return true;  // alone it always fits: submit() checked the pool's size
  const int bt = pool_->config().block_tokens;
  // Blocks the running requests still need for their prompts, plus one each to grow into.
  int headroom = 0;
  size_t shared = 0;
  for (const auto& r : running_) {
    headroom += div_up(r->runner.tokens_to_prefill(), bt) + 1;
    shared = std::max(shared, common_prefix(target, r->session.tokens()) / bt);
  }
  const int need = div_up(static_cast<int>(target.size()) + 1, bt) - static_cast<int>(shared);
  return need + headroom <= pool_->n_available_blocks();
}

void Engine::admit() {
  // Preempted requests first (they were admitted earlier), then the queue in order.
  while (!preempted_.empty() && static_cast<int>(running_.size()) < options_.max_running &&
         kv_admits(preempted_.front()->runner.target())) {
    running_.push_back(std::move(preempted_.front()));
    preempted_.erase(preempted_.begin());
  }
  std::sort(running_.begin(), running_.end(), [](const auto& a, const auto& b) { return a->rank < b->rank; });
  if (!preempted_.empty()) return;  // no overtaking a preempted request
  while (static_cast<int>(running_.size()) < options_.max_running) {
    Queued q;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (queue_.empty() || !kv_admits(queue_.front().request.prompt)) return;
      q = std::move(queue_.front());
      queue_.pop_front();
    }
    const RequestParams& p = q.request.params;
    GenerateOptions o;
    o.max_tokens = std::min(p.max_tokens, model_->n_ctx() - static_cast<int>(q.request.prompt.size()));
    o.prefill_chunk_tokens = options_.prefill_chunk_tokens;
    o.sampling = p.sampling;
    o.stop_strings = p.stop_strings;
    o.think_budget_tokens = p.think_budget_tokens;
    auto a = std::make_unique<Active>(*this, std::move(q), o);
    a->rank = next_rank_++;
    a->options.drafter = p.speculate ? &a->governed : nullptr;
    Active* raw = a.get();
    a->options.on_text = [this, raw](std::string_view text) {
      EngineEvent e;
      e.kind = EngineEvent::Kind::kText;
      e.text = std::string(text);
      if (raw->request.on_event) raw->request.on_event(std::move(e));
    };
    a->options.on_prefill_progress = [raw](int done, int total) {
      EngineEvent e;
      e.kind = EngineEvent::Kind::kPrefillProgress;
      e.done = done;
      e.total = total;
      if (raw->request.on_event) raw->request.on_event(std::move(e));
    };
    running_.push_back(std::move(a));
  }
}

bool Engine::waits_for_shared_prefix(const Active& a) const {
  const int bt = pool_->config().block_tokens;
  const std::span<const int32_t> want = a.runner.target();
  for (const auto& b : running_) {
    if (b.get() == &a || b->parked || b->runner.phase() != SequenceRunner::Phase::kPrefill) continue;
    const size_t reusable = std::min(common_prefix(want, b->runner.target()), want.size() - 1);
    if (reusable / bt > b->session.tokens().size() / bt) return true;
  }
  return false;
}

bool Engine::plan_prefills(int n_decoding) {
  using Phase = SequenceRunner::Phase;
  // When the pool is nearly full, decoders' growth comes first: a prefill would only be
  // preempted again.
  if (n_decoding > 0 && pool_->n_available_blocks() <= n_decoding) return false;
  bool progressed = false;
  // Admitted requests match their prompts first (the cached part is known from then on).
  for (auto& ap : running_) {
    Active& a = *ap;
    if (a.parked || a.over || a.runner.phase() != Phase::kSync || waits_for_shared_prefix(a)) continue;
    Status s = a.runner.sync();
    progressed = true;
    if (!s.is_ok()) {
      fail(a, s);
      continue;
    }
    emit_started(a);
    if (a.runner.done()) finish(a);
  }
  // The budget goes first to a request passed over for kMaxPrefillWaits steps (none starves),
  // then to prefills that complete within it, shortest first (an agent's next turn, mostly
  // cached, gets its first token without queueing behind another agent's long prompt), then to
  // the rest in admission order.
  constexpr int kMaxPrefillWaits = 8;
  int budget = std::max(1, options_.prefill_chunk_tokens);
  std::vector<Active*> order;
  for (auto& ap : running_)
    if (!ap->parked && !ap->over && ap->runner.phase() == Phase::kPrefill) order.push_back(ap.get());
  auto key = [budget](const Active* a) {
    const int left = a->runner.tokens_to_prefill();
    const int tier = a->prefill_waits >= kMaxPrefillWaits ? 0 : left <= budget ? 1 : 2;
    return std::make_tuple(tier, tier == 1 ? left : 0, a->rank);
  };
  std::sort(order.begin(), order.end(), [&](const Active* x, const Active* y) { return key(x) < key(y); });
  for (Active* a : order) {
    if (budget <= 0) {
      ++a->prefill_waits;
      continue;
    }
    auto n = a->runner.plan_prefill(plan_, budget);
    if (!n.is_ok()) {
      fail(*a, n.status());
      continue;
    }
    if (n.value() == 0) {
      ++a->prefill_waits;  // no KV room now
      continue;
    }
    a->planned = true;
    a->prefill_waits = 0;
    budget -= n.value();
  }
  return progressed;
}

void Engine::step() {
  reap_cancelled();
  admit();
  const double t_step = now_seconds();  // planning (drafts included), forward, applying the rows
  begin_plan(plan_);
  bool progressed = false;
  int n_decoding = 0;
  using Phase = SequenceRunner::Phase;
  // Tokens committed during this step (plan_decode commits the token the last step sampled,
  // consume() the accepted drafts and a prefill's first token): the decode rate's numerator.
  int64_t generated = 0;

  // Decoders, oldest first. One that cannot get a KV block preempts the youngest request that
  // holds KV and has no rows in this plan yet (itself when there is none). Speculation pays when
  // a step is bound by reading the weights; next to a prefill chunk the step is compute-bound and
  // every draft row costs a full token, so decoders do not draft while anyone is prefilling.
  const bool prefill_pending = std::any_of(running_.begin(), running_.end(), [](const auto& a) {
    return a->runner.phase() == Phase::kSync || a->runner.phase() == Phase::kPrefill;
  });
  for (size_t i = 0; i < running_.size(); ++i) {
    Active& a = *running_[i];
    if (a.runner.phase() != Phase::kDecode) continue;
    for (;;) {
      const int before = a.runner.stats().generated_tokens;
      auto d = a.runner.plan_decode(plan_, !prefill_pending);
      generated += a.runner.stats().generated_tokens - before;
      if (!d.is_ok()) {
        fail(a, d.status());
        break;
      }
      if (d.value() == SequenceRunner::DecodePlan::kPlanned) {
        a.planned = true;
        ++n_decoding;
        break;
      }
      if (d.value() == SequenceRunner::DecodePlan::kFinished) {
        finish(a);
        progressed = true;
        break;
      }
      Active* victim = nullptr;
      for (size_t j = running_.size(); j-- > i + 1;) {
        Active& v = *running_[j];
        if (!v.parked && !v.over && !v.session.tokens().empty()) {
          victim = &v;
          break;
        }
      }
      if (victim == nullptr) {
        if (n_decoding > 0 || i + 1 < running_.size()) preempt(a);  // others go on; it resumes later
        break;
      }
      preempt(*victim);
    }
  }

  const int decode_rows = plan_.n_tokens();
  if (plan_prefills(n_decoding)) progressed = true;
  const int prefill_rows = plan_.n_tokens() - decode_rows;

  if (plan_.n_tokens() > 0) {
    // Only each row's argmax (and candidates) cross to the host unless some runner needs the
    // logits; then the logits do, and every runner of the step picks from them (StepRunner).
    step_runners_.clear();
    for (const auto& ap : running_)
      if (ap->planned) step_runners_.push_back(&ap->runner);
    // A step the backend cannot hold (out of memory for its activations) fails its requests with
    // that message; the others, and later requests, go on (smaller steps still fit).
    const Result<StepOutputs> stepped = step_.forward(*model_, plan_, *pool_, step_runners_);
    if (!stepped.is_ok()) {
      for (auto& ap : running_) {
        if (!ap->planned) continue;
        ap->planned = false;
        fail(*ap, stepped.status());
      }
    } else {
      const StepOutputs& out = stepped.value();
      ++metrics_.steps;
      metrics_.step_tokens += plan_.n_tokens();
      for (auto& ap : running_) {
        Active& a = *ap;
        if (!a.planned) continue;
        a.planned = false;
        const int before = a.runner.stats().generated_tokens;
        Status s = a.runner.consume(out);
        generated += a.runner.stats().generated_tokens - before;
        if (!s.is_ok()) {
          fail(a, s);
        } else if (a.runner.done()) {
          finish(a);
        }
      }
      const double dt = now_seconds() - t_step;
      metrics_.prefill_step_tokens += prefill_rows;
      if (prefill_rows > 0) {
        metrics_.prefill_seconds = metrics_.prefill_seconds + dt;
      } else {
        metrics_.decode_seconds = metrics_.decode_seconds + dt;
        metrics_.decode_step_tokens += generated;
      }
    }
  } else if (!progressed && !running_.empty()) {
    // Nothing could run: the pool is held by running requests. Free the youngest holder; when the
    // oldest is alone and still cannot grow, the pool is its context limit.
    Active* victim = nullptr;
    for (size_t j = running_.size(); j-- > 1;) {
      Active& v = *running_[j];
      if (!v.parked && !v.over && !v.session.tokens().empty()) {
        victim = &v;
        break;
      }
    }
    if (victim != nullptr) {
      preempt(*victim);
    } else {
      Active& a = *running_.front();
      if (!a.parked && !a.over) {
        if (a.runner.phase() == Phase::kDecode) {
          a.runner.finish(StopReason::kContextFull);
          finish(a);
        } else {
          fail(a, error("KV cache exhausted: " + std::to_string(a.runner.tokens_to_prefill()) +
                        " prompt tokens still to compute and no block available in a pool of " +
                        std::to_string(pool_->n_blocks()) + " (other sequences hold the rest)"));
        }
      }
    }
  }

  // Preempted requests wait in preempted_ (by rank); finished ones are dropped.
  for (auto& ap : running_) {
    if (ap->parked && !ap->over) {
      ap->parked = false;
      preempted_.push_back(std::move(ap));
    }
  }
  std::erase_if(running_, [](const std::unique_ptr<Active>& a) { return a == nullptr || a->over; });
  std::sort(preempted_.begin(), preempted_.end(), [](const auto& a, const auto& b) { return a->rank < b->rank; });
  update_gauges();
}

void Engine::update_gauges() {
  metrics_.running = static_cast<int>(running_.size());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    n_preempted_ = static_cast<int>(preempted_.size());
    metrics_.queue_depth = static_cast<int>(queue_.size()) + n_preempted_;
  }
  metrics_.kv_blocks_used = pool_->n_used_blocks();
  metrics_.kv_blocks_free = pool_->n_available_blocks();
  metrics_.kv_evictions = pool_->stats().evictions;
}

}  // namespace tern
