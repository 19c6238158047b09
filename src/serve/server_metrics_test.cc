#include "serve/server_metrics.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(ServerMetricsTest, HistogramIsCumulative) {
  Histogram h({1.0, 2.0});
  h.observe(0.5);
  h.observe(1.5);
  h.observe(1.5);
  h.observe(9.0);
  std::string out;
  h.render("x", "help", "a=\"b\"", &out);
  EXPECT_TRUE(has_line(out, "x_bucket{a=\"b\",le=\"1\"} 1")) << out;
  EXPECT_TRUE(has_line(out, "x_bucket{a=\"b\",le=\"2\"} 3")) << out;
  EXPECT_TRUE(has_line(out, "x_bucket{a=\"b\",le=\"+Inf\"} 4")) << out;
  EXPECT_TRUE(has_line(out, "x_sum{a=\"b\"} 12.5")) << out;
  EXPECT_TRUE(has_line(out, "x_count{a=\"b\"} 4")) << out;
}

TEST(ServerMetricsTest, RendersVllmNamesWithPrefix) {
  ServerMetrics m("tiny");
  RequestTimings t;
  t.ttft_s = 0.5;
  t.itl_s = {0.01, 0.02};
  t.e2e_s = 1.0;
  t.queue_s = 0.1;
  t.finish_reason = FinishReason::kLength;
  m.on_request_finished(t);
  EngineStats s;
  s.num_running = 2;
  s.num_waiting = 3;
  s.prompt_tokens_total = 11;
  s.generation_tokens_total = 7;
  s.prefix_cache_queries_total = 100;
  s.prefix_cache_hits_total = 40;
  s.num_preemptions_total = 1;
  s.cache_usage = {{"kv", "host", 1024, 4096}};
  std::string out = m.render(s);
  const std::string l = "{model_name=\"tiny\"}";
  EXPECT_TRUE(has_line(out, "strata:num_requests_running" + l + " 2")) << out;
  EXPECT_TRUE(has_line(out, "strata:num_requests_waiting" + l + " 3"));
  EXPECT_TRUE(has_line(out, "strata:prompt_tokens_total" + l + " 11"));
  EXPECT_TRUE(has_line(out, "strata:generation_tokens_total" + l + " 7"));
  EXPECT_TRUE(has_line(out, "strata:prefix_cache_queries_total" + l + " 100"));
  EXPECT_TRUE(has_line(out, "strata:prefix_cache_hits_total" + l + " 40"));
  EXPECT_TRUE(has_line(out, "strata:num_preemptions_total" + l + " 1"));
  EXPECT_TRUE(has_line(out, "strata:cache_used_bytes{model_name=\"tiny\",kind=\"kv\",tier=\"host\"} 1024"));
  EXPECT_TRUE(has_line(out, "strata:cache_capacity_bytes{model_name=\"tiny\",kind=\"kv\",tier=\"host\"} 4096"));
  EXPECT_TRUE(has_line(out, "strata:time_to_first_token_seconds_count" + l + " 1"));
  EXPECT_TRUE(has_line(out, "strata:inter_token_latency_seconds_count" + l + " 2"));
  EXPECT_TRUE(has_line(out, "strata:e2e_request_latency_seconds_count" + l + " 1"));
  EXPECT_TRUE(has_line(out, "strata:request_queue_time_seconds_count" + l + " 1"));
  EXPECT_TRUE(has_line(out, "strata:request_success_total{model_name=\"tiny\",finished_reason=\"length\"} 1"));
  EXPECT_TRUE(has_line(out, "# TYPE strata:time_to_first_token_seconds histogram"));
}

}  // namespace
}  // namespace strata
