// Tests for DeepseekConfig. Expected values were read off the JSON files by hand and from the
// spec tables (v41-architecture.md §1, §2.6), not from the parser's output.
#include "model/deepseek_config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

namespace strata {
namespace {

std::string src_dir() {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  return e ? e : STRATA_SOURCE_DIR;
}
// Copies of ../shared/data/configs and ../shared/golden live in testdata/ (configs/, golden/).
const std::string kShared = src_dir() + "/testdata";

std::string shared_or_skip(const std::string& rel) {
  std::string r = rel;
  if (r.rfind("data/configs/", 0) == 0) r = "configs/" + r.substr(13);
  std::string p = kShared + "/" + r;
  return std::filesystem::exists(p) ? p : "";
}

DeepseekConfig load_ok(const std::string& path) {
  auto c = load_deepseek_config(path);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  if (!c.ok()) std::abort();
  return std::move(c).value();
}

std::vector<int> roles_of(const DeepseekConfig& c, AttnRole r) {
  std::vector<int> out;
  for (const auto& L : c.layers)
    if (L.role == r && !L.is_draft) out.push_back(L.layer_id);
  return out;
}

void expect_v41_flash(const DeepseekConfig& c) {
  EXPECT_EQ(c.version, DeepseekVersion::kV41);
  EXPECT_EQ(c.vocab_size, 129280);
  EXPECT_EQ(c.dim, 5120);
  EXPECT_EQ(c.n_layers, 40);
  EXPECT_EQ(c.n_draft_layers, 3);
  EXPECT_EQ(c.n_heads, 64);
  EXPECT_EQ(c.head_dim, 512);
  EXPECT_EQ(c.rope_head_dim, 64);
  EXPECT_EQ(c.q_lora_rank, 1280);
  EXPECT_EQ(c.o_groups, 8);
  EXPECT_EQ(c.o_lora_rank, 1024);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-20);
  EXPECT_EQ(c.window_size, 128);
  ASSERT_EQ(c.compress_ratios.size(), 43u);
  EXPECT_EQ(c.compress_ratios[1], 0);
  EXPECT_EQ(c.compress_ratios[2], 2);
  EXPECT_EQ(c.compress_ratios[19], 2);
  EXPECT_EQ(c.compress_ratios[20], 1);
  EXPECT_EQ(c.compress_ratios[39], 1);
  EXPECT_EQ(c.compress_ratios[40], 0);
  EXPECT_DOUBLE_EQ(c.compress_rope_theta, 160000);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000);
  EXPECT_EQ(c.rope_scaling_type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_factor, 16);
  EXPECT_EQ(c.original_seq_len, 65536);
  EXPECT_DOUBLE_EQ(c.beta_fast, 32);
  EXPECT_DOUBLE_EQ(c.beta_slow, 1);
  EXPECT_EQ(c.kv_source_layers, (std::vector<int>{2, 8, 14, 20}));
  EXPECT_EQ(c.index_source_layers, (std::vector<int>{2, 8, 14, 20, 24, 28, 32, 36}));
  EXPECT_EQ(c.candidate_source_layer, 20);
  EXPECT_EQ(c.candidate_topk_blocks, 2048);
  EXPECT_EQ(c.candidate_block_size, 8);
  EXPECT_EQ(c.index_n_heads, 32);
  EXPECT_EQ(c.index_head_dim, 128);
  EXPECT_EQ(c.index_topk, 512);
  EXPECT_EQ(c.n_routed_experts, 384);
  EXPECT_EQ(c.n_activated_experts, 6);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.moe_inter_dim, 2304);
  EXPECT_EQ(c.score_func, "sqrtsoftplus");
  EXPECT_DOUBLE_EQ(c.route_scale, 1.5);
  EXPECT_DOUBLE_EQ(c.swiglu_limit, 10.0);
  EXPECT_TRUE(c.shared_expert_clamped);
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_EQ(c.hc_sinkhorn_iters, 20);
  EXPECT_DOUBLE_EQ(c.hc_eps, 1e-6);
  EXPECT_EQ(c.engram_layer_ids, (std::vector<int>{1, 14}));
  EXPECT_EQ(c.engram_num_embeddings, (std::vector<int64_t>{384006168, 384016682}));
  EXPECT_EQ(c.engram_max_ngram_size, 4);
  EXPECT_EQ(c.engram_n_heads, 8);
  EXPECT_EQ(c.engram_head_dim, 256);
  EXPECT_EQ(c.engram_vocab_size, 16000000);
  EXPECT_EQ(c.engram_compressed_vocab_size, 99092);
  EXPECT_EQ(c.engram_pad_id, 2);
  EXPECT_EQ(c.dspark_block_size, 5);
  EXPECT_EQ(c.dspark_noise_token_id, 128799);
  EXPECT_EQ(c.dspark_target_layer_ids, (std::vector<int>{37, 38, 39}));
  EXPECT_EQ(c.dspark_markov_rank, 256);
  EXPECT_EQ(c.dspark_n_routed_experts, 128);
  EXPECT_EQ(c.dspark_n_activated_experts, 3);
  EXPECT_EQ(c.weight_block_size, 32);
  EXPECT_EQ(c.expert_dtype, "fp4");
  EXPECT_EQ(c.n_hash_layers, 0);
  EXPECT_EQ(c.image_token_id, 129264);
  // Roles: spec §2.6 table.
  EXPECT_EQ(roles_of(c, AttnRole::kSwaOnly), (std::vector<int>{0, 1}));
  EXPECT_EQ(roles_of(c, AttnRole::kFull), (std::vector<int>{2, 8, 14, 20}));
  EXPECT_EQ(roles_of(c, AttnRole::kReindex), (std::vector<int>{24, 28, 32, 36}));
  EXPECT_EQ(roles_of(c, AttnRole::kReuse).size(), 40u - 2 - 4 - 4);
  // Owners: "latest source" rule.
  EXPECT_EQ(c.layers[7].kv_owner, 2);
  EXPECT_EQ(c.layers[7].topk_owner, 2);
  EXPECT_EQ(c.layers[13].kv_owner, 8);
  EXPECT_EQ(c.layers[19].kv_owner, 14);
  EXPECT_EQ(c.layers[19].topk_owner, 14);
  EXPECT_EQ(c.layers[21].kv_owner, 20);
  EXPECT_EQ(c.layers[23].topk_owner, 20);
  EXPECT_EQ(c.layers[24].kv_owner, 20);
  EXPECT_EQ(c.layers[24].index_key_owner, 20);
  EXPECT_EQ(c.layers[24].topk_owner, 24);
  EXPECT_TRUE(c.layers[24].uses_candidates);
  EXPECT_EQ(c.layers[24].candidate_owner, 20);
  EXPECT_EQ(c.layers[39].topk_owner, 36);
  EXPECT_EQ(c.layers[39].kv_owner, 20);
  EXPECT_TRUE(c.layers[20].is_candidate_source);
  EXPECT_FALSE(c.layers[20].uses_candidates);
  EXPECT_FALSE(c.layers[14].uses_candidates);
  EXPECT_TRUE(c.layers[14].owns_index_keys);
  EXPECT_FALSE(c.layers[24].owns_index_keys);
  EXPECT_TRUE(c.layers[1].engram_before);
  EXPECT_EQ(c.layers[14].engram_slot, 1);
  EXPECT_TRUE(c.layers[38].dspark_tap);
  // Drafts.
  for (int id = 40; id < 43; ++id) {
    EXPECT_TRUE(c.layers[id].is_draft);
    EXPECT_EQ(c.layers[id].role, AttnRole::kSwaOnly);
    EXPECT_EQ(c.layers[id].n_routed_experts, 128);
    EXPECT_EQ(c.layers[id].n_activated_experts, 3);
    EXPECT_FALSE(c.layers[id].yarn);
  }
  EXPECT_TRUE(c.layers[2].yarn);
  EXPECT_DOUBLE_EQ(c.layers[2].rope_theta, 160000);
  EXPECT_FALSE(c.layers[0].yarn);
  EXPECT_DOUBLE_EQ(c.layers[0].rope_theta, 10000);
}

TEST(DeepseekConfig, V41FlashHfNested) {
  auto p = shared_or_skip("data/configs/deepseek-v4.1-flash.config.json");
  if (p.empty()) GTEST_SKIP() << "shared configs not present";
  auto c = load_ok(p);
  EXPECT_EQ(c.source_format, "hf-nested");
  expect_v41_flash(c);
  EXPECT_EQ(c.max_position_embeddings, 1048576);
  EXPECT_EQ(c.topk_method, "noaux_tc");
  EXPECT_EQ(c.pad_token_id, 2);
  EXPECT_EQ(c.vision_n_layers, 32);
  EXPECT_TRUE(c.notes.empty());
}

TEST(DeepseekConfig, V41FlashReferenceFlat) {
  auto p = shared_or_skip("data/configs/deepseek-v4.1-flash.inference-config.json");
  if (p.empty()) GTEST_SKIP() << "shared configs not present";
  auto c = load_ok(p);
  EXPECT_EQ(c.source_format, "reference-flat");
  expect_v41_flash(c);
  EXPECT_EQ(c.vision_n_layers, 32);
  EXPECT_EQ(c.weight_dtype, "fp8");
}

void expect_v41_tiny(const DeepseekConfig& c) {
  EXPECT_EQ(c.version, DeepseekVersion::kV41);
  EXPECT_EQ(c.vocab_size, 2048);
  EXPECT_EQ(c.dim, 256);
  EXPECT_EQ(c.n_layers, 12);
  EXPECT_EQ(c.n_draft_layers, 3);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rope_head_dim, 16);
  EXPECT_EQ(c.q_lora_rank, 128);
  EXPECT_EQ(c.o_groups, 4);
  EXPECT_EQ(c.o_lora_rank, 64);
  EXPECT_EQ(c.window_size, 16);
  EXPECT_EQ(c.kv_source_layers, (std::vector<int>{2, 4, 6}));
  EXPECT_EQ(c.index_source_layers, (std::vector<int>{2, 4, 6, 8, 10}));
  EXPECT_EQ(c.candidate_source_layer, 6);
  EXPECT_EQ(c.candidate_topk_blocks, 6);
  EXPECT_EQ(c.candidate_block_size, 4);
  EXPECT_EQ(c.index_n_heads, 4);
  EXPECT_EQ(c.index_head_dim, 64);
  EXPECT_EQ(c.index_topk, 8);
  EXPECT_EQ(c.n_routed_experts, 8);
  EXPECT_EQ(c.n_activated_experts, 2);
  EXPECT_EQ(c.moe_inter_dim, 128);
  EXPECT_EQ(c.engram_layer_ids, (std::vector<int>{1, 4}));
  EXPECT_EQ(c.engram_num_embeddings, (std::vector<int64_t>{1362, 1552}));
  EXPECT_EQ(c.engram_n_heads, 2);
  EXPECT_EQ(c.engram_head_dim, 64);
  EXPECT_EQ(c.engram_vocab_size, 200);
  EXPECT_EQ(c.engram_compressed_vocab_size, 685);
  EXPECT_EQ(c.dspark_noise_token_id, 2040);
  EXPECT_EQ(c.dspark_target_layer_ids, (std::vector<int>{9, 10, 11}));
  EXPECT_EQ(c.dspark_markov_rank, 32);
  EXPECT_EQ(c.dspark_n_routed_experts, 4);
  EXPECT_EQ(c.dspark_n_activated_experts, 2);
  EXPECT_EQ(c.image_token_id, 2047);
  EXPECT_EQ(c.vision_n_layers, 0);
  // README: SWA [0,1]; ratio 2 [2..5]; ratio 1 [6..11]; kv 2,4,6; index 2,4,6,8,10; cand 6.
  EXPECT_EQ(roles_of(c, AttnRole::kSwaOnly), (std::vector<int>{0, 1}));
  EXPECT_EQ(roles_of(c, AttnRole::kFull), (std::vector<int>{2, 4, 6}));
  EXPECT_EQ(roles_of(c, AttnRole::kReindex), (std::vector<int>{8, 10}));
  EXPECT_EQ(roles_of(c, AttnRole::kReuse), (std::vector<int>{3, 5, 7, 9, 11}));
  EXPECT_EQ(c.layers[3].kv_owner, 2);
  EXPECT_EQ(c.layers[5].kv_owner, 4);
  EXPECT_EQ(c.layers[5].topk_owner, 4);
  EXPECT_EQ(c.layers[9].kv_owner, 6);
  EXPECT_EQ(c.layers[9].topk_owner, 8);
  EXPECT_EQ(c.layers[10].index_key_owner, 6);
  EXPECT_TRUE(c.layers[10].uses_candidates);
  EXPECT_TRUE(c.layers[8].uses_candidates);
  EXPECT_TRUE(c.layers[6].is_candidate_source);
  EXPECT_FALSE(c.layers[4].uses_candidates);
}

TEST(DeepseekConfig, V41TinyBothFormats) {
  std::string dir = src_dir() + "/models/deepseek-v41-tiny";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "tiny model not present";
  auto hf = load_ok(dir + "/config.json");
  EXPECT_EQ(hf.source_format, "hf-nested");
  expect_v41_tiny(hf);
  EXPECT_EQ(hf.max_position_embeddings, 512);
  auto ref = load_ok(dir + "/inference-config.json");
  EXPECT_EQ(ref.source_format, "reference-flat");
  expect_v41_tiny(ref);
  // Directory load prefers config.json.
  EXPECT_EQ(load_ok(dir).source_format, "hf-nested");
}

TEST(DeepseekConfig, V4Flash0731) {
  auto p = shared_or_skip("data/configs/deepseek-v4-flash-0731.config.json");
  if (p.empty()) GTEST_SKIP() << "shared configs not present";
  auto c = load_ok(p);
  EXPECT_EQ(c.version, DeepseekVersion::kV4);
  EXPECT_EQ(c.source_format, "hf-flat");
  EXPECT_EQ(c.dim, 4096);
  EXPECT_EQ(c.n_layers, 43);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_EQ(c.n_draft_layers, 3);  // 46 ratios: accepted as published
  EXPECT_FALSE(c.notes.empty());
  EXPECT_EQ(c.n_heads, 64);
  EXPECT_EQ(c.q_lora_rank, 1024);
  EXPECT_EQ(c.index_n_heads, 64);
  EXPECT_EQ(c.index_topk, 512);
  EXPECT_EQ(c.n_routed_experts, 256);
  EXPECT_EQ(c.moe_inter_dim, 2048);
  EXPECT_EQ(c.n_hash_layers, 3);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-6);
  EXPECT_EQ(c.weight_block_size, 128);
  EXPECT_EQ(c.rope_scaling_type, "yarn");  // spelled "type" in this file
  EXPECT_EQ(c.original_seq_len, 65536);
  EXPECT_FALSE(c.shared_expert_clamped);
  EXPECT_EQ(c.dspark_target_layer_ids, (std::vector<int>{40, 41, 42}));
  EXPECT_EQ(c.dspark_block_size, 5);
  EXPECT_EQ(c.kv_fp8_block(), 64);
  // Layers 0,1 SWA; even 2..42 CSA; odd 3..41 HCA.
  std::vector<int> csa, hca;
  for (int i = 2; i <= 42; i += 2) csa.push_back(i);
  for (int i = 3; i <= 41; i += 2) hca.push_back(i);
  EXPECT_EQ(roles_of(c, AttnRole::kSwaOnly), (std::vector<int>{0, 1}));
  EXPECT_EQ(roles_of(c, AttnRole::kCsa), csa);
  EXPECT_EQ(roles_of(c, AttnRole::kHca), hca);
  EXPECT_TRUE(c.layers[2].overlap_compressor);
  EXPECT_FALSE(c.layers[3].overlap_compressor);
  EXPECT_FALSE(c.layers[3].has_indexer);
  EXPECT_EQ(c.layers[5].kv_owner, 5);
  EXPECT_TRUE(c.layers[0].hash_routed && c.layers[2].hash_routed);
  EXPECT_FALSE(c.layers[3].hash_routed);
  for (int id = 43; id < 46; ++id) EXPECT_TRUE(c.layers[id].is_draft);
}

TEST(DeepseekConfig, V4Pro) {
  auto p = shared_or_skip("data/configs/deepseek-v4-pro.config.json");
  if (p.empty()) GTEST_SKIP() << "shared configs not present";
  auto c = load_ok(p);
  EXPECT_EQ(c.version, DeepseekVersion::kV4);
  EXPECT_EQ(c.dim, 7168);
  EXPECT_EQ(c.n_layers, 61);
  EXPECT_EQ(c.n_draft_layers, 1);
  EXPECT_EQ(c.n_heads, 128);
  EXPECT_EQ(c.q_lora_rank, 1536);
  EXPECT_EQ(c.o_groups, 16);
  EXPECT_EQ(c.n_routed_experts, 384);
  EXPECT_EQ(c.moe_inter_dim, 3072);
  EXPECT_EQ(c.index_topk, 1024);
  EXPECT_DOUBLE_EQ(c.route_scale, 2.5);
  EXPECT_TRUE(c.notes.empty());
  // Layers 0 and 1 are HCA (spec §6.12); even 2..60 CSA; odd 3..59 HCA.
  EXPECT_EQ(c.layers[0].role, AttnRole::kHca);
  EXPECT_EQ(c.layers[1].role, AttnRole::kHca);
  EXPECT_EQ(roles_of(c, AttnRole::kCsa).size(), 30u);
  EXPECT_EQ(roles_of(c, AttnRole::kHca).size(), 31u);
  EXPECT_EQ(roles_of(c, AttnRole::kSwaOnly).size(), 0u);
  EXPECT_EQ(c.layers[60].role, AttnRole::kCsa);
  EXPECT_EQ(c.layers[61].role, AttnRole::kSwaOnly);
}

TEST(DeepseekConfig, V4FlashTinyGolden) {
  auto p = shared_or_skip("golden/v4flash-tiny/config.json");
  if (p.empty()) GTEST_SKIP() << "golden not present";
  auto c = load_ok(p);
  EXPECT_EQ(c.version, DeepseekVersion::kV4);
  EXPECT_EQ(c.dim, 128);
  EXPECT_EQ(c.n_layers, 7);
  EXPECT_EQ(c.n_draft_layers, 1);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.window_size, 16);
  EXPECT_EQ(c.n_hash_layers, 3);
  EXPECT_EQ(c.index_head_dim, 64);
  EXPECT_EQ(c.layers[3].role, AttnRole::kHca);  // HCA ratio 16 is a config value
  EXPECT_EQ(c.layers[3].ratio, 16);
  EXPECT_EQ(c.layers[4].role, AttnRole::kCsa);
  EXPECT_EQ(c.layers[7].role, AttnRole::kSwaOnly);
  auto ref = load_ok(kShared + "/golden/v4flash-tiny/inference-config.json");
  EXPECT_EQ(ref.version, DeepseekVersion::kV4);
  EXPECT_EQ(ref.n_hash_layers, 3);
  EXPECT_EQ(ref.n_draft_layers, 1);
  EXPECT_EQ(ref.layers[5].role, AttnRole::kHca);
}

// ---- validation errors ----

std::string tiny_v41_json(const std::string& replace_key = "", const std::string& value = "") {
  std::ifstream in(src_dir() + "/models/deepseek-v41-tiny/inference-config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (!replace_key.empty()) {
    auto pos = s.find("\"" + replace_key + "\"");
    EXPECT_NE(pos, std::string::npos);
    auto colon = s.find(':', pos);
    // Replace the value up to the next top-level key (",\n    \"") or closing brace.
    auto end = s.find(",\n    \"", colon);
    if (end == std::string::npos) end = s.rfind('}');
    s = s.substr(0, colon + 1) + " " + value + s.substr(end);
  }
  return s;
}

void expect_error(const std::string& json, const std::string& needle) {
  auto c = parse_deepseek_config_json(json);
  ASSERT_FALSE(c.ok()) << "expected an error containing '" << needle << "'";
  EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().to_string();
}

TEST(DeepseekConfig, ValidationErrors) {
  if (!std::filesystem::exists(src_dir() + "/models/deepseek-v41-tiny/inference-config.json"))
    GTEST_SKIP();
  ASSERT_TRUE(parse_deepseek_config_json(tiny_v41_json()).ok());
  // Ratio mismatch: layer 6 (ratio 1) made a non-source -> reads layer 4 (ratio 2).
  expect_error(tiny_v41_json("kv_source_layers", "[2, 4]"), "ratio");
  // A compressed layer before any kv source.
  expect_error(tiny_v41_json("kv_source_layers", "[4, 6]"), "no kv source");
  // Out of range id.
  expect_error(tiny_v41_json("index_source_layers", "[2, 4, 6, 8, 40]"), "out of range");
  // Source with ratio 0.
  expect_error(tiny_v41_json("kv_source_layers", "[1, 2, 4, 6]"), "ratio 0");
  // Bad ratio for V4.1.
  expect_error(tiny_v41_json("compress_ratios", "[0,0,4,4,4,4,1,1,1,1,1,1,0,0,0]"),
               "V4.1 supports ratios");
  // Too few ratios.
  expect_error(tiny_v41_json("compress_ratios", "[0,0,2]"), "fewer than n_layers");
  // Candidate source that is not an index source.
  expect_error(tiny_v41_json("candidate_source_layer", "7"), "not an index source");
  // Unsorted list.
  expect_error(tiny_v41_json("index_source_layers", "[4, 2, 6, 8, 10]"), "increasing");
  // Wrong type.
  expect_error(tiny_v41_json("window_size", "\"big\""), "window_size");
  // Not JSON.
  expect_error("{", "not valid JSON");
  // Wrong model type.
  expect_error(R"({"model_type": "llama", "hidden_size": 4})", "not a DeepSeek");
}

TEST(DeepseekConfig, RopeTypeSpellings) {
  if (!std::filesystem::exists(src_dir() + "/models/deepseek-v41-tiny/config.json")) GTEST_SKIP();
  std::ifstream in(src_dir() + "/models/deepseek-v41-tiny/config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  auto pos = s.find("\"type\": \"yarn\"");
  ASSERT_NE(pos, std::string::npos);
  std::string s2 = s;
  s2.replace(pos, 6, "\"rope_type\"");
  auto a = parse_deepseek_config_json(s);
  auto b = parse_deepseek_config_json(s2);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->rope_scaling_type, "yarn");
  EXPECT_EQ(b->rope_scaling_type, "yarn");
  std::string s3 = s;
  s3.replace(pos, 14, "\"type\": \"linear\"");
  expect_error(s3, "unsupported type");
}

}  // namespace
}  // namespace strata
