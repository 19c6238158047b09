// The `inspect --state --json` report: totals equal the analytic owners-once figures derived
// here from the spec (v41-architecture.md §3), per-kind entries, stages on separate entries.
#include "state/state_report.h"

#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace strata {
namespace {

nlohmann::json report(const std::string& cfg) {
  auto c = load_deepseek_config(cfg);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  auto g = StateGraph::from_deepseek(*c);
  EXPECT_TRUE(g.ok());
  return nlohmann::json::parse(format_state_json(*g));
}

TEST(StateReport, V41FlashJson) {
  const std::string p = std::string(STRATA_SOURCE_DIR) + "/testdata/configs/deepseek-v4.1-flash.config.json";
  if (!std::filesystem::exists(p)) GTEST_SKIP();
  auto j = report(p);
  // 3 sources x (288 + 68) / 2 + (288 + 68) = 890 B/token.
  EXPECT_DOUBLE_EQ(j["totals"]["bytes_per_token"].get<double>(), 3 * 356 / 2.0 + 356);
  // Backbone: 40 rings x 128 x 528 + 3 compressor tails x 8192 + Engram 12 B.
  EXPECT_EQ(j["stages"]["backbone"]["bytes_per_request_fixed"].get<int64_t>(),
            40LL * 128 * 528 + 3 * 8192 + 12);
  EXPECT_EQ(j["stages"]["draft"]["bytes_per_request_fixed"].get<int64_t>(), 3LL * 128 * 528);
  EXPECT_EQ(j["totals"]["bytes_per_request_fixed"].get<int64_t>(),
            43LL * 128 * 528 + 3 * 8192 + 12);
  EXPECT_EQ(j["alignment_unit_tokens"].get<int>(), 64);
  // Per cached boundary: the stored policy keeps every ring / fixed owner (40 + 3 rings,
  // 3 tails, Engram); the replay policies nothing, and replay one window (128 tokens) or the
  // 40 layers' window cone 128 + 39 x 127 = 5081 -> 5082 (even). Unit entries: 64 x 890 B.
  const auto& pr = j["prefix_restore"];
  EXPECT_DOUBLE_EQ(pr["unit_entry_bytes"].get<double>(), 64 * 890.0);
  EXPECT_EQ(pr["stored"]["bytes_per_boundary"].get<int64_t>(), 43LL * 128 * 528 + 3 * 8192 + 12);
  EXPECT_EQ(pr["replay"]["bytes_per_boundary"].get<int64_t>(), 0);
  EXPECT_EQ(pr["replay"]["replay_tokens"].get<int64_t>(), 128);
  EXPECT_FALSE(pr["replay"]["exact"].get<bool>());
  EXPECT_EQ(pr["replay_exact"]["replay_tokens"].get<int64_t>(), 5082);
  // Memory per cached unit (issue 22: a snapshot at every unit boundary under `stored`).
  EXPECT_DOUBLE_EQ(pr["stored"]["bytes_per_cached_unit"].get<double>(),
                   43.0 * 128 * 528 + 3 * 8192 + 12 + 64 * 890.0);
  EXPECT_DOUBLE_EQ(pr["replay"]["bytes_per_cached_unit"].get<double>(), 64 * 890.0);
  bool saw_ckv = false;
  for (const auto& k : j["kinds"]) {
    if (k["kind"] == "compressed_kv") {
      saw_ckv = true;
      EXPECT_EQ(k["owners"].get<int>(), 4);
      EXPECT_EQ(k["row_bytes"].get<int>(), 288);
      EXPECT_DOUBLE_EQ(k["bytes_per_token"].get<double>(), 3 * 288 / 2.0 + 288);
    }
  }
  EXPECT_TRUE(saw_ckv);
  EXPECT_EQ(j["transients"].size(), 9u);  // 8 top-k + 1 candidate mask
}

TEST(StateReport, TextMentionsUnitAndStages) {
  auto c = load_deepseek_config(std::string(STRATA_SOURCE_DIR) + "/testdata/golden/v4flash-tiny/config.json");
  if (!c.ok()) GTEST_SKIP();
  auto g = StateGraph::from_deepseek(*c);
  ASSERT_TRUE(g.ok());
  std::string t = format_state_text(*g);
  // Smallest multiple of lcm(4, 16) = 16 that is >= 64 tokens.
  EXPECT_NE(t.find("alignment unit 64 tokens"), std::string::npos) << t;
  EXPECT_NE(t.find("draft    stage"), std::string::npos);
  std::string d = format_state_dot(*g);
  EXPECT_EQ(d.rfind("digraph", 0), 0u);
}

// Each DCP rank's bytes of V4.1-Flash (one ratio-1 and three ratio-2 compressed sources,
// 288 B rows and 68 B index keys; every other kind replicated): the records rank r owns
// counted one by one here, against dcp_rank_bytes; the ranks together hold one rank's bytes.
TEST(StateReport, V41FlashBytesPerDcpRank) {
  const std::string p = std::string(STRATA_SOURCE_DIR) + "/testdata/configs/deepseek-v4.1-flash.config.json";
  if (!std::filesystem::exists(p)) GTEST_SKIP();
  auto c = load_deepseek_config(p);
  ASSERT_TRUE(c.ok());
  auto g = StateGraph::from_deepseek(*c);
  ASSERT_TRUE(g.ok());
  for (int64_t n : {int64_t{131072}, int64_t{1048576}, int64_t{1001}})
    for (auto [D, S] : {std::pair{2, int64_t{1}}, {4, 1}, {3, 8}}) {
      auto count = [&](int64_t rows, int r) {
        int64_t k = 0;
        for (int64_t g2 = 0; g2 < rows; ++g2) k += (g2 / S) % D == r;
        return k;
      };
      int64_t sum_kv = 0, sum_ik = 0;
      for (int r = 0; r < D; ++r) {
        const int64_t recs = count(n, r) + 3 * count(n / 2, r);
        const int64_t kv = dcp_rank_bytes(*g, StateKind::kCompressedKv, Stage::kBackbone, n, r, D, S);
        const int64_t ik = dcp_rank_bytes(*g, StateKind::kIndexKeys, Stage::kBackbone, n, r, D, S);
        EXPECT_EQ(kv, 288 * recs) << n << " D " << D << " S " << S << " rank " << r;
        EXPECT_EQ(ik, 68 * recs) << n << " D " << D << " S " << S << " rank " << r;
        EXPECT_EQ(dcp_rank_bytes(*g, StateKind::kWindowKv, Stage::kBackbone, n, r, D, S),
                  40LL * 128 * 528);
        sum_kv += kv;
        sum_ik += ik;
      }
      EXPECT_EQ(sum_kv, dcp_rank_bytes(*g, StateKind::kCompressedKv, Stage::kBackbone, n, 0, 1, 1));
      EXPECT_EQ(sum_ik, dcp_rank_bytes(*g, StateKind::kIndexKeys, Stage::kBackbone, n, 0, 1, 1));
    }
}

}  // namespace
}  // namespace strata
