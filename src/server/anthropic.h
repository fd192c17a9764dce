// The Anthropic dialect: /v1/messages (and /v1/messages/count_tokens) requests to
// GenerationSpecs, and Completions / GenEvents back to Messages API JSON and its event stream:
//   message_start, then per content block content_block_start, (ping after the first),
//   content_block_delta..., content_block_stop, then message_delta (stop reason, usage) and
//   message_stop.
// Anthropic's conversation (system outside the messages, tool_use/tool_result content blocks)
// is rewritten into the OpenAI-shaped messages the shared builder takes.
#pragma once

#include <memory>
#include <string>

#include "server/api_types.h"
#include "server/json_fields.h"
#include "server/stream_encoder.h"

namespace tern::server {

// count_only: /v1/messages/count_tokens, where max_tokens is not required.
ApiOr<GenerationSpec> parse_anthropic_messages(const Json& body, bool count_only = false);

Json anthropic_response(const Completion& c, const ResponseMeta& meta);
std::unique_ptr<StreamEncoder> anthropic_stream(ResponseMeta meta);

// {"type": "error", "error": {"type", "message"}}; the type follows the HTTP status.
std::string anthropic_error_body(const ApiError& e);

// "end_turn", "max_tokens", "stop_sequence", "tool_use".
const char* anthropic_stop_reason(FinishReason r);

}  // namespace tern::server
