#include "chat/chat_template.h"

#include "chat/json.h"

namespace tern::chat {

Result<ChatTemplate> ChatTemplate::parse(std::string_view source, const jinja::ParseLimits& limits) {
  TERN_ASSIGN_OR_RETURN(jinja::Body body, jinja::parse_template(source, limits));
  ChatTemplate t;
  t.body_ = std::make_shared<const jinja::Body>(std::move(body));
  return t;
}

Result<std::string> ChatTemplate::render(const Value& context, const RenderLimits& limits,
                                         const std::optional<std::tm>& now) const {
  std::tm clock{};
  if (now) {
    clock = *now;
  } else {
    const std::time_t t = std::time(nullptr);
    localtime_r(&t, &clock);
  }
  Interpreter interp(limits, clock);
  return interp.render(*body_, context);
}

Result<Value> normalize_messages(const Value& messages) {
  if (!messages.is_array()) return error("messages: expected a list, got " + type_name(messages));
  std::vector<Value> out;
  for (size_t i = 0; i < messages.as_array().size(); ++i) {
    const Value& m = messages.as_array()[i];
    if (!m.is_object()) {
      return error("messages[" + std::to_string(i) + "]: expected an object, got " + type_name(m));
    }
    Object kept;
    for (const auto& [k, v] : m.as_object().items()) {
      if (!v.is_none()) kept.set(k, v);
    }
    const Value* reasoning = nullptr;
    for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
      if (reasoning == nullptr) reasoning = kept.find(key);
    }
    if (reasoning != nullptr) {
      // {"thinking": r, **message, "reasoning_content": r}: `thinking` keeps the first position.
      const Value r = *reasoning;
      Object aliased;
      aliased.set("thinking", r);
      for (const auto& [k, v] : kept.items()) aliased.set(k, v);
      aliased.set("thinking", r);
      aliased.set("reasoning_content", r);
      kept = std::move(aliased);
    }
    out.push_back(Value::object(std::move(kept)));
  }
  return Value::array(std::move(out));
}

Result<std::string> apply_chat_template(const ChatTemplate& tmpl, const ChatRequest& request,
                                        const RenderLimits& limits) {
  TERN_ASSIGN_OR_RETURN(Value messages, normalize_messages(request.messages));
  Object context;
  // HF's order: special tokens, then kwargs (which override them), then the render arguments.
  context.set("bos_token", Value(request.bos_token));
  context.set("eos_token", Value(request.eos_token));
  for (const auto& [k, v] : request.extra.items()) context.set(k, v);
  context.set("messages", messages);
  context.set("tools", request.tools.is_undefined() ? Value() : request.tools);
  context.set("documents", Value());
  context.set("add_generation_prompt", Value(request.add_generation_prompt));
  return tmpl.render(Value::object(std::move(context)), limits, request.now);
}

Result<Value> from_openai_messages(const Value& messages) {
  if (!messages.is_array()) return error("messages: expected a list, got " + type_name(messages));
  std::vector<Value> out;
  for (size_t i = 0; i < messages.as_array().size(); ++i) {
    Value m = messages.as_array()[i];
    if (!m.is_object()) return error("messages[" + std::to_string(i) + "]: expected an object, got " + type_name(m));
    const Value* content = m.get("content");
    if (content != nullptr && content->is_none()) {
      Object with_text = m.as_object();
      with_text.set("content", Value(std::string()));
      m = Value::object(std::move(with_text));
    }
    const Value* calls = m.get("tool_calls");
    if (calls == nullptr || !calls->is_array()) {
      out.push_back(m);
      continue;
    }
    std::vector<Value> new_calls;
    for (const Value& call : calls->as_array()) {
      const Value* fn = call.get("function");
      const Value* args = fn != nullptr ? fn->get("arguments") : nullptr;
      if (args == nullptr || !args->is_string()) {
        new_calls.push_back(call);
        continue;
      }
      Result<Value> parsed = parse_json(args->as_string());
      if (!parsed.is_ok()) {
        new_calls.push_back(call);
        continue;
      }
      Object new_fn = fn->as_object();
      new_fn.set("arguments", std::move(parsed).value());
      Object new_call = call.as_object();
      new_call.set("function", Value::object(std::move(new_fn)));
      new_calls.push_back(Value::object(std::move(new_call)));
    }
    Object new_message = m.as_object();
    new_message.set("tool_calls", Value::array(std::move(new_calls)));
    out.push_back(Value::object(std::move(new_message)));
  }
  return Value::array(std::move(out));
}

}  // namespace tern::chat
