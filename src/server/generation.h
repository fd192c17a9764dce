// One request on the engine, seen from an HTTP thread: submits it, receives the engine's events
// through a queue (the engine thread never blocks on a client), runs the output parser over the
// generated text and hands out dialect-free GenEvents.
//
// Lifetime: the engine's callback holds only a shared channel, so a Generation may be destroyed
// (client gone) while the engine still runs the request; destruction sets the cancel flag and the
// engine frees the request's slot at its next step.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "chat/output_parser.h"
#include "engine/engine.h"
#include "server/api_types.h"
#include "server/prompt_builder.h"

namespace tern::server {

class Generation {
 public:
  // Checks the prompt against the context (400 naming both sizes), then submits: 429 when the
  // engine's queue is full, 503 when it is shutting down.
  // With history.memory set, an answer that ends naturally (end of turn or max_tokens) is
  // remembered as a turn, so that the next request's prompt can splice its exact tokens.
  static ApiOr<std::unique_ptr<Generation>> start(Engine& engine, BuiltPrompt prompt, RequestParams params,
                                                  HistoryContext history = {});
  ~Generation();
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Waits up to `wait` for engine events and appends the GenEvents they produce. Returns false
  // when the request is over and its final event (kFinished or kError) has been handed out.
  bool poll(std::vector<GenEvent>* out, std::chrono::milliseconds wait);
  // The client went away: the engine stops the request between steps.
  void cancel();
  bool finished() const { return finished_; }

  struct Channel;

 private:
  Generation(const tok::Tokenizer& tokenizer, BuiltPrompt prompt, RequestParams params);
  void on_engine_event(EngineEvent&& e, std::vector<GenEvent>* out);
  void emit_output(std::vector<chat::OutputEvent> events, std::vector<GenEvent>* out);
  FinishInfo finish_info(const EngineEvent& e) const;
  void remember_turn(const EngineEvent& finished);

  const tok::Tokenizer* tokenizer_;
  BuiltPrompt prompt_;
  RequestParams params_;
  std::shared_ptr<Channel> channel_;
  std::shared_ptr<std::atomic<bool>> cancel_;
  chat::OutputParser parser_;
  std::string emitted_text_;  // what the engine streamed (stop strings held back)
  HistoryContext history_;
  Completion answer_;         // what the client receives, as it will send it back (history_ only)
  int n_good_calls_ = 0;      // tool calls that ended well
  bool finished_ = false;
};

// Which stop string ended a generation: the one the full decoded output has right after the text
// that was emitted (the engine never emits the stop string itself); "" when none fits.
std::string matched_stop_string(std::string_view full_text, size_t emitted_bytes, const std::vector<std::string>& stops);

}  // namespace tern::server
