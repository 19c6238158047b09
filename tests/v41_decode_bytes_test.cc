// DeepseekV41Runner::decode_bytes_read on the golden tiny model (models/deepseek-v41-tiny),
// checked against an independent count: tensor sizes summed straight from the safetensors
// JSON header by name pattern (no loader, no weights structs), and the state bytes worked
// out by hand from the spec's serving formats (v41-architecture.md §3.1) for head_dim 64:
//   window row  = 64 FP8 codes + 64/32 UE8M0 scales          = 66 B
//   compressed  = 64/2 packed FP4 + 64/16 E4M3 scales         = 36 B
//   index key   = 64/2 packed FP4 + 64/32 UE8M0 scales (ihd 64) = 34 B
//   compressor tail (ratio-2 kv sources 2 and 4) = 2 slots x (64 kv + 64 score) x 4 B = 1024 B
//   Engram history = 3 x int32 = 12 B
// Layout of the tiny model (its config.json): 12 layers, window 16, ratios 0,0,2,2,2,2,1x6,
// index sources 2,4 (m=2) and 6,8,10 (m=1), index_topk 8, 8 experts with 2 active, Engram
// before layers 1 and 4 with (4-1)*2 = 6 table rows read per layer. Layer 6 is the candidate
// source: layers 8 and 10 read only its candidate blocks' keys, at most 6 blocks x 4 = 24.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "exec/deepseek_v41/deepseek_v41_runner.h"

namespace strata {
namespace {

std::string model_dir() {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  return std::string(e ? e : STRATA_SOURCE_DIR) + "/models/deepseek-v41-tiny";
}

// name -> byte size, from the file's header.
std::map<std::string, int64_t> header_sizes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint8_t len8[8];
  in.read(reinterpret_cast<char*>(len8), 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(len8[i]) << (8 * i);
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  auto j = nlohmann::json::parse(text);
  std::map<std::string, int64_t> out;
  for (auto& [k, v] : j.items()) {
    if (k == "__metadata__") continue;
    out[k] = v["data_offsets"][1].get<int64_t>() - v["data_offsets"][0].get<int64_t>();
  }
  return out;
}

int64_t expected_weight_bytes() {
  const auto sizes = header_sizes(model_dir() + "/model.safetensors");
  const std::regex expert(R"(layers\.(\d+)\.ffn\.experts\.\d+\..*)");
  const std::regex table(R"(layers\.(\d+)\.engram\.embed\.(weight|scale))");
  int64_t dense = 0, experts = 0, engram_rows = 0;
  for (const auto& [name, bytes] : sizes) {
    if (name.rfind("mtp.", 0) == 0) continue;              // DSpark: not run
    if (name.find("bias_vl") != std::string::npos) continue;  // vision only
    if (name == "embed.weight") {
      dense += bytes / 2048;  // one row of [2048, 256]
    } else if (std::regex_match(name, expert)) {
      experts += bytes;  // all 8 experts of all 12 layers; 2 of 8 are read per layer
    } else if (std::regex_match(name, table)) {
      engram_rows += bytes;
    } else {
      dense += bytes;
    }
  }
  EXPECT_EQ(sizes.at("layers.1.engram.embed.weight"), 1362 * 64);
  EXPECT_EQ(sizes.at("layers.4.engram.embed.weight"), 1552 * 64);
  // 6 rows of (64 B codes + 2 B scales) per Engram layer.
  const int64_t engram = 2 * 6 * (64 + 2);
  EXPECT_EQ(engram_rows, (1362 + 1552) * (64 + 2));
  return dense + experts * 2 / 8 + engram;
}

int64_t expected_state_bytes(int64_t len) {
  const int64_t window = 12 * std::min<int64_t>(len, 15) * 66;
  const int64_t vis2 = (len + 1) / 2, vis1 = len + 1;
  const int64_t compressed =
      4 * std::min<int64_t>(8, vis2) * 36 + 6 * std::min<int64_t>(8, vis1) * 36;
  const int64_t keys = 2 * vis2 * 34 + vis1 * 34 + 2 * std::min<int64_t>(24, vis1) * 34;
  const int64_t fixed = 2 * 1024 + 12;
  return window + compressed + keys + fixed;
}

TEST(V41DecodeBytes, MatchesHeaderSumsAndHandCountedState) {
  V41LoadOptions lo;
  lo.state_max_tokens = 128;
  V41RunnerCacheOptions co;
  co.max_seqs = 1;
  co.max_tokens = 512;
  auto r = DeepseekV41Runner::create(model_dir(), lo, "", co);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const int64_t weights = expected_weight_bytes();
  // Sanity of the independent count: the backbone is most of the 17.5 MB file.
  EXPECT_GT(weights, 5'000'000);
  EXPECT_LT(weights, 17'563'036);
  for (int64_t len : {0, 1, 5, 15, 16, 17, 100, 300}) {
    SCOPED_TRACE(len);
    EXPECT_EQ((*r)->decode_bytes_read(len), weights + expected_state_bytes(len));
  }
  // Hand-worked totals for two lengths (state part only), as a check on the formula above.
  EXPECT_EQ(expected_state_bytes(5), 5 * 66 * 12 + (4 * 3 + 6 * 6) * 36 + (2 * 3 + 3 * 6) * 34 + 2060);
  EXPECT_EQ(expected_state_bytes(100), 11880 + 2880 + 3400 + 3434 + 1632 + 2060);
}

}  // namespace
}  // namespace strata
