// Chat templates: the public face of the Jinja interpreter.
//
//   TERN_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::parse(gguf_chat_template_text));
//   ChatRequest req;  req.messages = ...;  req.add_generation_prompt = true;
//   TERN_ASSIGN_OR_RETURN(std::string prompt, apply_chat_template(t, req));
//
// apply_chat_template reproduces Hugging Face's `tokenizer.apply_chat_template(..., tokenize=False)`
// byte for byte: the same message preprocessing (None-valued keys dropped, reasoning fields
// aliased), the same context variables, and jinja2 semantics in the evaluator.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "chat/jinja_ast.h"
#include "chat/jinja_interp.h"
#include "chat/jinja_parser.h"
#include "chat/value.h"
#include "core/status.h"

namespace tern::chat {

class ChatTemplate {
 public:
  // Parses once; the result renders any number of times (and is cheap to copy).
  static Result<ChatTemplate> parse(std::string_view source, const jinja::ParseLimits& limits = {});

  // Renders with `context` as the template's variables (an object). `now` is what strftime_now()
  // formats; the current local time when absent.
  Result<std::string> render(const Value& context, const RenderLimits& limits = {},
                             const std::optional<std::tm>& now = std::nullopt) const;

 private:
  std::shared_ptr<const jinja::Body> body_;
};

struct ChatRequest {
  Value messages = Value::array();  // [{role, content, tool_calls?, reasoning_content?, ...}, ...]
  Value tools;                      // a list of tool schemas, or None (templates see `tools` as none)
  bool add_generation_prompt = true;
  std::string bos_token;
  std::string eos_token;
  Object extra;                   // further template variables: enable_thinking, date_string, ...
  std::optional<std::tm> now;     // strftime_now's clock (tests pin it)
};

// HF's preprocessing then render. Fails when a message is not an object, or the template fails
// (raise_exception, undefined access, ...) with the template's message and position.
Result<std::string> apply_chat_template(const ChatTemplate& tmpl, const ChatRequest& request,
                                        const RenderLimits& limits = {});

// What HF does to messages before rendering: drops keys whose value is None, and copies a
// message's reasoning (reasoning_content, thinking or reasoning, first present) to both
// `thinking` (first key) and `reasoning_content`.
Result<Value> normalize_messages(const Value& messages);

// OpenAI chat format -> the form chat templates expect (what vLLM and llama.cpp's server do too):
// - a tool call's `function.arguments` JSON string becomes an object (templates apply `tojson`
//   to it); arguments that are not valid JSON stay strings;
// - `content: null` (an assistant turn that only calls tools) becomes "": templates concatenate
//   content, and HF would drop the null key and fail on the missing attribute.
// Fails when `messages` is not a list of objects.
Result<Value> from_openai_messages(const Value& messages);

}  // namespace tern::chat
