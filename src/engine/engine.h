// The Engine: one thread that owns the model and serves many requests. HTTP threads (server/)
// submit native EngineRequests and receive EngineEvents; nothing below server/ sees JSON.
//
// Scheduling (continuous batching): each step the engine thread builds one BatchPlan holding a
// decode token (or a speculative verify window) for every running request plus prefill chunks
// of admitted ones, prefill_chunk_tokens in all (short prefills first, so a mostly cached turn
// is not queued behind a long prompt; aging keeps long ones from starving), so a long prompt
// never stalls the others; one forward, and each request's SequenceRunner
// (engine/sequence_runner.h) takes its logits. Every request's prompt is matched against the KV
// pool's prefix index after admission (after any running request that is computing the same
// prefix has registered it), so requests sharing a system prompt and tools reuse each other's
// blocks. Because every kernel is batch-invariant, a request's greedy tokens do not depend on
// what it was batched with.
//
// KV memory: a request is admitted (up to max_running) while the pool's available blocks cover
// its prompt's unshared blocks plus what the running ones still need for theirs. When a step
// cannot get a block for a running sequence anyway, the youngest request is preempted: its KV is
// released (full blocks stay cached in the index) and it resumes later where it was, bit for bit.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "engine/session.h"
#include "kv/kv_pool.h"
#include "models/model.h"
#include "ops/batch_plan.h"
#include "tokenizer/tokenizer.h"

namespace tern {

struct RequestParams {
  int max_tokens = 256;
  SamplerParams sampling;
  std::vector<std::string> stop_strings;
  int think_budget_tokens = -1;   // -1 = none
  bool speculate = true;          // n-gram prompt-lookup drafting
  uint64_t cache_salt = 0;        // prefix-cache namespace (tenant / API key); 0 = shared
};

struct EngineEvent {
  enum class Kind : uint8_t {
    kStarted,          // admitted: prompt_tokens and cached_tokens are known
    kPrefillProgress,  // done / total prompt tokens prefilled
    kText,             // a piece of generated text (final: stop strings already held back)
    kFinished,         // stats, stop_reason and all generated tokens
    kError,            // message; the request is over
  };
  Kind kind = Kind::kText;
  std::string text;              // kText: the delta; kError: the message
  int done = 0, total = 0;       // kPrefillProgress
  GenStats stats;                // kStarted (prompt/cached tokens), kFinished (all)
  std::vector<int32_t> tokens;   // kFinished: generated token ids
};

// Called on the engine thread, in order, for one request; must not block.
using EventSink = std::function<void(EngineEvent&&)>;

struct EngineRequest {
  std::vector<int32_t> prompt;
  RequestParams params;
  EventSink on_event;
  std::shared_ptr<std::atomic<bool>> cancel;  // set by the caller (client gone); may be null
};

struct EngineOptions {
  int max_running = 8;             // requests decoding at once (sequences in a step)
  int max_queued = 64;             // waiting requests beyond which submit() refuses
  int prefill_chunk_tokens = 512;  // prompt tokens per step for the request being prefilled
};

// Monotonic counters and gauges, readable from any thread (Prometheus /metrics).
struct EngineMetrics {
  std::atomic<int64_t> requests_finished{0};
  std::atomic<int64_t> requests_failed{0};
  std::atomic<int64_t> requests_rejected{0};
  std::atomic<int64_t> requests_cancelled{0};
  std::atomic<int64_t> requests_preempted{0};  // preemptions (KV pool full); a request may count twice
  std::atomic<int64_t> prompt_tokens{0};
  std::atomic<int64_t> cached_tokens{0};
  std::atomic<int64_t> restored_tokens{0};     // of cached_tokens, restored from the host-RAM or SSD tier
  std::atomic<int64_t> generated_tokens{0};
  std::atomic<int64_t> drafts_proposed{0};
  std::atomic<int64_t> drafts_accepted{0};
  // Engine wall time per forward step (forward + applying its rows), by what the step held. One
  // step serves every running request, so these do not overlap (per-request prefill/decode times
  // would: they are sums of intervals that run concurrently under batching).
  std::atomic<double> prefill_seconds{0};      // steps with prefill rows (decode rows beside them too)
  std::atomic<double> decode_seconds{0};       // decode-only steps
  std::atomic<int64_t> prefill_step_tokens{0};  // prompt tokens computed, over all steps
  std::atomic<int64_t> decode_step_tokens{0};   // tokens generated in decode-only steps
  std::atomic<int> queue_depth{0};
  std::atomic<int> running{0};                 // requests holding a slot (prefilling or decoding)
  std::atomic<int64_t> steps{0};               // forward passes
  std::atomic<int64_t> step_tokens{0};         // tokens over all forward passes (mean batch = /steps)
  std::atomic<int> kv_blocks_used{0};
  std::atomic<int> kv_blocks_free{0};
  std::atomic<int64_t> kv_evictions{0};
};

class Engine {
 public:
  Engine(Model& model, KvPool& pool, const tok::Tokenizer& tokenizer, EngineOptions options = {});
  ~Engine();  // shutdown(false)
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Thread-safe. Queues the request; an error (the server's 429/503) when the queue is full or
  // the engine is shutting down, or (400) when the prompt cannot fit the context or the KV pool.
  Status submit(EngineRequest request);
  // Stops accepting requests. drain: finish queued and running ones first; otherwise running
  // requests end with a kFinished event (stop reason cancelled) and queued ones with kError.
  void shutdown(bool drain);
  const EngineMetrics& metrics() const { return metrics_; }
  const Model& model() const { return *model_; }
  const tok::Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  struct Queued {
    EngineRequest request;
    double submitted_s = 0;  // steady clock
  };
  struct Active;  // an admitted request: its Session, drafter, options and SequenceRunner

  void run();
  // One scheduler step: reap cancellations, admit, plan, forward, apply. Engine thread only.
  void step();
  void reap_cancelled();
  void admit();
  // Whether the pool can take a request whose KV must hold `target` next to the running ones.
  bool kv_admits(std::span<const int32_t> target) const;
  // Whether `a` should wait before matching its prompt: a running request is still computing
  // blocks of the same prefix, which `a` can reuse once they are registered.
  bool waits_for_shared_prefix(const Active& a) const;
  // Syncs admitted requests and spends prefill_chunk_tokens on prefill chunks; true when a
  // request changed phase (so a step without rows still made progress).
  bool plan_prefills(int n_decoding);
  // Releases a's KV; it resumes from preempted_ later.
  void preempt(Active& a);
  void emit_started(Active& a);
  void finish(Active& a);                      // kFinished with the runner's result
  void fail(Active& a, const Status& status);  // kError
  void update_gauges();

  Model* model_;
  KvPool* pool_;
  const tok::Tokenizer* tokenizer_;
  EngineOptions options_;
  EngineMetrics metrics_;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Queued> queue_;  // guarded by mutex_
  int n_preempted_ = 0;       // guarded by mutex_: preempted_.size() for the queue-depth gauge
  bool stopping_ = false;
  bool drain_ = false;

  // Engine thread only.
  std::vector<std::unique_ptr<Active>> running_;    // by admission rank, oldest first
  std::vector<std::unique_ptr<Active>> preempted_;  // by admission rank; resumed first
  uint64_t next_rank_ = 0;
  BatchPlan plan_;
  StepRunner step_;                             // the step's outputs
  std::vector<SequenceRunner*> step_runners_;   // the runners with rows in plan_

  std::thread thread_;
};

}  // namespace tern
