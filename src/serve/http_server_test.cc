// HttpServer over the FakeRunner: failure paths that the real model cannot trigger on
// demand (a runner failure mid-stream, shutdown mid-stream).
#include "serve/http_server.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "sched/fake_runner.h"
#include "serve/test_http_client.h"

namespace strata {
namespace {

using json = nlohmann::json;
using testing::http_get;
using testing::http_post;

// A slow FakeRunner whose next step can be made to fail from another thread.
class SlowRunner : public FakeRunner {
 public:
  explicit SlowRunner(FakeRunnerOptions o) : FakeRunner(o) {}
  Status step(std::span<const StepItem> items, std::vector<float>* logits) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (fail.exchange(false)) return internal_error("injected runner failure");
    return FakeRunner::step(items, logits);
  }
  std::atomic<bool> fail{false};
};

struct Stack {
  static HttpServerOptions options(int64_t max_model_len, const RequestGuardOptions& guard) {
    HttpServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.threads = 8;
    o.max_body_bytes = 4096;
    o.max_model_len = max_model_len;
    o.guard = guard;
    return o;
  }
  explicit Stack(int64_t max_context = 4096, RequestGuardOptions guard = {},
                 int64_t max_model_len = 0)
      : runner({.vocab = 64, .max_context = max_context}),
        metrics("fake"),
        engine(&runner, nullptr, {}),
        http(&engine, &metrics, options(max_model_len, guard)) {
    engine.set_observer(&metrics);
    engine.start();
    EXPECT_TRUE(http.start().ok());
  }
  ~Stack() {
    engine.shutdown();
    http.stop();
  }
  SlowRunner runner;
  ServerMetrics metrics;
  Engine engine;
  HttpServer http;
};

TEST(HttpServerTest, TokenPromptCompletesWithoutTokenizer) {
  Stack s;
  auto r = http_post(s.http.port(), "/v1/completions", R"({"prompt": [1, 2, 3], "max_tokens": 4})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  // A text prompt needs a tokenizer: 400.
  auto t = http_post(s.http.port(), "/v1/completions", R"({"prompt": "hi"})");
  EXPECT_EQ(t.status, 400);
}

TEST(HttpServerTest, RunnerFailureMidStreamIsAnErrorEventNotDone) {
  Stack s;
  std::thread failer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    s.runner.fail = true;
  });
  auto r = http_post(s.http.port(), "/v1/completions",
                     R"({"prompt": [1, 2, 3], "max_tokens": 2000, "stream": true})");
  failer.join();
  EXPECT_EQ(r.status, 200);
  ASSERT_FALSE(r.data.empty());
  EXPECT_FALSE(r.done);
  json last = json::parse(r.data.back());
  ASSERT_TRUE(last.contains("error")) << r.data.back();
  EXPECT_EQ(last["error"]["type"], "internal_error");
  EXPECT_EQ(s.runner.live_sequences(), 0);
}

TEST(HttpServerTest, RunnerFailureWithoutStreamIs500) {
  Stack s;
  std::thread failer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    s.runner.fail = true;
  });
  auto r = http_post(s.http.port(), "/v1/completions", R"({"prompt": [1, 2], "max_tokens": 2000})");
  failer.join();
  EXPECT_EQ(r.status, 500);
  json j = json::parse(r.body);
  EXPECT_TRUE(j["error"].contains("message"));
}

TEST(HttpServerTest, ShutdownMidStreamEndsWithErrorEvent) {
  auto s = std::make_unique<Stack>();
  const int port = s->http.port();
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    s->engine.shutdown();
  });
  auto r = http_post(port, "/v1/completions",
                     R"({"prompt": [1, 2, 3], "max_tokens": 3000, "stream": true})");
  stopper.join();
  EXPECT_FALSE(r.done);
  ASSERT_FALSE(r.data.empty());
  json last = json::parse(r.data.back());
  ASSERT_TRUE(last.contains("error"));
  EXPECT_EQ(last["error"]["type"], "service_unavailable");
  EXPECT_EQ(http_get(port, "/health").status, 503);
  auto after = http_post(port, "/v1/completions", R"({"prompt": [1], "max_tokens": 2})");
  EXPECT_EQ(after.status, 503);
  s.reset();
}

TEST(HttpServerTest, BodyLimitAndUnknownRoute) {
  Stack s;
  std::string big = R"({"prompt": [1], "pad": ")" + std::string(8000, 'x') + R"("})";
  auto r = http_post(s.http.port(), "/v1/completions", big);
  EXPECT_EQ(r.status, 413);
  EXPECT_TRUE(json::parse(r.body)["error"].contains("message")) << r.body;
  auto n = http_get(s.http.port(), "/v2/nothing");
  EXPECT_EQ(n.status, 404);
  EXPECT_TRUE(json::parse(n.body)["error"].contains("message"));
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

httplib::Result raw(int port, const std::string& method, const std::string& path,
                    httplib::Headers headers = {}, const std::string& body = "",
                    const std::string& type = "application/json") {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(10);
  httplib::Request r;
  r.method = method;
  r.path = path;
  r.headers = std::move(headers);
  if (!body.empty()) {
    r.body = body;
    r.set_header("Content-Type", type);
  }
  return c.send(r);
}

TEST(RequestGuard, ApiKeyOnV1Only) {
  Stack s(4096, {.api_key = "sekret", .protect_metrics = false, .allowed_hosts = {}, .allowed_origins = {}});
  const std::string body = R"({"prompt": [1, 2], "max_tokens": 2})";
  auto none = raw(s.http.port(), "POST", "/v1/completions", {}, body);
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_NE(none->body.find("authentication_error"), std::string::npos);
  auto wrong = raw(s.http.port(), "POST", "/v1/completions", {{"Authorization", "Bearer sekreT"}}, body);
  EXPECT_EQ(wrong->status, 401);
  auto longer = raw(s.http.port(), "POST", "/v1/completions", {{"Authorization", "Bearer sekret2"}}, body);
  EXPECT_EQ(longer->status, 401);
  auto ok = raw(s.http.port(), "POST", "/v1/completions", {{"Authorization", "Bearer sekret"}}, body);
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(raw(s.http.port(), "GET", "/v1/models")->status, 401);
  EXPECT_EQ(raw(s.http.port(), "GET", "/health")->status, 200);
  EXPECT_EQ(raw(s.http.port(), "GET", "/metrics")->status, 200);
}

TEST(RequestGuard, ProtectedMetrics) {
  Stack s(4096, {.api_key = "k", .protect_metrics = true, .allowed_hosts = {}, .allowed_origins = {}});
  EXPECT_EQ(raw(s.http.port(), "GET", "/metrics")->status, 401);
  EXPECT_EQ(raw(s.http.port(), "GET", "/metrics", {{"Authorization", "Bearer k"}})->status, 200);
}

TEST(RequestGuard, ContentTypeMethodsAndOptions) {
  Stack s;
  const std::string body = R"({"prompt": [1, 2], "max_tokens": 2})";
  // "Simple" cross-origin POST types are refused.
  for (const char* t : {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data"}) {
    auto r = raw(s.http.port(), "POST", "/v1/completions", {}, body, t);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 415) << t;
  }
  EXPECT_EQ(raw(s.http.port(), "POST", "/v1/completions", {}, body, "application/json; charset=utf-8")->status, 200);
  auto get = raw(s.http.port(), "GET", "/v1/completions");
  EXPECT_EQ(get->status, 405);
  EXPECT_EQ(get->get_header_value("Allow"), "POST, OPTIONS");
  EXPECT_EQ(raw(s.http.port(), "DELETE", "/health")->status, 405);
  EXPECT_EQ(raw(s.http.port(), "GET", "/nope")->status, 404);
  auto opt = raw(s.http.port(), "OPTIONS", "/v1/chat/completions");
  EXPECT_EQ(opt->status, 204);
  EXPECT_EQ(opt->get_header_value("Allow"), "POST, OPTIONS");
  // CORS is off by default: no Access-Control-Allow-Origin for any origin.
  auto cors = raw(s.http.port(), "OPTIONS", "/v1/completions", {{"Origin", "http://evil.example"}});
  EXPECT_FALSE(cors->has_header("Access-Control-Allow-Origin"));
}

TEST(RequestGuard, AllowedOriginsAndHosts) {
  Stack s(4096, {.api_key = "", .protect_metrics = false, .allowed_hosts = {"localhost"},
                 .allowed_origins = {"http://app.example"}});
  const std::string port = std::to_string(s.http.port());
  auto bad_host = raw(s.http.port(), "GET", "/health", {{"Host", "rebind.example:" + port}});
  EXPECT_EQ(bad_host->status, 400);
  EXPECT_NE(bad_host->body.find("rebind.example"), std::string::npos);
  auto ok_host = raw(s.http.port(), "GET", "/health", {{"Host", "localhost:" + port}});
  EXPECT_EQ(ok_host->status, 200);
  auto pre = raw(s.http.port(), "OPTIONS", "/v1/completions",
                 {{"Host", "localhost"}, {"Origin", "http://app.example"}});
  EXPECT_EQ(pre->status, 204);
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Origin"), "http://app.example");
  EXPECT_NE(pre->get_header_value("Access-Control-Allow-Headers").find("Authorization"), std::string::npos);
  auto other = raw(s.http.port(), "GET", "/health", {{"Host", "localhost"}, {"Origin", "http://evil.example"}});
  EXPECT_FALSE(other->has_header("Access-Control-Allow-Origin"));
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// Sends `text` on a plain TCP connection and returns what comes back (up to 64 KiB, 3 s).
// The raw reply to `text` written on a new connection (everything until the server closes
// or 3 s pass quietly).
std::string raw_socket(int port, const std::string& text) {
  const int fd = testing::connect_raw(port);
  if (fd < 0 || !testing::send_raw(fd, text)) {
    if (fd >= 0) close(fd);
    return "";
  }
  std::string out = testing::read_raw(fd);
  close(fd);
  return out;
}

// Header names are case-insensitive (RFC 9110 §5.1; HTTP/2 proxies send them lowercase): a
// lowercase content-type and authorization are read like the canonical spellings.
TEST(RequestGuard, HeaderNamesAreCaseInsensitive) {
  Stack s(4096, {.api_key = "k", .protect_metrics = false, .allowed_hosts = {}, .allowed_origins = {}});
  const std::string body = R"({"prompt": [1, 2], "max_tokens": 2})";
  auto request = [&](const std::string& ct, const std::string& auth) {
    return raw_socket(s.http.port(),
                      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + ct +
                          ": application/json\r\n" + auth + ": Bearer k\r\ncontent-length: " +
                          std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
  };
  for (const auto& [ct, auth] : {std::pair{"Content-Type", "Authorization"},
                                 {"content-type", "authorization"},
                                 {"CONTENT-TYPE", "AUTHORIZATION"}}) {
    const std::string reply = request(ct, auth);
    EXPECT_EQ(reply.rfind("HTTP/1.1 200", 0), 0u) << ct << " / " << auth << ":\n" << reply;
  }
  // Without the key: still refused, whatever the spelling.
  const std::string no_key = raw_socket(
      s.http.port(), "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: "
                     "application/json\r\ncontent-length: " + std::to_string(body.size()) +
                     "\r\nConnection: close\r\n\r\n" + body);
  EXPECT_EQ(no_key.rfind("HTTP/1.1 401", 0), 0u) << no_key;
}

TEST(RequestGuard, ChunkedBodiesHaveTheLimitAndSmugglingIsRefused) {
  Stack s;  // max_body_bytes 4096
  httplib::Client c("127.0.0.1", s.http.port());
  const std::string big = R"({"prompt": [1], "max_tokens": 1, "pad": ")" + std::string(20000, 'a') + "\"}";
  auto r = c.Post(
      "/v1/completions",
      [&](size_t offset, httplib::DataSink& sink) {
        sink.write(big.data() + offset, big.size() - offset);
        sink.done();
        return true;
      },
      "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  const std::string both = raw_socket(
      s.http.port(),
      "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
      "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
  EXPECT_EQ(both.rfind("HTTP/1.1 400", 0), 0u) << both;
  // Conflicting Content-Lengths: 400, and the connection closes (the bytes after the first
  // length are not taken as another request).
  const std::string two = raw_socket(
      s.http.port(),
      "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
      "Content-Length: 10\r\nContent-Length: 5\r\n\r\n{\"a\": 1}\r\n"
      "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n");
  EXPECT_EQ(two.rfind("HTTP/1.1 400", 0), 0u) << two;
  EXPECT_NE(two.find("conflicting Content-Length"), std::string::npos) << two;
  EXPECT_EQ(two.find("HTTP/1.1 200"), std::string::npos) << two;
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

TEST(HttpServerTest, MaxTokensPastTheContextIsA400) {
  Stack s;  // context 4096
  auto over = http_post(s.http.port(), "/v1/completions", R"({"prompt": [1, 2, 3], "max_tokens": 4094})");
  EXPECT_EQ(over.status, 400);
  EXPECT_NE(over.body.find("context_length_exceeded"), std::string::npos) << over.body;
  Stack small(64);
  EXPECT_EQ(http_post(small.http.port(), "/v1/completions", R"({"prompt": [1, 2, 3], "max_tokens": 61})").status, 200);
  EXPECT_EQ(http_post(small.http.port(), "/v1/completions", R"({"prompt": [1, 2, 3], "max_tokens": 62})").status, 400);
  // --max-model-len 10: the same checks against 10 tokens.
  Stack m(4096, {}, 10);
  EXPECT_EQ(http_post(m.http.port(), "/v1/completions", R"({"prompt": [1, 2, 3], "max_tokens": 8})").status, 400);
  auto fits = http_post(m.http.port(), "/v1/completions", R"({"prompt": [1, 2, 3], "max_tokens": 7})");
  EXPECT_EQ(fits.status, 200) << fits.body;
  EXPECT_EQ(json::parse(http_get(m.http.port(), "/v1/models").body)["data"][0]["max_model_len"], 10);
  EXPECT_EQ(http_post(m.http.port(), "/v1/completions", R"({"prompt": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]})").status, 400);
  // Without max_tokens, generation stops at the limit.
  auto chat_like = http_post(m.http.port(), "/v1/completions", R"({"prompt": [1, 2, 3, 4, 5, 6, 7, 8]})");
  ASSERT_EQ(chat_like.status, 200);
  EXPECT_LE(json::parse(chat_like.body)["usage"]["completion_tokens"].get<int>(), 2);
}

}  // namespace
}  // namespace strata
