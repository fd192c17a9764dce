// Completions and GenEvents -> OpenAI JSON: chat.completion / text_completion objects, their
// chunk streams ("data: {...}\n\n" ... "data: [DONE]\n\n") and error bodies.
#include <unordered_map>

#include "server/openai.h"

namespace tern::server {
namespace {

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json usage_json(const Usage& u) {
  return Json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              // restored_tokens (tern's): the part of cached_tokens that came back from the
              // host-RAM or SSD tier rather than device memory.
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}, {"restored_tokens", u.restored_tokens}}}};
}

Json envelope(const ResponseMeta& meta, const char* object) {
  return Json{{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model},
              {"system_fingerprint", "tern"}};
}

std::string data_line(const Json& j) { return "data: " + dump(j) + "\n\n"; }

// The stream's last words when generation did not end normally: an error object the SDKs raise.
std::string stream_error(const ApiError& e) { return "data: " + openai_error_body(e) + "\n\n"; }

ApiError cancelled_error() {
  ApiError e;
  e.http_status = 503;
  e.type = "server_error";
  e.code = "shutting_down";
  e.message = "generation stopped: the server is shutting down";
  return e;
}

class ChatStream final : public StreamEncoder {
 public:
  ChatStream(ResponseMeta meta, bool include_usage) : meta_(std::move(meta)), include_usage_(include_usage) {}

  std::string encode(const GenEvent& e) override {
    switch (e.kind) {
      case GenEvent::Kind::kStarted: return chunk(Json{{"role", "assistant"}, {"content", ""}});
      case GenEvent::Kind::kOutput: return output(e.output);
      case GenEvent::Kind::kError: return stream_error(e.error) + "data: [DONE]\n\n";
      case GenEvent::Kind::kFinished: break;
    }
    if (e.finish.reason == FinishReason::kCancelled) return stream_error(cancelled_error()) + "data: [DONE]\n\n";
    std::string s = chunk(Json::object(), openai_finish_reason(e.finish.reason));
    if (include_usage_) {
      Json j = envelope(meta_, "chat.completion.chunk");
      j["choices"] = Json::array();
      j["usage"] = usage_json(e.finish.usage);
      s += data_line(j);
    }
    return s + "data: [DONE]\n\n";
  }

 private:
  std::string chunk(Json delta, const char* finish_reason = nullptr) {
    Json choice{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    if (finish_reason != nullptr) choice["finish_reason"] = finish_reason;
    Json j = envelope(meta_, "chat.completion.chunk");
    j["choices"] = Json::array({std::move(choice)});
    if (include_usage_) j["usage"] = nullptr;
    return data_line(j);
  }

  std::string output(const chat::OutputEvent& o) {
    using Kind = chat::OutputEvent::Kind;
    switch (o.kind) {
      case Kind::Text: return o.text.empty() ? std::string() : chunk(Json{{"content", o.text}});
      case Kind::Reasoning: return o.text.empty() ? std::string() : chunk(Json{{"reasoning_content", o.text}});
      case Kind::ToolCallStart: {
        const int index = static_cast<int>(call_index_.size());
        call_index_[o.id] = index;
        args_sent_[o.id] = false;
        return chunk(Json{{"tool_calls", Json::array({Json{{"index", index},
                                                           {"id", o.id},
                                                           {"type", "function"},
                                                           {"function", {{"name", o.name}, {"arguments", ""}}}}})}});
      }
      case Kind::ToolCallArgs:
        if (o.text.empty()) return {};
        args_sent_[o.id] = true;
        return args_chunk(o.id, o.text);
      case Kind::ToolCallEnd:
        // A call without arguments still ends as a parseable object.
        if (!o.malformed && !args_sent_[o.id]) return args_chunk(o.id, "{}");
        return {};
    }
    return {};
  }

  std::string args_chunk(const std::string& id, const std::string& fragment) {
    return chunk(Json{{"tool_calls", Json::array({Json{{"index", call_index_[id]}, {"function", {{"arguments", fragment}}}}})}});
  }

  ResponseMeta meta_;
  bool include_usage_;
  std::unordered_map<std::string, int> call_index_;
  std::unordered_map<std::string, bool> args_sent_;
};

class CompletionStream final : public StreamEncoder {
 public:
  CompletionStream(ResponseMeta meta, bool include_usage) : meta_(std::move(meta)), include_usage_(include_usage) {}

  std::string encode(const GenEvent& e) override {
    switch (e.kind) {
      case GenEvent::Kind::kStarted: return {};
      case GenEvent::Kind::kOutput: return e.output.text.empty() ? std::string() : chunk(e.output.text, nullptr);
      case GenEvent::Kind::kError: return stream_error(e.error) + "data: [DONE]\n\n";
      case GenEvent::Kind::kFinished: break;
    }
    if (e.finish.reason == FinishReason::kCancelled) return stream_error(cancelled_error()) + "data: [DONE]\n\n";
    std::string s = chunk("", openai_finish_reason(e.finish.reason));
    if (include_usage_) {
      Json j = envelope(meta_, "text_completion");
      j["choices"] = Json::array();
      j["usage"] = usage_json(e.finish.usage);
      s += data_line(j);
    }
    return s + "data: [DONE]\n\n";
  }

 private:
  std::string chunk(const std::string& text, const char* finish_reason) {
    Json choice{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    if (finish_reason != nullptr) choice["finish_reason"] = finish_reason;
    Json j = envelope(meta_, "text_completion");
    j["choices"] = Json::array({std::move(choice)});
    if (include_usage_) j["usage"] = nullptr;
    return data_line(j);
  }

  ResponseMeta meta_;
  bool include_usage_;
};

}  // namespace

const char* openai_finish_reason(FinishReason r) {
  switch (r) {
    case FinishReason::kLength: return "length";
    case FinishReason::kToolCalls: return "tool_calls";
    default: return "stop";
  }
}

Json openai_chat_response(const Completion& c, const ResponseMeta& meta) {
  Json message{{"role", "assistant"}};
  message["content"] = c.text.empty() && !c.tool_calls.empty() ? Json(nullptr) : Json(c.text);
  if (!c.reasoning.empty()) message["reasoning_content"] = c.reasoning;
  if (!c.tool_calls.empty()) {
    Json calls = Json::array();
    for (const ToolCall& t : c.tool_calls)
      calls.push_back(Json{{"id", t.id}, {"type", "function"}, {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
    message["tool_calls"] = std::move(calls);
  }
  Json j = envelope(meta, "chat.completion");
  j["choices"] = Json::array({Json{{"index", 0},
                                   {"message", std::move(message)},
                                   {"logprobs", nullptr},
                                   {"finish_reason", openai_finish_reason(c.finish.reason)}}});
  j["usage"] = usage_json(c.finish.usage);
  return j;
}

Json openai_completion_response(const Completion& c, const ResponseMeta& meta) {
  Json j = envelope(meta, "text_completion");
  j["choices"] = Json::array({Json{{"index", 0},
                                   {"text", c.text},
                                   {"logprobs", nullptr},
                                   {"finish_reason", openai_finish_reason(c.finish.reason)}}});
  j["usage"] = usage_json(c.finish.usage);
  return j;
}

std::unique_ptr<StreamEncoder> openai_chat_stream(ResponseMeta meta, bool include_usage) {
  return std::make_unique<ChatStream>(std::move(meta), include_usage);
}

std::unique_ptr<StreamEncoder> openai_completion_stream(ResponseMeta meta, bool include_usage) {
  return std::make_unique<CompletionStream>(std::move(meta), include_usage);
}

std::string openai_error_body(const ApiError& e) {
  Json err{{"message", e.message}, {"type", e.type}};
  err["param"] = e.param.empty() ? Json(nullptr) : Json(e.param);
  err["code"] = e.code.empty() ? Json(nullptr) : Json(e.code);
  return dump(Json{{"error", std::move(err)}});
}

}  // namespace tern::server
