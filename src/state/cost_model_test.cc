// Cost model (state/cost_model.h) on the real V4.1-Flash config: the byte figures equal the
// formulas of docs/state.md (unit rows 64 x 890 = 56,960 B; snapshot 43 rings x 128 x 528 +
// 3 x 8,192 + 12 = 2,930,700 B; window state 43 x 128 x 528 = 2,906,112 B per request), the
// decision flips to recompute on a tier slow enough that loading a unit costs more than its
// prefill, and malformed hardware files are refused.
#include "state/cost_model.h"

#include <gtest/gtest.h>

#include "model/deepseek_config.h"
#include "state/cache_manager.h"

namespace strata {
namespace {

StateGraph real_v41() {
  auto c = load_deepseek_config(std::string(STRATA_SOURCE_DIR) +
                                "/testdata/configs/deepseek-v4.1-flash.config.json");
  STRATA_CHECK_MSG(c.ok(), "{}", c.status().to_string());
  auto g = StateGraph::from_deepseek(*c);
  STRATA_CHECK(g.ok());
  return std::move(*g);
}

TEST(CostModel, RealV41FigureAndDecisions) {
  const StateGraph g = real_v41();
  auto hw = parse_hardware(R"({"name": "t", "prefill_tokens_per_s": 20000, "running_requests": 2,
      "tiers": [{"name": "fast", "bytes": 1e12, "gbps": 10},
                {"name": "slow", "bytes": 1e12, "gbps": 0.0005}]})");
  ASSERT_TRUE(hw.ok()) << hw.status().to_string();
  const Plan p = make_plan(g, 64, *hw, {4096}, 0);
  ASSERT_EQ(p.contexts.size(), 1u);
  const PlanAtContext& c = p.contexts[0];
  EXPECT_EQ(c.unit_row_bytes, 56960);
  EXPECT_EQ(c.snapshot_bytes, 2930700);
  EXPECT_EQ(c.replay_exact_tokens, 5082);
  int64_t window = -1;
  for (const KindBytes& k : c.per_request)
    if (k.kind == "window_kv") window = k.bytes;
  EXPECT_EQ(window, 2906112);
  // fast: (56,960 + 2,930,700) B / 10 GB/s = 0.30 ms < 64 / 20,000 s = 3.2 ms -> store.
  EXPECT_NEAR(c.load_s_per_tier[0], 2987660 / 10e9, 1e-12);
  EXPECT_NEAR(c.recompute_unit_s, 64.0 / 20000, 1e-12);
  EXPECT_EQ(c.decision_per_tier[0], "store");
  // slow: rows alone take 56,960 / 0.5 MB/s = 114 ms > 3.2 ms -> recompute.
  EXPECT_EQ(c.decision_per_tier[1], "recompute");
  // Capacity: the fast tier after 2 running requests, whole units with snapshots.
  const int64_t room = static_cast<int64_t>(1e12) - 2 * c.request_bytes;
  EXPECT_EQ(c.cached_tokens_per_tier[0], room / 2987660 * 64);
  EXPECT_EQ(c.cached_tokens_rows_only_per_tier[0], room / 56960 * 64);
}

TEST(CostModel, EngramTablesTakeTheFastestTierWithRoom) {
  const StateGraph g = real_v41();
  auto hw = parse_hardware(R"({"prefill_tokens_per_s": 1, "running_requests": 0,
      "tiers": [{"name": "a", "bytes": 100, "gbps": 1}, {"name": "b", "bytes": 1000, "gbps": 1}]})");
  ASSERT_TRUE(hw.ok());
  EXPECT_EQ(make_plan(g, 64, *hw, {4096}, 500).engram_tier, "b");
  EXPECT_EQ(make_plan(g, 64, *hw, {4096}, 50).engram_tier, "a");
  EXPECT_EQ(make_plan(g, 64, *hw, {4096}, 5000).engram_tier, "");
}

TEST(CostModel, MalformedHardwareIsRefused) {
  for (const char* bad :
       {"[]", "{}", R"({"prefill_tokens_per_s": 0, "tiers": [{"name": "a", "bytes": 1, "gbps": 1}]})",
        R"({"prefill_tokens_per_s": 5, "tiers": []})",
        R"({"prefill_tokens_per_s": 5, "tiers": [{"name": "a", "bytes": 1, "gbps": 0}]})",
        R"({"prefill_tokens_per_s": 5, "tiers": [{"bytes": 1, "gbps": 1}]})", "not json"})
    EXPECT_EQ(parse_hardware(bad).status().code(), StatusCode::kInvalidArgument) << bad;
}

}  // namespace
}  // namespace strata
