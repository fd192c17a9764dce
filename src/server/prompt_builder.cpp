#include "server/prompt_builder.h"

#include "chat/json.h"

namespace tern::server {
namespace {

bool contains(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

std::string string_field(const chat::Value& v, std::string_view key) {
  const chat::Value* f = v.get(key);
  return f != nullptr && f->is_string() ? f->as_string() : std::string();
}

chat::Value message(std::string role, std::string content) {
  chat::Object o;
  o.set("role", std::move(role));
  o.set("content", std::move(content));
  return chat::Value::object(std::move(o));
}

// JSON as the Hermes convention writes it (Python's json.dumps defaults).
std::string dump(const chat::Value& v) {
  Result<std::string> s = chat::dump_json(v);
  return s.is_ok() ? s.value() : std::string("null");
}

// The assistant text that opens a call in the model's format: any call (name empty) or the named one.
std::string forced_call_opening(chat::OutputFormat format, const std::string& name) {
  const std::string quoted = name.empty() ? std::string() : dump(chat::Value(name));
  switch (format) {
    case chat::OutputFormat::Qwen3Coder:
      return name.empty() ? "<tool_call>\n<function=" : "<tool_call>\n<function=" + name + ">\n";
    case chat::OutputFormat::Llama3:
      return name.empty() ? "{\"name\": \"" : "{\"name\": " + quoted + ", \"parameters\": ";
    case chat::OutputFormat::Mistral:
      return name.empty() ? "[TOOL_CALLS][{\"name\": \"" : "[TOOL_CALLS][{\"name\": " + quoted + ", \"arguments\": ";
    case chat::OutputFormat::Hermes:
    case chat::OutputFormat::PlainText:
      break;
  }
  return name.empty() ? "<tool_call>\n{\"name\": \"" : "<tool_call>\n{\"name\": " + quoted + ", \"arguments\": ";
}

ApiOr<BuiltPrompt> build_raw(const GenerationSpec& spec, const tok::Tokenizer& tokenizer) {
  BuiltPrompt out;
  if (!spec.prompt_ids.empty()) {
    for (size_t i = 0; i < spec.prompt_ids.size(); ++i) {
      const int32_t id = spec.prompt_ids[i];
      if (id < 0 || id >= tokenizer.n_vocab())
        return invalid_field("prompt[" + std::to_string(i) + "]", "expected a token id in [0, " +
                                                                      std::to_string(tokenizer.n_vocab()) + "), got " +
                                                                      std::to_string(id));
    }
    out.tokens = spec.prompt_ids;
  } else {
    out.tokens = tokenizer.encode(spec.prompt, /*add_bos_eos=*/true, /*parse_special=*/true);
  }
  if (out.tokens.empty()) return invalid_field("prompt", "expected a non-empty prompt, got one with no tokens");
  out.parser.format = chat::OutputFormat::PlainText;
  return out;
}

// The assistant messages of `original` (the request's, in chat form) that the turn memory knows,
// as indices into `rendered` (the list given to the template: the same assistant messages in the
// same order, with tool calls possibly inlined and a system message added).
std::vector<HistoryHit> find_history(const chat::Value& original, const chat::Value& rendered, const HistoryContext& history) {
  std::vector<HistoryHit> hits;
  if (history.memory == nullptr) return hits;
  std::vector<size_t> rendered_assistants;
  for (size_t i = 0; i < rendered.as_array().size(); ++i)
    if (string_field(rendered.as_array()[i], "role") == "assistant") rendered_assistants.push_back(i);
  size_t n_seen = 0;
  for (const chat::Value& m : original.as_array()) {
    if (string_field(m, "role") != "assistant") continue;
    const size_t ordinal = n_seen++;
    if (ordinal >= rendered_assistants.size()) return {};  // not a 1:1 rewrite after all
    HistoryHit hit;
    hit.message_index = rendered_assistants[ordinal];
    for (const MessageKey& k : lookup_keys(m)) {
      for (auto& t : history.memory->find(history.scope, k)) hit.turns.push_back(std::move(t));
    }
    if (!hit.turns.empty()) hits.push_back(std::move(hit));
  }
  if (n_seen != rendered_assistants.size()) return {};
  return hits;
}

}  // namespace

uint64_t history_scope(uint64_t model_fingerprint, uint64_t cache_salt) {
  return model_fingerprint ^ ((cache_salt + 1) * 0xff51afd7ed558ccdull);
}

Result<ChatFormat> ChatFormat::from_template(std::string_view source, std::string bos_token, std::string eos_token) {
  Result<chat::ChatTemplate> tmpl = chat::ChatTemplate::parse(source);
  if (!tmpl.is_ok()) return error("chat template: " + tmpl.status().message());
  ChatFormat f{std::move(tmpl).value(), std::move(bos_token), std::move(eos_token)};
  f.native_tools = contains(source, "tools");
  if (contains(source, "<function=") && contains(source, "<tool_call>")) {
    f.tool_format = chat::OutputFormat::Qwen3Coder;
  } else if (contains(source, "<tool_call>")) {
    f.tool_format = chat::OutputFormat::Hermes;
  } else if (contains(source, "[TOOL_CALLS]")) {
    f.tool_format = chat::OutputFormat::Mistral;
  } else if (contains(source, "<|python_tag|>") || contains(source, "ipython")) {
    f.tool_format = chat::OutputFormat::Llama3;
  } else {
    // Unknown markup, or tools described by us in the system message: the Hermes convention.
    f.tool_format = chat::OutputFormat::Hermes;
    f.native_tools = f.native_tools && contains(source, "tool_call");
  }
  f.reasoning = contains(source, "<think>");
  for (const char* marker : {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>",
                             "<|end_of_text|>", "</s>"}) {
    if (contains(source, marker)) f.turn_end_markers.emplace_back(marker);
  }
  if (!f.eos_token.empty() && contains(source, "eos_token")) f.turn_end_markers.push_back(f.eos_token);
  return f;
}

std::string describe_tools(const chat::Value& tools) {
  std::string s =
      "# Tools\n\nYou can call the functions described below. Their signatures, one JSON object per line:\n<tools>\n";
  if (tools.is_array())
    for (const chat::Value& t : tools.as_array()) s += dump(t) + "\n";
  s +=
      "</tools>\n\nTo call a function, answer with a JSON object holding its name and arguments inside "
      "<tool_call></tool_call> tags:\n<tool_call>\n{\"name\": <function name>, \"arguments\": <arguments object>}\n"
      "</tool_call>";
  return s;
}

chat::Value inline_tool_messages(const chat::Value& messages) {
  std::vector<chat::Value> out;
  std::string pending_results;  // consecutive tool results, merged into one user turn
  auto flush_results = [&] {
    if (pending_results.empty()) return;
    out.push_back(message("user", std::move(pending_results)));
    pending_results.clear();
  };
  for (const chat::Value& m : messages.as_array()) {
    const std::string role = string_field(m, "role");
    if (role == "tool") {
      if (!pending_results.empty()) pending_results += "\n";
      pending_results += "<tool_response>\n" + string_field(m, "content") + "\n</tool_response>";
      continue;
    }
    flush_results();
    const chat::Value* calls = m.get("tool_calls");
    if (role != "assistant" || calls == nullptr || !calls->is_array() || calls->as_array().empty()) {
      out.push_back(m);
      continue;
    }
    std::string content = string_field(m, "content");
    for (const chat::Value& call : calls->as_array()) {
      const chat::Value* fn = call.get("function");
      if (fn == nullptr) continue;
      chat::Object o;
      o.set("name", string_field(*fn, "name"));
      const chat::Value* args = fn->get("arguments");
      o.set("arguments", args != nullptr ? *args : chat::Value::object());
      if (!content.empty()) content += "\n";
      content += "<tool_call>\n" + dump(chat::Value::object(std::move(o))) + "\n</tool_call>";
    }
    chat::Object rewritten;
    for (const auto& [k, v] : m.as_object().items())
      if (k != "tool_calls") rewritten.set(k, v);
    rewritten.set("content", std::move(content));
    out.push_back(chat::Value::object(std::move(rewritten)));
  }
  flush_results();
  return chat::Value::array(std::move(out));
}

ApiOr<TemplateInput> template_input(const GenerationSpec& spec, const ChatFormat& format) {
  TemplateInput in;
  in.use_tools = spec.tools.is_array() && !spec.tools.as_array().empty() && spec.tool_choice.mode != ToolChoiceMode::kNone;
  in.force_call = in.use_tools && (spec.tool_choice.mode == ToolChoiceMode::kRequired ||
                                   spec.tool_choice.mode == ToolChoiceMode::kNamed);
  Result<chat::Value> messages = chat::from_openai_messages(spec.messages);
  if (!messages.is_ok()) return invalid_field("messages", messages.status().message());
  in.messages = std::move(messages).value();

  chat::ChatRequest& req = in.request;
  req.bos_token = format.bos_token;
  req.eos_token = format.eos_token;
  req.add_generation_prompt = true;
  if (format.native_tools) {
    req.messages = in.messages;
    if (in.use_tools) req.tools = spec.tools;
  } else {
    chat::Value inlined = inline_tool_messages(in.messages);
    if (in.use_tools) {
      std::vector<chat::Value> items = inlined.as_array();
      const std::string tools_text = describe_tools(spec.tools);
      if (!items.empty() && string_field(items[0], "role") == "system") {
        items[0] = message("system", string_field(items[0], "content") + "\n\n" + tools_text);
      } else {
        items.insert(items.begin(), message("system", tools_text));
      }
      inlined = chat::Value::array(std::move(items));
    }
    req.messages = inlined;
  }
  in.thinking = spec.enable_thinking;
  if (in.force_call && !in.thinking) in.thinking = false;  // the forced call opens the answer, not a <think> block
  if (in.thinking) req.extra.set("enable_thinking", *in.thinking);
  return in;
}

ApiOr<BuiltPrompt> build_prompt(const GenerationSpec& spec, const ChatFormat& format, const tok::Tokenizer& tokenizer,
                                const std::string& call_id_prefix, const HistoryContext& history) {
  if (!spec.chat) return build_raw(spec, tokenizer);
  ApiOr<TemplateInput> input = template_input(spec, format);
  if (!input.is_ok()) return input.error();
  const TemplateInput& in = input.value();
  const chat::ChatRequest& req = in.request;
  const bool use_tools = in.use_tools;
  const bool force_call = in.force_call;
  const std::optional<bool>& thinking = in.thinking;

  const std::vector<HistoryHit> hits = find_history(in.messages, req.messages, history);
  Result<std::string> text = chat::apply_chat_template(format.tmpl, req);
  if (!text.is_ok()) return invalid_field("messages", "the model's chat template refused them: " + text.status().message());

  BuiltPrompt out;
  out.parser.format = use_tools ? format.tool_format : chat::OutputFormat::PlainText;
  out.parser.tools = use_tools ? spec.tools : chat::Value();
  out.parser.id_prefix = call_id_prefix;
  out.parser.reasoning = format.reasoning || thinking.value_or(false);
  const std::string_view rendered = text.value();
  out.parser.starts_in_reasoning = out.parser.reasoning && (ends_with(rendered, "<think>") || ends_with(rendered, "<think>\n"));
  if (force_call) {
    // "required" with a single tool can only mean that tool: name it, so a small model cannot
    // invent another name.
    std::string name = spec.tool_choice.name;
    if (spec.tool_choice.mode == ToolChoiceMode::kRequired && spec.tools.as_array().size() == 1) {
      const chat::Value* fn = spec.tools.as_array()[0].get("function");
      if (fn != nullptr) name = string_field(*fn, "name");
    }
    out.forced_output = forced_call_opening(format.tool_format, name);
  }
  SplicedPrompt spliced = splice_history(text.value(), format.tmpl, req, hits, format.turn_end_markers, tokenizer);
  out.tokens = std::move(spliced.tokens);
  out.history = spliced.stats;
  out.n_rendered_tokens = out.tokens.size();
  out.rendered_tokens_hash = spliced.tokens_hash;
  out.rendered_text_hash = hash_text(text.value());
  out.rendered_text_bytes = text.value().size();
  // note: the forced opening is tokenized on its own, so that the rendered conversation's tokens
  // (which the next turn's prompt repeats) do not depend on it.
  if (!out.forced_output.empty()) {
    const std::vector<int32_t> forced = tokenizer.encode(out.forced_output, /*add_bos_eos=*/false, /*parse_special=*/true);
    out.tokens.insert(out.tokens.end(), forced.begin(), forced.end());
  }
  if (out.tokens.empty()) return invalid_field("messages", "expected a conversation, got an empty prompt");
  return out;
}

void remember_answer(const HistoryContext& history, const BuiltPrompt& prompt, const Completion& answer,
                     std::span<const int32_t> generated, const tok::Tokenizer& tokenizer) {
  if (history.memory == nullptr) return;
  RememberedTurn turn;
  turn.output_tokens.assign(prompt.tokens.begin() + static_cast<ptrdiff_t>(prompt.n_rendered_tokens), prompt.tokens.end());
  turn.output_tokens.insert(turn.output_tokens.end(), generated.begin(), generated.end());
  turn.prompt_tokens_hash = prompt.rendered_tokens_hash;
  turn.prompt_text_hash = prompt.rendered_text_hash;
  turn.prompt_text_bytes = prompt.rendered_text_bytes;
  turn.has_reasoning = !answer.reasoning.empty();

  std::vector<CallForKey> calls;
  for (const ToolCall& c : answer.tool_calls) calls.push_back(CallForKey{c.name, c.arguments});
  std::vector<MessageKey> keys = {message_key(answer.text, answer.reasoning, calls)};
  if (!answer.reasoning.empty()) keys.push_back(message_key(answer.text, "", calls));
  const std::string raw = prompt.forced_output + tokenizer.decode(generated, /*skip_special=*/true);
  keys.push_back(message_key(raw, "", {}));
  history.memory->remember(history.scope, keys, std::move(turn));
}

}  // namespace tern::server
