// OpenAI translators without a network or a model: request JSON -> GenerationSpec (and the errors
// that name the field), Completion -> response JSON, GenEvents -> chunk stream.
#include <gtest/gtest.h>

#include "server/openai.h"

namespace tern::server {
namespace {

Json parse(const std::string& text) { return Json::parse(text); }

GenerationSpec chat_ok(const std::string& body) {
  ApiOr<GenerationSpec> r = parse_openai_chat(parse(body));
  EXPECT_TRUE(r.is_ok()) << (r.is_ok() ? "" : r.error().message);
  return r.is_ok() ? r.value() : GenerationSpec{};
}

ApiError chat_error(const std::string& body) {
  ApiOr<GenerationSpec> r = parse_openai_chat(parse(body));
  EXPECT_FALSE(r.is_ok()) << body;
  return r.is_ok() ? ApiError{} : r.error();
}

// Splits an SSE byte stream into its data payloads.
std::vector<std::string> data_lines(const std::string& sse) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = sse.find("data: ", pos)) != std::string::npos) {
    const size_t end = sse.find("\n\n", pos);
    out.push_back(sse.substr(pos + 6, end - pos - 6));
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

GenEvent finished(FinishReason reason, Usage usage) {
  GenEvent e;
  e.kind = GenEvent::Kind::kFinished;
  e.finish.reason = reason;
  e.finish.usage = usage;
  return e;
}

TEST(OpenAiRequest, ReadsAFullChatRequest) {
  const GenerationSpec s = chat_ok(R"({
    "model": "m", "max_completion_tokens": 77, "temperature": 0.5, "top_p": 0.9, "seed": 42,
    "presence_penalty": 0.25, "frequency_penalty": -0.5, "stop": ["END", "\n\n"], "stream": true,
    "stream_options": {"include_usage": true}, "user": "ignored", "n": 1,
    "messages": [
      {"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]},
      {"role": "assistant", "content": null, "reasoning_content": "thinking...",
       "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "result"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}],
    "tool_choice": {"type": "function", "function": {"name": "f"}}})");
  EXPECT_EQ(s.model, "m");
  EXPECT_TRUE(s.chat);
  EXPECT_TRUE(s.stream);
  EXPECT_TRUE(s.include_usage);
  EXPECT_EQ(s.params.max_tokens, 77);
  EXPECT_FLOAT_EQ(s.params.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(s.params.sampling.top_p, 0.9f);
  EXPECT_EQ(s.params.sampling.seed, 42u);
  EXPECT_FLOAT_EQ(s.params.sampling.presence_penalty, 0.25f);
  EXPECT_FLOAT_EQ(s.params.sampling.frequency_penalty, -0.5f);
  EXPECT_EQ(s.params.stop_strings, (std::vector<std::string>{"END", "\n\n"}));
  EXPECT_EQ(s.tool_choice.mode, ToolChoiceMode::kNamed);
  EXPECT_EQ(s.tool_choice.name, "f");

  const auto& m = s.messages.as_array();
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0].get("role")->as_string(), "system");  // developer is the system role
  EXPECT_EQ(m[1].get("content")->as_string(), "part one\npart two");
  EXPECT_EQ(m[2].get("content")->as_string(), "");
  EXPECT_EQ(m[2].get("reasoning_content")->as_string(), "thinking...");
  const chat::Value& call = m[2].get("tool_calls")->as_array()[0];
  EXPECT_EQ(call.get("id")->as_string(), "call_1");
  EXPECT_EQ(call.get("function")->get("arguments")->as_string(), "{\"x\": 1}");
  EXPECT_EQ(m[3].get("tool_call_id")->as_string(), "call_1");

  const chat::Value& schema = *s.tools.as_array()[0].get("function")->get("parameters");
  EXPECT_EQ(schema.get("properties")->get("x")->get("type")->as_string(), "integer");
}

TEST(OpenAiRequest, Defaults) {
  const GenerationSpec s = chat_ok(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_FALSE(s.stream);
  EXPECT_FLOAT_EQ(s.params.sampling.temperature, 1.0f);  // OpenAI's default
  EXPECT_EQ(s.tool_choice.mode, ToolChoiceMode::kAuto);
  EXPECT_TRUE(s.tools.is_none());
  EXPECT_TRUE(s.params.stop_strings.empty());
  EXPECT_FALSE(s.enable_thinking.has_value());
}

TEST(OpenAiRequest, ErrorsNameTheField) {
  struct Case {
    const char* body;
    const char* param;
    const char* message_part;
  };
  const Case cases[] = {
      {R"({"messages": [{"role": "user", "content": "hi"}]})", "model", "missing"},
      {R"({"model": "m"})", "messages", "missing"},
      {R"({"model": "m", "messages": []})", "messages", "at least one"},
      {R"({"model": "m", "messages": {"role": "user"}})", "messages", "expected an array, got an object"},
      {R"({"model": 7, "messages": [{"role": "user", "content": "hi"}]})", "model", "expected a string, got an integer"},
      {R"({"model": "m", "messages": [{"role": "robot", "content": "hi"}]})", "messages[0].role", "got 'robot'"},
      {R"({"model": "m", "messages": [{"role": "user", "content": 3}]})", "messages[0].content", "got an integer"},
      {R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content[0].type", "image_url"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": "hot"})", "temperature",
       "expected a number, got a string"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 2.5})", "temperature",
       "[0, 2], got 2.5"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 0})", "max_tokens", "got 0"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1.5})", "max_tokens",
       "expected an integer"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 3})", "n", "unsupported value 3"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stop": ["a", 1]})", "stop[1]",
       "expected a string"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "logprobs": true})", "logprobs", "unsupported"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
           "tools": [{"type": "function", "function": {"name": "f", "parameters": "object"}}]})",
       "tools[0].function.parameters", "expected a JSON schema object, got a string"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]})",
       "tools[0].function", "missing"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"})", "tool_choice",
       "no tools"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
           "tools": [{"type": "function", "function": {"name": "f"}}],
           "tool_choice": {"type": "function", "function": {"name": "g"}}})",
       "tool_choice.function.name", "got 'g'"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"}})",
       "response_format.type", "json_object"},
  };
  for (const Case& c : cases) {
    const ApiError e = chat_error(c.body);
    EXPECT_EQ(e.http_status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_NE(e.message.find(c.message_part), std::string::npos) << e.message;
    EXPECT_EQ(e.message.rfind(std::string(c.param) + ": ", 0), 0u) << e.message;  // the message starts with the field
  }
}

TEST(OpenAiRequest, CompletionPrompts) {
  auto ok = [](const std::string& body) {
    ApiOr<GenerationSpec> r = parse_openai_completion(parse(body));
    EXPECT_TRUE(r.is_ok()) << (r.is_ok() ? "" : r.error().message);
    return r.is_ok() ? r.value() : GenerationSpec{};
  };
  EXPECT_EQ(ok(R"({"model": "m", "prompt": "abc"})").prompt, "abc");
  EXPECT_EQ(ok(R"({"model": "m", "prompt": ["abc"]})").prompt, "abc");
  EXPECT_EQ(ok(R"({"model": "m", "prompt": [1, 2, 3]})").prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(ok(R"({"model": "m", "prompt": [[4, 5]]})").prompt_ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(ok(R"({"model": "m", "prompt": "x"})").params.max_tokens, 16);  // the endpoint's default
  EXPECT_FALSE(ok(R"({"model": "m", "prompt": "x"})").chat);

  ApiOr<GenerationSpec> two = parse_openai_completion(parse(R"({"model": "m", "prompt": ["a", "b"]})"));
  ASSERT_FALSE(two.is_ok());
  EXPECT_EQ(two.error().param, "prompt");
  ApiOr<GenerationSpec> bad_id = parse_openai_completion(parse(R"({"model": "m", "prompt": [1, -2]})"));
  ASSERT_FALSE(bad_id.is_ok());
  EXPECT_EQ(bad_id.error().param, "prompt[1]");
  ApiOr<GenerationSpec> echo = parse_openai_completion(parse(R"({"model": "m", "prompt": "a", "echo": true})"));
  ASSERT_FALSE(echo.is_ok());
  EXPECT_EQ(echo.error().param, "echo");
}

TEST(OpenAiResponse, ChatWithToolCalls) {
  Completion c;
  c.reasoning = "let me see";
  c.tool_calls.push_back(ToolCall{"call_a", "f", R"({"x": 1})"});
  c.finish.reason = FinishReason::kToolCalls;
  c.finish.usage = Usage{100, 64, 9, 48};
  const Json j = openai_chat_response(c, ResponseMeta{"chatcmpl-1", "m", 5});
  EXPECT_EQ(j["object"], "chat.completion");
  const Json& msg = j["choices"][0]["message"];
  EXPECT_TRUE(msg["content"].is_null());  // only calls: content is null, as OpenAI sends it
  EXPECT_EQ(msg["reasoning_content"], "let me see");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["arguments"], R"({"x": 1})");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(j["usage"]["total_tokens"], 109);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 64);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["restored_tokens"], 48);
}

TEST(OpenAiStream, ChunksCarryDeltasToolCallsAndUsage) {
  auto enc = openai_chat_stream(ResponseMeta{"chatcmpl-1", "m", 5}, /*include_usage=*/true);
  using K = chat::OutputEvent::Kind;
  GenEvent started;
  started.kind = GenEvent::Kind::kStarted;
  std::string sse = enc->encode(started);
  sse += enc->encode(output(K::Text, "Hi"));
  sse += enc->encode(output(K::ToolCallStart, "", "call_a", "f"));
  sse += enc->encode(output(K::ToolCallArgs, "{\"x\": ", "call_a"));
  sse += enc->encode(output(K::ToolCallArgs, "1}", "call_a"));
  sse += enc->encode(output(K::ToolCallEnd, "", "call_a"));
  sse += enc->encode(output(K::ToolCallStart, "", "call_b", "g"));
  sse += enc->encode(output(K::ToolCallEnd, "", "call_b"));  // no arguments at all
  sse += enc->encode(finished(FinishReason::kToolCalls, Usage{10, 0, 7}));

  const auto lines = data_lines(sse);
  ASSERT_EQ(lines.size(), 10u);
  std::vector<Json> chunks;
  for (size_t i = 0; i + 1 < lines.size(); ++i) chunks.push_back(Json::parse(lines[i]));
  EXPECT_EQ(lines.back(), "[DONE]");
  for (const Json& c : chunks) EXPECT_EQ(c["object"], "chat.completion.chunk");
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chunks[1]["choices"][0]["delta"]["content"], "Hi");
  const Json& start = chunks[2]["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(start["index"], 0);
  EXPECT_EQ(start["id"], "call_a");
  EXPECT_EQ(start["function"]["name"], "f");
  EXPECT_EQ(start["function"]["arguments"], "");
  EXPECT_EQ(chunks[3]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"], "{\"x\": ");
  EXPECT_EQ(chunks[4]["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
  EXPECT_EQ(chunks[5]["choices"][0]["delta"]["tool_calls"][0]["index"], 1);
  EXPECT_EQ(chunks[6]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"], "{}");
  EXPECT_EQ(chunks[7]["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_TRUE(chunks[7]["usage"].is_null());
  EXPECT_TRUE(chunks[8]["choices"].empty());
  EXPECT_EQ(chunks[8]["usage"]["completion_tokens"], 7);
}

TEST(OpenAiStream, CancelledAndFailedStreamsEndWithAnError) {
  auto enc = openai_chat_stream(ResponseMeta{"x", "m", 0}, false);
  const auto lines = data_lines(enc->encode(finished(FinishReason::kCancelled, {})));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(Json::parse(lines[0])["error"]["code"], "shutting_down");
  EXPECT_EQ(lines[1], "[DONE]");

  GenEvent failed;
  failed.kind = GenEvent::Kind::kError;
  failed.error.http_status = 500;
  failed.error.type = "server_error";
  failed.error.message = "boom";
  const auto lines2 = data_lines(openai_completion_stream(ResponseMeta{"x", "m", 0}, false)->encode(failed));
  EXPECT_EQ(Json::parse(lines2[0])["error"]["message"], "boom");
}

TEST(OpenAiError, Shape) {
  ApiError e = invalid_field("messages[0].role", "expected user");
  const Json j = Json::parse(openai_error_body(e));
  EXPECT_EQ(j["error"]["message"], "messages[0].role: expected user");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "messages[0].role");
  EXPECT_TRUE(j["error"]["code"].is_null());
}

}  // namespace
}  // namespace tern::server
