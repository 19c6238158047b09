// Opens the real v41-tiny golden checkpoint (models/deepseek-v41-tiny, a copy of
// /work/shared/golden/v41-tiny) and checks tensors against facts stated in its README and
// config.json: names, dtypes, shapes, the ue8m0 scale rule (scale = 2^ceil(log2(amax/448))
// for FP8, 2^ceil(log2(amax/6)) for FP4) and the weight init scales (std 1/sqrt(fan_in) for
// linear layers, 4/sqrt(fan_in) for expert w1/w3, norm weights 1 + 0.1 N).
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/checkpoint_summary.h"
#include "model/quant_decode.h"
#include "model/safetensors.h"

namespace strata {
namespace {

std::string model_dir() {
  const char* env = std::getenv("STRATA_SOURCE_DIR");
  return std::string(env ? env : STRATA_SOURCE_DIR) + "/models/deepseek-v41-tiny";
}

class GoldenCheckpoint : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto c = SafetensorsCheckpoint::open(model_dir());
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    ckpt_ = std::move(c).value().release();
    std::ifstream in(model_dir() + "/config.json");
    ASSERT_TRUE(in.good());
    auto cfg = nlohmann::json::parse(in);
    auto bs = cfg.at("quantization_config").at("weight_block_size").get<std::vector<int64_t>>();
    ASSERT_EQ(bs.size(), 2u);
    block_ = BlockSize{bs[0], bs[1]};
  }
  static void TearDownTestSuite() {
    delete ckpt_;
    ckpt_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(ckpt_, nullptr); }

  static SafetensorsCheckpoint* ckpt_;
  static BlockSize block_;
};
SafetensorsCheckpoint* GoldenCheckpoint::ckpt_ = nullptr;
BlockSize GoldenCheckpoint::block_;

double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s / static_cast<double>(v.size()));
}

std::string scale_of(const std::string& weight) {
  return weight.substr(0, weight.size() - 7) + ".scale";
}

TEST_F(GoldenCheckpoint, OpensWithExpectedTensors) {
  EXPECT_EQ(block_.out, 32);
  EXPECT_EQ(block_.in, 32);
  // README: vocab 2048, dim 256, q_lora_rank 128; 32x32 FP8 blocks.
  EXPECT_TRUE(ckpt_->get("embed.weight", DType::kBF16, {2048, 256}).ok());
  EXPECT_TRUE(ckpt_->get("head.weight", DType::kBF16, {2048, 256}).ok());
  EXPECT_TRUE(ckpt_->get("layers.0.attn.wq_a.weight", DType::kF8_E4M3, {128, 256}).ok());
  EXPECT_TRUE(ckpt_->get("layers.0.attn.wq_a.scale", DType::kF8_E8M0, {4, 8}).ok());
  // Experts: FP4 packed I8 [moe_inter 128, dim 256 / 2], scale [128, 256 / 32].
  EXPECT_TRUE(ckpt_->get("layers.0.ffn.experts.0.w1.weight", DType::kI8, {128, 128}).ok());
  EXPECT_TRUE(ckpt_->get("layers.0.ffn.experts.0.w1.scale", DType::kF8_E8M0, {128, 8}).ok());
  EXPECT_TRUE(ckpt_->get("layers.0.attn.attn_sink", DType::kF32, {8}).ok());
  // README: mtp.N.embed / mtp.N.head are absent (tied to the main ones).
  EXPECT_FALSE(ckpt_->has("mtp.0.embed.weight"));
  EXPECT_FALSE(ckpt_->has("mtp.0.head.weight"));
  EXPECT_TRUE(ckpt_->has("mtp.0.main_proj.weight"));
}

TEST_F(GoldenCheckpoint, Fp8WeightDecodes) {
  auto w = ckpt_->get("layers.0.attn.wq_a.weight", DType::kF8_E4M3, {128, 256});
  auto s = ckpt_->get("layers.0.attn.wq_a.scale", DType::kF8_E8M0, {4, 8});
  ASSERT_TRUE(w.ok() && s.ok());
  auto v = dequantize(*w, &*s, block_);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  ASSERT_EQ(v->size(), 128u * 256u);
  for (float x : *v) ASSERT_TRUE(std::isfinite(x));
  // Linear init std 1/sqrt(fan_in) = 1/16; FP8 rounding changes it by a few percent.
  EXPECT_NEAR(rms(*v), 1.0 / 16, 0.2 / 16);
  // One row agrees with the whole-matrix decode.
  std::vector<float> row(256);
  ASSERT_TRUE(dequantize_row(*w, &*s, 77, block_, row.data()).ok());
  for (int c = 0; c < 256; ++c) EXPECT_EQ(row[c], (*v)[77 * 256 + c]);
}

// Every FP8 weight: finite, and in every scale block the largest |fp8 code value| lies in
// [224, 448] (scale 2^ceil(log2(amax/448)) puts amax/scale in (224, 448]; rounding to the
// e4m3 grid, spacing 32 there, can land on 224).
TEST_F(GoldenCheckpoint, AllFp8WeightsFollowTheScaleRule) {
  int checked = 0;
  for (const std::string& name : ckpt_->names()) {
    auto w = ckpt_->get(name);
    ASSERT_TRUE(w.ok());
    if (w->dtype != DType::kF8_E4M3) continue;
    auto s = ckpt_->get(scale_of(name));
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    // Engram tables are scaled per row per 32 (README); dense weights per 32x32 block.
    const bool per_row = name.find("engram.embed") != std::string::npos;
    const BlockSize bs = per_row ? BlockSize{1, 32} : block_;
    auto unscaled = dequantize(*w, nullptr, bs);
    auto scaled = dequantize(*w, &*s, bs);
    ASSERT_TRUE(scaled.ok()) << name << ": " << scaled.status().to_string();
    ASSERT_TRUE(unscaled.ok());
    const int64_t rows = w->shape[0], cols = w->shape[1];
    for (int64_t r0 = 0; r0 < rows; r0 += bs.out) {
      for (int64_t c0 = 0; c0 < cols; c0 += bs.in) {
        float amax = 0;
        for (int64_t r = r0; r < std::min(rows, r0 + bs.out); ++r)
          for (int64_t c = c0; c < std::min(cols, c0 + bs.in); ++c)
            amax = std::max(amax, std::fabs((*unscaled)[r * cols + c]));
        ASSERT_GE(amax, 224.0f) << name << " block " << r0 << "," << c0;
        ASSERT_LE(amax, 448.0f) << name << " block " << r0 << "," << c0;
      }
    }
    for (float x : *scaled) ASSERT_TRUE(std::isfinite(x)) << name;
    ++checked;
  }
  // README: 8 per layer (wq_a, wq_b, wkv, wo_a, wo_b, shared w1/w2/w3) x 15 layers (12 + 3
  // DSpark), indexer.wq_b on the 5 index sources, engram wkv + embed on 2 layers, main_proj.
  EXPECT_EQ(checked, 8 * 15 + 5 + 2 * 2 + 1);
}

// Every packed-FP4 expert: in each group of 32 the largest |e2m1 value| is in [3, 6]
// (scale 2^ceil(log2(amax/6))), and the decoded values are finite.
TEST_F(GoldenCheckpoint, AllFp4ExpertsFollowTheScaleRule) {
  int checked = 0;
  for (const std::string& name : ckpt_->names()) {
    auto w = ckpt_->get(name);
    ASSERT_TRUE(w.ok());
    if (w->dtype != DType::kI8) continue;
    auto s = ckpt_->get(scale_of(name));
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    auto v = dequantize(*w, &*s, kFp4ExpertBlock);
    ASSERT_TRUE(v.ok()) << name << ": " << v.status().to_string();
    const int64_t rows = w->shape[0], cols = w->shape[1] * 2;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t g = 0; g < cols / 32; ++g) {
        const float sc = ue8m0_to_f32(s->data[r * (cols / 32) + g]);
        float amax = 0;
        for (int64_t c = g * 32; c < g * 32 + 32; ++c) {
          const float x = (*v)[r * cols + c];
          ASSERT_TRUE(std::isfinite(x)) << name;
          amax = std::max(amax, std::fabs(x) / sc);
        }
        ASSERT_GE(amax, 3.0f) << name << " row " << r << " group " << g;
        ASSERT_LE(amax, 6.0f) << name << " row " << r << " group " << g;
      }
    }
    ++checked;
  }
  // 12 layers x 8 experts x 3 + 3 DSpark stages x 4 experts x 3 (README / config).
  EXPECT_EQ(checked, 12 * 8 * 3 + 3 * 4 * 3);
}

TEST_F(GoldenCheckpoint, ExpertAndNormInitScales) {
  auto w = ckpt_->get("layers.3.ffn.experts.5.w1.weight", DType::kI8, {128, 128});
  auto s = ckpt_->get("layers.3.ffn.experts.5.w1.scale", DType::kF8_E8M0, {128, 8});
  ASSERT_TRUE(w.ok() && s.ok());
  auto v = dequantize(*w, &*s, kFp4ExpertBlock);
  ASSERT_TRUE(v.ok());
  // Expert w1 std 4/sqrt(256) = 0.25; FP4 rounding error is larger than FP8's.
  EXPECT_NEAR(rms(*v), 0.25, 0.05);
  auto n = ckpt_->get("layers.0.attn_norm.weight", DType::kBF16, {256});
  ASSERT_TRUE(n.ok());
  auto nv = dequantize(*n, nullptr, BlockSize{});
  ASSERT_TRUE(nv.ok());
  double mean = 0;
  for (float x : *nv) mean += x;
  mean /= static_cast<double>(nv->size());
  EXPECT_NEAR(mean, 1.0, 0.05);  // 1 + 0.1 N over 256 entries
}

TEST_F(GoldenCheckpoint, Summary) {
  CheckpointSummary s = summarize_checkpoint(*ckpt_);
  EXPECT_EQ(s.num_tensors, static_cast<int64_t>(ckpt_->names().size()));
  ASSERT_TRUE(s.by_category.count("FP4_E2M1"));
  EXPECT_EQ(s.by_category.count("I8"), 0u);  // every I8 tensor is an FP4 expert
  const DTypeCount& fp4 = s.by_category.at("FP4_E2M1");
  EXPECT_EQ(fp4.tensors, 12 * 8 * 3 + 3 * 4 * 3);
  // Each expert matrix is 128 x 256 logical values (moe_inter_dim x dim).
  EXPECT_EQ(fp4.params, int64_t{12 * 8 * 3 + 3 * 4 * 3} * 128 * 256);
  EXPECT_EQ(fp4.bytes, uint64_t{12 * 8 * 3 + 3 * 4 * 3} * 128 * 128);
  // The data section holds every tensor exactly once: bytes add up to the file size minus
  // the header.
  std::ifstream f(model_dir() + "/model.safetensors", std::ios::binary | std::ios::ate);
  const uint64_t file_size = static_cast<uint64_t>(f.tellg());
  f.seekg(0);
  uint8_t len[8];
  f.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(len[i]) << (8 * i);
  EXPECT_EQ(s.total_bytes, file_size - 8 - n);
  const std::string table = format_checkpoint_summary(s);
  EXPECT_NE(table.find("FP4_E2M1"), std::string::npos) << table;
}

}  // namespace
}  // namespace strata
