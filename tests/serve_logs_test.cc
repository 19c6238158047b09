// Issue 24 item 16: `strata serve` logs one line per finished request and a periodic
// throughput line while busy (vLLM's request and stats logs), and --metrics-prefix vllm:
// renames every /metrics series so vLLM dashboards work.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "pd_process.h"
#include "runner_fixtures.h"
#include "serve/test_http_client.h"

namespace strata {
namespace {

TEST(ServeLogs, RequestLinesStatsLinesAndMetricsPrefix) {
  auto s = testing::StrataProcess::start(
      {"serve", "--model", testing::model_dir("stories260K"), "--port", "0", "--threads", "1",
       "--log-stats-interval", "0.2", "--metrics-prefix", "vllm:"},
      "logs");
  ASSERT_TRUE(s);
  for (int i = 0; i < 2; ++i) {
    const auto r = testing::http_post(
        s->port(), "/v1/completions",
        nlohmann::json{{"prompt", "Once upon a time"}, {"max_tokens", 64}, {"ignore_eos", true}}.dump());
    EXPECT_EQ(r.status, 200) << r.body;
  }
  const std::string m = testing::http_get(s->port(), "/metrics").body;
  EXPECT_NE(m.find("\nvllm:num_requests_running{"), std::string::npos);
  EXPECT_NE(m.find("# TYPE vllm:time_to_first_token_seconds histogram"), std::string::npos);
  EXPECT_EQ(m.find("strata:"), std::string::npos);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const std::string log_path = s->log();
  s->stop(SIGTERM);
  std::ifstream f(log_path);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string log = ss.str();
  EXPECT_NE(log.find("finished: prompt_tokens=5 cached_tokens="), std::string::npos) << log;
  EXPECT_NE(log.find("generation_tokens=64"), std::string::npos) << log;
  EXPECT_NE(log.find("finish_reason=length"), std::string::npos) << log;
}

TEST(ServeLogs, StatsLineWhileBusy) {
  auto s = testing::StrataProcess::start(
      {"serve", "--model", testing::model_dir("stories260K"), "--port", "0", "--threads", "1",
       "--log-stats-interval", "0.05", "--disable-log-requests"},
      "stats");
  ASSERT_TRUE(s);
  const auto r = testing::http_post(
      s->port(), "/v1/completions",
      nlohmann::json{{"prompt", "Once upon a time"}, {"max_tokens", 400}, {"ignore_eos", true}}.dump());
  EXPECT_EQ(r.status, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  const std::string log_path = s->log();
  s->stop(SIGTERM);
  std::ifstream f(log_path);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_NE(ss.str().find("avg generation throughput"), std::string::npos) << ss.str();
  EXPECT_EQ(ss.str().find("finished: prompt_tokens"), std::string::npos);
}

}  // namespace
}  // namespace strata
