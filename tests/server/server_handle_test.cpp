// Server::handle end to end without a network: a real Engine on the default model, requests
// handed straight to the router, answers captured by a fake responder. Covers routing, auth,
// limits, streaming equal to non-streaming, and cancellation when the client goes away.
#include <gtest/gtest.h>

#include "../common/model_fixture.h"
#include "engine/engine.h"
#include "server/json_fields.h"
#include "server/server.h"

namespace tern::server {
namespace {

class FakeResponder final : public HttpResponder {
 public:
  explicit FakeResponder(int gone_after_writes = -1) : gone_after_writes_(gone_after_writes) {}
  void send(int status, std::string_view content_type, std::string body) override {
    this->status = status;
    this->content_type = std::string(content_type);
    this->body = std::move(body);
  }
  bool begin_stream(int status) override {
    this->status = status;
    streaming = true;
    return true;
  }
  bool write(std::string_view data) override {
    if (client_gone()) return false;
    body += data;
    ++n_writes;
    return true;
  }
  void end_stream() override { ended = true; }
  bool client_gone() override { return gone_after_writes_ >= 0 && n_writes >= gone_after_writes_; }

  int status = 0;
  std::string content_type;
  std::string body;
  bool streaming = false;
  bool ended = false;
  int n_writes = 0;

 private:
  int gone_after_writes_;
};

HttpRequest post(std::string path, std::string body, std::vector<std::pair<std::string, std::string>> headers = {}) {
  HttpRequest r;
  r.method = "POST";
  r.path = std::move(path);
  r.body = std::move(body);
  r.headers = std::move(headers);
  return r;
}

HttpRequest get(std::string path) {
  HttpRequest r;
  r.method = "GET";
  r.path = std::move(path);
  return r;
}

class ServerHandleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    m_ = testing::load_test_model(testing::default_model_path(), 2, false, 1024);
    ASSERT_NE(m_.model, nullptr);
    tok_ = std::move(tok::Tokenizer::from_gguf(*m_.file)).value();
    engine_ = std::make_unique<Engine>(*m_.model, *m_.kv, *tok_);
  }
  std::unique_ptr<Server> make_server(std::string api_key = {}, uint64_t max_body_bytes = 4096) {
    auto source = m_.file->get_string_opt("tokenizer.chat_template");
    auto format = ChatFormat::from_template(*source.value(), "<|im_start|>", "<|im_end|>");
    ServerOptions o;
    o.model_id = "tiny";
    o.model_aliases = {"also-tiny"};
    o.api_key = std::move(api_key);
    o.http.max_body_bytes = max_body_bytes;
    return std::make_unique<Server>(*engine_, std::move(format).value(), o);
  }

  testing::LoadedTestModel m_;
  std::unique_ptr<tok::Tokenizer> tok_;
  std::unique_ptr<Engine> engine_;
};

constexpr const char* kChat =
    R"({"model": "tiny", "max_tokens": 6, "temperature": 0, "messages": [{"role": "user", "content": "Say hello."}]})";

TEST_F(ServerHandleTest, ChatStreamedEqualsNotStreamed) {
  auto server = make_server();
  FakeResponder whole;
  server->handle(post("/v1/chat/completions", kChat), whole);
  ASSERT_EQ(whole.status, 200) << whole.body;
  const Json j = Json::parse(whole.body);
  const std::string text = j["choices"][0]["message"]["content"];
  EXPECT_EQ(j["usage"]["completion_tokens"], 6);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");

  Json body = Json::parse(kChat);
  body["stream"] = true;
  FakeResponder streamed;
  server->handle(post("/v1/chat/completions", body.dump()), streamed);
  EXPECT_TRUE(streamed.streaming && streamed.ended);
  std::string joined;
  size_t pos = 0;
  while ((pos = streamed.body.find("data: {", pos)) != std::string::npos) {
    const size_t end = streamed.body.find("\n\n", pos);
    const Json chunk = Json::parse(streamed.body.substr(pos + 6, end - pos - 6));
    joined += chunk["choices"][0]["delta"].value("content", "");
    pos = end;
  }
  EXPECT_EQ(joined, text);
  EXPECT_NE(streamed.body.find("data: [DONE]\n\n"), std::string::npos);

  // The alias is accepted too; an unknown name is a 404 naming the model.
  body["stream"] = false;
  body["model"] = "also-tiny";
  FakeResponder alias;
  server->handle(post("/v1/chat/completions", body.dump()), alias);
  EXPECT_EQ(alias.status, 200);
  body["model"] = "other";
  FakeResponder unknown;
  server->handle(post("/v1/messages", body.dump()), unknown);
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(Json::parse(unknown.body)["error"]["type"], "not_found_error");
}

TEST_F(ServerHandleTest, RoutingLimitsAndAuth) {
  auto server = make_server("k");
  FakeResponder nokey;
  server->handle(post("/v1/chat/completions", kChat), nokey);
  EXPECT_EQ(nokey.status, 401);
  FakeResponder bearer;
  server->handle(post("/v1/chat/completions", kChat, {{"authorization", "Bearer k"}}), bearer);
  EXPECT_EQ(bearer.status, 200);
  FakeResponder health;
  server->handle(get("/health"), health);  // no key needed
  EXPECT_EQ(health.status, 200);
  FakeResponder wrong_method;
  server->handle(get("/v1/chat/completions"), wrong_method);
  EXPECT_EQ(wrong_method.status, 405);
  FakeResponder nowhere;
  server->handle(get("/v2/nothing"), nowhere);
  EXPECT_EQ(nowhere.status, 404);

  HttpRequest big = post("/v1/messages", "", {{"x-api-key", "k"}});
  big.body_too_large = true;
  big.declared_body_bytes = 1 << 20;
  FakeResponder too_large;
  server->handle(big, too_large);
  EXPECT_EQ(too_large.status, 413);
  const Json err = Json::parse(too_large.body);
  EXPECT_EQ(err["error"]["type"], "request_too_large");
  EXPECT_NE(err["error"]["message"].get<std::string>().find("1048576"), std::string::npos);

  FakeResponder models;
  server->handle(get("/v1/models"), models);
  EXPECT_EQ(models.status, 401);

  FakeResponder metrics;
  server->handle(get("/metrics"), metrics);
  EXPECT_NE(metrics.body.find("tern_http_requests_total{endpoint=\"/v1/chat/completions\",status=\"401\"} 1"),
            std::string::npos) << metrics.body;
  EXPECT_NE(metrics.body.find("tern_http_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 1"),
            std::string::npos);
  EXPECT_NE(metrics.body.find("tern_generated_tokens_total 6"), std::string::npos) << metrics.body;
}

TEST_F(ServerHandleTest, PromptOverTheContextNamesBothSizes) {
  auto server = make_server({}, 1 << 20);
  std::string words;
  for (int i = 0; i < 1500; ++i) words += "word ";
  Json body = Json::parse(kChat);
  body["messages"][0]["content"] = words;
  FakeResponder out;
  server->handle(post("/v1/chat/completions", body.dump()), out);
  ASSERT_EQ(out.status, 400) << out.body;
  const Json err = Json::parse(out.body)["error"];
  EXPECT_EQ(err["code"], "context_length_exceeded");
  const std::string message = err["message"];
  const std::string lead = "the prompt is ";
  ASSERT_EQ(message.rfind(lead, 0), 0u) << message;
  EXPECT_GT(std::stoi(message.substr(lead.size())), 1500) << message;
  EXPECT_NE(message.find("the context holds 1024"), std::string::npos) << message;
}

TEST_F(ServerHandleTest, ClientGoneCancelsTheGeneration) {
  auto server = make_server();
  Json body = Json::parse(kChat);
  body["stream"] = true;
  body["max_tokens"] = 400;
  body["temperature"] = 0.9;
  FakeResponder leaving(/*gone_after_writes=*/2);
  server->handle(post("/v1/chat/completions", body.dump()), leaving);
  EXPECT_FALSE(leaving.ended);  // no terminator to a client that left
  engine_->shutdown(/*drain=*/true);
  EXPECT_EQ(engine_->metrics().requests_cancelled.load(), 1);
  EXPECT_LT(engine_->metrics().generated_tokens.load(), 400);
  EXPECT_EQ(server->n_active_requests(), 0);
}

}  // namespace
}  // namespace tern::server
