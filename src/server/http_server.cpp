// HTTP/1.1 over Boost.Beast with blocking sockets and a thread per connection. Blocking I/O keeps
// the handler code straight-line (it waits on the engine anyway); socket timeouts bound every
// read and write so that a silent or stalled client cannot hold a thread forever.
#include "server/http_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <limits>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

namespace tern::server {

namespace net = boost::asio;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;

const std::string* HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k == name) return &v;
  return nullptr;
}

namespace {

// How long a blocked write may wait for a client that stopped reading.
constexpr std::chrono::seconds kSendTimeout{30};
// Oversized bodies up to this size are read and dropped before the 413 goes out: clients send the
// whole body before they read the answer, and closing on unread data would reset the connection
// and lose the answer.
constexpr uint64_t kMaxDrainBytes = 64ull << 20;

void drain_body(tcp::socket& socket, boost::beast::flat_buffer& buffer, uint64_t n_bytes) {
  const uint64_t buffered = std::min<uint64_t>(n_bytes, buffer.size());
  buffer.consume(static_cast<size_t>(buffered));
  uint64_t left = n_bytes - buffered;
  std::vector<char> scratch(64 << 10);
  boost::beast::error_code ec;
  while (left > 0 && !ec) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(left, scratch.size()));
    left -= socket.read_some(net::buffer(scratch.data(), want), ec);
  }
}

void set_socket_timeout(int fd, int option, std::chrono::seconds t) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(t.count());
  setsockopt(fd, SOL_SOCKET, option, &tv, sizeof(tv));
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

class BeastResponder final : public HttpResponder {
 public:
  BeastResponder(tcp::socket& socket, bool keep_alive) : socket_(socket), keep_alive_(keep_alive) {}

  void send(int status, std::string_view content_type, std::string body) override {
    http::response<http::string_body> res{static_cast<http::status>(status), 11};
    res.set(http::field::server, "tern");
    res.set(http::field::content_type, std::string(content_type));
    res.keep_alive(keep_alive_);
    res.body() = std::move(body);
    res.prepare_payload();
    boost::beast::error_code ec;
    http::write(socket_, res, ec);
    if (ec) gone_ = true;
    answered_ = true;
  }

  bool begin_stream(int status) override {
    http::response<http::empty_body> res{static_cast<http::status>(status), 11};
    res.set(http::field::server, "tern");
    res.set(http::field::content_type, "text/event-stream");
    res.set(http::field::cache_control, "no-cache");
    res.keep_alive(keep_alive_);
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    boost::beast::error_code ec;
    http::write_header(socket_, sr, ec);
    if (ec) gone_ = true;
    answered_ = true;
    streaming_ = true;
    return !gone_;
  }

  bool write(std::string_view data) override {
    if (gone_ || data.empty()) return !gone_;
    boost::beast::error_code ec;
    net::write(socket_, http::make_chunk(net::const_buffer(data.data(), data.size())), ec);
    if (ec) gone_ = true;
    return !gone_;
  }

  void end_stream() override {
    if (gone_) return;
    boost::beast::error_code ec;
    net::write(socket_, http::make_chunk_last(), ec);
    if (ec) gone_ = true;
  }

  bool client_gone() override {
    if (gone_) return true;
    pollfd p{};
    p.fd = socket_.native_handle();
    p.events = POLLIN | POLLRDHUP;
    if (::poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) gone_ = true;
    return gone_;
  }

  bool answered() const { return answered_; }
  bool reusable() const { return keep_alive_ && !gone_ && answered_; }

 private:
  tcp::socket& socket_;
  bool keep_alive_;
  bool gone_ = false;
  bool answered_ = false;
  bool streaming_ = false;
};

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions options;
  HttpHandler handler;
  net::io_context io;
  tcp::acceptor acceptor{io};
  int port = 0;

  std::atomic<bool> stopping{false};
  mutable std::mutex mutex;
  std::condition_variable all_closed;
  // Open connections: native fd -> busy in a handler. Idle ones are woken by stop().
  std::unordered_map<int, bool> connections;
  int n_threads = 0;  // connection threads still running (they touch this Impl until they end)

  void serve_connection(tcp::socket socket);
  bool set_busy(int fd, bool busy);
  void refuse(tcp::socket& socket);
};

bool HttpServer::Impl::set_busy(int fd, bool busy) {
  std::lock_guard<std::mutex> lock(mutex);
  connections[fd] = busy;
  return !stopping;
}

void HttpServer::Impl::refuse(tcp::socket& socket) {
  http::response<http::string_body> res{http::status::service_unavailable, 11};
  res.set(http::field::content_type, "application/json");
  res.keep_alive(false);
  res.body() = R"({"error":{"message":"too many open connections","type":"server_error"}})";
  res.prepare_payload();
  boost::beast::error_code ec;
  http::write(socket, res, ec);
}

void HttpServer::Impl::serve_connection(tcp::socket socket) {
  const int fd = socket.native_handle();
  set_socket_timeout(fd, SO_RCVTIMEO, options.idle_timeout);
  set_socket_timeout(fd, SO_SNDTIMEO, kSendTimeout);
  boost::beast::error_code ec;
  socket.set_option(tcp::no_delay(true), ec);  // stream deltas leave at once
  boost::beast::flat_buffer buffer;
  while (!stopping) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(options.max_header_bytes);
    // note: Beast refuses a declared Content-Length over the body limit while reading the head,
    // before we know the path; the limit is set after the head so that the 413 can be answered.
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    http::read_header(socket, buffer, parser, ec);
    if (ec) break;  // closed, timed out, woken by stop(), or a malformed request head
    set_busy(fd, true);
    const auto& head = parser.get();
    HttpRequest req;
    req.method = std::string(head.method_string());
    const std::string target(head.target());
    req.path = target.substr(0, target.find('?'));
    for (const auto& field : head) {
      const auto name = field.name_string();
      req.headers.emplace_back(lower(std::string_view(name.data(), name.size())), std::string(field.value()));
    }
    const auto declared = parser.content_length();
    req.declared_body_bytes = declared ? *declared : 0;
    if (declared && *declared > options.max_body_bytes) {
      req.body_too_large = true;
      if (*declared <= kMaxDrainBytes) drain_body(socket, buffer, *declared);
    } else {
      if (const std::string* expect = req.header("expect"); expect && lower(*expect) == "100-continue") {
        http::response<http::empty_body> cont{http::status::continue_, 11};
        http::write(socket, cont, ec);
      }
      parser.body_limit(options.max_body_bytes);
      http::read(socket, buffer, parser, ec);
      if (ec == http::error::body_limit) {
        req.body_too_large = true;  // chunked request bodies are only measured while reading
      } else if (ec) {
        break;
      } else {
        req.body = std::move(parser.get().body());
      }
    }
    const bool keep_alive = parser.get().keep_alive() && !req.body_too_large;
    BeastResponder responder(socket, keep_alive);
    handler(req, responder);
    if (!responder.answered()) responder.send(500, "application/json", R"({"error":{"message":"no response"}})");
    if (!set_busy(fd, false) || !responder.reusable()) break;
  }
  {
    // Forget the fd before closing it: accept() may hand the same number to a new connection.
    std::lock_guard<std::mutex> lock(mutex);
    connections.erase(fd);
  }
  socket.shutdown(tcp::socket::shutdown_both, ec);
  socket.close(ec);
  std::lock_guard<std::mutex> lock(mutex);
  --n_threads;
  all_closed.notify_all();
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() {
  stop();
  std::unique_lock<std::mutex> lock(impl_->mutex);
  impl_->all_closed.wait(lock, [&] { return impl_->n_threads == 0; });
}

Result<std::unique_ptr<HttpServer>> HttpServer::listen(const HttpServerOptions& options, HttpHandler handler) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->handler = std::move(handler);
  boost::beast::error_code ec;
  const auto address = net::ip::make_address(options.host, ec);
  if (ec) return error("--host: expected an IP address, got '" + options.host + "'");
  if (options.port < 0 || options.port > 65535)
    return error("--port: expected 0..65535, got " + std::to_string(options.port));
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(options.port));
  const std::string where = options.host + ":" + std::to_string(options.port);
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return error("cannot listen on " + where + ": " + ec.message());
  impl->port = impl->acceptor.local_endpoint().port();
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

int HttpServer::port() const { return impl_->port; }

int HttpServer::n_open_connections() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return static_cast<int>(impl_->connections.size());
}

void HttpServer::run() {
  Impl& s = *impl_;
  const int listen_fd = s.acceptor.native_handle();
  while (!s.stopping) {
    // note: poll with a timeout instead of a blocking accept, so stop() needs no cross-thread
    // close of the acceptor (asio objects are not thread-safe).
    pollfd p{};
    p.fd = listen_fd;
    p.events = POLLIN;
    if (::poll(&p, 1, 100) <= 0) continue;
    boost::beast::error_code ec;
    tcp::socket socket(s.io);
    s.acceptor.accept(socket, ec);
    if (ec) continue;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      if (static_cast<int>(s.connections.size()) >= s.options.max_connections) {
        set_socket_timeout(socket.native_handle(), SO_SNDTIMEO, std::chrono::seconds(1));
        s.refuse(socket);
        continue;
      }
      s.connections[socket.native_handle()] = false;
      ++s.n_threads;
    }
    std::thread([&s, sock = std::move(socket)]() mutable { s.serve_connection(std::move(sock)); }).detach();
  }
  boost::beast::error_code ec;
  s.acceptor.close(ec);
  std::unique_lock<std::mutex> lock(s.mutex);
  s.all_closed.wait(lock, [&] { return s.n_threads == 0; });
}

void HttpServer::stop() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->stopping = true;
  // Idle keep-alive connections sit in a blocking read: shutting down the read side ends it.
  for (const auto& [fd, busy] : impl_->connections)
    if (!busy) ::shutdown(fd, SHUT_RD);
}

}  // namespace tern::server
