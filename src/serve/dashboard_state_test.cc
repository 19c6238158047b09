// Dashboard state JSON (serve/dashboard_state.h) and the handoff ring (serve/handoff_log.h).
// Byte figures are computed here by hand from the specs (f32 rows: 4 B per element).
#include "serve/dashboard_state.h"

#include <gtest/gtest.h>

#include "state/handoff.h"

namespace strata {
namespace {

using Json = nlohmann::json;

StateSpec f32_spec(StateKind kind, Granularity g, int ratio, int rows_fixed, int elems) {
  StateSpec s;
  s.kind = kind;
  s.granularity = g;
  s.ratio = ratio;
  s.rows_fixed = rows_fixed;
  s.row_elems = elems;
  s.format = RowFormat::kF32;
  return make_state_spec(s);
}

// Two layers: a 4-row window ring of 16 floats per layer (64 B rows, 256 B per request each)
// and one compressed KV at L0 (8 floats = 32 B per row, 1 row per 2 tokens) read by L0 and L1.
StateGraph two_layer_graph() {
  StateGraphBuilder b("t", 2);
  for (int l = 0; l < 2; ++l) {
    const OwnerId w = b.add_owner(StateKind::kWindowKv, l, Stage::kBackbone,
                                  f32_spec(StateKind::kWindowKv, Granularity::kRing, 1, 4, 16));
    b.add_write(l, w);
    b.add_read(l, w);
  }
  const OwnerId c = b.add_owner(StateKind::kCompressedKv, 0, Stage::kBackbone,
                                f32_spec(StateKind::kCompressedKv, Granularity::kPerCompressedRow, 2, 0, 8));
  b.add_write(0, c);
  b.add_read(0, c, 2);
  b.add_read(1, c, 2);
  auto g = b.build();
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return std::move(g).value();
}

TEST(DashboardState, StateGraphOwnersAndKinds) {
  const StateGraph g = two_layer_graph();
  const Json j = state_graph_json(g);
  ASSERT_EQ(j["owners"].size(), 3u);
  const Json& ckv = j["owners"][2];
  EXPECT_EQ(ckv["label"], "compressed_kv@L0");
  EXPECT_EQ(ckv["kind"], "compressed_kv");
  EXPECT_EQ(ckv["layer"], 0);
  EXPECT_EQ(ckv["granularity"], "per_compressed_row");
  EXPECT_EQ(ckv["row_bytes"], 32);
  EXPECT_DOUBLE_EQ(ckv["bytes_per_token"].get<double>(), 16.0);
  EXPECT_EQ(ckv["fixed_bytes"], 0);
  EXPECT_EQ(ckv["consumer_layers"], Json::array({0, 1}));
  EXPECT_EQ(j["owners"][1]["label"], "window_kv@L1");
  EXPECT_EQ(j["owners"][1]["fixed_bytes"], 256);
  // One entry per (kind, stage), owners counted once.
  ASSERT_EQ(j["kinds"].size(), 2u);
  EXPECT_EQ(j["kinds"][0]["kind"], "window_kv");
  EXPECT_EQ(j["kinds"][0]["owners"], 2);
  EXPECT_EQ(j["kinds"][0]["fixed_bytes_per_request"], 512);
  EXPECT_DOUBLE_EQ(j["kinds"][0]["bytes_per_token"].get<double>(), 0.0);
  EXPECT_EQ(j["kinds"][1]["kind"], "compressed_kv");
  EXPECT_DOUBLE_EQ(j["kinds"][1]["bytes_per_token"].get<double>(), 16.0);
  EXPECT_DOUBLE_EQ(j["bytes_per_token"].get<double>(), 16.0);
  EXPECT_EQ(j["fixed_bytes_per_request"], 512);
}

TEST(DashboardState, ServerShape) {
  const StateGraph g = two_layer_graph();
  EngineStats s;
  s.num_running = 1;
  s.num_waiting = 1;
  s.cache_usage = {{"window_kv", "host", 512, 4096}, {"compressed_kv", "host", 64, 1024}};
  s.requests = {{.id = 7, .phase = "prefill", .prompt_tokens = 100, .computed_tokens = 64,
                 .last_step_tokens = 32, .cached_tokens = 16, .age_s = 0.5},
                {.id = 9, .phase = "waiting", .prompt_tokens = 5, .imported = true}};
  HandoffLog log;
  HandoffRecord rec;
  rec.direction = "import";
  rec.num_tokens = 99;
  rec.payload_bytes = 1000;
  rec.bytes_per_kind = {{"window_kv", 600}, {"compressed_kv", 400}};
  rec.latency_ms = 2.5;
  log.record(rec);
  const Json j = dashboard_state_json({"tiny", "decode", "vllm:"}, s, &g, log.recent(), log.total());
  EXPECT_EQ(j["kind"], "server");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["role"], "decode");
  EXPECT_EQ(j["metrics_prefix"], "vllm:");
  EXPECT_GT(j["time_unix_ms"].get<int64_t>(), 0);
  EXPECT_EQ(j["state_graph"]["owners"].size(), 3u);
  EXPECT_EQ(j["requests"]["running"], 1);
  EXPECT_EQ(j["requests"]["waiting"], 1);
  ASSERT_EQ(j["requests"]["list"].size(), 2u);
  const Json& r = j["requests"]["list"][0];
  EXPECT_EQ(r["id"], 7);
  EXPECT_EQ(r["phase"], "prefill");
  EXPECT_EQ(r["computed_tokens"], 64);
  EXPECT_EQ(r["prompt_tokens"], 100);
  EXPECT_EQ(r["last_step_tokens"], 32);
  EXPECT_EQ(r["cached_tokens"], 16);
  EXPECT_EQ(r["imported"], false);
  EXPECT_EQ(j["requests"]["list"][1]["imported"], true);
  ASSERT_EQ(j["cache_usage"].size(), 2u);
  EXPECT_EQ(j["cache_usage"][1], Json({{"kind", "compressed_kv"}, {"tier", "host"},
                                       {"used_bytes", 64}, {"capacity_bytes", 1024}}));
  EXPECT_EQ(j["handoffs"]["total"], 1);
  const Json& h = j["handoffs"]["recent"][0];
  EXPECT_EQ(h["seq"], 1);
  EXPECT_EQ(h["direction"], "import");
  EXPECT_EQ(h["payload_bytes"], 1000);
  EXPECT_EQ(h["bytes_per_kind"], Json({{"window_kv", 600}, {"compressed_kv", 400}}));
  EXPECT_DOUBLE_EQ(h["latency_ms"].get<double>(), 2.5);
  EXPECT_EQ(h["ok"], true);
}

TEST(DashboardState, NoGraphIsNull) {
  const Json j = dashboard_state_json({"llama", "colocated", "strata:"}, EngineStats{}, nullptr, {}, 0);
  EXPECT_TRUE(j["state_graph"].is_null());
  EXPECT_TRUE(j["requests"]["list"].empty());
  EXPECT_TRUE(j["handoffs"]["recent"].empty());
}

TEST(DashboardState, RouterShape) {
  const Json state = {{"kind", "server"}, {"model", "tiny"}};
  const Json j = router_dashboard_json(
      "round-robin", {{"http://p", "prefill", state, "strata:x 1\n", ""},
                      {"http://d", "decode", nullptr, "", "unreachable"}});
  EXPECT_EQ(j["kind"], "router");
  EXPECT_EQ(j["policy"], "round-robin");
  ASSERT_EQ(j["backends"].size(), 2u);
  EXPECT_EQ(j["backends"][0]["state"], state);
  EXPECT_EQ(j["backends"][0]["metrics"], "strata:x 1\n");
  EXPECT_EQ(j["backends"][0]["error"], "");
  EXPECT_TRUE(j["backends"][1]["state"].is_null());
  EXPECT_TRUE(j["backends"][1]["metrics"].is_null());
  EXPECT_EQ(j["backends"][1]["error"], "unreachable");
}

TEST(HandoffLog, KeepsTheLastRecordsInOrder) {
  HandoffLog log(2);
  for (int i = 1; i <= 3; ++i) {
    HandoffRecord rec;
    rec.direction = "export";
    rec.num_tokens = i;
    log.record(rec);
  }
  const std::vector<HandoffRecord> r = log.recent();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].seq, 2);
  EXPECT_EQ(r[0].num_tokens, 2);
  EXPECT_EQ(r[1].seq, 3);
  EXPECT_GT(r[1].unix_ms, 0);
  EXPECT_EQ(log.total(), 3);
}

TEST(HandoffLog, BytesPerKindSumsRuns) {
  HandoffState st;
  st.runs.push_back({.owner = 0, .kind = StateKind::kWindowKv, .bytes = std::vector<uint8_t>(64)});
  st.runs.push_back({.owner = 2, .kind = StateKind::kCompressedKv, .bytes = std::vector<uint8_t>(32)});
  st.runs.push_back({.owner = 1, .kind = StateKind::kWindowKv, .bytes = std::vector<uint8_t>(64)});
  const auto per_kind = handoff_bytes_per_kind(st);
  ASSERT_EQ(per_kind.size(), 2u);
  EXPECT_EQ(per_kind[0], (std::pair<std::string, int64_t>{"window_kv", 128}));
  EXPECT_EQ(per_kind[1], (std::pair<std::string, int64_t>{"compressed_kv", 32}));
  EXPECT_EQ(st.payload_bytes(), 160);
}

}  // namespace
}  // namespace strata
