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

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "chat/output_parser.h"
#include "core/status.h"
#include "server/api_types.h"
#include "server/history_splice.h"
#include "server/turn_memory.h"
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
  // Texts that end an assistant turn in this template (<|im_end|>, <|eot_id|>, <end_of_turn>,
  // the eos token, ...): where a spliced turn's span ends.
  std::vector<std::string> turn_end_markers{};

  // Errors name the template problem (position and message from the Jinja parser).
  static Result<ChatFormat> from_template(std::string_view source, std::string bos_token, std::string eos_token);
};

struct BuiltPrompt {
  std::vector<int32_t> tokens;
  // Model output the prompt already ends with (a forced tool-call opening); fed to the parser
  // before the generated text.
  std::string forced_output;
  chat::OutputParserOptions parser;

  // For remembering the answer as a turn (turn_memory.h): the tokens before forced_output's are
  // the rendered conversation, whose text and tokens are summarized here.
  size_t n_rendered_tokens = 0;
  uint64_t rendered_tokens_hash = kTokenHashSeed;
  uint64_t rendered_text_hash = 0;
  size_t rendered_text_bytes = 0;
  SpliceStats history;  // remembered assistant turns spliced into `tokens`
};

// Where remembered turns come from; no memory = every message is re-tokenized.
struct HistoryContext {
  TurnMemory* memory = nullptr;
  uint64_t scope = 0;  // model fingerprint and cache salt (history_scope)
};

uint64_t history_scope(uint64_t model_fingerprint, uint64_t cache_salt);

// Files an answer in history.memory: `generated` are the tokens sampled after `prompt` (without
// the end-of-turn token), `answer` what the client received from them. Keys: the answer as sent
// back with its reasoning, without it, and as the model's raw text.
void remember_answer(const HistoryContext& history, const BuiltPrompt& prompt, const Completion& answer,
                     std::span<const int32_t> generated, const tok::Tokenizer& tokenizer);

// What a chat request gives the template: messages in chat form (from_openai_messages), with
// tool calls and results inlined and tools described in the system message for a template that
// does not render tools; tools; flags.
struct TemplateInput {
  chat::Value messages;     // the request's messages in chat form, before inlining
  chat::ChatRequest request;
  bool use_tools = false;
  bool force_call = false;  // tool_choice required or named
  std::optional<bool> thinking;
};
ApiOr<TemplateInput> template_input(const GenerationSpec& spec, const ChatFormat& format);

// call_id_prefix: unique per request, so tool call ids never repeat within a conversation.
// Errors: the template refused the messages, a prompt that is empty, token ids out of range.
ApiOr<BuiltPrompt> build_prompt(const GenerationSpec& spec, const ChatFormat& format, const tok::Tokenizer& tokenizer,
                                const std::string& call_id_prefix, const HistoryContext& history = {});

// The system-message text that describes `tools` (an array of OpenAI function tools) to a model
// whose template does not render them.
std::string describe_tools(const chat::Value& tools);

// OpenAI-shaped messages rewritten for a template without tool support: assistant tool_calls
// become Hermes markup in the content, tool results become user turns in <tool_response>.
chat::Value inline_tool_messages(const chat::Value& messages);

}  // namespace tern::server
