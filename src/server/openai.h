// The OpenAI dialect: /v1/chat/completions and /v1/completions requests to GenerationSpecs, and
// Completions / GenEvents back to OpenAI's JSON and chunk streams. Pure functions of their
// inputs (no engine, no network), so tests and the fuzzer call them directly.
#pragma once

#include <memory>
#include <string>

#include "server/api_types.h"
#include "server/json_fields.h"
#include "server/stream_encoder.h"

namespace tern::server {

// Request translators. Errors are 400s naming the field (OpenAI's error.param).
ApiOr<GenerationSpec> parse_openai_chat(const Json& body);
ApiOr<GenerationSpec> parse_openai_completion(const Json& body);

// Non-streamed responses.
Json openai_chat_response(const Completion& c, const ResponseMeta& meta);
Json openai_completion_response(const Completion& c, const ResponseMeta& meta);

// Streamed responses: chat.completion.chunk / text_completion chunks, then "data: [DONE]".
std::unique_ptr<StreamEncoder> openai_chat_stream(ResponseMeta meta, bool include_usage);
std::unique_ptr<StreamEncoder> openai_completion_stream(ResponseMeta meta, bool include_usage);

// {"error": {"message", "type", "param", "code"}}
std::string openai_error_body(const ApiError& e);

// "stop", "length", "tool_calls" (cancelled generations never reach a response body).
const char* openai_finish_reason(FinishReason r);

}  // namespace tern::server
