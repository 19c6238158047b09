// Unit tests of the V4 primitives (exec/deepseek_v4/v4_ops.h) against hand-derived values.
#include "exec/deepseek_v4/v4_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/dtype.h"

namespace strata {
namespace {

TEST(V4Ops, HadamardMatchesSylvesterMatrix) {
  // H_4 (Sylvester) = [[1,1,1,1],[1,-1,1,-1],[1,1,-1,-1],[1,-1,-1,1]], scaled by 1/2.
  std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f};
  v4::hadamard(x.data(), 1, 4);
  EXPECT_EQ(x[0], 5.0f);   // (1+2+3+4)/2
  EXPECT_EQ(x[1], -1.0f);  // (1-2+3-4)/2
  EXPECT_EQ(x[2], -2.0f);  // (1+2-3-4)/2
  EXPECT_EQ(x[3], 0.0f);   // (1-2-3+4)/2
}

TEST(V4Ops, ScalarTailSplit) {
  // 33 tokens x 4 heads = 132 fp32 elements: 128 vectorized, the last 4 scalar.
  EXPECT_FALSE(v4::torch_scalar_tail(127, 132));
  EXPECT_TRUE(v4::torch_scalar_tail(128, 132));
  // bf16 steps of 32: 16 elements are all scalar, 64 none.
  EXPECT_TRUE(v4::torch_scalar_tail(0, 16, 32));
  EXPECT_FALSE(v4::torch_scalar_tail(63, 64, 32));
}

TEST(V4Ops, SleefLog1pWithinOneUlp) {
  for (float x : {1e-6f, 0.01f, 0.3f, 1.0f, 2.5f, 17.0f, 1000.0f}) {
    const double ref = std::log1p(static_cast<double>(x));
    const float got = v4::sleef_log1pf(x);
    const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(ref)) - 23);
    EXPECT_LE(std::fabs(got - ref), ulp) << x;
  }
  EXPECT_EQ(v4::sleef_log1pf(0.0f), 0.0f);
}

TEST(V4Ops, HeadRmsTailRoundsSqrtFirst) {
  // One row {3, 4}: mean square 12.5. Vectorized rows use bf16(1 / sqrt(12.5)); rows in the
  // scalar tail use bf16(1 / bf16(sqrt(12.5))) (c10's bf16 sqrt rounds first).
  std::vector<float> a = {3.0f, 4.0f}, b = a;
  v4::head_rms(a.data(), 1, 2, 0.0, 0, 64);  // row 0 of 64: vectorized
  v4::head_rms(b.data(), 1, 2, 0.0, 0, 1);   // row 0 of 1: scalar tail
  EXPECT_EQ(a[0], round_to_bf16(3.0f * round_to_bf16(1.0f / std::sqrt(12.5f))));
  EXPECT_EQ(b[0], round_to_bf16(3.0f * round_to_bf16(1.0f / round_to_bf16(std::sqrt(12.5f)))));
}

TEST(V4Ops, SoftplusPaths) {
  // Above the threshold softplus is the identity on both paths.
  EXPECT_EQ(v4::torch_softplus_at(25.0f, 0, 32), 25.0f);
  EXPECT_EQ(v4::torch_softplus_at(25.0f, 31, 32), 25.0f);
  // Both paths are within 2 ulp of log1p(exp(x)).
  for (float x : {-3.0f, -0.5f, 0.0f, 0.7f, 4.0f}) {
    const double ref = std::log1p(std::exp(static_cast<double>(x)));
    const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(ref)) - 23);
    EXPECT_LE(std::fabs(v4::torch_softplus_at(x, 0, 32) - ref), 2 * ulp) << x;
    EXPECT_LE(std::fabs(v4::torch_softplus_at(x, 31, 32) - ref), 2 * ulp) << x;
  }
}

}  // namespace
}  // namespace strata
