// Streaming parser of model output: splits generated text, as it arrives, into structured events
// (text, reasoning, tool calls with arguments streamed as they arrive).
//
// Formats (OutputFormat):
//   Hermes      <tool_call>{"name": ..., "arguments": {...}}</tool_call>   (Qwen2.5, Qwen3, Hermes)
//   Qwen3Coder  <tool_call><function=NAME><parameter=KEY>VALUE</parameter>...</function></tool_call>
//   Llama3      {"name": ..., "parameters": {...}} as the whole message (optionally after
//               <|python_tag|>; several calls separated by ';')
//   Mistral     [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]  or  [TOOL_CALLS]NAME[ARGS]{...}
// and, with `reasoning` on, <think>...</think> before the answer.
//
// Invariants:
// - Split-invariance: the concatenated text, reasoning and per-call arguments are the same however
//   the output is cut into deltas (feeding one byte at a time equals feeding it all at once). Bytes
//   that might begin a marker are held back until they cannot; text events never end inside a
//   UTF-8 sequence unless the output itself does.
// - Nothing is dropped: markup that does not parse (invalid JSON, an unclosed tag, an unknown tool
//   name) comes out as Text events with `malformed` set, raw, byte for byte. A call whose start was
//   already announced and that then breaks ends with ToolCallEnd{malformed} before that text.
// - Arguments stream as the JSON text of an object: the concatenated ToolCallArgs fragments of a
//   call that ends well parse as a JSON object.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "chat/value.h"

namespace tern::chat {

enum class OutputFormat { PlainText, Hermes, Qwen3Coder, Llama3, Mistral };

struct OutputParserOptions {
  OutputFormat format = OutputFormat::PlainText;
  bool reasoning = false;            // parse <think>...</think>
  bool starts_in_reasoning = false;  // the prompt ended with "<think>" (Qwen3, DeepSeek-R1 prompts)
  // The request's tools (OpenAI schemas). When non-empty, a call naming another tool is malformed;
  // Qwen3Coder also reads parameter types from it to type parameter values.
  Value tools;
  std::string id_prefix = "call";  // tool call ids: prefix + index, zero-padded to 9 characters
};

struct OutputEvent {
  enum class Kind { Text, Reasoning, ToolCallStart, ToolCallArgs, ToolCallEnd };
  Kind kind = Kind::Text;
  std::string text;  // Text/Reasoning: the delta; ToolCallArgs: a fragment of the arguments JSON
  std::string id;    // tool call events
  std::string name;  // ToolCallStart
  // Text: raw markup that failed to parse as a tool call. ToolCallEnd: the call was abandoned.
  // Reasoning (from finish()): the <think> block never closed.
  bool malformed = false;
};

// Options for a model, read off its chat template: the tool-call format the template teaches
// (<tool_call> JSON or Qwen3-Coder XML, [TOOL_CALLS], Llama 3's JSON), whether it knows <think>,
// and whether `prompt` (the rendered prompt) already opened a <think> block. Templates that
// teach none of these formats parse as plain text.
OutputParserOptions output_options_for_template(std::string_view template_source, std::string_view prompt,
                                                const Value& tools);

class OutputParser {
 public:
  explicit OutputParser(OutputParserOptions options);

  std::vector<OutputEvent> feed(std::string_view delta);
  // End of output: flushes held-back bytes; an unfinished call becomes malformed text.
  std::vector<OutputEvent> finish();

 private:
  enum class Mode { Text, Reasoning, Call };
  // Where a tool call's markup is in its grammar (see output_parser.cpp).
  enum class Stage {
    // JSON call object (Hermes, Llama3, Mistral).
    ObjOpen, ObjKeyOrEnd, ObjKey, ObjColon, ObjValue, ObjNameString, ObjArgs, ObjSkipValue, ObjCommaOrEnd,
    // Framing around objects.
    HermesClose, MistralArrayOpen, MistralArrayNext, MistralName, MistralArgs, LlamaNext,
    // Qwen3-Coder XML.
    XmlFunctionOpen, XmlBody, XmlParamValue, XmlFunctionClosed,
  };
  struct ValueScan {
    bool started = false;
    bool in_string = false;
    bool escape = false;
    bool scalar = false;
    int depth = 0;
    char first = 0;
  };

  void step(std::vector<OutputEvent>* out, bool at_end);
  bool step_text(std::vector<OutputEvent>* out, bool at_end);
  bool step_reasoning(std::vector<OutputEvent>* out, bool at_end);
  bool step_call(std::vector<OutputEvent>* out, bool at_end);
  bool step_json_object(std::vector<OutputEvent>* out, bool at_end, bool* done);
  bool step_xml(std::vector<OutputEvent>* out, bool at_end);
  // Advances `scan` over a JSON value in buf_ from pos_; true when the value ended.
  bool scan_value(ValueScan* scan, bool at_end, bool* bad);
  bool skip_ws(bool at_end);
  void begin_call(std::string start_marker, Stage stage);
  void start_call(std::vector<OutputEvent>* out);
  void emit_args(std::vector<OutputEvent>* out, std::string fragment);
  void end_call(std::vector<OutputEvent>* out);
  void fail_call(std::vector<OutputEvent>* out);
  // A name running from buf_[start] to a delimiter of delim_len bytes found at delim_at (npos:
  // not yet) is too long when a byte-at-a-time feed would have seen kMaxNameBytes bytes after
  // start with no whole delimiter in them: the same verdict however the output was split. The
  // call then fails at start + kMaxNameBytes + 1, where that feed would have stopped.
  bool name_too_long(size_t start, size_t delim_at, size_t delim_len) const;
  bool fail_long_name(std::vector<OutputEvent>* out, size_t start);
  void emit_text(std::vector<OutputEvent>* out, std::string text, bool malformed);
  bool tool_known(const std::string& name) const;
  std::string param_json(const std::string& key, const std::string& raw) const;

  OutputParserOptions opt_;
  std::vector<std::string> tool_names_;
  Mode mode_ = Mode::Text;
  std::string buf_;  // bytes not yet consumed
  size_t pos_ = 0;   // consumed prefix of buf_ (in Call mode: scanned, kept until the call resolves)
  // After a failed <tool_call>, the text up to its closing tag is still the broken call's markup.
  std::string_view malformed_until_;
  // After a failed Llama 3 or Mistral call (which have no closing tag) the rest of the output is
  // the broken calls' markup.
  bool malformed_rest_ = false;
  bool saw_content_ = false;  // non-whitespace text was emitted (a leading <think> or Llama '{' no longer applies)
  size_t n_calls_ = 0;

  // The call being parsed.
  Stage stage_ = Stage::ObjOpen;
  Stage after_object_ = Stage::HermesClose;
  std::string call_id_;
  std::string call_name_;
  bool call_started_ = false;     // ToolCallStart was emitted
  bool call_has_args_ = false;    // some argument bytes were emitted
  std::string key_;               // current JSON key / XML parameter name
  size_t obj_start_ = 0;          // offset of the call object's '{' in buf_
  size_t value_start_ = 0;        // offset of the current value in buf_
  size_t args_start_ = 0, args_end_ = 0;  // the arguments value (when it came before the name)
  bool args_seen_ = false;
  ValueScan scan_;
  int n_xml_params_ = 0;
};

}  // namespace tern::chat
