// Errors and limits: unsupported constructs are named with their line and column, template
// errors carry the template's message and position, and runaway templates stop at the limits
// instead of exhausting time, memory or the stack.
#include <gtest/gtest.h>

#include "chat/chat_template.h"

namespace tern::chat {
namespace {

std::string parse_error(const std::string& source) {
  Result<ChatTemplate> t = ChatTemplate::parse(source);
  return t.is_ok() ? "(parsed)" : t.status().message();
}

std::string render_error(const std::string& source, const RenderLimits& limits = {}) {
  Result<ChatTemplate> t = ChatTemplate::parse(source);
  if (!t.is_ok()) return "(parse error) " + t.status().message();
  Result<std::string> out = t->render(Value::object(), limits, std::tm{});
  return out.is_ok() ? "(rendered)" : out.status().message();
}

TEST(JinjaErrors, UnsupportedConstructsAreNamedWithPosition) {
  EXPECT_EQ(parse_error("ok\n  {% include 'x.jinja' %}"),
            "template line 2, column 6: unsupported construct '{% include %}'");
  EXPECT_EQ(parse_error("{% for x in xs recursive %}{% endfor %}"),
            "template line 1, column 16: unsupported construct 'recursive' for loop");
  EXPECT_EQ(parse_error("{% call m() %}{% endcall %}"), "template line 1, column 4: unsupported construct '{% call %}'");
  EXPECT_EQ(parse_error("{% do x %}"), "template line 1, column 4: encountered unknown tag 'do'");
  EXPECT_EQ(parse_error("{{ '\\N{BULLET}' }}"),
            "template line 1, column 4: unsupported construct: \\N{...} escape in a string literal");
  EXPECT_EQ(render_error("\n{{ 'a'.encode() }}"), "template line 2, column 14: unsupported construct: str.encode()");
}

TEST(JinjaErrors, SyntaxErrorsPointAtTheToken) {
  EXPECT_EQ(parse_error("{% if x %}\nnever closed"),
            "template line 2, column 13: unexpected end of template, expected 'elif' or 'else' or 'endif'");
  EXPECT_EQ(parse_error("{{ 1 + }}"), "template line 1, column 8: unexpected '}}'");
  EXPECT_EQ(parse_error("{{ x | nope }}"), "template line 1, column 6: no filter named 'nope'");
  EXPECT_EQ(parse_error("{{ (1 }}"), "template line 1, column 7: unexpected '}'");
  EXPECT_EQ(parse_error("{# open"), "template line 1, column 1: missing end of comment tag '#}'");
  EXPECT_EQ(parse_error("{{ 'open }}"), "template line 1, column 4: unterminated string literal");
}

TEST(JinjaErrors, TemplateErrorsCarryMessageAndPosition) {
  EXPECT_EQ(render_error("a\n  {{ raise_exception('Roles must alternate') }}"),
            "template line 2, column 21: TemplateError: Roles must alternate");
  EXPECT_EQ(render_error("{{ d.a.b }}"), "template line 1, column 5: UndefinedError: 'd' is undefined");
  EXPECT_EQ(render_error("{% set l = [1] %}{{ l.append(2) }}"),
            "template line 1, column 22: SecurityError: access to attribute 'append' of 'list' object is unsafe.");
}

TEST(JinjaErrors, LimitsStopRunawayTemplates) {
  RenderLimits limits;
  limits.max_steps = 10'000;
  EXPECT_EQ(render_error("{% for i in range(100000) %}x{% endfor %}", limits),
            "template line 1, column 29: render exceeded 10000 steps");
  limits = {};
  limits.max_output_bytes = 1000;
  EXPECT_EQ(render_error("{% for i in range(1000) %}xx{% endfor %}", limits),
            "template line 1, column 27: rendered output exceeds 1000 bytes");
  EXPECT_EQ(render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
            "template line 1, column 21: macro calls nested deeper than 100");
  EXPECT_EQ(render_error("{{ 'x' * 100000000000 }}"), "template line 1, column 8: sequence repetition larger than the output limit");
  EXPECT_EQ(render_error("{{ 9223372036854775807 + 1 }}"),
            "template line 1, column 24: integer overflow (tern's ints are 64-bit)");
  // Values cannot nest without bound (every recursion over a value stays shallow) nor form cycles.
  EXPECT_EQ(render_error("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}"),
            "template line 1, column 74: value nesting deeper than 512 levels");
  EXPECT_EQ(render_error("{% set ns = namespace() %}{% set ns.me = [ns] %}"),
            "template line 1, column 30: unsupported construct: storing a namespace inside a namespace");
  std::string deep;
  for (int i = 0; i < 300; ++i) deep += "(";
  EXPECT_EQ(parse_error("{{ " + deep + "1 }}").rfind("template line 1, column ", 0), 0u);
}

}  // namespace
}  // namespace tern::chat
