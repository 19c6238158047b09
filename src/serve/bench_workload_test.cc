#include "serve/bench_workload.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "serve/bench_report.h"

namespace strata {
namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(BenchWorkloadTest, MooncakeBlocksAndOracle) {
  // Hand-derived oracle: r0 [1,2] -> 0/2 hits; r1 [1,2,3] -> chains [1],[1,2] seen: 2/3;
  // r2 [1,4] -> [1] seen, [1,4] not: 1/2; r3 [5,2] -> [5],[5,2] unseen: 0/2 (block 2 alone
  // does not count: its chain differs). Total 3 / 9.
  std::string path = write_temp("mc.jsonl",
                                R"({"timestamp": 0, "input_length": 1000, "output_length": 100, "hash_ids": [1, 2]}
{"timestamp": 500, "input_length": 1200, "output_length": 40, "hash_ids": [1, 2, 3]}
{"timestamp": 1000, "input_length": 900, "output_length": 10, "hash_ids": [1, 4]}
{"timestamp": 3000, "input_length": 900, "output_length": 10, "hash_ids": [5, 2]}
{"timestamp": 4000, "input_length": 99999, "output_length": 10, "hash_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9]}
)");
  WorkloadOptions o;
  o.vocab = 100;
  o.max_context = 32;
  o.block_tokens = 4;
  o.time_scale = 0.5;
  o.length_scale = 0.1;
  auto w = load_mooncake_trace(path, o);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  ASSERT_EQ(w->requests.size(), 4u);
  EXPECT_EQ(w->skipped_too_long, 1);  // 9 blocks x 4 + 1 > 32
  EXPECT_EQ(w->oracle_blocks, 9);
  EXPECT_DOUBLE_EQ(w->oracle_prefix_hit_rate, 3.0 / 9.0);
  const auto& r = w->requests;
  EXPECT_EQ(r[0].prompt.size(), 8u);
  EXPECT_EQ(r[1].prompt.size(), 12u);
  EXPECT_EQ(r[0].output_tokens, 10);
  EXPECT_EQ(r[2].output_tokens, 1);
  EXPECT_DOUBLE_EQ(r[1].arrival_s, 0.25);
  EXPECT_DOUBLE_EQ(r[3].arrival_s, 1.5);
  // Equal hash ids -> equal blocks; different ids -> different blocks.
  EXPECT_TRUE(std::equal(r[0].prompt.begin(), r[0].prompt.end(), r[1].prompt.begin()));
  EXPECT_TRUE(std::equal(r[0].prompt.begin(), r[0].prompt.begin() + 4, r[2].prompt.begin()));
  EXPECT_FALSE(std::equal(r[0].prompt.begin() + 4, r[0].prompt.end(), r[2].prompt.begin() + 4));
  EXPECT_TRUE(std::equal(r[0].prompt.begin() + 4, r[0].prompt.end(), r[3].prompt.begin() + 4));
  for (const auto& q : r) {
    for (int32_t t : q.prompt) {
      EXPECT_GE(t, kFirstToken);
      EXPECT_LT(t, 100);
    }
  }
  EXPECT_EQ(load_mooncake_trace("/nonexistent.jsonl", o).status().code(), StatusCode::kNotFound);
  auto bad = write_temp("bad.jsonl", "{\"timestamp\": 0,\n");
  EXPECT_EQ(load_mooncake_trace(bad, o).status().code(), StatusCode::kDataLoss);
}

TEST(BenchWorkloadTest, AzureCsvTimesAndScaling) {
  std::string path = write_temp("az.csv",
                                "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                "2023-11-16 18:17:03.5000000,100,10\n"
                                "2023-11-16 18:17:05.0000000,2000,20\n"
                                "2023-11-16 18:18:03.5000000,40,4\n");
  WorkloadOptions o;
  o.vocab = 50;
  o.max_context = 100;
  o.time_scale = 0.1;
  o.length_scale = 0.5;
  auto w = load_azure_trace(path, o);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  ASSERT_EQ(w->requests.size(), 2u);
  EXPECT_EQ(w->skipped_too_long, 1);  // 1000 + 10 > 100
  EXPECT_EQ(w->requests[0].prompt.size(), 50u);
  EXPECT_EQ(w->requests[0].output_tokens, 5);
  EXPECT_NEAR(w->requests[1].arrival_s, 6.0, 1e-9);  // 60 s x 0.1
}

TEST(BenchWorkloadTest, SharedPrefixGroups) {
  WorkloadOptions o;
  o.vocab = 200;
  o.num_requests = 6;
  auto w = make_shared_prefix_workload(o, {.num_groups = 2, .prefix_len = 10, .suffix_len = 5, .output_len = 3});
  ASSERT_EQ(w.requests.size(), 6u);
  auto& a = w.requests[0].prompt;
  auto& c = w.requests[2].prompt;
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 10, c.begin()));
  EXPECT_FALSE(std::equal(a.begin(), a.begin() + 10, w.requests[1].prompt.begin()));
}

TEST(BenchReportTest, PercentilesThroughputAndGoodput) {
  Workload w;
  BenchRun run;
  run.duration_s = 2.0;
  // Four successes with TTFT 10, 20, 30, 40 ms; one failure.
  for (int i = 1; i <= 4; ++i) {
    RequestResult r;
    r.success = true;
    r.ttft_s = 0.01 * i;
    r.latency_s = 0.01 * i + 0.09;  // 10 tokens: TPOT = 10 ms
    r.output_tokens = 10;
    r.prompt_len = 5;
    r.itl_s = std::vector<double>(9, 0.01);
    run.results.push_back(r);
  }
  RequestResult bad;
  bad.error = "boom";
  run.results.push_back(bad);
  run.prefix_cache_queries = 100;
  run.prefix_cache_hits = 25;
  auto j = summarize_bench(w, run, {.ttft_ms = 25});
  EXPECT_EQ(j["completed"], 4);
  EXPECT_EQ(j["failed"], 1);
  EXPECT_EQ(j["total_input_tokens"], 20);
  EXPECT_EQ(j["total_output"], 40);
  EXPECT_DOUBLE_EQ(j["request_throughput"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["request_goodput"].get<double>(), 1.0);  // TTFT 10 and 20 meet 25 ms
  EXPECT_DOUBLE_EQ(j["output_throughput"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(j["total_token_throughput"].get<double>(), 30.0);
  EXPECT_NEAR(j["mean_ttft_ms"].get<double>(), 25.0, 1e-9);
  EXPECT_NEAR(j["median_ttft_ms"].get<double>(), 25.0, 1e-9);
  EXPECT_NEAR(j["p99_ttft_ms"].get<double>(), 39.7, 1e-9);  // 30 + 0.97 x 10
  EXPECT_NEAR(j["std_ttft_ms"].get<double>(), std::sqrt(125.0), 1e-9);
  EXPECT_NEAR(j["mean_tpot_ms"].get<double>(), 10.0, 1e-9);
  EXPECT_NEAR(j["mean_itl_ms"].get<double>(), 10.0, 1e-9);
  EXPECT_DOUBLE_EQ(j["prefix_cache_hit_rate"].get<double>(), 0.25);
  EXPECT_TRUE(j["oracle_prefix_hit_rate"].is_null());
  std::string svg = render_bench_svg(run, "t<1>");
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("t&lt;1&gt;"), std::string::npos);
  EXPECT_NE(render_bench_text(j).find("Successful requests"), std::string::npos);
}

TEST(BenchReportTest, ScrapeCounterSumsMatchingNames) {
  std::string m =
      "# HELP strata:prefix_cache_hits_total x\n"
      "strata:prefix_cache_hits_total{model_name=\"a\"} 12\n"
      "vllm:prefix_cache_hits_total{engine=\"1\"} 3\n"
      "strata:prefix_cache_queries_total{model_name=\"a\"} 40\n";
  EXPECT_DOUBLE_EQ(scrape_counter(m, ":prefix_cache_hits_total"), 15.0);
  EXPECT_DOUBLE_EQ(scrape_counter(m, ":prefix_cache_queries_total"), 40.0);
  EXPECT_DOUBLE_EQ(scrape_counter(m, ":missing_total"), -1.0);
}

}  // namespace
}  // namespace strata
