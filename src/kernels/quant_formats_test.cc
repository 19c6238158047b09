// Tests for the serving-format codecs. Expectations are hand-derived (spec §2.1 rules worked
// by hand), exhaustive code round trips, or agreement of two independent algorithms (the byte
// encoder vs the value-rounding QDQ path).
#include "kernels/quant_formats.h"

#include "kernels/cpu_features.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace strata::quant {
namespace {

TEST(QuantFormats, Pow2Ceil) {
  EXPECT_EQ(pow2_ceil(1.0f), 1.0f);
  EXPECT_EQ(pow2_ceil(1.5f), 2.0f);
  EXPECT_EQ(pow2_ceil(0.75f), 1.0f);
  EXPECT_EQ(pow2_ceil(1.0f / 448.0f), 1.0f / 256.0f);  // 2^-8.81 -> 2^-8
  EXPECT_EQ(pow2_ceil(0.25f), 0.25f);
}

TEST(QuantFormats, E4m3CodesRoundTripExhaustively) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(e4m3_decode(static_cast<uint8_t>(c))));
      continue;
    }
    float v = e4m3_decode(static_cast<uint8_t>(c));
    if (c == 0x80) {  // -0
      EXPECT_EQ(e4m3_encode(v), 0x80);
      continue;
    }
    EXPECT_EQ(e4m3_encode(v), c) << "code " << c << " value " << v;
    EXPECT_EQ(e4m3_round(v), v);
  }
  // Hand-checked values: 448 = 0x7E, 2^-9 = 0x01 (smallest subnormal), 1.0 = 0x38.
  EXPECT_EQ(e4m3_encode(448.f), 0x7e);
  EXPECT_EQ(e4m3_encode(1000.f), 0x7e);
  EXPECT_EQ(e4m3_encode(std::ldexp(1.f, -9)), 0x01);
  EXPECT_EQ(e4m3_encode(1.0f), 0x38);
  EXPECT_EQ(e4m3_decode(0x38), 1.0f);
  // Ties: 1.0625 is halfway between 1.0 (mantissa 0) and 1.125 (mantissa 1) -> even: 1.0.
  EXPECT_EQ(e4m3_round(1.0625f), 1.0f);
  EXPECT_EQ(e4m3_round(1.1875f), 1.25f);  // between 1.125 (odd) and 1.25 (even)
  EXPECT_EQ(e4m3_round(76.8f), 80.f);     // spacing 8 in [64,128)
}

TEST(QuantFormats, E4m3EncoderAgreesWithValueRounding) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-12.f, 9.f);
  for (int i = 0; i < 200000; ++i) {
    float x = std::ldexp(1.0f + (rng() % 1000000) / 1e6f, static_cast<int>(u(rng)));
    if (rng() & 1) x = -x;
    if (std::fabs(x) > 448.f) continue;
    ASSERT_EQ(e4m3_decode(e4m3_encode(x)), e4m3_round(x)) << x;
  }
}

TEST(QuantFormats, E2m1TieTable) {
  // Spec §2.1: 0.75->1.0, 1.75->2.0, 3.5->4.0; 0.25->0, 1.25->1, 2.5->2, 5->4.
  struct {
    float in, out;
  } cases[] = {{0.75f, 1.f}, {1.75f, 2.f}, {3.5f, 4.f}, {0.25f, 0.f}, {1.25f, 1.f},
               {2.5f, 2.f},  {5.f, 4.f},   {5.1f, 6.f}, {6.f, 6.f},   {0.26f, 0.5f},
               {-2.6f, -3.f}, {-0.1f, -0.f}};
  for (auto c : cases) {
    EXPECT_EQ(e2m1_decode(e2m1_encode(c.in)), c.out) << c.in;
    EXPECT_EQ(e2m1_round(c.in), c.out) << c.in;
  }
  for (int c = 0; c < 16; ++c) {
    float v = e2m1_decode(static_cast<uint8_t>(c));
    if (c == 8) continue;  // -0
    EXPECT_EQ(e2m1_encode(v), c);
  }
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-6.f, 6.f);
  for (int i = 0; i < 100000; ++i) {
    float x = u(rng);
    ASSERT_EQ(e2m1_decode(e2m1_encode(x)), e2m1_round(x)) << x;
  }
}

// The encoder against an independent definition: the nearest E2M1 magnitude by distance, a
// tie going to the even code, saturating at 6; checked on every 97th float bit pattern in
// [0, 8], on every midpoint and its neighbours one ulp away, with both signs, and on NaN.
TEST(QuantFormats, E2m1EncoderIsNearestWithTiesToEven) {
  const float mags[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  auto reference = [&](float x) {
    const float m = std::min(std::fabs(x), 6.0f);  // saturation
    int best = 0;
    for (int c = 1; c < 8; ++c) {
      const float d = std::fabs(m - mags[c]), db = std::fabs(m - mags[best]);
      if (d < db || (d == db && c % 2 == 0)) best = c;
    }
    return static_cast<uint8_t>(best | (std::signbit(x) ? 8 : 0));
  };
  std::vector<float> xs;
  uint32_t top;
  const float eight = 8.0f;
  std::memcpy(&top, &eight, 4);
  for (uint32_t b = 0; b <= top; b += 97) {
    float f;
    std::memcpy(&f, &b, 4);
    xs.push_back(f);
  }
  for (float mid : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f})
    for (float x : {std::nextafter(mid, 0.f), mid, std::nextafter(mid, 9.f)}) xs.push_back(x);
  xs.push_back(1e30f);
  for (float x : xs) {
    ASSERT_EQ(e2m1_encode(x), reference(x)) << x;
    ASSERT_EQ(e2m1_encode(-x), reference(-x)) << -x;
  }
  EXPECT_EQ(e2m1_encode(std::nanf("")) & 7, 0);
}

TEST(QuantFormats, Fp8BlockHandExample) {
  // Block of 32: amax 1.0 -> s = pow2ceil(1/448) = 2^-8; 0.3/s = 76.8 -> 80 -> 0.3125.
  std::vector<float> x(32, 0.f);
  x[0] = 1.0f;
  x[1] = 0.3f;
  x[2] = -0.001f;  // /s = -0.256 -> subnormal grid 2^-9*256=0.5 spacing? (e4m3 near 0.25: step 2^-5)
  std::vector<uint8_t> codes(32), scales(1);
  fp8_ue8m0_quantize(x.data(), 32, 32, codes.data(), scales.data());
  EXPECT_EQ(scales[0], 127 - 8);
  std::vector<float> y(32);
  fp8_ue8m0_dequantize(codes.data(), scales.data(), 32, 32, y.data());
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 0.3125f);
  // -0.256 in [0.25, 0.5): spacing 2^-5 -> -0.25 ; times 2^-8 -> -2^-10.
  EXPECT_EQ(y[2], -std::ldexp(1.f, -10));
  EXPECT_EQ(y[3], 0.f);
}

TEST(QuantFormats, Fp4E4m3HandExample) {
  // Block of 16, amax 3.0 -> s = e4m3(0.5) = 0.5; 1.3/0.5 = 2.6 -> 3 -> 1.5; 0.6/0.5=1.2 -> 1.0 -> 0.5.
  std::vector<float> x(16, 0.f);
  x[0] = 3.0f;
  x[1] = 1.3f;
  x[2] = 0.6f;
  x[3] = -0.13f;  // /0.5 = -0.26 -> -0.5 -> -0.25
  std::vector<uint8_t> packed(8), scales(1);
  fp4_e4m3_quantize(x.data(), 16, 16, packed.data(), scales.data());
  EXPECT_EQ(e4m3_decode(scales[0]), 0.5f);
  std::vector<float> y(16);
  fp4_e4m3_dequantize(packed.data(), scales.data(), 16, 16, y.data());
  EXPECT_EQ(y[0], 3.0f);
  EXPECT_EQ(y[1], 1.5f);
  EXPECT_EQ(y[2], 0.5f);
  EXPECT_EQ(y[3], -0.25f);
  // Even element in the low nibble: x[0] = 3.0/0.5 = 6 -> code 7; x[1] -> 3 -> code 5.
  EXPECT_EQ(packed[0], 0x57);
  // Non-power-of-two scale: amax 1.0 -> 1/6 = 0.1667 -> e4m3 0.171875 (step 2^-6 * 1/8... in
  // [0.125, 0.25) spacing 2^-6 = 0.015625: 0.1667/0.015625 = 10.67 -> 11 -> 0.171875).
  std::vector<float> z(16, 0.f);
  z[0] = 1.0f;
  fp4_e4m3_quantize(z.data(), 16, 16, packed.data(), scales.data());
  EXPECT_EQ(e4m3_decode(scales[0]), 0.171875f);
}

TEST(QuantFormats, Fp4Ue8m0HandExample) {
  // amax 3 -> s = pow2ceil(0.5) = 0.5; 1.1/0.5 = 2.2 -> 2 -> 1.0.
  std::vector<float> x(32, 0.f);
  x[0] = 3.0f;
  x[5] = 1.1f;
  std::vector<uint8_t> packed(16), scales(1);
  fp4_ue8m0_quantize(x.data(), 32, 32, packed.data(), scales.data());
  EXPECT_EQ(scales[0], 126);
  std::vector<float> y(32);
  fp4_ue8m0_dequantize(packed.data(), scales.data(), 32, 32, y.data());
  EXPECT_EQ(y[0], 3.0f);
  EXPECT_EQ(y[5], 1.0f);
}

// Byte codecs decode to exactly the QDQ values (computed by the independent value path).
TEST(QuantFormats, CodecsEqualQdqOnRandomRows) {
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.f, 1.f);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 512;
    float mag = std::ldexp(1.f, static_cast<int>(rng() % 30) - 15);
    std::vector<float> x(n);
    for (auto& v : x) v = g(rng) * mag;
    if (trial % 7 == 0) x[rng() % n] = 0.f;
    std::vector<float> y(n), ref = x;
    std::vector<uint8_t> codes(n), sc(n / 16);
    fp8_ue8m0_quantize(x.data(), n, 32, codes.data(), sc.data());
    fp8_ue8m0_dequantize(codes.data(), sc.data(), n, 32, y.data());
    fp8_ue8m0_qdq(ref.data(), n, 32);
    for (int i = 0; i < n; ++i) ASSERT_EQ(y[i], ref[i]) << "fp8 " << i;
    ref = x;
    fp4_e4m3_quantize(x.data(), n, 16, codes.data(), sc.data());
    fp4_e4m3_dequantize(codes.data(), sc.data(), n, 16, y.data());
    fp4_e4m3_qdq(ref.data(), n, 16);
    for (int i = 0; i < n; ++i) ASSERT_EQ(y[i], ref[i]) << "fp4/e4m3 " << i;
    ref = x;
    fp4_ue8m0_quantize(x.data(), n, 32, codes.data(), sc.data());
    fp4_ue8m0_dequantize(codes.data(), sc.data(), n, 32, y.data());
    fp4_ue8m0_qdq(ref.data(), n, 32);
    for (int i = 0; i < n; ++i) ASSERT_EQ(y[i], ref[i]) << "fp4/ue8m0 " << i;
  }
}

TEST(QuantFormats, Fp8DequantizeEveryCodeAndScaleBitExact) {
  // 256 codes (NaN codes included) in blocks of 64, for scales across the UE8M0 range: the
  // vector path (16 codes at a time) must give e4m3_decode(c) * s bit for bit, and fall back
  // where it cannot (NaN codes, huge or NaN scales).
  std::vector<uint8_t> codes(256);
  for (int c = 0; c < 256; ++c) codes[c] = static_cast<uint8_t>((c * 37) & 0xFF);  // a permutation
  for (bool avx512 : {true, false})  // the AVX-512 path (where the CPU has it), the F16C path
  for (int e : {0, 1, 100, 120, 127, 135, 226, 227, 254, 255}) {
    const std::vector<uint8_t> scales(4, static_cast<uint8_t>(e));
    std::vector<float> got(256);
    kernels::set_avx512_enabled(avx512);
    fp8_ue8m0_dequantize(codes.data(), scales.data(), 256, 64, got.data());
    kernels::set_avx512_enabled(true);
    for (int i = 0; i < 256; ++i) {
      const float want = e4m3_decode(codes[i]) * ue8m0_decode(static_cast<uint8_t>(e));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got[i])) << "code " << int(codes[i]) << " e " << e;
      } else {
        EXPECT_EQ(std::memcmp(&got[i], &want, 4), 0) << "code " << int(codes[i]) << " e " << e;
      }
    }
  }
}

TEST(QuantFormats, QdqIsIdempotent) {
  std::mt19937 rng(4);
  std::normal_distribution<float> g(0.f, 3.f);
  std::vector<float> x(256);
  for (auto& v : x) v = g(rng);
  auto a = x;
  fp8_ue8m0_qdq(a.data(), 256, 32);
  auto b = a;
  fp8_ue8m0_qdq(b.data(), 256, 32);
  EXPECT_EQ(a, b);
  a = x;
  fp4_e4m3_qdq(a.data(), 256, 16);
  b = a;
  fp4_e4m3_qdq(b.data(), 256, 16);
  EXPECT_EQ(a, b);
}

// FP4 dequantize: every byte (both nibbles) under E4M3 and UE8M0 scales (normal, subnormal,
// negative, zero, NaN), on the scalar path, the AVX2 path (8 values at a time) and the
// AVX-512 path (16 at a time, then AVX2: blocks of 16, 32 and 24 = 16 + an 8-wide tail), equals e2m1_decode(nibble) * scale bit for bit.
TEST(QuantFormats, Fp4DequantizeEveryCodeAndScaleBitExactOnEveryIsa) {
  const int n = 768;  // a multiple of 16, 24 and 32; n / 2 >= 256 bytes
  std::vector<uint8_t> packed(n / 2);
  for (int c = 0; c < n / 2; ++c) packed[c] = static_cast<uint8_t>((c * 101 + 7) & 0xFF);
  for (int mode : {0, 1, 2}) {  // scalar, AVX2, AVX-512 (where the CPU has it)
    const kernels::Isa isa = mode == 0 ? kernels::Isa::kScalar : kernels::Isa::kAvx2;
    kernels::force_isa(isa);
    kernels::set_avx512_enabled(mode == 2);
    for (int sb : {0x00, 0x01, 0x07, 0x38, 0x77, 0x7E, 0x7F, 0x80, 0xB5, 0xFE}) {
      for (int block : {16, 32, 24}) {
        const std::vector<uint8_t> sc(n / block, static_cast<uint8_t>(sb));
        // each scale format: its dequantizer and the scale byte's value
        const bool e4m3_scale[] = {true, false};
        for (bool e4m3 : e4m3_scale) {
          std::vector<float> got(n);
          (e4m3 ? fp4_e4m3_dequantize : fp4_ue8m0_dequantize)(packed.data(), sc.data(), n, block,
                                                               got.data());
          const uint8_t b = static_cast<uint8_t>(sb);
          const float scale = e4m3 ? e4m3_decode(b) : ue8m0_decode(b);
          for (int i = 0; i < n; ++i) {
            const uint8_t nib = (i % 2 == 0) ? (packed[i / 2] & 0xF) : (packed[i / 2] >> 4);
            const float want = e2m1_decode(nib) * scale;
            ASSERT_EQ(std::memcmp(&got[i], &want, 4), 0)
                << (e4m3 ? "e4m3" : "ue8m0") << " scale " << sb << " block " << block << " i "
                << i << " isa " << int(isa);
          }
        }
      }
    }
  }
  kernels::force_isa(kernels::Isa::kAvx2);
  kernels::set_avx512_enabled(true);
}

// The one scalar codec: round = decode(encode) everywhere, and magnitudes past the grid
// saturate (the former nearest-value encoder picked code 6, 4.0, for |x| >= 2^25: the
// distances to 4 and 6 rounded equal).
TEST(QuantCodec, RoundIsDecodeOfEncodeAndFp4Saturates) {
  for (uint64_t u = 0; u < (1ull << 32); u += 9973) {
    const uint32_t b = static_cast<uint32_t>(u);
    float x;
    std::memcpy(&x, &b, 4);
    if (x != x) continue;
    const float r4 = e4m3_round(x), d4 = e4m3_decode(e4m3_encode(x));
    ASSERT_EQ(std::memcmp(&r4, &d4, 4), 0) << x;
    const float r2 = e2m1_round(x), d2 = e2m1_decode(e2m1_encode(x));
    ASSERT_EQ(std::memcmp(&r2, &d2, 4), 0) << x;
  }
  for (float big : {6.5f, 100.0f, 0x1p25f, 3e38f}) {
    EXPECT_EQ(e2m1_encode(big), 7) << big;
    EXPECT_EQ(e2m1_encode(-big), 15) << big;
    EXPECT_EQ(e4m3_encode(big * 1000), 0x7e) << big;
  }
}

}  // namespace
}  // namespace strata::quant
