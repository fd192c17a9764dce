// The internal request and event types both API dialects translate to and from. The OpenAI and
// Anthropic translators (openai_*.cpp, anthropic_*.cpp) turn JSON into a GenerationSpec and turn
// GenEvents back into their own JSON; everything between (templating, tokenization, the engine,
// tool-call parsing) is shared and never sees JSON.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "chat/output_parser.h"
#include "chat/value.h"
#include "core/check.h"
#include "engine/engine.h"

namespace tern::server {

// An error answered to the client: HTTP status plus the fields both dialects' error bodies need.
struct ApiError {
  int http_status = 400;
  std::string type = "invalid_request_error";  // OpenAI's error.type (mapped for Anthropic)
  std::string message;                         // names the field and what was expected
  std::string param;                           // the offending field's path ("messages[1].content")
  std::string code;                            // OpenAI's error.code ("context_length_exceeded"), may be ""
};

ApiError invalid_field(std::string param, std::string message);

// Either a value or an ApiError (Result<T> carries only a message; requests need a status too).
template <typename T>
class ApiOr {
 public:
  ApiOr(T value) : v_(std::move(value)) {}        // NOLINT(implicit)
  ApiOr(ApiError error) : v_(std::move(error)) {}  // NOLINT(implicit)
  bool is_ok() const { return v_.index() == 0; }
  T& value() {
    TERN_CHECK(is_ok());
    return std::get<0>(v_);
  }
  const ApiError& error() const {
    TERN_CHECK(!is_ok());
    return std::get<1>(v_);
  }

 private:
  std::variant<T, ApiError> v_;
};

enum class ToolChoiceMode { kAuto, kNone, kRequired, kNamed };

struct ToolChoice {
  ToolChoiceMode mode = ToolChoiceMode::kAuto;
  std::string name;  // kNamed: the function that must be called
};

// One generation request, dialect-free.
struct GenerationSpec {
  std::string model;               // as the client named it (checked against the served names)
  bool chat = true;                // false: a raw prompt (/v1/completions)
  chat::Value messages;            // chat: OpenAI-shaped messages (content strings, tool_calls)
  chat::Value tools;               // chat: OpenAI function tools [{type, function: {name, ...}}], or None
  ToolChoice tool_choice;
  std::string prompt;              // raw: prompt text (special-token text is recognised)
  std::vector<int32_t> prompt_ids; // raw: the prompt as token ids (instead of text)
  std::optional<bool> enable_thinking;  // template variable; unset = the template's default
  RequestParams params;
  bool stream = false;
  bool include_usage = false;      // OpenAI stream_options.include_usage
};

enum class FinishReason { kStop, kLength, kStopSequence, kToolCalls, kCancelled };

struct Usage {
  int prompt_tokens = 0;
  int cached_tokens = 0;      // prompt tokens whose KV came from the prefix cache
  int completion_tokens = 0;
  int restored_tokens = 0;    // of cached_tokens, restored from the host-RAM or SSD tier
};

struct FinishInfo {
  FinishReason reason = FinishReason::kStop;
  std::string stop_sequence;  // kStopSequence: which one matched
  Usage usage;
};

// What the shared generation loop hands to a dialect, in order: kStarted once, then output pieces
// (text, reasoning, tool calls as chat::OutputEvent), then exactly one of kFinished or kError.
struct GenEvent {
  enum class Kind { kStarted, kOutput, kFinished, kError };
  Kind kind = Kind::kOutput;
  chat::OutputEvent output;  // kOutput
  Usage usage;               // kStarted: prompt tokens (cached when known)
  FinishInfo finish;         // kFinished
  ApiError error;            // kError
};

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text of an object
};

// A whole non-streamed answer, accumulated from GenEvents.
struct Completion {
  std::string text;
  std::string reasoning;
  std::vector<ToolCall> tool_calls;
  FinishInfo finish;
};

// Folds one event into a Completion (tool calls that end malformed are dropped; their raw text
// arrives as Text events).
void accumulate(Completion& c, const GenEvent& e);

}  // namespace tern::server
