#include "cli/agentic_sessions.h"

#include <fstream>

#ifndef TERN_SOURCE_DIR
#define TERN_SOURCE_DIR "."
#endif

namespace tern::cli {

Result<std::vector<Conversation>> read_sessions(const std::string& path, int limit) {
  std::ifstream in(path);
  if (!in) return error("cannot open sessions file '" + path + "'");
  std::vector<Conversation> out;
  std::string line;
  int line_no = 0;
  while (static_cast<int>(out.size()) < limit && std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    auto v = chat::parse_json(line);
    if (!v.is_ok()) return error(path + ":" + std::to_string(line_no) + ": " + v.status().message());
    const chat::Value* id = v.value().get("id");
    const chat::Value* messages = v.value().get("messages");
    if (id == nullptr || !id->is_string() || messages == nullptr || !messages->is_array())
      return error(path + ":" + std::to_string(line_no) + ": expected {\"id\": string, \"messages\": [...]}");
    out.push_back({id->as_string(), *messages});
  }
  return out;
}

std::string default_sessions_path() {
  return std::string(TERN_SOURCE_DIR) + "/../shared/data/agentic/swe-sessions.jsonl";
}

Result<chat::ChatTemplate> load_chat_template(const gguf::File& file) {
  auto source = file.get_string("tokenizer.chat_template");
  if (!source.is_ok()) return error("the model has no chat template: " + source.status().message());
  auto tmpl = chat::ChatTemplate::parse(source.value());
  if (!tmpl.is_ok()) return error("chat template: " + tmpl.status().message());
  return std::move(tmpl).value();
}

std::vector<size_t> user_turns(const Conversation& conv) {
  std::vector<size_t> out;
  const auto& msgs = conv.messages.as_array();
  for (size_t k = 1; k < msgs.size(); ++k) {
    const chat::Value* role = msgs[k].get("role");
    if (role != nullptr && role->is_string() && role->as_string() == "user") out.push_back(k);
  }
  return out;
}

Result<std::vector<int32_t>> turn_prompt(const chat::ChatTemplate& tmpl, const tok::Tokenizer& tok,
                                         const Conversation& conv, size_t k) {
  const auto& msgs = conv.messages.as_array();
  chat::ChatRequest req;
  req.messages = chat::Value::array(std::vector<chat::Value>(msgs.begin(), msgs.begin() + static_cast<std::ptrdiff_t>(k + 1)));
  req.add_generation_prompt = true;
  req.bos_token = std::string(tok.piece(tok.bos_id()));
  req.eos_token = std::string(tok.piece(tok.eos_id()));
  TERN_ASSIGN_OR_RETURN(std::string text, chat::apply_chat_template(tmpl, req));
  return tok.encode(text, true, true);
}

}  // namespace tern::cli
