// Recorded agent sessions (shared/data/agentic/swe-sessions.jsonl: one JSON object per line,
// {"id": ..., "messages": [{"role": ..., "content": ...}, ...]}) and their teacher-forced turn
// prompts, shared by `tern bench replay` and `tern bench serve`. The prompt of turn k is the
// chat-templated messages[0..k], where message k is a user message, with the generation prompt
// appended; the recorded assistant message follows it in the next turn's prompt whatever the
// engine generated, so every prompt extends the one before.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "chat/json.h"
#include "core/status.h"
#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

namespace tern::cli {

struct Conversation {
  std::string id;
  chat::Value messages;  // all recorded messages
};

// The first `limit` sessions of a JSONL file; errors name the file and line.
Result<std::vector<Conversation>> read_sessions(const std::string& path, int limit);
// ../shared/data/agentic/swe-sessions.jsonl beside the source tree.
std::string default_sessions_path();
// The model's chat template (tokenizer.chat_template).
Result<chat::ChatTemplate> load_chat_template(const gguf::File& file);

// Indices k >= 1 of the user messages: the turns of the session.
std::vector<size_t> user_turns(const Conversation& conv);
// The token prompt of the turn ending at user message k.
Result<std::vector<int32_t>> turn_prompt(const chat::ChatTemplate& tmpl, const tok::Tokenizer& tok,
                                         const Conversation& conv, size_t k);

}  // namespace tern::cli
