// libFuzzer target for the chat layer's parsers of untrusted text: chat templates (a GGUF file's
// tokenizer.chat_template is untrusted), JSON (request bodies, tool-call arguments) and model
// output (the streaming tool-call parser). Beyond "no crash, no sanitizer report, no runaway time
// or memory" it checks:
//   - a template that fails to parse or render gets a message naming the template line/column;
//   - a rendered prompt respects the output limit;
//   - whatever parse_json accepts, dump_json writes, and parsing that again gives an equal value;
//   - the output parser gives the same events fed whole or one byte at a time (every format), and
//     the arguments of every call that ends well parse as a JSON object.
// The template renders against a fixed conversation with tools, tool calls and reasoning, so the
// fuzzer reaches the same paths real templates take. A failed property is a TERN_CHECK (abort).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "chat/chat_template.h"
#include "chat/json.h"
#include "chat/output_parser.h"
#include "core/check.h"

namespace {

using tern::chat::ChatRequest;
using tern::chat::ChatTemplate;
using tern::chat::Value;

constexpr const char* kConversation = R"({"messages": [
  {"role": "system", "content": "Be brief."},
  {"role": "user", "content": "Weather in Paris?"},
  {"role": "assistant", "content": "", "reasoning_content": "Use the tool.",
   "tool_calls": [{"id": "call0a1b2", "type": "function",
                   "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2, "x": 1.5}}}]},
  {"role": "tool", "tool_call_id": "call0a1b2", "name": "get_weather", "content": "18C"},
  {"role": "user", "content": [{"type": "text", "text": "Thanks"}]}],
 "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]})";

const Value& conversation() {
  static const Value v = tern::chat::parse_json(kConversation).value();
  return v;
}

void check_json_round_trip(std::string_view text) {
  auto parsed = tern::chat::parse_json(text, {.max_depth = 64});
  if (!parsed.is_ok()) {
    TERN_CHECK_MSG(parsed.status().message().find("line") != std::string::npos, "json error without a position");
    return;
  }
  auto dumped = tern::chat::dump_json(*parsed);
  TERN_CHECK_MSG(dumped.is_ok(), "dump_json rejected what parse_json accepted");
  auto again = tern::chat::parse_json(*dumped, {.max_depth = 64});
  TERN_CHECK_MSG(again.is_ok(), "parse_json rejected what dump_json wrote");
  // NaN never equals itself, in Python as here; skip values that hold one.
  if (dumped->find("NaN") == std::string::npos) {
    TERN_CHECK_MSG(tern::chat::equals(*parsed, *again), "json round trip changed the value");
  }
}

using tern::chat::OutputEvent;

// Events with adjacent deltas of one kind merged: the split-independent content of a stream.
std::vector<OutputEvent> collapse(std::vector<OutputEvent> events) {
  std::vector<OutputEvent> merged;
  for (OutputEvent& e : events) {
    const bool delta = e.kind == OutputEvent::Kind::Text || e.kind == OutputEvent::Kind::Reasoning ||
                       e.kind == OutputEvent::Kind::ToolCallArgs;
    if (delta && !merged.empty() && merged.back().kind == e.kind && merged.back().malformed == e.malformed &&
        merged.back().id == e.id) {
      merged.back().text += e.text;
    } else if (!(delta && e.text.empty() && !e.malformed)) {
      merged.push_back(std::move(e));
    }
  }
  return merged;
}

std::vector<OutputEvent> parse_output(const tern::chat::OutputParserOptions& opt, std::string_view text, bool bytewise) {
  tern::chat::OutputParser p(opt);
  std::vector<OutputEvent> all;
  auto take = [&](std::vector<OutputEvent> events) {
    for (OutputEvent& e : events) all.push_back(std::move(e));
  };
  if (bytewise) {
    for (size_t i = 0; i < text.size(); ++i) take(p.feed(text.substr(i, 1)));
  } else {
    take(p.feed(text));
  }
  take(p.finish());
  return collapse(std::move(all));
}

void check_output_parser(std::string_view text) {
  using tern::chat::OutputFormat;
  for (OutputFormat format : {OutputFormat::PlainText, OutputFormat::Hermes, OutputFormat::Qwen3Coder,
                              OutputFormat::Llama3, OutputFormat::Mistral}) {
    tern::chat::OutputParserOptions opt;
    opt.format = format;
    opt.reasoning = true;
    opt.tools = *conversation().get("tools");
    const std::vector<OutputEvent> whole = parse_output(opt, text, false);
    const std::vector<OutputEvent> bytes = parse_output(opt, text, true);
    TERN_CHECK_MSG(whole.size() == bytes.size(), "events depend on how the output was split");
    std::string args;
    for (size_t i = 0; i < whole.size(); ++i) {
      TERN_CHECK(whole[i].kind == bytes[i].kind && whole[i].text == bytes[i].text &&
                 whole[i].malformed == bytes[i].malformed && whole[i].name == bytes[i].name);
      if (whole[i].kind == OutputEvent::Kind::ToolCallStart) args.clear();
      if (whole[i].kind == OutputEvent::Kind::ToolCallArgs) args += whole[i].text;
      if (whole[i].kind == OutputEvent::Kind::ToolCallEnd && !whole[i].malformed) {
        auto parsed = tern::chat::parse_json(args);
        TERN_CHECK_MSG(parsed.is_ok() && parsed->is_object(), "a well-ended call's arguments are not a JSON object");
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  check_json_round_trip(text);
  if (size <= 1024) check_output_parser(text);  // byte-at-a-time feeding is quadratic in the worst case

  auto tmpl = ChatTemplate::parse(text, {.max_depth = 64});
  if (!tmpl.is_ok()) {
    TERN_CHECK_MSG(tmpl.status().message().rfind("template line ", 0) == 0, "parse error without a position");
    return 0;
  }
  ChatRequest req;
  req.messages = *conversation().get("messages");
  req.tools = *conversation().get("tools");
  req.bos_token = "<s>";
  req.eos_token = "</s>";
  req.now = std::tm{};
  tern::chat::RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_steps = 200'000;
  limits.max_call_depth = 32;
  limits.max_range = 10'000;
  auto out = tern::chat::apply_chat_template(*tmpl, req, limits);
  if (out.is_ok()) {
    TERN_CHECK(out->size() <= limits.max_output_bytes);
  } else {
    TERN_CHECK_MSG(out.status().message().rfind("template line ", 0) == 0, "render error without a position");
  }
  return 0;
}
