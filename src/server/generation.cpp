#include "server/generation.h"

#include <condition_variable>
#include <deque>
#include <mutex>

namespace tern::server {

// The queue between the engine thread (producer) and the HTTP thread (consumer).
struct Generation::Channel {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<EngineEvent> events;
};

namespace {

ApiError api_error(int status, std::string type, std::string message, std::string code = {}) {
  ApiError e;
  e.http_status = status;
  e.type = std::move(type);
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

bool contains(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }

}  // namespace

std::string matched_stop_string(std::string_view full_text, size_t emitted_bytes, const std::vector<std::string>& stops) {
  for (const std::string& s : stops)
    if (!s.empty() && full_text.size() >= emitted_bytes && full_text.substr(emitted_bytes).starts_with(s)) return s;
  // Decoding the whole output can differ from the streamed pieces at a character boundary; fall
  // back to the earliest occurrence at or after the emitted text.
  std::string best;
  size_t best_pos = std::string::npos;
  const size_t from = emitted_bytes > 8 ? emitted_bytes - 8 : 0;
  for (const std::string& s : stops) {
    if (s.empty()) continue;
    const size_t pos = full_text.find(s, std::min(from, full_text.size()));
    if (pos < best_pos) best_pos = pos, best = s;
  }
  return best;
}

Generation::Generation(const tok::Tokenizer& tokenizer, BuiltPrompt prompt, RequestParams params)
    : tokenizer_(&tokenizer),
      prompt_(std::move(prompt)),
      params_(std::move(params)),
      channel_(std::make_shared<Channel>()),
      cancel_(std::make_shared<std::atomic<bool>>(false)),
      parser_(prompt_.parser) {}

Generation::~Generation() {
  if (!finished_) cancel();
}

void Generation::cancel() { cancel_->store(true); }

ApiOr<std::unique_ptr<Generation>> Generation::start(Engine& engine, BuiltPrompt prompt, RequestParams params,
                                                     HistoryContext history) {
  const int n_ctx = engine.model().n_ctx();
  const int n_prompt = static_cast<int>(prompt.tokens.size());
  if (n_prompt + 1 > n_ctx) {
    return api_error(400, "invalid_request_error",
                     "the prompt is " + std::to_string(n_prompt) + " tokens but the context holds " +
                         std::to_string(n_ctx) + " (at least one token must be left to generate)",
                     "context_length_exceeded");
  }
  std::unique_ptr<Generation> g(new Generation(engine.tokenizer(), std::move(prompt), std::move(params)));
  g->history_ = history;
  EngineRequest r;
  r.prompt = g->prompt_.tokens;
  r.params = g->params_;
  r.cancel = g->cancel_;
  r.on_event = [channel = g->channel_](EngineEvent&& e) {
    {
      std::lock_guard<std::mutex> lock(channel->mutex);
      channel->events.push_back(std::move(e));
    }
    channel->ready.notify_one();
  };
  Status s = engine.submit(std::move(r));
  if (!s.is_ok()) {
    // note: Engine::submit reports only a message; its three refusals are told apart by wording.
    const std::string& m = s.message();
    if (contains(m, "shutting down")) return api_error(503, "server_error", m, "shutting_down");
    if (contains(m, "too long") || contains(m, "empty"))
      return api_error(400, "invalid_request_error", m, "context_length_exceeded");
    return api_error(429, "rate_limit_error", m, "server_busy");
  }
  return g;
}

bool Generation::poll(std::vector<GenEvent>* out, std::chrono::milliseconds wait) {
  if (finished_) return false;
  std::deque<EngineEvent> events;
  {
    std::unique_lock<std::mutex> lock(channel_->mutex);
    channel_->ready.wait_for(lock, wait, [&] { return !channel_->events.empty(); });
    events.swap(channel_->events);
  }
  for (EngineEvent& e : events) {
    on_engine_event(std::move(e), out);
    if (finished_) break;
  }
  return !finished_;
}

void Generation::emit_output(std::vector<chat::OutputEvent> events, std::vector<GenEvent>* out) {
  for (chat::OutputEvent& o : events) {
    if (o.kind == chat::OutputEvent::Kind::ToolCallEnd && !o.malformed) ++n_good_calls_;
    GenEvent g;
    g.kind = GenEvent::Kind::kOutput;
    g.output = std::move(o);
    if (history_.memory != nullptr) accumulate(answer_, g);
    out->push_back(std::move(g));
  }
}

FinishInfo Generation::finish_info(const EngineEvent& e) const {
  FinishInfo f;
  f.usage.prompt_tokens = e.stats.prompt_tokens;
  f.usage.cached_tokens = e.stats.cached_tokens;
  f.usage.restored_tokens = e.stats.restored_tokens;
  f.usage.completion_tokens = e.stats.generated_tokens;
  switch (e.stats.stop_reason) {
    case StopReason::kMaxTokens:
    case StopReason::kContextFull: f.reason = FinishReason::kLength; break;
    case StopReason::kCancelled: f.reason = FinishReason::kCancelled; break;
    case StopReason::kStopString:
      f.reason = FinishReason::kStopSequence;
      f.stop_sequence = matched_stop_string(tokenizer_->decode(e.tokens, /*skip_special=*/true), emitted_text_.size(),
                                            params_.stop_strings);
      break;
    default: f.reason = FinishReason::kStop; break;
  }
  if (n_good_calls_ > 0 && f.reason != FinishReason::kLength && f.reason != FinishReason::kCancelled)
    f.reason = FinishReason::kToolCalls;
  return f;
}

void Generation::on_engine_event(EngineEvent&& e, std::vector<GenEvent>* out) {
  switch (e.kind) {
    case EngineEvent::Kind::kStarted: {
      GenEvent g;
      g.kind = GenEvent::Kind::kStarted;
      g.usage.prompt_tokens = e.stats.prompt_tokens;
      g.usage.cached_tokens = e.stats.cached_tokens;
      g.usage.restored_tokens = e.stats.restored_tokens;
      out->push_back(std::move(g));
      if (!prompt_.forced_output.empty()) emit_output(parser_.feed(prompt_.forced_output), out);
      break;
    }
    case EngineEvent::Kind::kPrefillProgress: break;
    case EngineEvent::Kind::kText:
      emitted_text_ += e.text;
      emit_output(parser_.feed(e.text), out);
      break;
    case EngineEvent::Kind::kFinished: {
      emit_output(parser_.finish(), out);
      remember_turn(e);
      GenEvent g;
      g.kind = GenEvent::Kind::kFinished;
      g.finish = finish_info(e);
      out->push_back(std::move(g));
      finished_ = true;
      break;
    }
    case EngineEvent::Kind::kError: {
      GenEvent g;
      g.kind = GenEvent::Kind::kError;
      g.error = contains(e.text, "shutting down") ? api_error(503, "server_error", e.text, "shutting_down")
                                                   : api_error(500, "server_error", "generation failed: " + e.text);
      out->push_back(std::move(g));
      finished_ = true;
      break;
    }
  }
}

void Generation::remember_turn(const EngineEvent& finished) {
  const StopReason why = finished.stats.stop_reason;
  // A stop string ends the answer inside tokens that spell more than the client receives.
  if (history_.memory == nullptr || (why != StopReason::kEndOfGeneration && why != StopReason::kMaxTokens)) return;
  remember_answer(history_, prompt_, answer_, finished.tokens, *tokenizer_);
}

void accumulate(Completion& c, const GenEvent& e) {
  if (e.kind == GenEvent::Kind::kFinished) {
    c.finish = e.finish;
    return;
  }
  if (e.kind != GenEvent::Kind::kOutput) return;
  const chat::OutputEvent& o = e.output;
  switch (o.kind) {
    case chat::OutputEvent::Kind::Text: c.text += o.text; break;
    case chat::OutputEvent::Kind::Reasoning: c.reasoning += o.text; break;
    case chat::OutputEvent::Kind::ToolCallStart: c.tool_calls.push_back(ToolCall{o.id, o.name, ""}); break;
    case chat::OutputEvent::Kind::ToolCallArgs:
      if (!c.tool_calls.empty() && c.tool_calls.back().id == o.id) c.tool_calls.back().arguments += o.text;
      break;
    case chat::OutputEvent::Kind::ToolCallEnd:
      if (c.tool_calls.empty() || c.tool_calls.back().id != o.id) break;
      if (o.malformed) {
        c.tool_calls.pop_back();
      } else if (c.tool_calls.back().arguments.empty()) {
        c.tool_calls.back().arguments = "{}";  // a call without arguments still carries an object
      }
      break;
  }
}

}  // namespace tern::server
