// Dequantization references: the DeepSeek-V4.1-Flash golden byte vectors (real checkpoint
// bytes with expected floats, testdata/quant/...json) and small hand-derived cases.
#include "model/quant_decode.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace strata {
namespace {

using json = nlohmann::json;

std::string source_dir() {
  const char* env = std::getenv("STRATA_SOURCE_DIR");
  return env ? env : STRATA_SOURCE_DIR;
}

std::vector<uint8_t> from_hex(const std::string& s) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < s.size(); i += 2)
    out.push_back(static_cast<uint8_t>(std::stoul(s.substr(i, 2), nullptr, 16)));
  return out;
}

TensorView view(const std::string& name, DType dt, std::vector<int64_t> shape,
                const std::vector<uint8_t>& bytes) {
  TensorView t;
  t.name = name;
  t.dtype = dt;
  t.shape = std::move(shape);
  t.data = bytes.data();
  t.num_bytes = bytes.size();
  t.file = "<test>";
  return t;
}

json load_golden() {
  const std::string path =
      source_dir() + "/testdata/quant/deepseek-v4.1-flash.quant-golden-vectors.json";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in);
}

TEST(QuantGolden, Fp8E4M3Probe) {
  json g = load_golden();
  const json& p = g.at("fp8_e4m3_probe1");
  // "layers.0.attn.wkv.weight row 0 (block_size 32)": one 32-wide block, one scale.
  std::vector<uint8_t> w = from_hex(p.at("weight_hex_first32").get<std::string>());
  ASSERT_EQ(w.size(), 32u);
  std::vector<uint8_t> s = from_hex(p.at("scale_e8m0_hex").get<std::string>());
  ASSERT_EQ(s.size(), 1u);
  TensorView wv = view("wkv.weight", DType::kF8_E4M3, {1, 32}, w);
  TensorView sv = view("wkv.scale", DType::kF8_E8M0, {1, 1}, s);
  std::vector<float> out(32);
  ASSERT_TRUE(dequantize_row(wv, &sv, 0, BlockSize{32, 32}, out.data()).ok());
  const auto expect = p.at("expected_first8").get<std::vector<double>>();
  ASSERT_EQ(expect.size(), 8u);
  for (size_t i = 0; i < expect.size(); ++i)
    EXPECT_EQ(out[i], static_cast<float>(expect[i])) << "element " << i;
  for (float v : out) EXPECT_TRUE(std::isfinite(v));
}

TEST(QuantGolden, Fp4E2M1Probe) {
  json g = load_golden();
  const json& p = g.at("fp4_e2m1_probe2");
  ASSERT_EQ(p.at("nibble_order").get<std::string>(), "low nibble = lower-indexed element");
  // The FP4 table given in the file.
  const auto table = p.at("fp4_table").get<std::vector<double>>();
  ASSERT_EQ(table.size(), 16u);
  for (int n = 0; n < 16; ++n)
    EXPECT_EQ(fp4_e2m1_to_f32(static_cast<uint8_t>(n)), static_cast<float>(table[n])) << n;

  std::vector<uint8_t> all = from_hex(p.at("weight_hex").get<std::string>());
  const size_t used = p.at("bytes_used").get<size_t>();
  ASSERT_LE(used, all.size());
  std::vector<uint8_t> w(all.begin(), all.begin() + static_cast<long>(used));
  std::vector<uint8_t> s = from_hex(p.at("scale_e8m0_hex").get<std::string>());
  const int64_t block = p.at("test_block_size").get<int64_t>();
  const int64_t cols = static_cast<int64_t>(used) * 2;
  ASSERT_EQ(cols, block);  // one scale covers the probe
  TensorView wv = view("w1.weight", DType::kI8, {1, static_cast<int64_t>(used)}, w);
  TensorView sv = view("w1.scale", DType::kF8_E8M0, {1, 1}, s);
  std::vector<float> out(static_cast<size_t>(cols));
  Status st = dequantize_row(wv, &sv, 0, BlockSize{1, block}, out.data());
  ASSERT_TRUE(st.ok()) << st.to_string();
  const auto expect = p.at("expected_first16").get<std::vector<double>>();
  ASSERT_EQ(expect.size(), static_cast<size_t>(cols));
  for (size_t i = 0; i < expect.size(); ++i)
    EXPECT_EQ(out[i], static_cast<float>(expect[i])) << "element " << i;
}

TEST(QuantGolden, E8m0Rule) {
  json g = load_golden();
  ASSERT_EQ(g.at("e8m0").get<std::string>(), "code c -> 2**(c-127); 255 -> NaN");
  for (int c = 0; c < 255; ++c)
    EXPECT_EQ(ue8m0_to_f32(static_cast<uint8_t>(c)), std::ldexp(1.0f, c - 127)) << c;
  EXPECT_TRUE(std::isnan(ue8m0_to_f32(255)));
}

// FP8 [3, 5] with 2x2 blocks -> scale [2, 3]. Bytes 0x38 = 1.0, 0x40 = 2.0, 0xB8 = -1.0.
TEST(QuantDecode, Fp8BlockScaleIndexing) {
  std::vector<uint8_t> w(15, 0x38);
  w[1 * 5 + 4] = 0x40;  // (1, 4) = 2.0
  w[2 * 5 + 0] = 0xB8;  // (2, 0) = -1.0
  // Scale codes: block (i, j) -> 2^(i*3 + j).
  std::vector<uint8_t> s = {127, 128, 129, 130, 131, 132};
  TensorView wv = view("w", DType::kF8_E4M3, {3, 5}, w);
  TensorView sv = view("s", DType::kF8_E8M0, {2, 3}, s);
  auto all = dequantize(wv, &sv, BlockSize{2, 2});
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  const float expect[15] = {1, 1, 2, 2, 4,   //
                            1, 1, 2, 2, 8,   // (1,4) = 2.0 * 4
                            -8, 8, 16, 16, 32};
  for (int i = 0; i < 15; ++i) EXPECT_EQ((*all)[i], expect[i]) << i;
}

TEST(QuantDecode, Fp8WithF32ScaleAndWithoutScale) {
  std::vector<uint8_t> w = {0x38, 0x3C, 0x40, 0x7E};  // 1, 1.5, 2, 448
  float sc = 0.25f;
  std::vector<uint8_t> s(4);
  std::memcpy(s.data(), &sc, 4);
  TensorView wv = view("w", DType::kF8_E4M3, {2, 2}, w);
  TensorView sv = view("s", DType::kF32, {1, 1}, s);
  float out[2];
  ASSERT_TRUE(dequantize_row(wv, &sv, 1, BlockSize{128, 128}, out).ok());
  EXPECT_EQ(out[0], 0.5f);
  EXPECT_EQ(out[1], 112.0f);
  ASSERT_TRUE(dequantize_row(wv, nullptr, 0, BlockSize{}, out).ok());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 1.5f);
}

// Packed FP4 [2, 64 logical] stored [2, 32] I8, scale [2, 2] (per row, per 32).
TEST(QuantDecode, Fp4NibbleOrderAndGroups) {
  std::vector<uint8_t> w(64, 0x00);
  w[0] = 0x21;        // row 0: col 0 = 0.5 (low nibble 1), col 1 = 1.0 (high nibble 2)
  w[16] = 0xF7;       // row 0: col 32 = 6.0, col 33 = -6.0 (second group)
  w[32 + 31] = 0x9A;  // row 1: col 62 = -1.0 (0xA), col 63 = -0.5 (0x9)
  std::vector<uint8_t> s = {127, 126, 129, 120};  // row0: 1, 0.5; row1: 4, 2^-7
  TensorView wv = view("w", DType::kI8, {2, 32}, w);
  TensorView sv = view("s", DType::kF8_E8M0, {2, 2}, s);
  auto ls = logical_shape(wv, &sv);
  ASSERT_TRUE(ls.ok());
  EXPECT_EQ(ls->rows, 2);
  EXPECT_EQ(ls->cols, 64);
  auto all = dequantize(wv, &sv, kFp4ExpertBlock);
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  const std::vector<float>& v = *all;
  EXPECT_EQ(v[0], 0.5f);
  EXPECT_EQ(v[1], 1.0f);
  EXPECT_EQ(v[2], 0.0f);
  EXPECT_EQ(v[32], 3.0f);   // 6 * 0.5
  EXPECT_EQ(v[33], -3.0f);
  EXPECT_EQ(v[64 + 62], -1.0f / 128);
  EXPECT_EQ(v[64 + 63], -0.5f / 128);
  EXPECT_EQ(v[64 + 0], 0.0f);
}

TEST(QuantDecode, Bf16AndF32Rows) {
  std::vector<uint8_t> b = {0x80, 0x3F, 0x00, 0xC0};  // LE bf16: 1.0, -2.0
  TensorView bv = view("b", DType::kBF16, {2}, b);
  float out[2];
  ASSERT_TRUE(dequantize_row(bv, nullptr, 0, BlockSize{}, out).ok());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  float f[4] = {1.5f, -3.0f, 7.0f, 0.25f};
  std::vector<uint8_t> fb(16);
  std::memcpy(fb.data(), f, 16);
  TensorView fv = view("f", DType::kF32, {2, 2}, fb);
  ASSERT_TRUE(dequantize_row(fv, nullptr, 1, BlockSize{}, out).ok());
  EXPECT_EQ(out[0], 7.0f);
  EXPECT_EQ(out[1], 0.25f);
}

TEST(QuantDecode, Errors) {
  std::vector<uint8_t> w(16, 0x38), s(4, 127), s_wrong(2, 127);
  TensorView wv = view("w", DType::kF8_E4M3, {4, 4}, w);
  TensorView sv = view("s", DType::kF8_E8M0, {2, 2}, s);
  TensorView bad = view("s_bad", DType::kF8_E8M0, {1, 2}, s_wrong);
  float out[4];
  EXPECT_TRUE(dequantize_row(wv, &sv, 3, BlockSize{2, 2}, out).ok());
  Status st = dequantize_row(wv, &bad, 0, BlockSize{2, 2}, out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("s_bad"), std::string::npos) << st.message();
  EXPECT_EQ(dequantize_row(wv, &sv, 4, BlockSize{2, 2}, out).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(dequantize_row(wv, &sv, -1, BlockSize{2, 2}, out).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(dequantize_row(wv, &sv, 0, BlockSize{0, 2}, out).code(),
            StatusCode::kInvalidArgument);
  TensorView iv = view("i", DType::kI8, {4, 4}, w);
  st = dequantize_row(iv, nullptr, 0, BlockSize{}, out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("'i'"), std::string::npos) << st.message();
  TensorView fv = view("f", DType::kF32, {2, 2}, w);
  EXPECT_EQ(dequantize_row(fv, &sv, 0, BlockSize{}, out).code(), StatusCode::kInvalidArgument);
  TensorView lv = view("l", DType::kI64, {2}, w);
  EXPECT_EQ(dequantize_row(lv, nullptr, 0, BlockSize{}, out).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata
