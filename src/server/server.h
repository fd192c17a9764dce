// `tern serve`'s server: routes HTTP requests to the OpenAI and Anthropic translators, checks the
// API key and the model name, and pumps each generation from the engine to its client (one
// response body, or a Server-Sent Events stream).
//
// Endpoints: POST /v1/chat/completions, /v1/completions, /v1/messages, /v1/messages/count_tokens;
// GET /v1/models, /v1/models/{id}, /health, /metrics.
//
// Shutdown: stop() stops accepting and closes idle connections; requests in flight keep going.
// cancel_all() then ends what is still running, and those streams close with an explicit error
// event ("the server is shutting down") rather than silently.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_set>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"
#include "server/api_types.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/prompt_builder.h"
#include "server/stream_encoder.h"
#include "server/turn_memory.h"

namespace tern::server {

class Generation;

struct ServerOptions {
  std::string model_id;                    // the name GET /v1/models lists
  std::vector<std::string> model_aliases;  // further names accepted as "model"; "*" accepts any
  std::string api_key;                     // when set, /v1/* needs it (Bearer or x-api-key)
  HttpServerOptions http;
};

class Server {
 public:
  Server(Engine& engine, ChatFormat format, ServerOptions options);
  ~Server();

  Status listen();  // binds options.http.host:port
  int port() const;
  void run();       // serves until stop(); returns once every connection has closed
  void stop();      // thread-safe
  // Generations in flight (queued or running), and a way to end them all: each ends with the
  // dialect's "shutting down" event. Thread-safe.
  int n_active_requests() const;
  void cancel_all();

  // Answers one request (the HTTP layer's handler; tests call it with a fake responder).
  void handle(const HttpRequest& req, HttpResponder& out);
  std::string metrics_text() const;

 private:
  enum class Route { kChatCompletions, kCompletions, kMessages, kCountTokens, kModels, kModel, kHealth, kMetrics, kUnknown };
  // Registers a generation for cancel_all() while it is being served.
  class ActiveGeneration {
   public:
    ActiveGeneration(Server& server, Generation& gen);
    ~ActiveGeneration();

   private:
    Server* server_;
    Generation* gen_;
  };

  void serve_generation(Route route, const HttpRequest& req, HttpResponder& out);
  // Pumps events to a Server-Sent Events stream until the end or until the client leaves.
  void stream_to(Generation& gen, StreamEncoder& enc, HttpResponder& out);
  // Waits for the whole answer; nullopt when the client left or (with *failed set) it failed.
  std::optional<Completion> collect(Generation& gen, HttpResponder& out, std::optional<GenEvent>* failed);
  void send_error(Route route, const ApiError& e, HttpResponder& out);
  void send_json(Route route, int status, std::string body, HttpResponder& out);
  bool authorized(const HttpRequest& req) const;
  bool model_known(const std::string& name) const;
  std::string models_json() const;

  Engine* engine_;
  ChatFormat format_;
  ServerOptions options_;
  std::unique_ptr<HttpServer> http_;
  RequestCounters counters_;
  TurnMemory turn_memory_;  // generated turns, spliced back into later prompts
  HistoryCounters history_counters_;
  mutable std::mutex active_mutex_;
  std::unordered_set<Generation*> active_;
  std::atomic<bool> stopping_{false};
};

}  // namespace tern::server
