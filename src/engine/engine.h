// The Engine: one thread that owns the model and serves many requests. HTTP threads (server/)
// submit native EngineRequests and receive EngineEvents; nothing below server/ sees JSON.
//
// Scheduling (continuous batching): each step the engine thread builds one BatchPlan holding a
// decode token (or a speculative verify window) for every running request plus, token budget
// permitting, a prefill chunk of one admitted request, so a long prompt never stalls the others.
// Every request's prompt is matched against the KV pool's prefix index, so requests sharing a
// system prompt and tools reuse each other's blocks. Because every kernel is batch-invariant, a
// request's greedy tokens do not depend on what it was batched with.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "engine/session.h"
#include "kv/kv_pool.h"
#include "models/model.h"
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
  std::atomic<int64_t> prompt_tokens{0};
  std::atomic<int64_t> cached_tokens{0};
  std::atomic<int64_t> generated_tokens{0};
  std::atomic<int64_t> drafts_proposed{0};
  std::atomic<int64_t> drafts_accepted{0};
  std::atomic<double> prefill_seconds{0};
  std::atomic<double> decode_seconds{0};
  std::atomic<int> queue_depth{0};
  std::atomic<int> running{0};
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
  void run();
  void serve(EngineRequest& request);

  Model* model_;
  KvPool* pool_;
  const tok::Tokenizer* tokenizer_;
  EngineOptions options_;
  EngineMetrics metrics_;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<EngineRequest> queue_;
  bool stopping_ = false;
  bool drain_ = false;
  std::thread thread_;
};

}  // namespace tern
