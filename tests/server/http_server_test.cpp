// The HTTP layer over loopback with plain sockets as the client: keep-alive, bodies over the limit
// answered (not reset), chunked streams, detection of a client that hung up, and stop() ending
// idle keep-alive connections.
#include "server/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace tern::server {
namespace {

using namespace std::chrono_literals;

class Client {
 public:
  explicit Client(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  }
  ~Client() { close(); }
  void send(const std::string& s) { ASSERT_EQ(::send(fd_, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size())); }
  // Reads until `marker` has arrived (or the peer closes / 5 s pass).
  std::string read_until(const std::string& marker) {
    while (buf_.find(marker) == std::string::npos) {
      char tmp[4096];
      const ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
      if (n <= 0) break;
      buf_.append(tmp, static_cast<size_t>(n));
    }
    std::string out;
    out.swap(buf_);
    return out;
  }
  bool closed_by_peer() {
    char c;
    return ::recv(fd_, &c, 1, 0) == 0;
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  std::string buf_;
};

std::string post(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void start(HttpHandler handler, uint64_t max_body_bytes = 1024) {
    HttpServerOptions o;
    o.port = 0;
    o.max_body_bytes = max_body_bytes;
    auto s = HttpServer::listen(o, std::move(handler));
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    server_ = std::move(s).value();
    runner_ = std::thread([this] { server_->run(); });
  }
  void TearDown() override {
    if (server_) server_->stop();
    if (runner_.joinable()) runner_.join();
  }
  std::unique_ptr<HttpServer> server_;
  std::thread runner_;
};

TEST_F(HttpServerTest, KeepAliveAndOversizedBodies) {
  start([](const HttpRequest& req, HttpResponder& out) {
    if (req.body_too_large) return out.send(413, "text/plain", "too big: " + std::to_string(req.declared_body_bytes));
    out.send(200, "text/plain", req.path + " got " + std::to_string(req.body.size()));
  });
  Client c(server_->port());
  c.send(post("/a?x=1", "hello"));
  const std::string r1 = c.read_until("got 5");
  EXPECT_NE(r1.find("HTTP/1.1 200"), std::string::npos) << r1;
  EXPECT_NE(r1.find("/a got 5"), std::string::npos) << r1;  // the query string is not part of the path
  c.send(post("/b", "hi"));  // same connection
  EXPECT_NE(c.read_until("got 2").find("/b got 2"), std::string::npos);

  // A body over the limit: the whole body is sent first, and the answer still arrives.
  c.send(post("/c", std::string(100000, 'x')));
  const std::string r3 = c.read_until("100000");
  EXPECT_NE(r3.find("HTTP/1.1 413"), std::string::npos) << r3;
  EXPECT_NE(r3.find("too big: 100000"), std::string::npos) << r3;
  EXPECT_TRUE(c.closed_by_peer());  // the connection is not reused after a refused body
}

TEST_F(HttpServerTest, StreamsChunksAndNoticesClientsThatLeave) {
  std::atomic<bool> noticed_gone{false};
  start([&](const HttpRequest& req, HttpResponder& out) {
    ASSERT_TRUE(out.begin_stream(200));
    if (req.path == "/stream") {
      for (const char* piece : {"data: one\n\n", "data: two\n\n"}) EXPECT_TRUE(out.write(piece));
      return out.end_stream();
    }
    // /wait: hold the stream open until the client hangs up.
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!out.client_gone() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
    noticed_gone = out.client_gone();
  });
  Client c(server_->port());
  c.send(post("/stream", ""));
  const std::string r = c.read_until("0\r\n\r\n");
  EXPECT_NE(r.find("Content-Type: text/event-stream"), std::string::npos) << r;
  EXPECT_NE(r.find("Transfer-Encoding: chunked"), std::string::npos) << r;
  EXPECT_LT(r.find("data: one"), r.find("data: two"));

  Client leaving(server_->port());
  leaving.send(post("/wait", ""));
  leaving.read_until("\r\n\r\n");
  leaving.close();
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!noticed_gone && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(noticed_gone);
}

TEST_F(HttpServerTest, StopEndsIdleKeepAliveConnections) {
  start([](const HttpRequest&, HttpResponder& out) { out.send(200, "text/plain", "ok"); });
  Client idle(server_->port());
  idle.send(post("/x", ""));
  idle.read_until("ok");
  EXPECT_EQ(server_->n_open_connections(), 1);
  const auto t0 = std::chrono::steady_clock::now();
  server_->stop();
  runner_.join();  // run() returns once the idle connection is closed, not after its timeout
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_TRUE(idle.closed_by_peer());
  EXPECT_EQ(server_->n_open_connections(), 0);
}

TEST(HttpServerListen, ErrorsNameTheAddress) {
  HttpServerOptions o;
  o.host = "not-an-ip";
  auto bad = HttpServer::listen(o, [](const HttpRequest&, HttpResponder&) {});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("not-an-ip"), std::string::npos);
}

}  // namespace
}  // namespace tern::server
