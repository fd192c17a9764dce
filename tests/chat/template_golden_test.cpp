// Every template in tests/data/templates/src renders byte-identically to Python jinja2 (as HF's
// apply_chat_template runs it) over every conversation in cases.json, and fails where Python
// failed. Goldens come from tools/gen_template_goldens.py.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "chat/chat_template.h"
#include "chat/json.h"

namespace tern::chat {
namespace {

const std::string kDir = std::string(TERN_TEST_DATA) + "/templates";

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Value load_json(const std::string& path) {
  Result<Value> v = parse_json(read_file(path));
  EXPECT_TRUE(v.is_ok()) << path << ": " << (v.is_ok() ? "" : v.status().message());
  return v.is_ok() ? std::move(v).value() : Value();
}

std::vector<std::string> template_names() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(kDir + "/goldens")) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The pinned clock of the goldens (cases.json "now"): 2025-03-14 09:26:53.
std::tm fixed_now() {
  std::tm t{};
  t.tm_year = 2025 - 1900;
  t.tm_mon = 2;
  t.tm_mday = 14;
  t.tm_hour = 9;
  t.tm_min = 26;
  t.tm_sec = 53;
  t.tm_wday = 5;
  t.tm_yday = 72;
  return t;
}

// "at byte N: got «...» want «...»": the first place two renders differ, with some context.
std::string first_difference(const std::string& got, const std::string& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  const size_t from = i < 40 ? 0 : i - 40;
  return "first difference at byte " + std::to_string(i) + ":\n got: " + got.substr(from, 120) +
         "\nwant: " + want.substr(from, 120);
}

class TemplateGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(TemplateGolden, MatchesJinja2) {
  const std::string name = GetParam();
  const Value golden = load_json(kDir + "/goldens/" + name + ".json");
  const Value cases = load_json(kDir + "/cases.json");
  ASSERT_TRUE(golden.is_object() && cases.is_object());
  const std::string source = read_file(kDir + "/src/" + golden.get("template")->as_string());
  Result<ChatTemplate> tmpl = ChatTemplate::parse(source);
  ASSERT_TRUE(tmpl.is_ok()) << tmpl.status().message();
  for (const Value& c : cases.get("cases")->as_array()) {
    const std::string case_name = c.get("name")->as_string();
    SCOPED_TRACE(name + " / " + case_name);
    const Value* expected = golden.get("results")->get(case_name);
    ASSERT_NE(expected, nullptr);
    ChatRequest req;
    req.messages = *c.get("messages");
    req.tools = *c.get("tools");
    req.add_generation_prompt = c.get("add_generation_prompt")->as_bool();
    req.bos_token = golden.get("bos_token")->as_string();
    req.eos_token = golden.get("eos_token")->as_string();
    req.extra = c.get("kwargs")->as_object();
    req.now = fixed_now();
    Result<std::string> out = apply_chat_template(*tmpl, req);
    if (const Value* want = expected->get("output")) {
      ASSERT_TRUE(out.is_ok()) << out.status().message();
      EXPECT_EQ(*out, want->as_string()) << first_difference(*out, want->as_string());
    } else {
      EXPECT_FALSE(out.is_ok()) << "jinja2 failed with " << expected->get("error")->as_string()
                                << " but tern rendered:\n"
                                << *out;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTemplates, TemplateGolden, ::testing::ValuesIn(template_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string s = info.param;
                           for (char& ch : s) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return s;
                         });

}  // namespace
}  // namespace tern::chat
