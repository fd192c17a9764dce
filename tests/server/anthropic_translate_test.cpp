// Anthropic translators without a network or a model: Messages requests -> GenerationSpec
// (conversation rewritten to OpenAI-shaped messages), Completion -> message JSON, and the exact
// event sequence of a stream.
#include <gtest/gtest.h>

#include "server/anthropic.h"

namespace tern::server {
namespace {

GenerationSpec ok(const std::string& body, bool count_only = false) {
  ApiOr<GenerationSpec> r = parse_anthropic_messages(Json::parse(body), count_only);
  EXPECT_TRUE(r.is_ok()) << (r.is_ok() ? "" : r.error().message);
  return r.is_ok() ? r.value() : GenerationSpec{};
}

ApiError fails(const std::string& body) {
  ApiOr<GenerationSpec> r = parse_anthropic_messages(Json::parse(body));
  EXPECT_FALSE(r.is_ok()) << body;
  return r.is_ok() ? ApiError{} : r.error();
}

struct Event {
  std::string name;
  Json data;
};

std::vector<Event> events(const std::string& sse) {
  std::vector<Event> out;
  size_t pos = 0;
  while ((pos = sse.find("event: ", pos)) != std::string::npos) {
    const size_t nl = sse.find('\n', pos);
    const size_t end = sse.find("\n\n", nl);
    out.push_back(Event{sse.substr(pos + 7, nl - pos - 7), Json::parse(sse.substr(nl + 7, end - nl - 7))});
    pos = end;
  }
  return out;
}

GenEvent output(chat::OutputEvent::Kind kind, std::string text, std::string id = {}, std::string name = {}) {
  GenEvent e;
  e.kind = GenEvent::Kind::kOutput;
  e.output.kind = kind;
  e.output.text = std::move(text);
  e.output.id = std::move(id);
  e.output.name = std::move(name);
  return e;
}

TEST(AnthropicRequest, RewritesTheConversation) {
  const GenerationSpec s = ok(R"({
    "model": "m", "max_tokens": 300, "temperature": 0, "stop_sequences": ["###"], "stream": true,
    "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use tools.", "cache_control": {"type": "ephemeral"}}],
    "thinking": {"type": "enabled", "budget_tokens": 64},
    "tools": [{"name": "read_file", "description": "Read a file", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}],
    "tool_choice": {"type": "any"},
    "messages": [
      {"role": "user", "content": "Open a.txt"},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "I should read it.", "signature": "sig"},
        {"type": "text", "text": "Reading."},
        {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.txt"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "hello"}]},
        {"type": "text", "text": "What does it say?"}]}]})");
  EXPECT_EQ(s.params.max_tokens, 300);
  EXPECT_FLOAT_EQ(s.params.sampling.temperature, 0.0f);
  EXPECT_EQ(s.params.stop_strings, std::vector<std::string>{"###"});
  EXPECT_EQ(s.params.think_budget_tokens, 64);
  EXPECT_EQ(s.enable_thinking, std::optional<bool>(true));
  EXPECT_EQ(s.tool_choice.mode, ToolChoiceMode::kRequired);  // "any" = some tool must be called
  EXPECT_TRUE(s.stream);

  const auto& m = s.messages.as_array();
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0].get("role")->as_string(), "system");
  EXPECT_EQ(m[0].get("content")->as_string(), "Be brief.\nUse tools.");
  EXPECT_EQ(m[1].get("content")->as_string(), "Open a.txt");
  EXPECT_EQ(m[2].get("role")->as_string(), "assistant");
  EXPECT_EQ(m[2].get("content")->as_string(), "Reading.");
  EXPECT_EQ(m[2].get("reasoning_content")->as_string(), "I should read it.");
  const chat::Value& call = m[2].get("tool_calls")->as_array()[0];
  EXPECT_EQ(call.get("id")->as_string(), "toolu_1");
  EXPECT_EQ(call.get("function")->get("name")->as_string(), "read_file");
  EXPECT_EQ(Json::parse(call.get("function")->get("arguments")->as_string()), Json::parse(R"({"path": "a.txt"})"));
  // The tool result answers the assistant turn, so it comes before the user's own text.
  EXPECT_EQ(m[3].get("role")->as_string(), "tool");
  EXPECT_EQ(m[3].get("tool_call_id")->as_string(), "toolu_1");
  EXPECT_EQ(m[3].get("content")->as_string(), "hello");
  EXPECT_EQ(m[4].get("role")->as_string(), "user");
  EXPECT_EQ(m[4].get("content")->as_string(), "What does it say?");

  const chat::Value& fn = *s.tools.as_array()[0].get("function");
  EXPECT_EQ(fn.get("name")->as_string(), "read_file");
  EXPECT_EQ(fn.get("parameters")->get("properties")->get("path")->get("type")->as_string(), "string");
}

TEST(AnthropicRequest, CountTokensNeedsNoMaxTokens) {
  EXPECT_TRUE(parse_anthropic_messages(Json::parse(R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})"), true).is_ok());
  EXPECT_EQ(fails(R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})").param, "max_tokens");
}

TEST(AnthropicRequest, ErrorsNameTheField) {
  struct Case {
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]})", "model"},
      {R"({"model": "m", "max_tokens": "5", "messages": [{"role": "user", "content": "x"}]})", "max_tokens"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]})", "messages[0].role"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image"}]}]})",
       "messages[0].content[0].type"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_result"}]}]})",
       "messages[0].content[0].tool_use_id"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "system": 3})", "system"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f"}]})",
       "tools[0].input_schema"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
           "tools": [{"name": "f", "input_schema": "obj"}]})", "tools[0].input_schema"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
           "tools": [{"type": "web_search_20250305", "name": "web_search"}]})", "tools[0].type"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
           "tools": [{"name": "f", "input_schema": {}}], "tool_choice": {"type": "tool", "name": "g"}})", "tool_choice.name"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "temperature": 1.5})", "temperature"},
      {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "thinking": {"type": "enabled"}})",
       "thinking.budget_tokens"},
  };
  for (const Case& c : cases) {
    const ApiError e = fails(c.body);
    EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.message;
    EXPECT_EQ(e.http_status, 400);
  }
}

TEST(AnthropicResponse, BlocksAndUsage) {
  Completion c;
  c.reasoning = "hmm";
  c.text = "Let me look.";
  c.tool_calls.push_back(ToolCall{"toolu_x_0", "read_file", R"({"path": "a.txt"})"});
  c.finish.reason = FinishReason::kToolCalls;
  c.finish.usage = Usage{100, 80, 12, 32};
  const Json j = anthropic_response(c, ResponseMeta{"msg_1", "m", 0});
  EXPECT_EQ(j["type"], "message");
  ASSERT_EQ(j["content"].size(), 3u);
  EXPECT_EQ(j["content"][0]["type"], "thinking");
  EXPECT_EQ(j["content"][1]["text"], "Let me look.");
  EXPECT_EQ(j["content"][2]["input"], Json::parse(R"({"path": "a.txt"})"));
  EXPECT_EQ(j["stop_reason"], "tool_use");
  EXPECT_TRUE(j["stop_sequence"].is_null());
  // Anthropic's input_tokens excludes what was read from the cache.
  EXPECT_EQ(j["usage"]["input_tokens"], 20);
  EXPECT_EQ(j["usage"]["cache_read_input_tokens"], 80);
  EXPECT_EQ(j["usage"]["cache_restored_input_tokens"], 32);
  EXPECT_EQ(j["usage"]["output_tokens"], 12);

  Completion stopped;
  stopped.text = "abc";
  stopped.finish.reason = FinishReason::kStopSequence;
  stopped.finish.stop_sequence = "###";
  const Json s = anthropic_response(stopped, ResponseMeta{"msg_2", "m", 0});
  EXPECT_EQ(s["stop_reason"], "stop_sequence");
  EXPECT_EQ(s["stop_sequence"], "###");
}

TEST(AnthropicStream, ExactEventSequence) {
  using K = chat::OutputEvent::Kind;
  auto enc = anthropic_stream(ResponseMeta{"msg_1", "m", 0});
  GenEvent started;
  started.kind = GenEvent::Kind::kStarted;
  started.usage = Usage{50, 0, 0};
  std::string sse = enc->encode(started);
  sse += enc->encode(output(K::Reasoning, "think"));
  sse += enc->encode(output(K::Text, "Hello"));
  sse += enc->encode(output(K::Text, " there"));
  sse += enc->encode(output(K::ToolCallStart, "", "toolu_a", "f"));
  sse += enc->encode(output(K::ToolCallArgs, "{\"a\": 1}", "toolu_a"));
  sse += enc->encode(output(K::ToolCallEnd, "", "toolu_a"));
  GenEvent done;
  done.kind = GenEvent::Kind::kFinished;
  done.finish.reason = FinishReason::kToolCalls;
  done.finish.usage = Usage{50, 32, 9};
  sse += enc->encode(done);

  const auto ev = events(sse);
  std::vector<std::string> names;
  for (const Event& e : ev) names.push_back(e.name);
  const std::vector<std::string> want = {
      "message_start",       "content_block_start", "ping",                "content_block_delta", "content_block_stop",
      "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",  "content_block_start",
      "content_block_delta", "content_block_stop",  "message_delta",       "message_stop"};
  EXPECT_EQ(names, want);
  for (const Event& e : ev) EXPECT_EQ(e.data["type"], e.name);  // data.type always repeats the event name
  EXPECT_EQ(ev[0].data["message"]["usage"]["input_tokens"], 50);
  EXPECT_EQ(ev[1].data["content_block"]["type"], "thinking");
  EXPECT_EQ(ev[3].data["delta"], Json::parse(R"({"type": "thinking_delta", "thinking": "think"})"));
  EXPECT_EQ(ev[5].data["index"], 1);
  EXPECT_EQ(ev[7].data["delta"]["text"], " there");
  EXPECT_EQ(ev[9].data["content_block"], Json::parse(R"({"type": "tool_use", "id": "toolu_a", "name": "f", "input": {}})"));
  EXPECT_EQ(ev[10].data["delta"], Json::parse(R"({"type": "input_json_delta", "partial_json": "{\"a\": 1}"})"));
  EXPECT_EQ(ev[11].data["index"], 2);
  EXPECT_EQ(ev[12].data["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(ev[12].data["usage"]["output_tokens"], 9);
  EXPECT_EQ(ev[12].data["usage"]["cache_read_input_tokens"], 32);
}

TEST(AnthropicStream, EmptyAnswerStillHasOneTextBlock) {
  auto enc = anthropic_stream(ResponseMeta{"msg_1", "m", 0});
  GenEvent started;
  started.kind = GenEvent::Kind::kStarted;
  GenEvent done;
  done.kind = GenEvent::Kind::kFinished;
  const auto ev = events(enc->encode(started) + enc->encode(done));
  std::vector<std::string> names;
  for (const Event& e : ev) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"message_start", "content_block_start", "ping", "content_block_stop",
                                             "message_delta", "message_stop"}));
}

TEST(AnthropicError, TypeFollowsStatus) {
  ApiError e;
  e.message = "m";
  for (auto [status, type] : std::vector<std::pair<int, const char*>>{{400, "invalid_request_error"},
                                                                      {401, "authentication_error"},
                                                                      {404, "not_found_error"},
                                                                      {413, "request_too_large"},
                                                                      {429, "rate_limit_error"},
                                                                      {500, "api_error"},
                                                                      {503, "overloaded_error"}}) {
    e.http_status = status;
    const Json j = Json::parse(anthropic_error_body(e));
    EXPECT_EQ(j["type"], "error");
    EXPECT_EQ(j["error"]["type"], type) << status;
    EXPECT_EQ(j["error"]["message"], "m");
  }
}

}  // namespace
}  // namespace tern::server
