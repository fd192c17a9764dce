// The shared request builder and the JSON boundary: template format detection, tools written into
// templates that do not know them, forced tool calls, raw prompts, body parsing limits.
#include <gtest/gtest.h>

#include <filesystem>

#include "formats/gguf.h"
#include "server/generation.h"
#include "server/json_fields.h"
#include "server/prompt_builder.h"

namespace tern::server {
namespace {

chat::Value value(const std::string& json) { return to_value(Json::parse(json)); }

const char* kChatMl =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

class PromptBuilderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* env = std::getenv("TERN_MODEL");
    const std::string path = env != nullptr && *env ? env : TERN_DEFAULT_MODEL;
    if (!std::filesystem::exists(path)) GTEST_FAIL() << "model file " << path << " is missing: run scripts/fetch-model";
    auto file = gguf::File::open(path);
    ASSERT_TRUE(file.is_ok()) << file.status().message();
    auto tok = tok::Tokenizer::from_gguf(file.value());
    ASSERT_TRUE(tok.is_ok()) << tok.status().message();
    tok_ = std::move(tok).value();
    auto f = ChatFormat::from_template(kChatMl, "<|im_start|>", "<|im_end|>");
    ASSERT_TRUE(f.is_ok()) << f.status().message();
    format_ = std::make_unique<ChatFormat>(std::move(f).value());
  }

  std::string built_text(const BuiltPrompt& p) const { return tok_->decode(p.tokens); }

  GenerationSpec chat_spec(const std::string& messages_json) const {
    GenerationSpec s;
    s.chat = true;
    s.messages = value(messages_json);
    return s;
  }

  std::unique_ptr<tok::Tokenizer> tok_;
  std::unique_ptr<ChatFormat> format_;
};

TEST(ChatFormatTest, DetectsToolAndReasoningConventions) {
  auto hermes = ChatFormat::from_template("{% if tools %}<tool_call>{% endif %}<think>", "", "");
  ASSERT_TRUE(hermes.is_ok());
  EXPECT_EQ(hermes->tool_format, chat::OutputFormat::Hermes);
  EXPECT_TRUE(hermes->native_tools);
  EXPECT_TRUE(hermes->reasoning);
  auto coder = ChatFormat::from_template("{% if tools %}<tool_call><function={{ x }}>{% endif %}", "", "");
  EXPECT_EQ(coder->tool_format, chat::OutputFormat::Qwen3Coder);
  auto mistral = ChatFormat::from_template("{% if tools %}[TOOL_CALLS]{% endif %}", "", "");
  EXPECT_EQ(mistral->tool_format, chat::OutputFormat::Mistral);
  auto llama = ChatFormat::from_template("{% if tools %}<|python_tag|>{% endif %}", "", "");
  EXPECT_EQ(llama->tool_format, chat::OutputFormat::Llama3);
  auto plain = ChatFormat::from_template(kChatMl, "", "");
  EXPECT_FALSE(plain->native_tools);
  EXPECT_FALSE(plain->reasoning);
  EXPECT_FALSE(ChatFormat::from_template("{% for %}", "", "").is_ok());
}

TEST(InlineTools, CallsBecomeMarkupAndResultsBecomeOneUserTurn) {
  const chat::Value out = inline_tool_messages(value(R"([
    {"role": "user", "content": "go"},
    {"role": "assistant", "content": "Sure.", "tool_calls": [
      {"id": "a", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}},
      {"id": "b", "type": "function", "function": {"name": "g", "arguments": {}}}]},
    {"role": "tool", "tool_call_id": "a", "content": "one"},
    {"role": "tool", "tool_call_id": "b", "content": "two"},
    {"role": "user", "content": "thanks"}])"));
  const auto& m = out.as_array();
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[1].get("content")->as_string(),
            "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
            "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>");
  EXPECT_EQ(m[1].get("tool_calls"), nullptr);
  EXPECT_EQ(m[2].get("role")->as_string(), "user");
  EXPECT_EQ(m[2].get("content")->as_string(), "<tool_response>\none\n</tool_response>\n<tool_response>\ntwo\n</tool_response>");
  EXPECT_EQ(m[3].get("content")->as_string(), "thanks");
}

TEST_F(PromptBuilderTest, RendersTheTemplateWithoutAddingBos) {
  auto p = build_prompt(chat_spec(R"([{"role": "user", "content": "hi"}])"), *format_, *tok_, "call_x_");
  ASSERT_TRUE(p.is_ok()) << p.error().message;
  EXPECT_EQ(built_text(p.value()), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_TRUE(p.value().forced_output.empty());
  EXPECT_EQ(p.value().parser.format, chat::OutputFormat::PlainText);  // no tools: nothing to parse
}

TEST_F(PromptBuilderTest, ToolsGoIntoTheSystemMessageWhenTheTemplateHasNone) {
  GenerationSpec s = chat_spec(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "weather?"}])");
  s.tools = value(R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])");
  auto p = build_prompt(s, *format_, *tok_, "call_x_");
  ASSERT_TRUE(p.is_ok()) << p.error().message;
  const std::string text = built_text(p.value());
  EXPECT_EQ(text.rfind("<|im_start|>system\nBe brief.\n\n# Tools", 0), 0u) << text;
  EXPECT_NE(text.find("{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""), std::string::npos) << text;
  EXPECT_EQ(p.value().parser.format, chat::OutputFormat::Hermes);
  EXPECT_EQ(p.value().parser.id_prefix, "call_x_");
  EXPECT_TRUE(p.value().parser.tools.is_array());

  s.tool_choice.mode = ToolChoiceMode::kNone;  // tools are neither shown nor parsed
  auto none = build_prompt(s, *format_, *tok_, "call_x_");
  EXPECT_EQ(built_text(none.value()).find("# Tools"), std::string::npos);
  EXPECT_EQ(none.value().parser.format, chat::OutputFormat::PlainText);

  s.tool_choice = ToolChoice{ToolChoiceMode::kNamed, "get_weather"};
  auto named = build_prompt(s, *format_, *tok_, "call_x_");
  const std::string forced = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ";
  EXPECT_EQ(named.value().forced_output, forced);
  const std::string named_text = built_text(named.value());
  const std::string tail = "<|im_start|>assistant\n" + forced;  // the prompt ends inside the call
  ASSERT_GE(named_text.size(), tail.size());
  EXPECT_EQ(named_text.substr(named_text.size() - tail.size()), tail);
}

TEST_F(PromptBuilderTest, TemplateErrorsAndRawPrompts) {
  auto bad = build_prompt(chat_spec(R"(["not an object"])"), *format_, *tok_, "c");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.error().param, "messages");

  GenerationSpec raw;
  raw.chat = false;
  raw.prompt_ids = {1, 2, tok_->n_vocab()};
  auto out_of_range = build_prompt(raw, *format_, *tok_, "c");
  ASSERT_FALSE(out_of_range.is_ok());
  EXPECT_EQ(out_of_range.error().param, "prompt[2]");
  raw.prompt_ids.clear();
  raw.prompt = "Hello";
  auto text = build_prompt(raw, *format_, *tok_, "c");
  ASSERT_TRUE(text.is_ok());
  EXPECT_EQ(tok_->decode(text.value().tokens), "Hello");
}

TEST(StopString, FindsWhichOneEndedTheText) {
  EXPECT_EQ(matched_stop_string("abc###rest", 3, {"@@", "###"}), "###");
  EXPECT_EQ(matched_stop_string("abcEND", 3, {"END", "ENDX"}), "END");
  EXPECT_EQ(matched_stop_string("ab c###", 2, {"###"}), "###");  // emitted text and full decode disagree a little
  EXPECT_EQ(matched_stop_string("abc", 3, {"###"}), "");
}

TEST(RequestBody, ParsesObjectsAndRefusesTheRest) {
  EXPECT_TRUE(parse_request_body(R"({"a": [1, {"b": null}]})").is_ok());
  auto malformed = parse_request_body("{\"a\": }");
  ASSERT_FALSE(malformed.is_ok());
  EXPECT_NE(malformed.error().message.find("column 7"), std::string::npos) << malformed.error().message;
  EXPECT_FALSE(parse_request_body("[1]").is_ok());
  EXPECT_FALSE(parse_request_body("").is_ok());
  EXPECT_FALSE(parse_request_body("{\"a\": 1} trailing").is_ok());

  const std::string deep = std::string(kMaxJsonDepth + 1, '[') + std::string(kMaxJsonDepth + 1, ']');
  auto too_deep = parse_request_body("{\"a\": " + deep + "}");
  ASSERT_FALSE(too_deep.is_ok());
  EXPECT_NE(too_deep.error().message.find("nesting"), std::string::npos);
  const std::string ok_depth = std::string(kMaxJsonDepth - 2, '[') + std::string(kMaxJsonDepth - 2, ']');
  EXPECT_TRUE(parse_request_body("{\"a\": " + ok_depth + "}").is_ok());

  std::string wide = "{";
  for (int i = 0; i <= kMaxObjectMembers; ++i) wide += (i ? ",\"k" : "\"k") + std::to_string(i) + "\": 0";
  wide += "}";
  auto too_wide = parse_request_body(wide);
  ASSERT_FALSE(too_wide.is_ok());
  EXPECT_NE(too_wide.error().message.find("members"), std::string::npos);
}

TEST(RequestBody, ValueConversionKeepsOrderAndNumberKinds) {
  const Json j = Json::parse(R"({"z": 1, "a": 2.5, "m": [true, null, "s"], "big": 18446744073709551615})");
  const chat::Value v = to_value(j);
  const auto& items = v.as_object().items();
  ASSERT_EQ(items.size(), 4u);
  EXPECT_EQ(items[0].first, "z");  // the client's key order survives (templates print schemas)
  EXPECT_TRUE(items[0].second.is_int());
  EXPECT_TRUE(items[1].second.is_float());
  EXPECT_TRUE(items[3].second.is_float());  // beyond int64: a float (chat::Value integers are int64)
  EXPECT_EQ(from_value(v)["m"], Json::parse(R"([true, null, "s"])"));
}

}  // namespace
}  // namespace tern::server
