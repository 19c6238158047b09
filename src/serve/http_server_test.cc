// HttpServer over the FakeRunner: failure paths that the real model cannot trigger on
// demand (a runner failure mid-stream, shutdown mid-stream).
#include "serve/http_server.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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
  explicit Stack(int64_t max_context = 4096)
      : runner({.vocab = 64, .max_context = max_context}),
        metrics("fake"),
        engine(&runner, nullptr, {}),
        http(&engine, &metrics, {.host = "127.0.0.1", .port = 0, .threads = 8, .max_body_bytes = 4096, .model_name = "", .disaggregation_mode = "", .kv_sender = nullptr, .kv_receiver = nullptr, .kv_load_failure_recompute = false}) {
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
