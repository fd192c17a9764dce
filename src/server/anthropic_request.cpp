// Anthropic Messages requests -> GenerationSpec. The conversation is rewritten into OpenAI-shaped
// messages: `system` becomes the first message, tool_result blocks become tool messages (placed
// before the user's own text, since they answer the previous assistant turn), tool_use blocks
// become tool_calls and thinking blocks reasoning_content.
#include <algorithm>

#include "server/anthropic.h"
#include "server/request_common.h"

namespace tern::server {
namespace {

chat::Value message(const std::string& role, std::string content) {
  chat::Object o;
  o.set("role", role);
  o.set("content", std::move(content));
  return chat::Value::object(std::move(o));
}

void refuse_block_type(const Fields& block, const std::string& type) {
  fail_field(block.path("type"), "unsupported content block type '" + type + "' (this server reads text only)");
}

// Text of a string or an array of text blocks (system prompts, tool results).
std::string read_text_blocks(const Json& v, const std::string& path) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) fail_field(path, std::string("expected a string or an array of text blocks, got ") + json_type_name(v));
  std::string text;
  for (size_t i = 0; i < v.size(); ++i) {
    Fields block(v[i], index_path(path, i));
    const std::string type = block.required_string("type");
    if (type != "text") refuse_block_type(block, type);
    if (!text.empty()) text += "\n";
    text += block.required_string("text");
  }
  return text;
}

void append_text(std::string& to, const std::string& text) {
  if (!to.empty() && !text.empty()) to += "\n";
  to += text;
}

void read_user(const Fields& m, std::vector<chat::Value>& out) {
  const Json& content = m.required("content");
  if (content.is_string()) {
    out.push_back(message("user", content.get<std::string>()));
    return;
  }
  if (!content.is_array()) fail_field(m.path("content"), std::string("expected a string or an array of content blocks, got ") + json_type_name(content));
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    Fields block(content[i], index_path(m.path("content"), i));
    const std::string type = block.required_string("type");
    if (type == "text") {
      append_text(text, block.required_string("text"));
    } else if (type == "tool_result") {
      chat::Object o;
      o.set("role", "tool");
      const Json* c = block.get("content");
      std::string result = c != nullptr ? read_text_blocks(*c, block.path("content")) : std::string();
      if (block.boolean("is_error").value_or(false)) result = "Error: " + result;
      o.set("content", std::move(result));
      o.set("tool_call_id", block.required_string("tool_use_id"));
      out.push_back(chat::Value::object(std::move(o)));
    } else {
      refuse_block_type(block, type);
    }
  }
  if (!text.empty()) out.push_back(message("user", std::move(text)));
}

void read_assistant(const Fields& m, std::vector<chat::Value>& out) {
  const Json& content = m.required("content");
  chat::Object o;
  o.set("role", "assistant");
  if (content.is_string()) {
    o.set("content", content.get<std::string>());
    out.push_back(chat::Value::object(std::move(o)));
    return;
  }
  if (!content.is_array()) fail_field(m.path("content"), std::string("expected a string or an array of content blocks, got ") + json_type_name(content));
  std::string text, reasoning;
  std::vector<chat::Value> calls;
  for (size_t i = 0; i < content.size(); ++i) {
    Fields block(content[i], index_path(m.path("content"), i));
    const std::string type = block.required_string("type");
    if (type == "text") {
      append_text(text, block.required_string("text"));
    } else if (type == "thinking") {
      append_text(reasoning, block.required_string("thinking"));
    } else if (type == "redacted_thinking") {
      // Opaque to anyone but its issuer: nothing to render.
    } else if (type == "tool_use") {
      const Json* input = block.object("input");
      chat::Object fn;
      fn.set("name", block.required_string("name"));
      fn.set("arguments", input != nullptr ? input->dump(-1, ' ', false, Json::error_handler_t::replace) : "{}");
      chat::Object call;
      call.set("id", block.required_string("id"));
      call.set("type", "function");
      call.set("function", chat::Value::object(std::move(fn)));
      calls.push_back(chat::Value::object(std::move(call)));
    } else {
      refuse_block_type(block, type);
    }
  }
  o.set("content", std::move(text));
  if (!calls.empty()) o.set("tool_calls", chat::Value::array(std::move(calls)));
  if (!reasoning.empty()) o.set("reasoning_content", std::move(reasoning));
  out.push_back(chat::Value::object(std::move(o)));
}

chat::Value read_tools(const Fields& body) {
  const Json* tools = body.array("tools");
  if (tools == nullptr) return chat::Value();
  std::vector<chat::Value> out;
  for (size_t i = 0; i < tools->size(); ++i) {
    Fields t((*tools)[i], index_path("tools", i));
    // Client tools have no type (or "custom"); typed ones are Anthropic's server-side tools.
    if (auto type = t.string("type"); type && *type != "custom")
      fail_field(t.path("type"), "unsupported tool type '" + *type + "' (only client tools)");
    const std::string name = t.required_string("name");
    if (name.empty()) fail_field(t.path("name"), "expected a non-empty tool name");
    const Json& schema = t.required("input_schema");
    out.push_back(function_tool(name, t.get("description"), &schema, t.path("input_schema")));
  }
  return chat::Value::array(std::move(out));
}

ToolChoice read_tool_choice(const Fields& body, const chat::Value& tools) {
  ToolChoice choice;
  const Json* v = body.object("tool_choice");
  if (v == nullptr) return choice;
  Fields c(*v, "tool_choice");
  const std::string type = c.required_string("type");
  if (type == "auto") choice.mode = ToolChoiceMode::kAuto;
  else if (type == "none") choice.mode = ToolChoiceMode::kNone;
  else if (type == "any") choice.mode = ToolChoiceMode::kRequired;
  else if (type == "tool") choice.mode = ToolChoiceMode::kNamed, choice.name = c.required_string("name");
  else fail_field("tool_choice.type", "expected auto, any, tool or none, got '" + type + "'");
  c.boolean("disable_parallel_tool_use");
  if (choice.mode == ToolChoiceMode::kRequired || choice.mode == ToolChoiceMode::kNamed) {
    const std::vector<std::string> names = tool_names(tools);
    if (names.empty()) fail_field("tool_choice", "a tool call is required but no tools were given");
    if (choice.mode == ToolChoiceMode::kNamed && std::find(names.begin(), names.end(), choice.name) == names.end())
      fail_field("tool_choice.name", "expected one of the tools' names, got '" + choice.name + "'");
  }
  return choice;
}

void read_thinking(const Fields& body, GenerationSpec& spec) {
  const Json* v = body.object("thinking");
  if (v == nullptr) return;
  Fields t(*v, "thinking");
  const std::string type = t.required_string("type");
  if (type == "disabled") {
    spec.enable_thinking = false;
  } else if (type == "enabled") {
    if (t.get("budget_tokens") == nullptr) fail_field("thinking.budget_tokens", "required field is missing");
    spec.enable_thinking = true;
    spec.params.think_budget_tokens = static_cast<int>(*t.integer("budget_tokens", 1, kMaxTokensLimit));
  } else if (type == "adaptive") {
    spec.enable_thinking = true;
  } else {
    fail_field("thinking.type", "expected enabled, disabled or adaptive, got '" + type + "'");
  }
}

}  // namespace

ApiOr<GenerationSpec> parse_anthropic_messages(const Json& json, bool count_only) {
  try {
    Fields body(json, "");
    GenerationSpec spec;
    spec.chat = true;
    spec.model = body.required_string("model");
    if (count_only) {
      spec.params.max_tokens = 1;
    } else {
      if (body.get("max_tokens") == nullptr) fail_field("max_tokens", "required field is missing");
      spec.params.max_tokens = static_cast<int>(*body.integer("max_tokens", 1, kMaxTokensLimit));
    }
    std::vector<chat::Value> messages;
    if (const Json* system = body.get("system")) {
      std::string text = read_text_blocks(*system, "system");
      messages.push_back(message("system", std::move(text)));
    }
    const Json* list = body.array("messages");
    if (list == nullptr) fail_field("messages", "required field is missing");
    if (list->empty()) fail_field("messages", "expected at least one message, got an empty array");
    for (size_t i = 0; i < list->size(); ++i) {
      Fields m((*list)[i], index_path("messages", i));
      const std::string role = m.required_string("role");
      if (role == "user") read_user(m, messages);
      else if (role == "assistant") read_assistant(m, messages);
      else fail_field(m.path("role"), "expected user or assistant, got '" + role + "'");
    }
    spec.messages = chat::Value::array(std::move(messages));
    spec.tools = read_tools(body);
    spec.tool_choice = read_tool_choice(body, spec.tools);
    RequestParams& p = spec.params;
    p.stop_strings = read_stop_strings(body, "stop_sequences");
    p.sampling.temperature = static_cast<float>(body.number("temperature", 0.0, 1.0).value_or(1.0));
    p.sampling.top_p = static_cast<float>(body.number("top_p", 0.0, 1.0).value_or(1.0));
    p.sampling.top_k = static_cast<int>(body.integer("top_k", 0, 1 << 20).value_or(0));
    p.sampling.seed = random_seed();
    spec.stream = body.boolean("stream").value_or(false);
    read_thinking(body, spec);
    return spec;
  } catch (const FieldError& e) {
    return e.error;
  }
}

}  // namespace tern::server
