// The shared request builder: a GenerationSpec becomes prompt token ids plus the options of the
// parser that will read the model's output. Both dialects go through here.
//
// Chat requests render the model's own chat template (from the GGUF) the way Hugging Face does.
// Templates that do not render `tools` themselves (SmolLM2's, Gemma's) get tools described in the
// system message and past tool calls/results written in the Hermes convention
// (<tool_call>{...}</tool_call>, <tool_response>...</tool_response>), which the output parser
// then reads back. tool_choice "required" or a named function is enforced by ending the prompt
// with the opening of a call in the model's format; that text counts as output (the parser reads
// it first), so the reply always starts as a call.
#pragma once

#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "chat/output_parser.h"
#include "core/status.h"
#include "server/api_types.h"
#include "tokenizer/tokenizer.h"

namespace tern::server {

// The model's chat conventions, read once at startup.
struct ChatFormat {
  chat::ChatTemplate tmpl;
  std::string bos_token;  // template variables bos_token / eos_token
  std::string eos_token;
  chat::OutputFormat tool_format = chat::OutputFormat::Hermes;  // how the model writes calls
  bool native_tools = false;  // the template renders `tools` (else they go into the system message)
  bool reasoning = false;     // the template knows <think> blocks

  // Errors name the template problem (position and message from the Jinja parser).
  static Result<ChatFormat> from_template(std::string_view source, std::string bos_token, std::string eos_token);
};

struct BuiltPrompt {
  std::vector<int32_t> tokens;
  // Model output the prompt already ends with (a forced tool-call opening); fed to the parser
  // before the generated text.
  std::string forced_output;
  chat::OutputParserOptions parser;
};

// call_id_prefix: unique per request, so tool call ids never repeat within a conversation.
// Errors: the template refused the messages, a prompt that is empty, token ids out of range.
ApiOr<BuiltPrompt> build_prompt(const GenerationSpec& spec, const ChatFormat& format, const tok::Tokenizer& tokenizer,
                                const std::string& call_id_prefix);

// The system-message text that describes `tools` (an array of OpenAI function tools) to a model
// whose template does not render them.
std::string describe_tools(const chat::Value& tools);

// OpenAI-shaped messages rewritten for a template without tool support: assistant tool_calls
// become Hermes markup in the content, tool results become user turns in <tool_response>.
chat::Value inline_tool_messages(const chat::Value& messages);

}  // namespace tern::server
