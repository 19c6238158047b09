// Tests for kernels/yarn_rope: frequencies against the YaRN formula evaluated by hand (the
// lo/hi band edges of the spec §2.2 for the released config, and for the tiny config), and
// the rotation convention (last rope_dim channels, adjacent pairs, inverse = conjugate).
#include "kernels/yarn_rope.h"

#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

namespace strata::kernels {
namespace {

float bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(YarnRope, PlainFrequencies) {
  YarnParams p;
  p.rope_dim = 4;
  p.theta = 10000.0;
  const auto f = yarn_inv_freqs(p);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], 0.01f);  // 1 / 10000^(2/4), correctly rounded
}

// Released V4.1 compressed layers: r = 64, theta 160000, L0 65536, factor 16, beta 32/1.
// Spec §2.2: lo = 15, hi = 25. Below lo the frequency is unchanged; from hi on it is f/16.
TEST(YarnRope, ReleasedConfigBandEdges) {
  YarnParams plain;
  plain.rope_dim = 64;
  plain.theta = 160000.0;
  YarnParams y = plain;
  y.original_seq_len = 65536;
  y.factor = 16;
  y.beta_fast = 32;
  y.beta_slow = 1;
  const auto f0 = yarn_inv_freqs(plain);
  const auto f = yarn_inv_freqs(y);
  for (int i = 0; i <= 15; ++i) EXPECT_EQ(f[i], f0[i]) << i;
  for (int i = 25; i < 32; ++i) EXPECT_EQ(f[i], f0[i] / 16.0f) << i;
  for (int i = 16; i < 25; ++i) {
    const double ramp = (i - 15) / 10.0;
    const double expect = f0[i] / 16.0 * ramp + f0[i] * (1.0 - ramp);
    EXPECT_NEAR(f[i], expect, expect * 1e-6) << i;
    EXPECT_LT(f[i], f0[i]);
    EXPECT_GT(f[i], f0[i] / 16.0f);
  }
}

// Tiny golden config: r = 16, theta 160000 -> cd(32) = 3.86, cd(1) = 6.18: lo = 3, hi = 7.
TEST(YarnRope, TinyConfigRamp) {
  YarnParams y;
  y.rope_dim = 16;
  y.theta = 160000.0;
  y.original_seq_len = 65536;
  y.factor = 16;
  YarnParams plain = y;
  plain.original_seq_len = 0;
  const auto f0 = yarn_inv_freqs(plain);
  const auto f = yarn_inv_freqs(y);
  for (int i = 0; i <= 3; ++i) EXPECT_EQ(f[i], f0[i]);
  for (int i = 7; i < 8; ++i) EXPECT_EQ(f[i], f0[i] / 16.0f);
  // i = 5: ramp 0.5 -> f/16*0.5 + f*0.5, each op rounded in f32
  const float a = (f0[5] / 16.0f) * 0.5f;
  const float b = f0[5] * 0.5f;
  EXPECT_EQ(f[5], a + b);
}

TEST(YarnRope, RotatesLastDimsAdjacentPairs) {
  // dim 6, rope_dim 4: channels 0,1 untouched; pairs (2,3) and (4,5) rotate.
  YarnParams p;
  p.rope_dim = 4;
  p.theta = 10000.0;
  RopeTable t(p, 4);
  std::vector<float> x = {5.0f, 7.0f, 1.0f, 0.0f, 0.0f, 1.0f};
  rope_apply_tail(x.data(), 1, 6, 4, t.cos(1), t.sin(1), /*inverse=*/false);
  EXPECT_EQ(x[0], 5.0f);
  EXPECT_EQ(x[1], 7.0f);
  // pair 0: freq 1, angle 1: (1,0) -> (cos 1, sin 1)
  EXPECT_EQ(x[2], bf16(std::cos(1.0f)));
  EXPECT_EQ(x[3], bf16(std::sin(1.0f)));
  // pair 1: freq 0.01: (0,1) -> (-sin 0.01, cos 0.01)
  EXPECT_EQ(x[4], bf16(-std::sin(0.01f)));
  EXPECT_EQ(x[5], bf16(std::cos(0.01f)));
  // position 0 is the identity
  std::vector<float> z = {0.5f, -2.0f, 3.0f, 0.25f};
  rope_apply_tail(z.data(), 1, 4, 4, t.cos(0), t.sin(0), false);
  EXPECT_EQ(z[0], 0.5f);
  EXPECT_EQ(z[1], -2.0f);
  EXPECT_EQ(z[2], 3.0f);
}

TEST(YarnRope, InverseIsConjugate) {
  YarnParams p;
  p.rope_dim = 2;
  p.theta = 10000.0;
  RopeTable t(p, 8);
  const float c = t.cos(3)[0], s = t.sin(3)[0];
  EXPECT_EQ(c, std::cos(3.0f));
  // (a + bi)(c - si) = (ac + bs) + (bc - as)i
  std::vector<float> x = {1.0f, 2.0f};
  rope_apply_tail(x.data(), 1, 2, 2, t.cos(3), t.sin(3), /*inverse=*/true, /*round_bf16=*/false);
  EXPECT_EQ(x[0], 1.0f * c + 2.0f * s);
  EXPECT_EQ(x[1], 2.0f * c - 1.0f * s);
  // forward then inverse returns close to the input (bf16 rounding in between)
  std::vector<float> v = {0.75f, -1.5f};
  rope_apply_tail(v.data(), 1, 2, 2, t.cos(5), t.sin(5), false);
  rope_apply_tail(v.data(), 1, 2, 2, t.cos(5), t.sin(5), true);
  EXPECT_NEAR(v[0], 0.75f, 0.01f);
  EXPECT_NEAR(v[1], -1.5f, 0.02f);
}

TEST(YarnRope, FusedProductVariant) {
  YarnParams p;
  p.rope_dim = 2;
  p.theta = 10000.0;
  RopeTable t(p, 8);
  const float c = t.cos(7)[0], s = t.sin(7)[0];
  const float a = 1.2578125f, b = -0.70703125f;  // bf16 values
  std::vector<float> x = {a, b};
  rope_apply_tail(x.data(), 1, 2, 2, t.cos(7), t.sin(7), false, false, RopeMul::kFusedFirst);
  volatile float bd = b * s, bc = b * c;
  EXPECT_EQ(x[0], std::fma(a, c, -bd));
  EXPECT_EQ(x[1], std::fma(a, s, bc));
}

TEST(YarnRope, PositionsWithStepUseGroupStart) {
  YarnParams p;
  p.rope_dim = 2;
  p.theta = 10000.0;
  RopeTable t(p, 16);
  // two compressed rows of ratio 2 starting at position 4: positions 4 and 6
  std::vector<float> x = {1.0f, 0.0f, 1.0f, 0.0f};
  rope_apply_positions(x.data(), 2, 1, 2, t, 4, 2, false);
  EXPECT_EQ(x[0], bf16(std::cos(4.0f)));
  EXPECT_EQ(x[2], bf16(std::cos(6.0f)));
  EXPECT_EQ(x[3], bf16(std::sin(6.0f)));
}

}  // namespace
}  // namespace strata::kernels
