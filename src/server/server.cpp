#include "server/server.h"

#include <chrono>
#include <ctime>
#include <optional>

#include "server/anthropic.h"
#include "server/generation.h"
#include "server/openai.h"
#include "server/request_common.h"

namespace tern::server {
namespace {

using Clock = std::chrono::steady_clock;

// How often an idle stream checks whether its client is still there.
constexpr std::chrono::milliseconds kPollInterval{100};
// A stream silent this long (a long prefill) gets the dialect's keep-alive event.
constexpr std::chrono::seconds kKeepAliveInterval{10};

constexpr std::string_view kJson = "application/json";

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

ApiError make_error(int status, std::string type, std::string message, std::string param = {}, std::string code = {}) {
  ApiError e;
  e.http_status = status;
  e.type = std::move(type);
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

// Compares without an early exit, so the time taken says nothing about where a guess went wrong.
bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(i < b.size() ? b[i] : 0);
  return diff == 0;
}

int64_t unix_seconds() { return static_cast<int64_t>(std::time(nullptr)); }

}  // namespace

Server::Server(Engine& engine, ChatFormat format, ServerOptions options)
    : engine_(&engine), format_(std::move(format)), options_(std::move(options)) {}

Server::~Server() { stop(); }

Status Server::listen() {
  TERN_ASSIGN_OR_RETURN(http_, HttpServer::listen(options_.http, [this](const HttpRequest& req, HttpResponder& out) {
                          handle(req, out);
                        }));
  return Status::ok();
}

int Server::port() const { return http_ ? http_->port() : 0; }

void Server::run() {
  if (http_) http_->run();
}

void Server::stop() {
  stopping_ = true;
  if (http_) http_->stop();
}

bool Server::authorized(const HttpRequest& req) const {
  if (options_.api_key.empty()) return true;
  if (const std::string* key = req.header("x-api-key"); key && constant_time_equal(*key, options_.api_key)) return true;
  const std::string* auth = req.header("authorization");
  return auth != nullptr && starts_with(*auth, "Bearer ") && constant_time_equal(auth->substr(7), options_.api_key);
}

bool Server::model_known(const std::string& name) const {
  if (name == options_.model_id) return true;
  for (const std::string& alias : options_.model_aliases)
    if (alias == "*" || alias == name) return true;
  return false;
}

std::string Server::models_json() const {
  Json data = Json::array();
  auto entry = [](const std::string& id) {
    return Json{{"id", id}, {"object", "model"}, {"created", 0}, {"owned_by", "tern"}, {"type", "model"}, {"display_name", id}};
  };
  data.push_back(entry(options_.model_id));
  for (const std::string& alias : options_.model_aliases)
    if (alias != "*") data.push_back(entry(alias));
  return Json{{"object", "list"}, {"data", std::move(data)}, {"has_more", false}}.dump();
}

std::string Server::metrics_text() const {
  ServerGauges g;
  g.open_connections = http_ ? http_->n_open_connections() : 0;
  g.active_requests = n_active_requests();
  const TurnMemoryStats h = turn_memory_.stats();
  g.history_turns = h.n_turns;
  g.history_tokens = h.n_tokens;
  return render_metrics(engine_->metrics(), counters_, g, history_counters_);
}

namespace {

const char* route_label(int route) {
  static constexpr const char* kLabels[] = {"/v1/chat/completions", "/v1/completions", "/v1/messages",
                                            "/v1/messages/count_tokens", "/v1/models", "/v1/models/{id}",
                                            "/health", "/metrics", "other"};
  return kLabels[route];
}

}  // namespace

void Server::send_json(Route route, int status, std::string body, HttpResponder& out) {
  counters_.count(route_label(static_cast<int>(route)), status);
  out.send(status, kJson, std::move(body));
}

void Server::send_error(Route route, const ApiError& e, HttpResponder& out) {
  const bool anthropic = route == Route::kMessages || route == Route::kCountTokens;
  send_json(route, e.http_status, anthropic ? anthropic_error_body(e) : openai_error_body(e), out);
}

void Server::handle(const HttpRequest& req, HttpResponder& out) {
  const std::string& path = req.path;
  Route route = Route::kUnknown;
  if (path == "/v1/chat/completions") route = Route::kChatCompletions;
  else if (path == "/v1/completions") route = Route::kCompletions;
  else if (path == "/v1/messages") route = Route::kMessages;
  else if (path == "/v1/messages/count_tokens") route = Route::kCountTokens;
  else if (path == "/v1/models") route = Route::kModels;
  else if (starts_with(path, "/v1/models/")) route = Route::kModel;
  else if (path == "/health") route = Route::kHealth;
  else if (path == "/metrics") route = Route::kMetrics;

  const bool is_get = req.method == "GET" || req.method == "HEAD";
  const bool wants_post = route == Route::kChatCompletions || route == Route::kCompletions ||
                          route == Route::kMessages || route == Route::kCountTokens;
  if (route == Route::kUnknown)
    return send_error(route, make_error(404, "not_found_error", "no endpoint " + req.method + " " + path), out);
  if (wants_post ? req.method != "POST" : !is_get)
    return send_error(route, make_error(405, "invalid_request_error", "method " + req.method + " not allowed on " + path), out);

  if (route == Route::kHealth) {
    const bool ok = !stopping_;
    return send_json(route, ok ? 200 : 503, ok ? R"({"status":"ok"})" : R"({"status":"shutting_down"})", out);
  }
  if (route == Route::kMetrics) {
    counters_.count(route_label(static_cast<int>(route)), 200);
    return out.send(200, "text/plain; version=0.0.4; charset=utf-8", metrics_text());
  }
  if (!authorized(req)) {
    return send_error(route, make_error(401, "authentication_error", "invalid or missing API key (send it as "
                                        "'Authorization: Bearer KEY' or 'x-api-key: KEY')", "", "invalid_api_key"), out);
  }
  if (route == Route::kModels) return send_json(route, 200, models_json(), out);
  if (route == Route::kModel) {
    const std::string id = path.substr(std::string_view("/v1/models/").size());
    if (!model_known(id)) return send_error(route, make_error(404, "not_found_error", "model '" + id + "' does not exist", "model", "model_not_found"), out);
    return send_json(route, 200, Json{{"id", id}, {"object", "model"}, {"created", 0}, {"owned_by", "tern"}}.dump(), out);
  }
  serve_generation(route, req, out);
}

void Server::serve_generation(Route route, const HttpRequest& req, HttpResponder& out) {
  if (stopping_) return send_error(route, make_error(503, "server_error", "the server is shutting down", "", "shutting_down"), out);
  if (req.body_too_large) {
    return send_error(route, make_error(413, "invalid_request_error", "the request body is " +
                                        std::to_string(req.declared_body_bytes) + " bytes; the limit is " +
                                        std::to_string(options_.http.max_body_bytes), "", "request_too_large"), out);
  }
  ApiOr<Json> body = parse_request_body(req.body);
  if (!body.is_ok()) return send_error(route, body.error(), out);
  ApiOr<GenerationSpec> parsed = route == Route::kChatCompletions ? parse_openai_chat(body.value())
                                 : route == Route::kCompletions   ? parse_openai_completion(body.value())
                                                                  : parse_anthropic_messages(body.value(), route == Route::kCountTokens);
  if (!parsed.is_ok()) return send_error(route, parsed.error(), out);
  GenerationSpec& spec = parsed.value();
  if (!model_known(spec.model)) {
    return send_error(route, make_error(404, "not_found_error", "model: '" + spec.model + "' is not served here (this server serves '" +
                                        options_.model_id + "')", "model", "model_not_found"), out);
  }
  const bool anthropic = route == Route::kMessages || route == Route::kCountTokens;
  const std::string call_prefix = (anthropic ? "toolu_" : "call_") + random_id(16) + "_";
  const HistoryContext history{&turn_memory_, history_scope(engine_->model().config().fingerprint, spec.params.cache_salt)};
  ApiOr<BuiltPrompt> prompt = build_prompt(spec, format_, engine_->tokenizer(), call_prefix, history);
  if (!prompt.is_ok()) return send_error(route, prompt.error(), out);
  if (route == Route::kCountTokens) {
    return send_json(route, 200, Json{{"input_tokens", prompt.value().tokens.size()}}.dump(), out);
  }
  const SpliceStats& spliced = prompt.value().history;
  history_counters_.remembered += spliced.n_remembered;
  history_counters_.spliced += spliced.n_spliced;
  history_counters_.verified += spliced.n_verified;
  history_counters_.spliced_tokens += spliced.n_spliced_tokens;

  ApiOr<std::unique_ptr<Generation>> started =
      Generation::start(*engine_, std::move(prompt.value()), spec.params, spec.chat ? history : HistoryContext{});
  if (!started.is_ok()) return send_error(route, started.error(), out);
  Generation& gen = *started.value();
  ActiveGeneration registered(*this, gen);

  ResponseMeta meta;
  meta.id = (anthropic ? "msg_" : route == Route::kCompletions ? "cmpl-" : "chatcmpl-") + random_id(24);
  meta.model = spec.model;
  meta.created = unix_seconds();
  if (spec.stream) {
    std::unique_ptr<StreamEncoder> enc = anthropic ? anthropic_stream(meta)
                                         : route == Route::kCompletions ? openai_completion_stream(meta, spec.include_usage)
                                                                        : openai_chat_stream(meta, spec.include_usage);
    counters_.count(route_label(static_cast<int>(route)), 200);
    return stream_to(gen, *enc, out);
  }
  std::optional<GenEvent> failed;
  std::optional<Completion> completion = collect(gen, out, &failed);
  if (failed) return send_error(route, failed->error, out);
  if (!completion) return;  // the client left
  if (completion->finish.reason == FinishReason::kCancelled) {
    return send_error(route, make_error(503, "server_error", "generation stopped: the server is shutting down", "", "shutting_down"), out);
  }
  Json response = anthropic                       ? anthropic_response(*completion, meta)
                  : route == Route::kCompletions ? openai_completion_response(*completion, meta)
                                                  : openai_chat_response(*completion, meta);
  send_json(route, 200, response.dump(-1, ' ', false, Json::error_handler_t::replace), out);
}

void Server::stream_to(Generation& gen, StreamEncoder& enc, HttpResponder& out) {
  if (!out.begin_stream(200)) return gen.cancel();
  std::vector<GenEvent> events;
  auto last_write = Clock::now();
  for (bool more = true; more;) {
    events.clear();
    more = gen.poll(&events, kPollInterval);
    std::string chunk;
    for (const GenEvent& e : events) chunk += enc.encode(e);
    if (chunk.empty() && Clock::now() - last_write > kKeepAliveInterval) chunk = enc.keepalive();
    if (!chunk.empty()) {
      if (!out.write(chunk)) return gen.cancel();
      last_write = Clock::now();
    } else if (more && out.client_gone()) {
      return gen.cancel();
    }
  }
  out.end_stream();
}

std::optional<Completion> Server::collect(Generation& gen, HttpResponder& out, std::optional<GenEvent>* failed) {
  Completion completion;
  std::vector<GenEvent> events;
  for (bool more = true; more;) {
    events.clear();
    more = gen.poll(&events, kPollInterval);
    for (const GenEvent& e : events) {
      if (e.kind == GenEvent::Kind::kError) {
        *failed = e;
        return std::nullopt;
      }
      accumulate(completion, e);
    }
    if (more && events.empty() && out.client_gone()) {
      gen.cancel();
      return std::nullopt;
    }
  }
  return completion;
}

Server::ActiveGeneration::ActiveGeneration(Server& server, Generation& gen) : server_(&server), gen_(&gen) {
  std::lock_guard<std::mutex> lock(server_->active_mutex_);
  server_->active_.insert(gen_);
}

Server::ActiveGeneration::~ActiveGeneration() {
  std::lock_guard<std::mutex> lock(server_->active_mutex_);
  server_->active_.erase(gen_);
}

int Server::n_active_requests() const {
  std::lock_guard<std::mutex> lock(active_mutex_);
  return static_cast<int>(active_.size());
}

void Server::cancel_all() {
  std::lock_guard<std::mutex> lock(active_mutex_);
  for (Generation* g : active_) g->cancel();
}

}  // namespace tern::server
