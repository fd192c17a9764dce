// Request pieces both dialects read the same way: stop strings, tool schemas, sampling defaults.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chat/value.h"
#include "server/json_fields.h"

namespace tern::server {

// At most this many stop strings (OpenAI allows 4; agents sometimes send a few more).
constexpr size_t kMaxStopStrings = 16;
// The largest max_tokens accepted (the engine clamps to the context anyway).
constexpr int64_t kMaxTokensLimit = 1 << 24;

// A string or an array of non-empty strings; empty when absent.
std::vector<std::string> read_stop_strings(const Fields& f, std::string_view key);

// An OpenAI function tool as the chat layer holds it: {type: function, function: {name,
// description?, parameters}}. `parameters` must be a JSON object (a schema); `path` names it in
// errors.
chat::Value function_tool(const std::string& name, const Json* description, const Json* parameters,
                          const std::string& parameters_path);

// The name of every tool in `tools` (an array of function tools).
std::vector<std::string> tool_names(const chat::Value& tools);

// A seed for requests that give none (each such request samples differently, as OpenAI's do).
uint64_t random_seed();

// Random [a-zA-Z0-9] text for response and tool-call ids.
std::string random_id(size_t n_chars);

}  // namespace tern::server
