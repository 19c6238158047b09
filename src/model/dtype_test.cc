// Scalar decode rules, checked against values derived by hand from the bit layouts
// (sign/exponent/mantissa as documented in dtype.h; OCP FP8/MX spec tables).
#include "model/dtype.h"

#include <cmath>

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(DType, NamesRoundTrip) {
  const char* names[] = {"F32", "F16", "BF16", "F64", "I64", "I32", "I16",
                         "I8",  "U8",  "BOOL", "F8_E4M3", "F8_E5M2", "F8_E8M0"};
  for (const char* n : names) {
    auto t = dtype_from_string(n);
    ASSERT_TRUE(t.has_value()) << n;
    EXPECT_STREQ(dtype_name(*t), n);
  }
  EXPECT_FALSE(dtype_from_string("F4").has_value());
  EXPECT_FALSE(dtype_from_string("f32").has_value());
  EXPECT_FALSE(dtype_from_string("").has_value());
}

TEST(DType, Sizes) {
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kF64), 8u);
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF16), 2u);
  EXPECT_EQ(dtype_size(DType::kI16), 2u);
  EXPECT_EQ(dtype_size(DType::kI32), 4u);
  EXPECT_EQ(dtype_size(DType::kI8), 1u);
  EXPECT_EQ(dtype_size(DType::kBool), 1u);
  EXPECT_EQ(dtype_size(DType::kF8_E4M3), 1u);
  EXPECT_EQ(dtype_size(DType::kF8_E8M0), 1u);
}

TEST(DType, F16) {
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);  // 1.0101010101b * 2^-2
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7C00)));
  EXPECT_TRUE(std::isinf(f16_to_f32(0xFC00)) && f16_to_f32(0xFC00) < 0);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7E00)));
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
}

TEST(DType, Fp8E4M3) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_f32(0x80)));
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);          // 0 0111 000
  EXPECT_EQ(fp8_e4m3_to_f32(0xB8), -1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x3C), 1.5f);          // 0 0111 100
  EXPECT_EQ(fp8_e4m3_to_f32(0x40), 2.0f);          // 0 1000 000
  EXPECT_EQ(fp8_e4m3_to_f32(0x7E), 448.0f);        // 0 1111 110: max finite
  EXPECT_EQ(fp8_e4m3_to_f32(0xFE), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x78), 256.0f);        // 0 1111 000: exponent 15 is finite
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), 0.015625f);     // 2^-6 smallest normal
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), 0.001953125f);  // 2^-9 smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x07), 0.013671875f);  // 7 * 2^-9
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7F)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0xFF)));
  // No infinities anywhere in the code space, and only the two NaN codes.
  int nans = 0;
  for (int b = 0; b < 256; ++b) {
    float v = fp8_e4m3_to_f32(static_cast<uint8_t>(b));
    EXPECT_FALSE(std::isinf(v)) << b;
    nans += std::isnan(v) ? 1 : 0;
  }
  EXPECT_EQ(nans, 2);
}

TEST(DType, Ue8m0) {
  EXPECT_EQ(ue8m0_to_f32(127), 1.0f);
  EXPECT_EQ(ue8m0_to_f32(128), 2.0f);
  EXPECT_EQ(ue8m0_to_f32(120), 0.0078125f);
  EXPECT_EQ(ue8m0_to_f32(0), std::ldexp(1.0f, -127));
  EXPECT_GT(ue8m0_to_f32(0), 0.0f);
  EXPECT_EQ(ue8m0_to_f32(254), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isnan(ue8m0_to_f32(255)));
}

TEST(DType, Fp4E2M1AllCodes) {
  // OCP MX spec table for E2M1.
  const float expect[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                            -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  for (int n = 0; n < 16; ++n) EXPECT_EQ(fp4_e2m1_to_f32(static_cast<uint8_t>(n)), expect[n]) << n;
  // Only the low nibble is used.
  EXPECT_EQ(fp4_e2m1_to_f32(0xF7), 6.0f);
}

TEST(DType, Bf16) {
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  // 1 + 2^-8 is a tie between 1 and 1+2^-7: rounds to even (1.0).
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3F82);  // 1 + 3*2^-8: tie -> even 1+2^-6
}

// count_nonfinite, checked against the decoders: every code of the 8- and 16-bit formats
// counts iff its decoded value is NaN or infinite.
TEST(DType, CountNonfiniteMatchesTheDecoders) {
  std::vector<uint8_t> b8(256);
  for (int i = 0; i < 256; ++i) b8[i] = static_cast<uint8_t>(i);
  int64_t e4m3 = 0, e8m0 = 0;
  for (int i = 0; i < 256; ++i) {
    e4m3 += !std::isfinite(fp8_e4m3_to_f32(static_cast<uint8_t>(i)));
    e8m0 += !std::isfinite(ue8m0_to_f32(static_cast<uint8_t>(i)));
  }
  EXPECT_EQ(count_nonfinite(DType::kF8_E4M3, b8.data(), 256), e4m3);
  EXPECT_EQ(e4m3, 2);
  EXPECT_EQ(count_nonfinite(DType::kF8_E8M0, b8.data(), 256), e8m0);
  EXPECT_EQ(e8m0, 1);
  std::vector<uint16_t> h(65536);
  for (int i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
  int64_t bf = 0, f16 = 0;
  for (int i = 0; i < 65536; ++i) {
    bf += !std::isfinite(bf16_to_f32(static_cast<uint16_t>(i)));
    f16 += !std::isfinite(f16_to_f32(static_cast<uint16_t>(i)));
  }
  const auto* hb = reinterpret_cast<const uint8_t*>(h.data());
  EXPECT_EQ(count_nonfinite(DType::kBF16, hb, h.size() * 2), bf);
  EXPECT_EQ(count_nonfinite(DType::kF16, hb, h.size() * 2), f16);
  const float f[] = {1.0f, -0.0f, INFINITY, -INFINITY, NAN, 3e38f, 1e-45f};
  EXPECT_EQ(count_nonfinite(DType::kF32, reinterpret_cast<const uint8_t*>(f), sizeof(f)), 3);
  EXPECT_EQ(count_nonfinite(DType::kI32, reinterpret_cast<const uint8_t*>(f), sizeof(f)), 0);
  EXPECT_EQ(count_nonfinite(DType::kU8, b8.data(), 256), 0);
}

}  // namespace
}  // namespace strata
