// OpenAI requests -> GenerationSpec. Unknown fields are ignored (clients send many that do not
// change generation: user, metadata, store, ...); known fields are checked for type and range, and
// values tern cannot honour (n > 1, logprobs, images) are refused rather than silently dropped.
#include <algorithm>

#include "server/openai.h"
#include "server/request_common.h"

namespace tern::server {
namespace {

// Message content: a string, null, or an array of parts of which only text is supported.
std::string read_content(const Fields& m) {
  const Json* c = m.get("content");
  if (c == nullptr) return {};
  if (c->is_string()) return c->get<std::string>();
  const std::string path = m.path("content");
  if (!c->is_array()) fail_field(path, std::string("expected a string or an array of content parts, got ") + json_type_name(*c));
  std::string text;
  for (size_t i = 0; i < c->size(); ++i) {
    Fields part((*c)[i], index_path(path, i));
    const std::string type = part.required_string("type");
    if (type != "text")
      fail_field(part.path("type"), "unsupported content part type '" + type + "' (this server reads text only)");
    if (!text.empty()) text += "\n";
    text += part.required_string("text");
  }
  return text;
}

chat::Value read_tool_calls(const Fields& m) {
  const Json* calls = m.array("tool_calls");
  std::vector<chat::Value> out;
  for (size_t i = 0; calls != nullptr && i < calls->size(); ++i) {
    Fields call((*calls)[i], index_path(m.path("tool_calls"), i));
    if (auto type = call.string("type"); type && *type != "function")
      fail_field(call.path("type"), "expected \"function\", got \"" + *type + "\"");
    Fields fn(call.required("function"), call.path("function"));
    const std::string name = fn.required_string("name");
    // Arguments are a JSON string on the wire; some clients send the object itself.
    const Json* args = fn.get("arguments");
    std::string args_text = "{}";
    if (args != nullptr) args_text = args->is_string() ? args->get<std::string>() : args->dump(-1, ' ', false, Json::error_handler_t::replace);
    chat::Object f;
    f.set("name", name);
    f.set("arguments", std::move(args_text));
    chat::Object o;
    o.set("id", call.string("id").value_or("call_" + std::to_string(i)));
    o.set("type", "function");
    o.set("function", chat::Value::object(std::move(f)));
    out.push_back(chat::Value::object(std::move(o)));
  }
  return chat::Value::array(std::move(out));
}

chat::Value read_messages(const Fields& body) {
  const Json* messages = body.array("messages");
  if (messages == nullptr) fail_field("messages", "required field is missing");
  if (messages->empty()) fail_field("messages", "expected at least one message, got an empty array");
  std::vector<chat::Value> out;
  for (size_t i = 0; i < messages->size(); ++i) {
    Fields m((*messages)[i], index_path("messages", i));
    std::string role = m.required_string("role");
    if (role == "developer") role = "system";  // newer clients' name for the system role
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      fail_field(m.path("role"), "expected system, developer, user, assistant or tool, got '" + role + "'");
    chat::Object o;
    o.set("role", role);
    o.set("content", read_content(m));
    if (auto name = m.string("name")) o.set("name", *name);
    if (role == "assistant") {
      chat::Value calls = read_tool_calls(m);
      if (!calls.as_array().empty()) o.set("tool_calls", calls);
      // Reasoning from an earlier turn, under either name clients use.
      if (auto r = m.string("reasoning_content")) o.set("reasoning_content", *r);
      else if (auto r2 = m.string("reasoning")) o.set("reasoning_content", *r2);
    }
    if (role == "tool") o.set("tool_call_id", m.string("tool_call_id").value_or(""));
    out.push_back(chat::Value::object(std::move(o)));
  }
  return chat::Value::array(std::move(out));
}

chat::Value read_tools(const Fields& body) {
  const Json* tools = body.array("tools");
  if (tools == nullptr) return chat::Value();
  std::vector<chat::Value> out;
  for (size_t i = 0; i < tools->size(); ++i) {
    Fields t((*tools)[i], index_path("tools", i));
    const std::string type = t.string("type").value_or("function");
    if (type != "function") fail_field(t.path("type"), "unsupported tool type '" + type + "' (only \"function\")");
    Fields fn(t.required("function"), t.path("function"));
    const std::string name = fn.required_string("name");
    if (name.empty()) fail_field(fn.path("name"), "expected a non-empty function name");
    out.push_back(function_tool(name, fn.get("description"), fn.get("parameters"), fn.path("parameters")));
  }
  return chat::Value::array(std::move(out));
}

ToolChoice read_tool_choice(const Fields& body, const chat::Value& tools) {
  ToolChoice choice;
  const Json* v = body.get("tool_choice");
  if (v == nullptr) return choice;
  if (v->is_string()) {
    const std::string s = v->get<std::string>();
    if (s == "auto") choice.mode = ToolChoiceMode::kAuto;
    else if (s == "none") choice.mode = ToolChoiceMode::kNone;
    else if (s == "required") choice.mode = ToolChoiceMode::kRequired;
    else fail_field("tool_choice", "expected \"auto\", \"none\", \"required\" or a named function, got \"" + s + "\"");
  } else {
    Fields named(*v, "tool_choice");
    Fields fn(named.required("function"), "tool_choice.function");
    choice.mode = ToolChoiceMode::kNamed;
    choice.name = fn.required_string("name");
  }
  if (choice.mode == ToolChoiceMode::kRequired || choice.mode == ToolChoiceMode::kNamed) {
    const std::vector<std::string> names = tool_names(tools);
    if (names.empty()) fail_field("tool_choice", "a tool call is required but no tools were given");
    if (choice.mode == ToolChoiceMode::kNamed && std::find(names.begin(), names.end(), choice.name) == names.end())
      fail_field("tool_choice.function.name", "expected one of the tools' names, got '" + choice.name + "'");
  }
  return choice;
}

// Fields /v1/chat/completions and /v1/completions share.
void read_common(const Fields& body, GenerationSpec& spec, int64_t default_max_tokens) {
  spec.model = body.required_string("model");
  spec.stream = body.boolean("stream").value_or(false);
  if (const Json* so = body.object("stream_options")) {
    Fields opts(*so, "stream_options");
    spec.include_usage = opts.boolean("include_usage").value_or(false);
  }
  RequestParams& p = spec.params;
  p.max_tokens = static_cast<int>(body.integer("max_completion_tokens", 1, kMaxTokensLimit)
                                      .value_or(body.integer("max_tokens", 1, kMaxTokensLimit).value_or(default_max_tokens)));
  p.sampling.temperature = static_cast<float>(body.number("temperature", 0.0, 2.0).value_or(1.0));
  p.sampling.top_p = static_cast<float>(body.number("top_p", 0.0, 1.0).value_or(1.0));
  p.sampling.top_k = static_cast<int>(body.integer("top_k", 0, 1 << 20).value_or(0));  // vLLM's extension
  p.sampling.min_p = static_cast<float>(body.number("min_p", 0.0, 1.0).value_or(0.0));
  p.sampling.presence_penalty = static_cast<float>(body.number("presence_penalty", -2.0, 2.0).value_or(0.0));
  p.sampling.frequency_penalty = static_cast<float>(body.number("frequency_penalty", -2.0, 2.0).value_or(0.0));
  const auto seed = body.integer("seed", INT64_MIN, INT64_MAX);
  p.sampling.seed = seed ? static_cast<uint64_t>(*seed) : random_seed();
  p.stop_strings = read_stop_strings(body, "stop");
  body.only("n", 1);
  body.only("best_of", 1);
}

}  // namespace

ApiOr<GenerationSpec> parse_openai_chat(const Json& json) {
  try {
    Fields body(json, "");
    GenerationSpec spec;
    spec.chat = true;
    read_common(body, spec, kMaxTokensLimit);
    spec.messages = read_messages(body);
    spec.tools = read_tools(body);
    spec.tool_choice = read_tool_choice(body, spec.tools);
    body.boolean("parallel_tool_calls");  // accepted; several calls in one answer are always allowed
    if (body.boolean("logprobs").value_or(false)) fail_field("logprobs", "unsupported value true (logprobs are not returned)");
    if (const Json* rf = body.object("response_format")) {
      Fields format(*rf, "response_format");
      const std::string type = format.required_string("type");
      if (type != "text") fail_field("response_format.type", "unsupported value '" + type + "' (only \"text\")");
    }
    if (auto effort = body.string("reasoning_effort")) {
      if (*effort != "none" && *effort != "minimal" && *effort != "low" && *effort != "medium" && *effort != "high")
        fail_field("reasoning_effort", "expected none, minimal, low, medium or high, got '" + *effort + "'");
      spec.enable_thinking = *effort != "none";
    }
    return spec;
  } catch (const FieldError& e) {
    return e.error;
  }
}

ApiOr<GenerationSpec> parse_openai_completion(const Json& json) {
  try {
    Fields body(json, "");
    GenerationSpec spec;
    spec.chat = false;
    read_common(body, spec, 16);  // the legacy endpoint's documented default
    const Json& prompt = body.required("prompt");
    // A string, a list holding one string, a list of token ids, or a list holding one such list.
    const Json* p = &prompt;
    std::string path = "prompt";
    if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) {
      p = &(*p)[0];
      path = "prompt[0]";
    } else if (p->is_array() && !p->empty() && ((*p)[0].is_string() || (*p)[0].is_array())) {
      fail_field("prompt", "unsupported: " + std::to_string(p->size()) + " prompts in one request (send one per request)");
    }
    if (p->is_string()) {
      spec.prompt = p->get<std::string>();
    } else if (p->is_array()) {
      for (size_t i = 0; i < p->size(); ++i) {
        const Json& id = (*p)[i];
        if (!id.is_number_integer()) fail_field(index_path(path, i), std::string("expected a token id, got ") + json_type_name(id));
        const int64_t v = id.get<int64_t>();
        if (v < 0 || v > INT32_MAX) fail_field(index_path(path, i), "expected a token id, got " + std::to_string(v));
        spec.prompt_ids.push_back(static_cast<int32_t>(v));
      }
    } else {
      fail_field("prompt", std::string("expected a string or an array of token ids, got ") + json_type_name(*p));
    }
    if (spec.prompt.empty() && spec.prompt_ids.empty()) fail_field(path, "expected a non-empty prompt");
    if (body.boolean("echo").value_or(false)) fail_field("echo", "unsupported value true");
    if (auto suffix = body.string("suffix"); suffix && !suffix->empty()) fail_field("suffix", "unsupported (no fill-in-the-middle)");
    if (const Json* lp = body.get("logprobs"); lp != nullptr && !(lp->is_number_integer() && lp->get<int64_t>() == 0))
      fail_field("logprobs", "unsupported (logprobs are not returned)");
    return spec;
  } catch (const FieldError& e) {
    return e.error;
  }
}

}  // namespace tern::server
