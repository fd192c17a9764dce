// A small HTTP/1.1 server for the API: one thread per connection, keep-alive, bounded request
// sizes, chunked streaming (Server-Sent Events) and detection of clients that hang up. Boost.Beast
// parses and writes HTTP; it stays inside http_server.cpp, so the rest of server/ sees only these
// plain types.
//
// Invariants:
// - The handler runs on the connection's thread; it may block (it waits on the engine) but must
//   answer every request exactly once: send(), or begin_stream() ... end_stream().
// - A request whose body exceeds max_body_bytes is still handed to the handler (body empty,
//   body_too_large set) so that the error comes back in the API dialect the path belongs to; the
//   connection closes after that answer because the body was never read.
// - stop() stops accepting, wakes idle keep-alive connections and waits for handlers to return.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace tern::server {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // target without the query string
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  bool body_too_large = false;   // the declared body exceeded the limit (body is empty)
  uint64_t declared_body_bytes = 0;
  // The first value of a header (name lower-case), or nullptr.
  const std::string* header(std::string_view name) const;
};

// How a handler answers. One instance per request, used only on the connection's thread.
class HttpResponder {
 public:
  virtual ~HttpResponder() = default;
  // A complete response with Content-Length.
  virtual void send(int status, std::string_view content_type, std::string body) = 0;
  // Starts a chunked text/event-stream response; false when the client is already gone.
  virtual bool begin_stream(int status) = 0;
  // One piece of the stream; false once the client is gone (every later write fails too).
  virtual bool write(std::string_view data) = 0;
  virtual void end_stream() = 0;
  // True when the peer has closed its side (checked without blocking).
  virtual bool client_gone() = 0;
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponder&)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                   // 0 = any free port (see HttpServer::port())
  uint64_t max_body_bytes = 16u << 20;  // larger bodies get the handler's 413
  uint32_t max_header_bytes = 64u << 10;
  int max_connections = 256;         // beyond this, new connections get 503 and are closed
  std::chrono::seconds idle_timeout{120};  // a keep-alive connection silent this long is closed
};

class HttpServer {
 public:
  // Binds and listens (errors name the address); serving starts with run().
  static Result<std::unique_ptr<HttpServer>> listen(const HttpServerOptions& options, HttpHandler handler);
  ~HttpServer();

  int port() const;  // the bound port
  // Accepts connections until stop(); returns after every connection thread has finished.
  void run();
  // Thread-safe and idempotent: stops accepting and closes idle connections. Connections busy in
  // a handler finish their current request first.
  void stop();
  int n_open_connections() const;

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tern::server
