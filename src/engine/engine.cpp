// First implementation of the Engine: requests are served one at a time on the engine thread
// (the KV pool's prefix index still shares every full block across requests). Continuous batching
// of several requests per step replaces serve() next; the interface stays as it is.
#include "engine/engine.h"

#include "spec/ngram_drafter.h"

namespace tern {

Engine::Engine(Model& model, KvPool& pool, const tok::Tokenizer& tokenizer, EngineOptions options)
    : model_(&model), pool_(&pool), tokenizer_(&tokenizer), options_(options) {
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
  if ((need + bt - 1) / bt > pool_->n_blocks())
    return error("prompt too long for the KV cache: " + std::to_string(request.prompt.size()) + " tokens need " +
                 std::to_string((need + bt - 1) / bt) + " blocks, the pool has " + std::to_string(pool_->n_blocks()));
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) return error("server is shutting down");
  if (static_cast<int>(queue_.size()) >= options_.max_queued) {
    ++metrics_.requests_rejected;
    return error("server busy: " + std::to_string(queue_.size()) + " requests queued (the limit)");
  }
  queue_.push_back(std::move(request));
  metrics_.queue_depth = static_cast<int>(queue_.size());
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
    EngineRequest request;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty() || (stopping_ && !drain_)) break;
      request = std::move(queue_.front());
      queue_.pop_front();
      metrics_.queue_depth = static_cast<int>(queue_.size());
    }
    serve(request);
  }
  // Whatever is still queued is refused.
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& r : queue_) {
    EngineEvent e;
    e.kind = EngineEvent::Kind::kError;
    e.text = "server shutting down";
    if (r.on_event) r.on_event(std::move(e));
  }
  queue_.clear();
  metrics_.queue_depth = 0;
}

void Engine::serve(EngineRequest& request) {
  auto emit = [&](EngineEvent&& e) {
    if (request.on_event) request.on_event(std::move(e));
  };
  metrics_.running = 1;
  EngineEvent started;
  started.kind = EngineEvent::Kind::kStarted;
  started.stats.prompt_tokens = static_cast<int>(request.prompt.size());
  emit(std::move(started));

  const RequestParams& p = request.params;
  Session session(*model_, *pool_, tokenizer_, SessionOptions{p.cache_salt, true});
  NgramDrafter ngram;
  GenerateOptions o;
  o.max_tokens = std::min(p.max_tokens, model_->n_ctx() - static_cast<int>(request.prompt.size()));
  o.prefill_chunk_tokens = options_.prefill_chunk_tokens;
  o.sampling = p.sampling;
  o.stop_strings = p.stop_strings;
  o.think_budget_tokens = p.think_budget_tokens;
  o.drafter = p.speculate ? &ngram : nullptr;
  o.cancel = request.cancel.get();
  o.on_text = [&](std::string_view text) {
    EngineEvent e;
    e.kind = EngineEvent::Kind::kText;
    e.text = std::string(text);
    emit(std::move(e));
  };
  o.on_prefill_progress = [&](int done, int total) {
    EngineEvent e;
    e.kind = EngineEvent::Kind::kPrefillProgress;
    e.done = done;
    e.total = total;
    emit(std::move(e));
  };
  auto result = session.generate(request.prompt, o);
  metrics_.running = 0;
  metrics_.kv_blocks_used = pool_->n_used_blocks();
  metrics_.kv_blocks_free = pool_->n_available_blocks();
  metrics_.kv_evictions = pool_->stats().evictions;
  if (!result.is_ok()) {
    const bool was_cancelled = request.cancel && request.cancel->load();
    ++(was_cancelled ? metrics_.requests_cancelled : metrics_.requests_failed);
    EngineEvent e;
    if (was_cancelled) {
      // Cancelled before the first token (during prefill): still a normal end, as documented.
      e.kind = EngineEvent::Kind::kFinished;
      e.stats.prompt_tokens = static_cast<int>(request.prompt.size());
      e.stats.stop_reason = StopReason::kCancelled;
      emit(std::move(e));
      return;
    }
    e.kind = EngineEvent::Kind::kError;
    e.text = result.status().message();
    emit(std::move(e));
    return;
  }
  GenResult& r = result.value();
  ++(r.stats.stop_reason == StopReason::kCancelled ? metrics_.requests_cancelled : metrics_.requests_finished);
  metrics_.prompt_tokens += r.stats.prompt_tokens;
  metrics_.cached_tokens += r.stats.cached_tokens;
  metrics_.generated_tokens += r.stats.generated_tokens;
  metrics_.drafts_proposed += r.stats.drafts_proposed;
  metrics_.drafts_accepted += r.stats.drafts_accepted;
  metrics_.prefill_seconds = metrics_.prefill_seconds + r.stats.prefill_seconds;
  metrics_.decode_seconds = metrics_.decode_seconds + r.stats.decode_seconds;
  EngineEvent e;
  e.kind = EngineEvent::Kind::kFinished;
  e.stats = r.stats;
  e.tokens = std::move(r.tokens);
  emit(std::move(e));
}

}  // namespace tern
