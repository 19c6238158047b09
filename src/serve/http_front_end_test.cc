// HttpFrontEnd on raw sockets: pipelining, half-close, slow clients, body limits, streamed
// responses and their end (issue 24 items 4, 6, 8).
#include "serve/http_front_end.h"

#include <gtest/gtest.h>

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "serve/test_http_client.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

class FrontEnd : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpFrontEndOptions o;
    o.port = 0;
    o.threads = 4;
    o.max_body_bytes = 1000;
    o.idle_timeout_s = 5;
    server_ = std::make_unique<HttpFrontEnd>(o);
    server_->Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("ok", "text/plain");
    });
    server_->Get("/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content("path=" + req.path + " q=" + req.get_param_value("q"), "text/plain");
    });
    server_->Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content("body=" + req.body, "text/plain");
    });
    server_->Post("/stream", [this](const httplib::Request& req, httplib::Response& res) {
      const int n = std::stoi(req.body);
      auto sent = std::make_shared<int>(0);
      res.set_chunked_content_provider(
          "text/plain",
          [n, sent](size_t, httplib::DataSink& sink) {
            if (*sent == n) {
              sink.done();
              return true;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            const std::string piece = "piece " + std::to_string((*sent)++) + "\n";
            return sink.write(piece.data(), piece.size());
          },
          [this](bool success) { (success ? streams_ok_ : streams_failed_)++; });
    });
    server_->set_error_handler([](const httplib::Request&, httplib::Response& res) {
      res.set_content("error " + std::to_string(res.status), "text/plain");
    });
    ASSERT_TRUE(server_->start().ok());
    port_ = server_->port();
    ASSERT_GT(port_, 0);
  }
  void TearDown() override { server_->stop(); }

  std::unique_ptr<HttpFrontEnd> server_;
  int port_ = -1;
  std::atomic<int> streams_ok_{0}, streams_failed_{0};
};

// Item 8: three requests written at once on one connection get three answers, in order.
TEST_F(FrontEnd, PipelinedRequestsAreAnsweredInOrder) {
  const int fd = testing::connect_raw(port_);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(testing::send_raw(fd,
           "GET /echo?q=1 HTTP/1.1\r\nHost: x\r\n\r\n"
           "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
           "GET /echo?q=3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  const std::string out = testing::read_raw(fd);
  close(fd);
  EXPECT_EQ(count(out, "HTTP/1.1 200"), 3u) << out;
  const size_t a = out.find("path=/echo q=1"), b = out.find("body=abc"), c = out.find("path=/echo q=3");
  ASSERT_NE(a, std::string::npos) << out;
  ASSERT_NE(b, std::string::npos) << out;
  ASSERT_NE(c, std::string::npos) << out;
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
}

// Item 8: a client that shuts down its sending side after the request still gets the
// response (plain and streamed).
TEST_F(FrontEnd, HalfClosedClientGetsItsResponse) {
  for (const std::string& req :
       {std::string("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi"),
        std::string("POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n3")}) {
    const int fd = testing::connect_raw(port_);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(testing::send_raw(fd, req));
    ASSERT_EQ(shutdown(fd, SHUT_WR), 0);
    const std::string out = testing::read_raw(fd);
    close(fd);
    EXPECT_NE(out.find("HTTP/1.1 200"), std::string::npos) << out;
    EXPECT_TRUE(out.find("body=hi") != std::string::npos || out.find("piece 2") != std::string::npos)
        << out;
  }
}

// Item 6: 1,000 connections that trickle header bytes hold no thread: /health answers on a
// new connection between every round of trickling, and the slow clients are still open.
TEST_F(FrontEnd, HealthAnswersUnderAThousandSlowClients) {
  constexpr int kSlow = 1000;
  ASSERT_GE(testing::raise_fd_limit(2 * kSlow + 200), 2u * kSlow + 200)
      << "this test needs 2,200 descriptors";
  testing::SlowClients slow(port_, kSlow);
  ASSERT_EQ(slow.open(), kSlow);
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(slow.trickle(round), kSlow);
    const testing::HttpReply r = testing::http_get(port_, "/health");
    EXPECT_EQ(r.status, 200) << "round " << round;
    EXPECT_EQ(r.body, "ok");
  }
  // The slow clients were waited for, not dropped: finishing their headers answers them.
  EXPECT_EQ(slow.finish(), kSlow);
}

// Item 4: a body past the limit is a 413, by Content-Length up front and by chunked
// encoding once it passes the limit; the server stays usable.
TEST_F(FrontEnd, OversizedBodiesAre413) {
  const int a = testing::connect_raw(port_);
  ASSERT_TRUE(testing::send_raw(a, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n"));
  EXPECT_NE(testing::read_raw(a).find("HTTP/1.1 413"), std::string::npos);
  close(a);
  const int b = testing::connect_raw(port_);
  std::string chunked =
      "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 20; ++i) chunked += "64\r\n" + std::string(100, 'z') + "\r\n";
  chunked += "0\r\n\r\n";
  ASSERT_TRUE(testing::send_raw(b, chunked));
  const std::string out = testing::read_raw(b);
  EXPECT_NE(out.find("HTTP/1.1 413"), std::string::npos) << out.substr(0, 200);
  EXPECT_EQ(out.find("zzzz"), std::string::npos);
  close(b);
  EXPECT_EQ(testing::http_post(port_, "/echo", "small").body, "body=small");
}

// Streams: every piece in order and success = true; a client that leaves mid-stream makes
// the provider's writes fail and the releaser see success = false.
TEST_F(FrontEnd, StreamsEndAndNoticeTheClientLeaving) {
  const testing::HttpReply r = testing::http_post(port_, "/stream", "50");
  ASSERT_EQ(r.status, 200);
  for (int i = 0; i < 50; ++i) EXPECT_NE(r.body.find("piece " + std::to_string(i) + "\n"), std::string::npos);
  const int fd = testing::connect_raw(port_);
  ASSERT_TRUE(testing::send_raw(fd, "POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n10000"));
  char buf[256];
  ASSERT_GT(recv(fd, buf, sizeof(buf), 0), 0);
  close(fd);
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (streams_failed_ == 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(streams_failed_, 1);
  EXPECT_EQ(streams_ok_, 1);
}

TEST_F(FrontEnd, UnknownPathGoesThroughTheErrorHandler) {
  const testing::HttpReply r = testing::http_get(port_, "/nope");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.body, "error 404");
}

TEST(FrontEndStart, PortInUseIsUnavailable) {
  HttpFrontEndOptions o;
  o.port = 0;
  HttpFrontEnd a(o);
  ASSERT_TRUE(a.start().ok());
  o.port = a.port();
  HttpFrontEnd b(o);
  const Status st = b.start();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.message();
}

}  // namespace
}  // namespace strata
