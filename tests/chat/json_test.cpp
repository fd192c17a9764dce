// chat/json: Python-compatible float printing and json.dumps options (HF's tojson), and a strict
// json.loads-compatible parser whose errors name line and column.
#include "chat/json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "chat/chat_template.h"

namespace tern::chat {
namespace {

std::string dumps(const std::string& json_text, const JsonDumpOptions& opt = {}) {
  Result<Value> v = parse_json(json_text);
  EXPECT_TRUE(v.is_ok()) << v.status().message();
  Result<std::string> s = dump_json(*v, opt);
  EXPECT_TRUE(s.is_ok());
  return *s;
}

std::string parse_error(const std::string& text) {
  Result<Value> v = parse_json(text);
  return v.is_ok() ? "(parsed)" : v.status().message();
}

TEST(Json, FloatReprMatchesPython) {
  EXPECT_EQ(float_repr(0.1), "0.1");
  EXPECT_EQ(float_repr(1.0), "1.0");
  EXPECT_EQ(float_repr(-0.0), "-0.0");
  EXPECT_EQ(float_repr(1e16), "1e+16");
  EXPECT_EQ(float_repr(9999999999999998.0), "9999999999999998.0");
  EXPECT_EQ(float_repr(1e-5), "1e-05");
  EXPECT_EQ(float_repr(0.0001), "0.0001");
  EXPECT_EQ(float_repr(123456789012345680.0), "1.2345678901234568e+17");
  EXPECT_EQ(float_repr(5e-324), "5e-324");
  EXPECT_EQ(float_repr(1.7976931348623157e308), "1.7976931348623157e+308");
  EXPECT_EQ(float_repr(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(float_repr(std::nan("")), "nan");
}

TEST(Json, DumpsLikePython) {
  const std::string doc = R"({"b": [1, 2.50, -0.0, true, null, "é\n\u0001\u007f"], "a": {}, "c": []})";
  EXPECT_EQ(dumps(doc), R"({"b": [1, 2.5, -0.0, true, null, "é\n\u0001)" "\x7f" R"("], "a": {}, "c": []})");
  JsonDumpOptions indented;
  indented.indent = 2;
  EXPECT_EQ(dumps(R"({"a": [1, {"b": []}]})", indented), "{\n  \"a\": [\n    1,\n    {\n      \"b\": []\n    }\n  ]\n}");
  JsonDumpOptions compact;
  compact.item_separator = ",";
  compact.key_separator = ":";
  compact.sort_keys = true;
  EXPECT_EQ(dumps(R"({"b": 1, "a": [1, 2]})", compact), R"({"a":[1,2],"b":1})");
  JsonDumpOptions ascii;
  ascii.ensure_ascii = true;
  EXPECT_EQ(dumps(R"(["é🦀"])", ascii), R"(["\u00e9\ud83e\udd80"])");
  EXPECT_EQ(dumps("[NaN, Infinity, -Infinity, 1e400]"), "[NaN, Infinity, -Infinity, Infinity]");
  EXPECT_FALSE(dump_json(Value::undefined()).is_ok());
}

TEST(Json, ParsesLikePython) {
  Result<Value> v = parse_json(R"({"k": 1, "x": 2, "k": 3, "big": 123456789012345678901, "s": "\ud83e\udd80\ud800"})");
  ASSERT_TRUE(v.is_ok());
  ASSERT_EQ(v->as_object().items().size(), 4u);
  EXPECT_EQ(v->as_object().items()[0].first, "k");  // a repeated key keeps its first place...
  EXPECT_EQ(v->get("k")->as_int(), 3);              // ...and its last value
  EXPECT_TRUE(v->get("big")->is_float());
  EXPECT_EQ(v->get("s")->as_string(), "🦀\xEF\xBF\xBD");  // a lone surrogate becomes U+FFFD
  EXPECT_TRUE(parse_json("-0")->is_int());
  EXPECT_TRUE(parse_json("1.0")->is_float());
}

TEST(Json, ErrorsNameLineAndColumn) {
  EXPECT_EQ(parse_error("{\"a\": 1,\n  x}"), "json: expected a string key at line 2 column 3, got 'x'");
  EXPECT_EQ(parse_error("[1, 2"), "json: expected ',' or ']' at line 1 column 6, got end of input");
  EXPECT_EQ(parse_error("\"tab\there\""), "json: expected no control character inside a string at line 1 column 5, got '\t'");
  EXPECT_EQ(parse_error("[01]"), "json: expected ',' or ']' at line 1 column 3, got '1'");
  EXPECT_EQ(parse_error("{} x"), "json: expected end of input at line 1 column 4, got 'x'");
  EXPECT_EQ(parse_error("\"\\q\""), "json: expected a valid escape (one of \"\\/bfnrtu) at line 1 column 3, got 'q'");
  EXPECT_EQ(parse_error(std::string(600, '[')), "json: expected nesting of at most 512 levels at line 1 column 514, got '['");
}

TEST(ChatMessages, NormalizedLikeHuggingFace) {
  Result<Value> msgs = parse_json(
      R"([{"role": "assistant", "content": "a", "tool_calls": null, "reasoning": "r"},
          {"role": "user", "thinking": "t", "content": "b"}])");
  Result<Value> out = normalize_messages(*msgs);
  ASSERT_TRUE(out.is_ok());
  // None-valued keys go; reasoning is copied to `thinking` (first) and `reasoning_content` (last).
  EXPECT_EQ(repr(*out),
            "[{'thinking': 'r', 'role': 'assistant', 'content': 'a', 'reasoning': 'r', 'reasoning_content': 'r'}, "
            "{'thinking': 't', 'role': 'user', 'content': 'b', 'reasoning_content': 't'}]");
  EXPECT_FALSE(normalize_messages(Value("x")).is_ok());
}

TEST(ChatMessages, FromOpenAiFormat) {
  Result<Value> msgs = parse_json(
      R"([{"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": [1, 2]}"}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "not json"}}]}])");
  Result<Value> out = from_openai_messages(*msgs);
  ASSERT_TRUE(out.is_ok());
  EXPECT_EQ(repr(*out),
            "[{'role': 'assistant', 'content': '', 'tool_calls': ["
            "{'id': 'c1', 'type': 'function', 'function': {'name': 'f', 'arguments': {'x': [1, 2]}}}, "
            "{'id': 'c2', 'type': 'function', 'function': {'name': 'g', 'arguments': 'not json'}}]}]");
}

}  // namespace
}  // namespace tern::chat
