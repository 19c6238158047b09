// Unit tests of the V4 primitives (exec/deepseek_v4/v4_ops.h) against hand-derived values.
#include "exec/deepseek_v4/v4_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu_features.h"
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

// sparse_attn_heads = sparse_attn_head for every head, bit for bit: 6 heads, 150 rows (a
// short last block) with null rows; a list whose first block holds only null rows (V4's
// running max stays -inf there, so the per-head kernel runs: NaN outputs compare equal by
// bits); with and without AVX-512, with the reference-position arguments.
TEST(V4Ops, SparseAttnHeadsMatchPerHeadCalls) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  const int64_t d = 64, n = 150, H = 6;
  std::vector<float> kv(n * d), q(H * d), sinks(H);
  for (auto& v : kv) v = round_to_bf16(nd(rng));
  for (auto& v : q) v = round_to_bf16(nd(rng) * 0.3f);
  for (auto& v : sinks) v = nd(rng);
  const float scale = 0.125f;
  for (bool lead_null : {false, true}) {
    std::vector<const float*> rows(n);
    for (int64_t t = 0; t < n; ++t)
      rows[t] = (t % 7 == 3 || t == 149 || (lead_null && t < 64)) ? nullptr : &kv[t * d];
    for (bool e512 : {true, false}) {
      kernels::set_avx512_enabled(e512);
      for (int64_t SH : {int64_t{0}, 3 * H}) {
        const int64_t qh0 = SH == 0 ? 0 : 2 * H;
        std::vector<float> want(H * d), got(H * d, -1.0f);
        for (int64_t h = 0; h < H; ++h)
          v4::sparse_attn_head(&q[h * d], rows.data(), n, d, sinks[h], scale, qh0 + h, SH,
                               &want[h * d]);
        v4::sparse_attn_heads(q.data(), rows.data(), n, d, H, sinks.data(), scale, qh0, SH,
                              got.data());
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4))
            << "lead_null " << lead_null << " avx512 " << e512 << " SH " << SH;
        if (lead_null) {
          EXPECT_TRUE(std::isnan(want[0]));  // the case the fallback exists for
        }
      }
    }
  }
  kernels::set_avx512_enabled(true);
}

// hc_pre / hc_post give the same bits with and without AVX-512 lanes and with the tokens split
// over a pool: D = 40 (two 16-lane blocks and a scalar tail), values with exact zeros of both
// signs (the first-product start keeps a -0 sum where a 0 + ... start would not).
TEST(V4Ops, HcPrePostSameBitsAcrossIsa) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  const int hc = 4;
  const int64_t S = 21, D = 40;
  std::vector<float> h(S * hc * D), f(S * D), pre(S * hc), post(S * hc), comb(S * hc * hc);
  for (size_t k = 0; k < h.size(); ++k) h[k] = k % 5 == 0 ? -0.0f : round_to_bf16(nd(rng));
  for (size_t k = 0; k < f.size(); ++k) f[k] = k % 3 == 0 ? -0.0f : round_to_bf16(nd(rng));
  for (auto& v : pre) v = nd(rng);
  for (auto& v : post) v = nd(rng);
  for (auto& v : comb) v = nd(rng);
  // Token 0: positive mixes, so where every stream (and f) is -0 the exact result is -0.
  for (int c = 0; c < hc; ++c) pre[c] = post[c] = 0.5f + static_cast<float>(c);
  for (int c = 0; c < hc * hc; ++c) comb[c] = 0.25f + static_cast<float>(c);
  ThreadPool pool(2);
  std::vector<float> y_want, h_want;
  bool first = true;
  for (bool e512 : {false, true}) {
    kernels::set_avx512_enabled(e512);
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      std::vector<float> y(S * D, 1.0f), hh = h;
      v4::hc_pre(h.data(), pre.data(), S, hc, D, y.data(), p);
      v4::hc_post(f.data(), post.data(), comb.data(), S, hc, D, hh.data(), p);
      if (first) {
        y_want = y;
        h_want = hh;
        first = false;
        continue;
      }
      EXPECT_EQ(0, std::memcmp(y.data(), y_want.data(), y.size() * 4)) << "avx512 " << e512;
      EXPECT_EQ(0, std::memcmp(hh.data(), h_want.data(), hh.size() * 4)) << "avx512 " << e512;
    }
  }
  kernels::set_avx512_enabled(true);
}

}  // namespace
}  // namespace strata
