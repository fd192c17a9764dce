#include "server/request_common.h"

#include <mutex>
#include <random>

namespace tern::server {

std::vector<std::string> read_stop_strings(const Fields& f, std::string_view key) {
  std::vector<std::string> out;
  const Json* v = f.get(key);
  if (v == nullptr) return out;
  if (v->is_string()) {
    if (!v->get_ref<const std::string&>().empty()) out.push_back(v->get<std::string>());
    return out;
  }
  if (!v->is_array()) fail_field(f.path(key), std::string("expected a string or an array of strings, got ") + json_type_name(*v));
  if (v->size() > kMaxStopStrings)
    fail_field(f.path(key), "expected at most " + std::to_string(kMaxStopStrings) + " stop strings, got " +
                                std::to_string(v->size()));
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& s = (*v)[i];
    if (!s.is_string()) fail_field(index_path(f.path(key), i), std::string("expected a string, got ") + json_type_name(s));
    if (s.get_ref<const std::string&>().empty()) fail_field(index_path(f.path(key), i), "expected a non-empty string");
    out.push_back(s.get<std::string>());
  }
  return out;
}

chat::Value function_tool(const std::string& name, const Json* description, const Json* parameters,
                          const std::string& parameters_path) {
  chat::Object fn;
  fn.set("name", name);
  if (description != nullptr) fn.set("description", to_value(*description));
  if (parameters != nullptr) {
    if (!parameters->is_object())
      fail_field(parameters_path, std::string("expected a JSON schema object, got ") + json_type_name(*parameters));
    fn.set("parameters", to_value(*parameters));
  } else {
    chat::Object empty_schema;
    empty_schema.set("type", "object");
    empty_schema.set("properties", chat::Value::object());
    fn.set("parameters", chat::Value::object(std::move(empty_schema)));
  }
  chat::Object tool;
  tool.set("type", "function");
  tool.set("function", chat::Value::object(std::move(fn)));
  return chat::Value::object(std::move(tool));
}

std::vector<std::string> tool_names(const chat::Value& tools) {
  std::vector<std::string> names;
  if (!tools.is_array()) return names;
  for (const chat::Value& t : tools.as_array()) {
    const chat::Value* fn = t.get("function");
    const chat::Value* name = fn != nullptr ? fn->get("name") : nullptr;
    if (name != nullptr && name->is_string()) names.push_back(name->as_string());
  }
  return names;
}

namespace {

std::mt19937_64& rng(std::unique_lock<std::mutex>& lock) {
  static std::mutex mutex;
  static std::mt19937_64 gen{std::random_device{}()};
  lock = std::unique_lock<std::mutex>(mutex);
  return gen;
}

}  // namespace

uint64_t random_seed() {
  std::unique_lock<std::mutex> lock;
  return rng(lock)();
}

std::string random_id(size_t n_chars) {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::unique_lock<std::mutex> lock;
  auto& gen = rng(lock);
  std::string s(n_chars, 'a');
  for (char& c : s) c = kAlphabet[gen() % (sizeof(kAlphabet) - 1)];
  return s;
}

}  // namespace tern::server
