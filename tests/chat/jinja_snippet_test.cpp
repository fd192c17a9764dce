// Small templates probing one jinja2 semantic each (whitespace control, scoping, Python number
// printing, filters, tests, string methods, errors), rendered byte-identically to Python jinja2
// in HF's environment. Goldens: tests/data/templates/snippets.json from tools/gen_template_goldens.py.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "chat/chat_template.h"
#include "chat/json.h"

namespace tern::chat {
namespace {

const Value& snippets() {
  static const Value v = [] {
    std::ifstream f(std::string(TERN_TEST_DATA) + "/templates/snippets.json", std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    Result<Value> parsed = parse_json(ss.str());
    return parsed.is_ok() ? *parsed->get("snippets") : Value::array();
  }();
  return v;
}

std::vector<std::string> snippet_names() {
  std::vector<std::string> names;
  for (const Value& s : snippets().as_array()) names.push_back(s.get("name")->as_string());
  return names;
}

const Value& snippet(const std::string& name) {
  for (const Value& s : snippets().as_array()) {
    if (s.get("name")->as_string() == name) return s;
  }
  static const Value none;
  return none;
}

class JinjaSnippet : public ::testing::TestWithParam<std::string> {};

TEST_P(JinjaSnippet, MatchesJinja2) {
  const Value& s = snippet(GetParam());
  ASSERT_TRUE(s.is_object());
  const std::string& source = s.get("template")->as_string();
  std::tm now{};  // the goldens' pinned clock: Friday 2025-03-14 09:26:53
  now.tm_year = 125;
  now.tm_mon = 2;
  now.tm_mday = 14;
  now.tm_hour = 9;
  now.tm_min = 26;
  now.tm_sec = 53;
  now.tm_wday = 5;
  now.tm_yday = 72;
  Result<ChatTemplate> tmpl = ChatTemplate::parse(source);
  Result<std::string> out = tmpl.is_ok() ? tmpl->render(*s.get("context"), {}, now) : Result<std::string>(tmpl.status());
  if (const Value* want = s.get("output")) {
    ASSERT_TRUE(out.is_ok()) << source << "\n" << out.status().message();
    EXPECT_EQ(*out, want->as_string()) << source;
  } else {
    ASSERT_FALSE(out.is_ok()) << source << "\njinja2: " << s.get("error")->as_string() << "\ntern rendered: " << *out;
    // Every error names where in the template it happened.
    EXPECT_EQ(out.status().message().rfind("template line ", 0), 0u) << out.status().message();
  }
}

INSTANTIATE_TEST_SUITE_P(Snippets, JinjaSnippet, ::testing::ValuesIn(snippet_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace tern::chat
