// `tern render [-m MODEL] --messages FILE.json [--tools FILE.json] [--template FILE.jinja]
// [--no-generation-prompt] [--var KEY=JSON]...`: prints the prompt the model's chat template makes
// of an OpenAI-format conversation, byte for byte what HF's apply_chat_template(tokenize=False)
// gives. The messages file is a JSON list of messages or a request object with "messages" (and
// optionally "tools"). --template renders another template with this model's BOS/EOS text. The
// prompt is written as is, without a trailing newline.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "chat/json.h"
#include "cli/commands.h"
#include "formats/gguf.h"

namespace tern::cli {
namespace {

struct RenderOptions {
  std::string model_path;
  std::string messages_path;
  std::string tools_path;
  std::string template_path;
  bool no_generation_prompt = false;
  std::vector<std::string> vars;  // KEY=JSON template variables (enable_thinking=false, ...)
};

Result<std::string> read_file(const std::string& path) {
  std::stringstream ss;
  if (path == "-") {
    ss << std::cin.rdbuf();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) return error("cannot open " + path);
    ss << in.rdbuf();
  }
  return ss.str();
}

Result<chat::Value> read_json(const std::string& path) {
  TERN_ASSIGN_OR_RETURN(std::string text, read_file(path));
  Result<chat::Value> v = chat::parse_json(text);
  if (!v.is_ok()) return error(path + ": " + v.status().message());
  return v;
}

// The text of a special token whose id the GGUF names under `key`; "" when the model has none.
Result<std::string> special_token_text(const gguf::File& file, const std::string& key) {
  TERN_ASSIGN_OR_RETURN(std::optional<uint64_t> id, file.get_uint_opt(key));
  if (!id) return std::string();
  TERN_ASSIGN_OR_RETURN(const gguf::Array* tokens, file.get_array("tokenizer.ggml.tokens", gguf::ValueType::STRING));
  if (*id >= tokens->items.size()) {
    return error(key + ": expected an id below the vocabulary size " + std::to_string(tokens->items.size()) +
                 ", got " + std::to_string(*id));
  }
  return *tokens->items[*id].as_string();
}

Status render(const RenderOptions& opts) {
  TERN_ASSIGN_OR_RETURN(gguf::File file, gguf::File::open(opts.model_path));
  chat::ChatRequest req;
  TERN_ASSIGN_OR_RETURN(req.bos_token, special_token_text(file, "tokenizer.ggml.bos_token_id"));
  TERN_ASSIGN_OR_RETURN(req.eos_token, special_token_text(file, "tokenizer.ggml.eos_token_id"));
  std::string source;
  if (!opts.template_path.empty()) {
    TERN_ASSIGN_OR_RETURN(source, read_file(opts.template_path));
  } else {
    TERN_ASSIGN_OR_RETURN(std::optional<std::string> embedded, file.get_string_opt("tokenizer.chat_template"));
    if (!embedded) return error(opts.model_path + " has no tokenizer.chat_template; pass --template FILE.jinja");
    source = *embedded;
  }
  Result<chat::ChatTemplate> tmpl = chat::ChatTemplate::parse(source);
  if (!tmpl.is_ok()) return error("chat template: " + tmpl.status().message());

  TERN_ASSIGN_OR_RETURN(chat::Value request, read_json(opts.messages_path));
  chat::Value messages = request;
  if (request.is_object()) {
    const chat::Value* m = request.get("messages");
    if (m == nullptr) return error(opts.messages_path + ": expected a list of messages or an object with \"messages\"");
    messages = *m;
    if (const chat::Value* tools = request.get("tools")) req.tools = *tools;
  }
  TERN_ASSIGN_OR_RETURN(req.messages, chat::from_openai_messages(messages));
  if (!opts.tools_path.empty()) {
    TERN_ASSIGN_OR_RETURN(chat::Value tools, read_json(opts.tools_path));
    if (tools.is_object() && tools.get("tools") != nullptr) tools = *tools.get("tools");
    if (!tools.is_array()) return error(opts.tools_path + ": expected a list of tools");
    req.tools = tools;
  }
  for (const std::string& var : opts.vars) {
    const size_t eq = var.find('=');
    if (eq == std::string::npos || eq == 0) return error("--var: expected KEY=JSON, got '" + var + "'");
    Result<chat::Value> v = chat::parse_json(var.substr(eq + 1));
    if (!v.is_ok()) return error("--var " + var.substr(0, eq) + ": " + v.status().message());
    req.extra.set(var.substr(0, eq), std::move(v).value());
  }
  req.add_generation_prompt = !opts.no_generation_prompt;
  Result<std::string> prompt = chat::apply_chat_template(*tmpl, req);
  if (!prompt.is_ok()) return error("chat template: " + prompt.status().message());
  std::fwrite(prompt->data(), 1, prompt->size(), stdout);
  return Status::ok();
}

}  // namespace

void register_render(CLI::App& app, CommandRunner* run) {
  auto opts = std::make_shared<RenderOptions>();
  auto* cmd = app.add_subcommand("render", "Print the prompt a chat template makes of an OpenAI-format conversation");
  cmd->add_option("-m,--model", opts->model_path, "GGUF model (default: the default model)");
  cmd->add_option("--messages", opts->messages_path, "JSON file: a list of messages or {\"messages\": [...]} ('-' = stdin)")
      ->required();
  cmd->add_option("--tools", opts->tools_path, "JSON file: a list of OpenAI tool schemas");
  cmd->add_option("--template", opts->template_path, "Render this Jinja template instead of the model's own");
  cmd->add_flag("--no-generation-prompt", opts->no_generation_prompt, "Do not open an assistant turn at the end");
  cmd->add_option("--var", opts->vars, "Extra template variable KEY=JSON (e.g. enable_thinking=false); repeatable");
  cmd->callback([opts, run] {
    if (opts->model_path.empty()) opts->model_path = default_model_path();
    *run = [opts] {
      const Status s = render(*opts);
      if (s.is_ok()) return 0;
      std::fprintf(stderr, "tern render: %s\n", s.message().c_str());
      return 1;
    };
  });
}

}  // namespace tern::cli
