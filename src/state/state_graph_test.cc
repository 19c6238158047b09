// StateGraph tests. Byte figures are computed here from the spec's formulas (v41-architecture.md
// §3.1/§3.2: 528 B window row, 288 B compressed row, 68 B index row, 583 B V4 row), and the
// layer lists from the configs as read by hand -- never from the program's own output.
#include "state/state_graph.h"

#include <filesystem>

#include <gtest/gtest.h>

namespace strata {
namespace {

// Copies of ../shared/data/configs (testdata/configs).
const std::string kCfg = std::string(STRATA_SOURCE_DIR) + "/testdata/configs/";

DeepseekConfig cfg_or_skip(const std::string& file, bool* ok) {
  *ok = std::filesystem::exists(kCfg + file);
  if (!*ok) return {};
  auto c = load_deepseek_config(kCfg + file);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? c.value() : DeepseekConfig{};
}

TEST(StateGraph, V41FlashOwnersOnceTotals) {
  bool ok;
  auto c = cfg_or_skip("deepseek-v4.1-flash.config.json", &ok);
  if (!ok) GTEST_SKIP();
  auto g = StateGraph::from_deepseek(c);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  // Serving rows by hand: window 512 FP8 + 512/32 scales; compressed 512/2 + 512/16; index
  // 128/2 + 128/32.
  const int win_row = 512 + 16, ckv_row = 256 + 32, idx_row = 64 + 4;
  EXPECT_EQ(win_row, 528);
  EXPECT_EQ(ckv_row, 288);
  EXPECT_EQ(idx_row, 68);
  // Growth: sources 2, 8, 14 at ratio 2 and 20 at ratio 1, each compressed KV + index keys.
  const double per_token = 3 * (ckv_row + idx_row) / 2.0 + (ckv_row + idx_row) / 1.0;
  EXPECT_DOUBLE_EQ(per_token, 890.0);
  EXPECT_DOUBLE_EQ(g->bytes_per_token(Stage::kBackbone), per_token);
  EXPECT_DOUBLE_EQ(g->bytes_per_token(Stage::kDraft), 0.0);
  EXPECT_DOUBLE_EQ(g->bytes_per_token(StateKind::kCompressedKv), 3 * 288 / 2.0 + 288);
  EXPECT_DOUBLE_EQ(g->bytes_per_token(StateKind::kIndexKeys), 3 * 68 / 2.0 + 68);
  // Fixed: 40 backbone rings of 128 rows, 3 compressor tails [2,512]x2 f32, Engram 3 x i32.
  const int64_t windows = 40LL * 128 * win_row;
  EXPECT_EQ(windows, 2703360);
  const int64_t tails = 3LL * (2 * 512 * 4 * 2);
  const int64_t engram = 3 * 4;
  EXPECT_EQ(g->bytes_per_request_fixed(StateKind::kWindowKv), windows + 3LL * 128 * win_row);
  EXPECT_EQ(g->bytes_per_request_fixed(StateKind::kCompressorState), tails);
  EXPECT_EQ(g->bytes_per_request_fixed(Stage::kBackbone), windows + tails + engram);
  EXPECT_EQ(g->bytes_per_request_fixed(Stage::kDraft), 3LL * 128 * win_row);
  // Each cross-layer owner allocated once: exactly 4 compressed-KV and 4 index-key owners.
  int n_ckv = 0, n_keys = 0, n_topk = 0;
  for (const auto& o : g->owners()) {
    n_ckv += o.kind == StateKind::kCompressedKv;
    n_keys += o.kind == StateKind::kIndexKeys;
    n_topk += o.kind == StateKind::kTopk;
  }
  EXPECT_EQ(n_ckv, 4);
  EXPECT_EQ(n_keys, 4);
  EXPECT_EQ(n_topk, 8);
  // Consumers of layer 20's compressed KV: 20..39.
  const auto& ckv20 = g->owner(g->find_owner(StateKind::kCompressedKv, 20));
  std::vector<int> expect;
  for (int l = 20; l < 40; ++l) expect.push_back(l);
  EXPECT_EQ(ckv20.consumer_layers, expect);
  // Index keys of 20 are read by 20, 24, 28, 32, 36.
  EXPECT_EQ(g->owner(g->find_owner(StateKind::kIndexKeys, 20)).consumer_layers,
            (std::vector<int>{20, 24, 28, 32, 36}));
  // Layer 27 reads KV of 20 and top-k of 24.
  EXPECT_EQ(g->owner(g->owner_read_by(27, StateKind::kCompressedKv)).layer, 20);
  EXPECT_EQ(g->owner(g->owner_read_by(27, StateKind::kTopk)).layer, 24);
  EXPECT_EQ(g->owner_read_by(25, StateKind::kCandidates), -1);  // Reuse: no indexer
  EXPECT_EQ(g->owner_read_by(24, StateKind::kCandidates), g->find_owner(StateKind::kCandidates, 20));
  EXPECT_EQ(g->owner_read_by(0, StateKind::kCompressedKv), -1);
}

TEST(StateGraph, V4Flash0731Totals) {
  bool ok;
  auto c = cfg_or_skip("deepseek-v4-flash-0731.config.json", &ok);
  if (!ok) GTEST_SKIP();
  auto g = StateGraph::from_deepseek(c);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  // V4 row: 448 FP8 + 448/64 UE8M0 + 64 BF16 = 583 B; index key 68 B.
  const int row = 448 + 7 + 128, idx = 68;
  // 21 CSA (even 2..42, ratio 4) and 20 HCA (odd 3..41, ratio 128).
  const double per_token = 21 * (row + idx) / 4.0 + 20 * row / 128.0;
  EXPECT_DOUBLE_EQ(g->bytes_per_token(), per_token);
  EXPECT_NEAR(per_token, 3508.84, 0.01);
  const int64_t windows = 43LL * 128 * row;
  const int64_t csa_state = 21LL * (8 * 1024 * 4 * 2 + 8 * 256 * 4 * 2);
  const int64_t hca_state = 20LL * (128 * 512 * 4 * 2);
  EXPECT_EQ(g->bytes_per_request_fixed(Stage::kBackbone), windows + csa_state + hca_state);
  // 3 stages' rings + the MTP carry (hc x dim bf16 streams of the last position)
  EXPECT_EQ(g->bytes_per_request_fixed(Stage::kDraft), 3LL * 128 * row + 4LL * 4096 * 2);
}

TEST(StateGraph, V4ProTotals) {
  bool ok;
  auto c = cfg_or_skip("deepseek-v4-pro.config.json", &ok);
  if (!ok) GTEST_SKIP();
  auto g = StateGraph::from_deepseek(c);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const int row = 583, idx = 68;
  // Pro: 61 layers; ratio 4 at even 2..60 (30), ratio 128 at 0, 1 and odd 3..59 (31).
  const double per_token = 30 * (row + idx) / 4.0 + 31 * row / 128.0;
  EXPECT_DOUBLE_EQ(g->bytes_per_token(), per_token);
  const int64_t fixed = 61LL * 128 * row + 30LL * (65536 + 16384) + 31LL * 524288;
  EXPECT_EQ(g->bytes_per_request_fixed(Stage::kBackbone), fixed);
  EXPECT_EQ(g->bytes_per_request_fixed(Stage::kDraft),
            1LL * 128 * row + int64_t{c.hc_mult} * c.dim * 2);  // ring + MTP carry
}

TEST(StateGraph, Llama) {
  LlamaStateDesc d{.n_layers = 5, .n_kv_heads = 4, .head_dim = 8, .kv_format = RowFormat::kF32};
  auto g = StateGraph::from_llama(d);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->owners().size(), 5u);
  EXPECT_DOUBLE_EQ(g->bytes_per_token(), 5.0 * 2 * 4 * 8 * 4);
  EXPECT_EQ(g->bytes_per_request_fixed(), 0);
  d.kv_format = RowFormat::kBf16;
  EXPECT_DOUBLE_EQ(StateGraph::from_llama(d)->bytes_per_token(), 5.0 * 2 * 4 * 8 * 2);
  d.n_kv_heads = 0;
  EXPECT_FALSE(StateGraph::from_llama(d).ok());
}

StateSpec ckv(int ratio) {
  StateSpec s;
  s.kind = StateKind::kCompressedKv;
  s.granularity = Granularity::kPerCompressedRow;
  s.ratio = ratio;
  s.row_elems = 32;
  s.format = RowFormat::kFp4E4m3;
  s.quant_block = 16;
  return make_state_spec(s);
}

TEST(StateGraph, ValidationErrors) {
  {  // consumer without owner
    StateGraphBuilder b("t", 3);
    OwnerId o = b.add_owner(StateKind::kCompressedKv, 0, Stage::kBackbone, ckv(2));
    b.add_write(0, o);
    b.add_read(1, o + 5, 2);
    auto g = b.build();
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.status().message().find("does not exist"), std::string::npos);
  }
  {  // ratio mismatch
    StateGraphBuilder b("t", 3);
    OwnerId o = b.add_owner(StateKind::kCompressedKv, 0, Stage::kBackbone, ckv(2));
    b.add_write(0, o);
    b.add_read(1, o, 1);
    auto g = b.build();
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.status().message().find("ratio mismatch"), std::string::npos);
  }
  {  // cycle: L0 reads L2's owner, L2 reads L0's owner
    StateGraphBuilder b("t", 3);
    OwnerId a = b.add_owner(StateKind::kCompressedKv, 0, Stage::kBackbone, ckv(2));
    OwnerId c = b.add_owner(StateKind::kCompressedKv, 2, Stage::kBackbone, ckv(2));
    b.add_write(0, a);
    b.add_write(2, c);
    b.add_read(2, a, 2);
    b.add_read(0, c, 2);
    auto g = b.build();
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.status().message().find("cycle"), std::string::npos) << g.status().message();
  }
  {  // owner without writer
    StateGraphBuilder b("t", 2);
    OwnerId a = b.add_owner(StateKind::kCompressedKv, 0, Stage::kBackbone, ckv(2));
    b.add_read(1, a, 2);
    EXPECT_FALSE(b.build().ok());
  }
  {  // valid
    StateGraphBuilder b("t", 2);
    OwnerId a = b.add_owner(StateKind::kCompressedKv, 0, Stage::kBackbone, ckv(2));
    b.add_write(0, a);
    b.add_read(1, a, 2);
    EXPECT_TRUE(b.build().ok());
  }
}

}  // namespace
}  // namespace strata
