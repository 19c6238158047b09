// Tests for kernels/act_quant: expected values are hand-derived from the E4M3 / E2M1 / UE8M0
// definitions and the reference rules quoted in act_quant.h.
#include "kernels/act_quant.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu_features.h"

namespace strata::kernels {
namespace {

TEST(ActQuant, Pow2CeilScale) {
  EXPECT_EQ(quant::pow2_ceil(1.0f), 1.0f);
  EXPECT_EQ(quant::pow2_ceil(1.5f), 2.0f);
  EXPECT_EQ(quant::pow2_ceil(0.75f), 1.0f);
  EXPECT_EQ(quant::pow2_ceil(3.0f), 4.0f);
  EXPECT_EQ(quant::pow2_ceil(0x1p-10f), 0x1p-10f);
  EXPECT_EQ(quant::pow2_ceil(std::nextafter(0x1p-10f, 1.0f)), 0x1p-9f);
}

TEST(ActQuant, E4m3EncodeRoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(quant::e4m3_encode(0.0f), 0x00);
  EXPECT_EQ(quant::e4m3_encode(-0.0f), 0x80);
  EXPECT_EQ(quant::e4m3_encode(1.0f), 0x38);    // exp 7 (bias 7), mant 0
  EXPECT_EQ(quant::e4m3_encode(-1.0f), 0xB8);
  EXPECT_EQ(quant::e4m3_encode(448.0f), 0x7E);  // 1.75 * 2^8
  EXPECT_EQ(quant::e4m3_encode(500.0f), 0x7E);  // saturates (satfinite)
  EXPECT_EQ(quant::e4m3_encode(-1e9f), 0xFE);
  EXPECT_EQ(quant::e4m3_encode(240.0f), 0x77);  // 1.875 * 2^7
  EXPECT_EQ(quant::e4m3_encode(0x1p-9f), 0x01);  // smallest subnormal
  EXPECT_EQ(quant::e4m3_encode(0x1p-6f), 0x08);  // smallest normal
  EXPECT_EQ(quant::e4m3_encode(7.0f * 0x1p-9f), 0x07);  // largest subnormal
  // ties to even
  EXPECT_EQ(quant::e4m3_round(1.0625f), 1.0f);     // between 1.0 (m0) and 1.125 (m1)
  EXPECT_EQ(quant::e4m3_round(1.1875f), 1.25f);    // between 1.125 (m1) and 1.25 (m2)
  EXPECT_EQ(quant::e4m3_round(232.0f), 224.0f);    // between 224 (m6) and 240 (m7)
  EXPECT_EQ(quant::e4m3_round(0x1p-10f), 0.0f);    // half the smallest subnormal -> 0 (even)
  EXPECT_EQ(quant::e4m3_round(3.0f * 0x1p-10f), 2.0f * 0x1p-9f);  // 1.5 subnormal steps -> 2
  EXPECT_EQ(quant::e4m3_round(0.3f), 0.3125f);     // 1.2*2^-2 -> 1.25*2^-2
  // rounding up across a binade
  EXPECT_EQ(quant::e4m3_round(1.96875f), 2.0f);    // 1.96875 = 1 + 7.75/8 -> 2.0
  EXPECT_TRUE(std::isnan(quant::e4m3_round(NAN)));
}

TEST(ActQuant, E2m1RoundsTiesToEvenCode) {
  EXPECT_EQ(quant::e2m1_round(0.25f), 0.0f);
  EXPECT_EQ(quant::e2m1_round(0.75f), 1.0f);
  EXPECT_EQ(quant::e2m1_round(1.25f), 1.0f);
  EXPECT_EQ(quant::e2m1_round(1.75f), 2.0f);
  EXPECT_EQ(quant::e2m1_round(2.5f), 2.0f);
  EXPECT_EQ(quant::e2m1_round(3.5f), 4.0f);
  EXPECT_EQ(quant::e2m1_round(5.0f), 4.0f);
  EXPECT_EQ(quant::e2m1_round(5.01f), 6.0f);
  EXPECT_EQ(quant::e2m1_round(-2.6f), -3.0f);
  EXPECT_EQ(quant::e2m1_encode(-0.0f), 0x8);
  EXPECT_EQ(quant::e2m1_encode(6.0f), 0x7);
  EXPECT_EQ(quant::e2m1_encode(-6.0f), 0xF);
  EXPECT_EQ(quant::e2m1_decode(0xB), -1.5f);
}

TEST(ActQuant, Fp8BlockScaleAndCodes) {
  // block of 4: amax 3 -> 3*f32(1/448) = 0.0066964 -> 2^-7
  std::vector<float> x = {1.0f, -3.0f, 0.5f, 0.30078125f /* bf16(0.3) */};
  std::vector<uint8_t> codes(4);
  std::vector<float> vals(4), s(1);
  act_quant_fp8(x.data(), 1, 4, 4, ScaleFmt::kUe8m0, codes.data(), vals.data(), s.data());
  EXPECT_EQ(s[0], 0x1p-7f);
  EXPECT_EQ(vals[0], 128.0f);
  EXPECT_EQ(vals[1], -384.0f);
  EXPECT_EQ(vals[2], 64.0f);
  EXPECT_EQ(vals[3], 40.0f);  // 38.5 = 1.203125*32 -> 1.25*32
  EXPECT_EQ(codes[0], 0x70);  // 128 = 2^7: exp field 14, mant 0
  EXPECT_EQ(codes[1], 0xFC);  // -384 = -1.5*2^8: sign, exp 15, mant 4
  // QDQ
  act_qdq_fp8(x.data(), 1, 4, 4, ScaleFmt::kUe8m0);
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_EQ(x[1], -3.0f);
  EXPECT_EQ(x[3], 0.3125f);
}

TEST(ActQuant, Fp8ZeroBlockUsesAmaxFloorAndPlainScaleMode) {
  std::vector<float> z(8, 0.0f), s(2), v(8);
  act_quant_fp8(z.data(), 1, 8, 4, ScaleFmt::kUe8m0, nullptr, v.data(), s.data());
  // 1e-4 * f32(1/448) = 2.23e-7 -> 2^-22 (2^-22 = 2.38e-7)
  EXPECT_EQ(s[0], 0x1p-22f);
  EXPECT_EQ(v[0], 0.0f);
  std::vector<float> x = {448.0f, 1.0f, 0.0f, 0.0f};
  act_quant_fp8(x.data(), 1, 4, 4, ScaleFmt::kNone, nullptr, v.data(), s.data());
  EXPECT_EQ(s[0], 448.0f * static_cast<float>(1.0 / 448.0));
}

TEST(ActQuant, Fp8RowsAreIndependent) {
  std::vector<float> x = {1.0f, 2.0f, 100.0f, 0.5f};  // 2 rows of 2, block 2
  std::vector<float> s(2), v(4);
  act_quant_fp8(x.data(), 2, 2, 2, ScaleFmt::kUe8m0, nullptr, v.data(), s.data());
  EXPECT_EQ(s[0], 0x1p-7f);  // 2/448 = 0.00446 -> 2^-7
  EXPECT_EQ(s[1], 0.25f);    // 100/448 = 0.223 -> 2^-2
  EXPECT_EQ(v[1], 256.0f);
  EXPECT_EQ(v[2], 384.0f);  // 400 = 1.5625*2^8: mantissa 4.5/8 ties to even 4 -> 1.5*2^8
  EXPECT_EQ(v[3], 2.0f);
}

TEST(ActQuant, Fp4E8m0Mode) {
  // amax 6: 6*f32(1/6) rounds to 1.0 -> scale 1
  std::vector<float> x = {6.0f, 1.0f, 0.75f, -0.25f};
  std::vector<float> s(1), v(4);
  std::vector<uint8_t> packed(2, 0);
  act_quant_fp4(x.data(), 1, 4, 4, Fp4ScaleFmt::kE8M0, packed.data(), v.data(), s.data());
  EXPECT_EQ(s[0], 1.0f);
  EXPECT_EQ(v[0], 6.0f);
  EXPECT_EQ(v[1], 1.0f);
  EXPECT_EQ(v[2], 1.0f);
  EXPECT_EQ(v[3], 0.0f);
  EXPECT_TRUE(std::signbit(v[3]));
  EXPECT_EQ(packed[0], 0x27);  // low nibble = element 0 (6.0 -> 7), high = element 1 (1.0 -> 2)
  EXPECT_EQ(packed[1], 0x82);  // element 2 (1.0 -> 2), element 3 (-0 -> 8)
  // amax 7: 7/6 -> scale 2; 7/2 = 3.5 -> 4 -> QDQ 8
  std::vector<float> y = {7.0f, 1.0f, 0.0f, 0.0f};
  act_qdq_fp4(y.data(), 1, 4, 4, Fp4ScaleFmt::kE8M0);
  EXPECT_EQ(y[0], 8.0f);
  EXPECT_EQ(y[1], 1.0f);  // 1/2 = 0.5 is an E2M1 value -> 0.5*2 = 1
}

TEST(ActQuant, Fp4E4m3Mode) {
  // amax 7: 7/6 = 1.1667 -> e4m3 1.125 -> scale 1.125
  std::vector<float> x = {7.0f, 1.0f, 2.5f, 0.0f};
  std::vector<float> s(1), v(4);
  act_quant_fp4(x.data(), 1, 4, 4, Fp4ScaleFmt::kE4M3, nullptr, v.data(), s.data());
  EXPECT_EQ(s[0], 1.125f);
  EXPECT_EQ(v[0], 6.0f);  // 6.22 clamped to 6
  EXPECT_EQ(v[1], 1.0f);  // 0.889 -> 1
  EXPECT_EQ(v[2], 2.0f);  // 2.222 -> 2
  act_qdq_fp4(x.data(), 1, 4, 4, Fp4ScaleFmt::kE4M3);
  EXPECT_EQ(x[0], 6.75f);
  EXPECT_EQ(x[1], 1.125f);
  EXPECT_EQ(x[2], 2.25f);
  // all-zero group: amax floor 6*2^-9 -> scale 2^-9
  std::vector<float> z(4, 0.0f);
  act_quant_fp4(z.data(), 1, 4, 4, Fp4ScaleFmt::kE4M3, nullptr, v.data(), s.data());
  EXPECT_EQ(s[0], 0x1p-9f);
}

TEST(ActQuant, Bf16Helpers) {
  std::vector<float> x = {1.00390625f /* 1 + 2^-8: tie -> 1.0 */, 1.01171875f /* tie -> 1.015625 */};
  round_bf16_inplace(x.data(), 2);
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_EQ(x[1], 1.015625f);
  std::vector<uint16_t> b(2);
  f32_to_bf16_array(x.data(), 2, b.data());
  EXPECT_EQ(b[0], 0x3F80);
  std::vector<float> back(2);
  bf16_to_f32_array(b.data(), 2, back.data());
  EXPECT_EQ(back[1], 1.015625f);
}

}  // namespace
}  // namespace strata::kernels

namespace strata::kernels {
namespace {

// Independent statement of E4M3 (fn) rounding: the nearest of the 127 finite non-negative
// code values by exhaustive search, ties to the even code, saturating at 448.
uint8_t nearest_e4m3_code(float a) {
  auto val = [](int c) {
    const int e = (c >> 3) & 15, m = c & 7;
    return e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7);
  };
  if (a >= 448.0f) return 0x7e;
  int best = 0;
  double bd = 1e30;
  for (int c = 0; c <= 0x7e; ++c) {
    const double d = std::fabs(static_cast<double>(a) - val(c));
    if (d < bd || (d == bd && (c & 1) == 0)) {
      bd = d;
      best = c;
    }
  }
  return static_cast<uint8_t>(best);
}

TEST(ActQuant, E4m3EncodeMatchesExhaustiveNearest) {
  std::vector<float> xs;
  // Every code value, every midpoint between neighbours, and one f32 ulp either side.
  std::vector<float> vals;
  for (int c = 0; c <= 0x7e; ++c) {
    const int e = (c >> 3) & 15, m = c & 7;
    vals.push_back(e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7));
  }
  for (size_t i = 0; i + 1 < vals.size(); ++i) {
    const float mid = (vals[i] + vals[i + 1]) / 2;  // exact in f32
    for (float v : {vals[i], mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) xs.push_back(v);
  }
  // A sweep over f32 bit patterns in [0, 460].
  for (uint32_t b = 0; b < 0x43E60000u; b += 9973) {
    float f;
    std::memcpy(&f, &b, 4);
    xs.push_back(f);
  }
  for (float a : xs)
    for (float x : {a, -a}) {
      const uint8_t want = static_cast<uint8_t>(nearest_e4m3_code(std::fabs(x)) | (std::signbit(x) ? 0x80 : 0));
      ASSERT_EQ(quant::e4m3_encode(x), want) << "x=" << x;
    }
}

}  // namespace
}  // namespace strata::kernels

namespace strata::kernels {
namespace {

// The AVX-512 form of act_quant_fp8 (q_vals only) and act_qdq_fp8 gives the scalar loops'
// bits on values spanning every E4M3 binade, the subnormal range, exact rounding ties, ±0,
// saturation, zero blocks and NaN blocks (which fall back to the scalar loop).
TEST(ActQuant, Fp8VectorFormMatchesScalarBits) {
  std::mt19937 g(5);
  std::uniform_real_distribution<float> e(-24.0f, 12.0f);
  const int64_t rows = 3, cols = 1024, block = 32;
  std::vector<float> x(rows * cols);
  for (size_t i = 0; i < x.size(); ++i) {
    float v = std::exp2(e(g)) * ((g() & 1) ? -1.0f : 1.0f);
    switch (i % 11) {
      case 0: v = 0.0f; break;
      case 1: v = -0.0f; break;
      case 2: v = 1.0625f * std::exp2(static_cast<float>(g() % 12) - 6.0f); break;  // ties
      default: break;
    }
    if (i % 97 == 3) v = 1e9f;  // a few blocks with one huge value
    x[i] = round_bf16(v);
  }
  for (int i = 64; i < 96; ++i) x[i] = 0.0f;         // zero block
  x[200] = std::numeric_limits<float>::quiet_NaN();  // NaN block -> scalar fallback
  auto run = [&](bool avx512, std::vector<float>* q, std::vector<float>* s, std::vector<float>* qdq) {
    set_avx512_enabled(avx512);
    q->assign(x.size(), -1.0f);
    s->assign(rows * cols / block, -1.0f);
    act_quant_fp8(x.data(), rows, cols, block, ScaleFmt::kUe8m0, nullptr, q->data(), s->data());
    *qdq = x;
    act_qdq_fp8(qdq->data(), rows, cols, block, ScaleFmt::kNone);
  };
  std::vector<float> q0, s0, d0, q1, s1, d1;
  run(false, &q0, &s0, &d0);
  run(true, &q1, &s1, &d1);
  set_avx512_enabled(true);
  EXPECT_EQ(0, std::memcmp(q0.data(), q1.data(), q0.size() * 4));
  EXPECT_EQ(0, std::memcmp(s0.data(), s1.data(), s0.size() * 4));
  EXPECT_EQ(0, std::memcmp(d0.data(), d1.data(), d0.size() * 4));
  // the inputs reach the subnormal E4M3 range and both signs of zero
  int sub = 0, negzero = 0;
  for (float v : q1) {
    sub += (v != 0.0f && std::fabs(v) < 0x1p-6f);
    negzero += (v == 0.0f && std::signbit(v));
  }
  EXPECT_GT(sub, 10);
  EXPECT_GT(negzero, 10);
}

}  // namespace
}  // namespace strata::kernels
