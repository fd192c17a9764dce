// Completions and GenEvents -> Anthropic Messages JSON and its event stream. Usage follows
// Anthropic's accounting: input_tokens excludes prompt tokens read from the cache, which are
// reported as cache_read_input_tokens (nothing is ever billed as cache creation here).
#include "server/anthropic.h"

namespace tern::server {
namespace {

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json usage_json(const Usage& u) {
  return Json{{"input_tokens", u.prompt_tokens - u.cached_tokens},
              {"cache_creation_input_tokens", 0},
              {"cache_read_input_tokens", u.cached_tokens},
              // tern's: the part of cache_read_input_tokens restored from the host-RAM or SSD tier.
              {"cache_restored_input_tokens", u.restored_tokens},
              {"output_tokens", u.completion_tokens}};
}

Json stop_sequence_json(const FinishInfo& f) {
  return f.reason == FinishReason::kStopSequence && !f.stop_sequence.empty() ? Json(f.stop_sequence) : Json(nullptr);
}

// Tool arguments arrive as JSON text; the Messages API carries them as an object.
Json tool_input(const std::string& arguments) {
  Json j = Json::parse(arguments, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : Json::object();
}

const char* error_type_for(int http_status) {
  switch (http_status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return http_status >= 500 ? "api_error" : "invalid_request_error";
  }
}

std::string error_event(const ApiError& e) { return sse_event("error", anthropic_error_body(e)); }

class MessagesStream final : public StreamEncoder {
 public:
  explicit MessagesStream(ResponseMeta meta) : meta_(std::move(meta)) {}

  std::string encode(const GenEvent& e) override {
    switch (e.kind) {
      case GenEvent::Kind::kStarted: return message_start(e.usage);
      case GenEvent::Kind::kOutput: return output(e.output);
      case GenEvent::Kind::kError: return close_block() + error_event(e.error);
      case GenEvent::Kind::kFinished: break;
    }
    if (e.finish.reason == FinishReason::kCancelled) {
      ApiError err;
      err.http_status = 503;
      err.message = "generation stopped: the server is shutting down";
      return close_block() + error_event(err);
    }
    std::string s;
    if (index_ < 0) s += open_block(Json{{"type", "text"}, {"text", ""}}, Block::kText);  // never an empty content list
    s += close_block();
    Json delta{{"type", "message_delta"},
               {"delta", {{"stop_reason", anthropic_stop_reason(e.finish.reason)}, {"stop_sequence", stop_sequence_json(e.finish)}}},
               {"usage", usage_json(e.finish.usage)}};
    s += sse_event("message_delta", dump(delta));
    s += sse_event("message_stop", R"({"type":"message_stop"})");
    return s;
  }

  std::string keepalive() override { return index_ >= 0 || started_ ? sse_event("ping", R"({"type":"ping"})") : ""; }

 private:
  enum class Block { kNone, kText, kThinking, kToolUse };

  std::string message_start(const Usage& usage) {
    started_ = true;
    Usage u = usage;
    u.completion_tokens = 0;
    Json message{{"id", meta_.id},
                 {"type", "message"},
                 {"role", "assistant"},
                 {"model", meta_.model},
                 {"content", Json::array()},
                 {"stop_reason", nullptr},
                 {"stop_sequence", nullptr},
                 {"usage", usage_json(u)}};
    return sse_event("message_start", dump(Json{{"type", "message_start"}, {"message", std::move(message)}}));
  }

  std::string open_block(Json content_block, Block kind) {
    std::string s = close_block();
    ++index_;
    open_ = kind;
    s += sse_event("content_block_start",
                   dump(Json{{"type", "content_block_start"}, {"index", index_}, {"content_block", std::move(content_block)}}));
    if (!pinged_) s += sse_event("ping", R"({"type":"ping"})");  // where Anthropic sends its first ping
    pinged_ = true;
    return s;
  }

  std::string close_block() {
    if (open_ == Block::kNone) return {};
    open_ = Block::kNone;
    return sse_event("content_block_stop", dump(Json{{"type", "content_block_stop"}, {"index", index_}}));
  }

  std::string delta(Json d) {
    return sse_event("content_block_delta", dump(Json{{"type", "content_block_delta"}, {"index", index_}, {"delta", std::move(d)}}));
  }

  std::string output(const chat::OutputEvent& o) {
    using Kind = chat::OutputEvent::Kind;
    std::string s;
    switch (o.kind) {
      case Kind::Text:
        if (o.text.empty()) return {};
        if (open_ != Block::kText) s += open_block(Json{{"type", "text"}, {"text", ""}}, Block::kText);
        return s + delta(Json{{"type", "text_delta"}, {"text", o.text}});
      case Kind::Reasoning:
        if (o.text.empty()) return {};
        if (open_ != Block::kThinking)
          s += open_block(Json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}, Block::kThinking);
        return s + delta(Json{{"type", "thinking_delta"}, {"thinking", o.text}});
      case Kind::ToolCallStart:
        return open_block(Json{{"type", "tool_use"}, {"id", o.id}, {"name", o.name}, {"input", Json::object()}},
                          Block::kToolUse);
      case Kind::ToolCallArgs:
        if (o.text.empty() || open_ != Block::kToolUse) return {};
        return delta(Json{{"type", "input_json_delta"}, {"partial_json", o.text}});
      case Kind::ToolCallEnd: return open_ == Block::kToolUse ? close_block() : std::string();
    }
    return {};
  }

  ResponseMeta meta_;
  Block open_ = Block::kNone;
  int index_ = -1;  // the current (or last) content block
  bool pinged_ = false;
  bool started_ = false;
};

}  // namespace

const char* anthropic_stop_reason(FinishReason r) {
  switch (r) {
    case FinishReason::kLength: return "max_tokens";
    case FinishReason::kStopSequence: return "stop_sequence";
    case FinishReason::kToolCalls: return "tool_use";
    default: return "end_turn";
  }
}

Json anthropic_response(const Completion& c, const ResponseMeta& meta) {
  Json content = Json::array();
  if (!c.reasoning.empty()) content.push_back(Json{{"type", "thinking"}, {"thinking", c.reasoning}, {"signature", ""}});
  if (!c.text.empty() || (c.tool_calls.empty() && content.empty())) content.push_back(Json{{"type", "text"}, {"text", c.text}});
  for (const ToolCall& t : c.tool_calls)
    content.push_back(Json{{"type", "tool_use"}, {"id", t.id}, {"name", t.name}, {"input", tool_input(t.arguments)}});
  return Json{{"id", meta.id},
              {"type", "message"},
              {"role", "assistant"},
              {"model", meta.model},
              {"content", std::move(content)},
              {"stop_reason", anthropic_stop_reason(c.finish.reason)},
              {"stop_sequence", stop_sequence_json(c.finish)},
              {"usage", usage_json(c.finish.usage)}};
}

std::unique_ptr<StreamEncoder> anthropic_stream(ResponseMeta meta) { return std::make_unique<MessagesStream>(std::move(meta)); }

std::string anthropic_error_body(const ApiError& e) {
  return dump(Json{{"type", "error"}, {"error", {{"type", error_type_for(e.http_status)}, {"message", e.message}}}});
}

}  // namespace tern::server
