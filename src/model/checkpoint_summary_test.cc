// summarize_checkpoint on a hand-built checkpoint: FP4 detection rule and totals.
#include "model/checkpoint_summary.h"

#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

namespace strata {
namespace {

namespace fs = std::filesystem;

TEST(CheckpointSummary, CountsFp4AsTwoParamsPerByte) {
  const fs::path dir = fs::path(::testing::TempDir()) /
                       ("strata_summary_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::vector<uint8_t> expert(4 * 16, 0x11);   // I8 [4, 16] = FP4 [4, 32]
  const std::vector<uint8_t> expert_scale(4, 127);   // [4, 1]: one per 32 logical inputs
  const std::vector<uint8_t> plain_i8(6, 1);         // I8 [2, 3], no scale
  const std::vector<uint8_t> odd(4 * 16, 0);         // I8 [4, 16] with a wrong-shaped scale
  const std::vector<uint8_t> odd_scale(4 * 2, 127);  // [4, 2]: not in/32 -> not FP4
  const std::vector<uint8_t> bf16(2 * 10, 0);        // BF16 [10]
  const std::vector<uint8_t> fp8(64 * 64, 0x38);     // F8 [64, 64]
  const std::vector<uint8_t> fp8_scale(4, 127);      // [2, 2]
  Status st = write_safetensors(
      (dir / "model.safetensors").string(),
      {{"e.w1.weight", DType::kI8, {4, 16}, expert},
       {"e.w1.scale", DType::kF8_E8M0, {4, 1}, expert_scale},
       {"ids", DType::kI8, {2, 3}, plain_i8},
       {"odd.weight", DType::kI8, {4, 16}, odd},
       {"odd.scale", DType::kF8_E8M0, {4, 2}, odd_scale},
       {"norm.weight", DType::kBF16, {10}, bf16},
       {"q.weight", DType::kF8_E4M3, {64, 64}, fp8},
       {"q.scale", DType::kF8_E8M0, {2, 2}, fp8_scale}});
  ASSERT_TRUE(st.ok()) << st.to_string();
  auto c = SafetensorsCheckpoint::open(dir.string());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  CheckpointSummary s = summarize_checkpoint(**c);
  EXPECT_EQ(s.num_tensors, 8);
  ASSERT_EQ(s.by_category.count("FP4_E2M1"), 1u);
  EXPECT_EQ(s.by_category.at("FP4_E2M1").tensors, 1);
  EXPECT_EQ(s.by_category.at("FP4_E2M1").params, 128);
  EXPECT_EQ(s.by_category.at("FP4_E2M1").bytes, 64u);
  EXPECT_EQ(s.by_category.at("I8").tensors, 2);     // ids + odd
  EXPECT_EQ(s.by_category.at("I8").params, 6 + 64);
  EXPECT_EQ(s.by_category.at("F8_E8M0").tensors, 3);
  EXPECT_EQ(s.by_category.at("F8_E8M0").params, 4 + 8 + 4);
  EXPECT_EQ(s.by_category.at("BF16").params, 10);
  EXPECT_EQ(s.by_category.at("BF16").bytes, 20u);
  EXPECT_EQ(s.by_category.at("F8_E4M3").params, 4096);
  EXPECT_EQ(s.total_params, 128 + 70 + 16 + 10 + 4096);
  EXPECT_EQ(s.total_bytes, 64u + 4 + 6 + 64 + 8 + 20 + 4096 + 4);
  const std::string table = format_checkpoint_summary(s);
  EXPECT_NE(table.find("total"), std::string::npos);
  EXPECT_NE(table.find("4320"), std::string::npos) << table;  // total params
  fs::remove_all(dir);
}

}  // namespace
}  // namespace strata
