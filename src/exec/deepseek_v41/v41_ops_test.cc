// Tests for exec/deepseek_v41/v41_ops.h index_dots, sparse_attn_head and linear_batch: vector paths against test-local
// scalar loops written from the documented order (bit-exact), across ISAs.
#include "exec/deepseek_v41/v41_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "base/thread_pool.h"
#include "kernels/cpu_features.h"
#include "kernels/quant_formats.h"
#include "model/dtype.h"
#include "model/deepseek_v41_weights.h"
#include "model/kernel_pack.h"

namespace strata::v41 {
namespace {

TEST(V41Ops, IndexDotsMatchSequentialF64Loop) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (int64_t nh : {1, 3, 4, 5, 16, 19, 32}) {
    const int64_t d = 128;
    std::vector<double> qT(d * nh);
    std::vector<float> key(d);
    for (auto& v : qT) v = static_cast<double>(nd(rng)) * std::ldexp(1.0, static_cast<int>(rng() % 40) - 20);
    for (auto& v : key) v = nd(rng);
    std::vector<double> want(nh);
    for (int64_t h = 0; h < nh; ++h) {
      double acc = 0.0;
      for (int64_t j = 0; j < d; ++j) acc = acc + qT[j * nh + h] * static_cast<double>(key[j]);
      want[h] = acc;
    }
    for (auto isa : {kernels::Isa::kScalar, kernels::Isa::kAvx2}) {
      const auto old = kernels::active_isa();
      kernels::force_isa(isa);
      std::vector<double> got(nh, -1.0);
      index_dots(qT.data(), key.data(), d, nh, got.data());
      kernels::force_isa(old);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), nh * 8)) << "nh=" << nh;
    }
  }
}

// index_weighted_scores against the documented formula written here with its own bf16
// rounding (bit patterns compared, so NaN lanes count too), on every ISA path.
float bf16_here(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    u = (u | 0x00400000u) & 0xffff0000u;
  } else {
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  }
  std::memcpy(&f, &u, 4);
  return f;
}
TEST(V41Ops, IndexWeightedScoresMatchTheFormula) {
  std::mt19937 rng(5);
  std::normal_distribution<double> nd;
  for (int64_t nh : {1, 3, 4, 16, 64}) {
    for (int64_t nk : {1, 7, 8, 9, 64, 101}) {
      std::vector<double> dots(nk * nh);
      for (auto& v : dots) {
        v = nd(rng) * std::ldexp(1.0, static_cast<int>(rng() % 30) - 10);
        switch (rng() % 16) {
          case 0: v = -0.0; break;
          case 1: v = std::numeric_limits<double>::quiet_NaN(); break;
          case 2: v = 1e39; break;                       // overflows f32
          case 3: v = 1.0 + std::ldexp(1.0, -8); break;  // a bf16 tie
          default: break;
        }
      }
      std::vector<float> w(nh);
      for (auto& v : w) v = bf16_here(static_cast<float>(nd(rng)));
      std::vector<float> want(nk);
      for (int64_t r = 0; r < nk; ++r) {
        float acc = 0.0f;
        for (int64_t h = 0; h < nh; ++h) {
          float dv = bf16_here(static_cast<float>(dots[r * nh + h]));
          if (dv < 0.0f) dv = 0.0f;
          acc += bf16_here(dv * w[h]);
        }
        want[r] = bf16_here(acc);
      }
      for (kernels::Isa isa : {kernels::Isa::kScalar, kernels::Isa::kAvx2}) {
        if (isa == kernels::Isa::kAvx2 && !kernels::cpu_has_avx2_fma()) continue;
        const kernels::Isa old = kernels::active_isa();
        kernels::force_isa(isa);
        std::vector<float> got(nk, 7.0f);
        index_weighted_scores(dots.data(), nk, nh, w.data(), got.data());
        kernels::force_isa(old);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), nk * sizeof(float)), 0)
            << "heads " << nh << " keys " << nk << " isa " << static_cast<int>(isa);
      }
    }
  }
}

// index_dots_fp4: the AVX2 path gives the scalar reference's bits on any codes and scales
// (random bytes, null keys); on rows quantized from ordinary values both equal the sequential
// f64 chain over the decoded values (index_dots_keys), the form they replace.
TEST(V41Ops, IndexDotsFp4MatchReferenceAndTheF64Chain) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  for (int64_t d : {64, 128, 96}) {
  for (int64_t nh : {4, 8, 64, 3}) {
    for (int pass = 0; pass < 2; ++pass) {  // 0: quantized values, 1: random bytes
      const int64_t nk = 37;
      std::vector<float> q(nh * d);
      for (auto& v : q) v = nd(rng) * (1.0f + static_cast<float>(rng() % 4));
      for (int64_t h = 0; h < nh; ++h) quant::fp4_ue8m0_qdq(&q[h * d], static_cast<int>(d), 32);
      IndexQueryFp4 iq;
      iq.set(q.data(), nh, d);
      const int64_t rb = d / 2 + d / 32;
      std::vector<uint8_t> rows(nk * rb);
      std::vector<float> kf(nk * d);
      for (int64_t r = 0; r < nk; ++r) {
        uint8_t* row = &rows[r * rb];
        if (pass == 0) {
          for (int64_t j = 0; j < d; ++j) kf[r * d + j] = nd(rng) * 3.0f;
          quant::fp4_ue8m0_quantize(&kf[r * d], static_cast<int>(d), 32, row, row + d / 2);
        } else {
          for (int64_t j = 0; j < d / 2; ++j) row[j] = static_cast<uint8_t>(rng());
          for (int64_t j = d / 2; j < rb; ++j) row[j] = static_cast<uint8_t>(rng() % 255);
          if (pass == 1 && nh == 64) iq.scales[rng() % iq.scales.size()] = 0;  // a 2^-127 block
        }
        quant::fp4_ue8m0_dequantize(row, row + d / 2, static_cast<int>(d), 32, &kf[r * d]);
      }
      std::vector<const uint8_t*> kp(nk);
      std::vector<const float*> kfp(nk);
      for (int64_t r = 0; r < nk; ++r) {
        kp[r] = r % 11 == 5 ? nullptr : &rows[r * rb];
        kfp[r] = kp[r] ? &kf[r * d] : nullptr;
      }
      std::vector<double> want(nk * nh), got(nk * nh, 7.0), chain(nk * nh);
      ref::index_dots_fp4(iq, kp.data(), nk, want.data());
      const kernels::Isa old = kernels::active_isa();
      for (kernels::Isa isa : {kernels::Isa::kScalar, kernels::Isa::kAvx2}) {
        kernels::force_isa(isa);
        index_dots_fp4(iq, kp.data(), nk, got.data());
        EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(double)), 0)
            << "d " << d << " heads " << nh << " pass " << pass << " isa " << static_cast<int>(isa);
      }
      kernels::force_isa(old);
      if (pass == 0) {
        std::vector<double> qT(d * nh);
        for (int64_t j = 0; j < d; ++j)
          for (int64_t h = 0; h < nh; ++h) qT[j * nh + h] = q[h * d + j];
        index_dots_keys(qT.data(), kfp.data(), nk, d, nh, chain.data());
        EXPECT_EQ(std::memcmp(chain.data(), want.data(), want.size() * sizeof(double)), 0)
            << "heads " << nh;
        int nonzero = 0;
        for (double v : want) nonzero += v != 0.0;
        EXPECT_GT(nonzero, nk * nh / 2);
      }
    }
  }
  }
}

// index_scores_fp4 (fused; 16 keys per AVX-512 VNNI pass where the CPU has it) against the
// reference dots then the reference weighting, bit for bit: quantized rows and random bytes
// (a NaN key scale, a 2^-127 query block), scales at the edges of the f32 path (and past
// them: products that leave f32's normal range), null keys, key counts around 16, negative,
// zero and non-finite head weights, every ISA path this machine has.
TEST(V41Ops, IndexScoresFp4MatchDotsThenWeighting) {
  std::mt19937 rng(21);
  std::normal_distribution<float> nd;
  const bool vnni = __builtin_cpu_supports("avx512vnni") && kernels::cpu_has_avx512();
  if (!vnni) std::printf("note: no AVX-512 VNNI here; the 16-key path is not exercised\n");
  int64_t positive_total = 0, keys_total = 0;  // the scores are not all zero or NaN
  for (int64_t d : {64, 128, 96}) {
    for (int64_t nh : {4, 8, 64, 3}) {
      for (int pass = 0; pass < 4; ++pass) {
        for (int64_t nk : {1, 15, 16, 17, 37, 50, 160}) {
          std::vector<float> q(nh * d);
          for (auto& v : q) v = nd(rng) * (1.0f + static_cast<float>(rng() % 4));
          for (int64_t h = 0; h < nh; ++h) quant::fp4_ue8m0_qdq(&q[h * d], static_cast<int>(d), 32);
          IndexQueryFp4 iq;
          iq.set(q.data(), nh, d);
          if (pass == 1) iq.scales[rng() % iq.scales.size()] = 0;  // a 2^-127 block
          // pass 2: the query's scales at 2^-2 or 2^124 and each 16 keys' scales at one value of
          // kEdge (the edges of the 16-key f32 path's range, NaN, 2^-127, 2^127); pass 3: a
          // non-finite head weight.
          const uint8_t kEdge[] = {0, 1, 2, 3, 4, 5, 127, 240, 241, 242, 243, 244, 245, 254, 255};
          if (pass == 2) std::fill(iq.scales.begin(), iq.scales.end(), nk % 2 ? 127 : 253);
          const int64_t rb = d / 2 + d / 32;
          std::vector<uint8_t> rows(nk * rb);
          for (int64_t r = 0; r < nk; ++r) {
            uint8_t* row = &rows[r * rb];
            if (pass == 0 || pass == 3) {
              std::vector<float> kf(d);
              for (auto& v : kf) v = nd(rng) * 3.0f;
              quant::fp4_ue8m0_quantize(kf.data(), static_cast<int>(d), 32, row, row + d / 2);
            } else {
              for (int64_t j = 0; j < d / 2; ++j) row[j] = static_cast<uint8_t>(rng());
              for (int64_t j = d / 2; j < rb; ++j) row[j] = static_cast<uint8_t>(100 + rng() % 50);
              if (pass == 1 && r == nk / 2) row[d / 2] = 255;  // a NaN block scale
              for (int64_t b = 0; pass == 2 && b < d / 32; ++b)
                row[d / 2 + b] = kEdge[(r / 16 + 4 * b) % std::size(kEdge)];
            }
          }
          std::vector<const uint8_t*> kp(nk);
          for (int64_t r = 0; r < nk; ++r)  // (pass 2: whole groups at one scale, no null key)
            kp[r] = r % 7 == 3 && pass != 2 ? nullptr : &rows[r * rb];
          std::vector<float> w(nh);
          for (auto& v : w) v = round_to_bf16(nd(rng));
          w[0] = 0.0f;
          if (pass == 3) w[nh - 1] = nk % 2 ? std::numeric_limits<float>::infinity() : NAN;
          std::vector<double> dots(nk * nh);
          std::vector<float> want(nk), got(nk);
          ref::index_dots_fp4(iq, kp.data(), nk, dots.data());
          ref::index_weighted_scores(dots.data(), nk, nh, w.data(), want.data());
          int positive = 0;
          for (float v : want) positive += v > 0;
          const kernels::Isa old = kernels::active_isa();
          const bool old512 = kernels::avx512_enabled();
          for (int path = 0; path < 3; ++path) {
            kernels::force_isa(path == 0 ? kernels::Isa::kScalar : kernels::Isa::kAvx2);
            kernels::set_avx512_enabled(path == 2);
            std::fill(got.begin(), got.end(), 7.0f);
            index_scores_fp4(iq, kp.data(), nk, w.data(), got.data());
            EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
                << "d " << d << " heads " << nh << " pass " << pass << " keys " << nk << " path " << path;
          }
          kernels::set_avx512_enabled(old512);
          kernels::force_isa(old);
          positive_total += positive;
          keys_total += nk;
        }
      }
    }
  }
  EXPECT_GT(positive_total, keys_total / 4);
}

TEST(V41Ops, IndexDotsKeysMatchOneKeyCalls) {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd;
  const int64_t d = 128;
  for (int64_t nh : {1, 3, 4, 6, 16, 19, 32}) {
    std::vector<double> qT(d * nh);
    for (auto& v : qT) v = static_cast<double>(nd(rng)) * std::ldexp(1.0, static_cast<int>(rng() % 40) - 20);
    for (int64_t nk : {1, 3, 4, 5, 8, 9, 17}) {
      std::vector<float> kv(nk * d);
      for (auto& v : kv) v = nd(rng);
      std::vector<const float*> keys(nk);
      for (int64_t r = 0; r < nk; ++r) keys[r] = (r % 4 == 2) ? nullptr : &kv[r * d];  // nulls: zero keys
      const std::vector<float> zero(d, 0.0f);
      std::vector<double> want(nk * nh);
      for (int64_t r = 0; r < nk; ++r)
        for (int64_t h = 0; h < nh; ++h) {  // the documented order, scalar
          const float* k = keys[r] ? keys[r] : zero.data();
          double acc = 0.0;
          for (int64_t j = 0; j < d; ++j) acc = acc + qT[j * nh + h] * static_cast<double>(k[j]);
          want[r * nh + h] = acc;
        }
      for (int mode : {0, 1, 2}) {  // scalar, AVX2 (8 keys x 4 heads below 16 heads), AVX-512 (4 keys x 16 heads)
        const auto old = kernels::active_isa();
        kernels::force_isa(mode == 0 ? kernels::Isa::kScalar : kernels::Isa::kAvx2);
        kernels::set_avx512_enabled(mode == 2);
        std::vector<double> got(nk * nh, -1.0);
        index_dots_keys(qT.data(), keys.data(), nk, d, nh, got.data());
        kernels::force_isa(old);
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 8))
            << "nh=" << nh << " keys=" << nk << " mode=" << mode;
      }
    }
  }
}

// Scores: sequential fma over d per row; PV: sequential fma over the block's rows per
// element. With two rows the softmax is easy to state by hand; compare ISAs bit for bit.
TEST(V41Ops, SparseAttnHeadSameBitsAcrossIsa) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  const int64_t d = 64, n = 150;  // > 2 blocks of 64 list entries, some null rows
  std::vector<float> kv(n * d), q(d);
  for (auto& v : kv) v = round_to_bf16(nd(rng));
  for (auto& v : q) v = round_to_bf16(nd(rng));
  std::vector<const float*> rows(n);
  for (int64_t t = 0; t < n; ++t) rows[t] = (t % 7 == 3) ? nullptr : &kv[t * d];
  std::vector<float> a(d), b(d);
  const auto old = kernels::active_isa();
  kernels::force_isa(kernels::Isa::kScalar);
  sparse_attn_head(q.data(), rows.data(), n, d, 0.5f, 0.125f, a.data());
  kernels::force_isa(kernels::Isa::kAvx2);
  for (bool e512 : {false, true}) {  // AVX2 alone, then with the AVX-512 PV loop (64 + tail)
    kernels::set_avx512_enabled(e512);
    for (int64_t dd : {d, int64_t{72}, int64_t{200}}) {
      std::vector<float> kv2(n * dd), q2(dd), a2(dd), b2(dd);
      for (size_t i = 0; i < kv2.size(); ++i) kv2[i] = kv[i % kv.size()];
      for (int64_t i = 0; i < dd; ++i) q2[i] = q[i % d];
      std::vector<const float*> rows2(n);
      for (int64_t t = 0; t < n; ++t) rows2[t] = rows[t] ? &kv2[t * dd] : nullptr;
      sparse_attn_head(q2.data(), rows2.data(), n, dd, 0.5f, 0.125f, b2.data());
      kernels::force_isa(kernels::Isa::kScalar);
      sparse_attn_head(q2.data(), rows2.data(), n, dd, 0.5f, 0.125f, a2.data());
      kernels::force_isa(kernels::Isa::kAvx2);
      EXPECT_EQ(0, std::memcmp(a2.data(), b2.data(), dd * 4)) << "d=" << dd << " avx512=" << e512;
    }
  }
  sparse_attn_head(q.data(), rows.data(), n, d, 0.5f, 0.125f, b.data());
  kernels::force_isa(old);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), d * 4));
  // Two rows, no sink contribution to speak of: out = softmax-weighted mix of the rows,
  // bounded by the rows' element-wise min/max.
  const float* two[2] = {&kv[0], &kv[d]};
  std::vector<float> o(d);
  sparse_attn_head(q.data(), two, 2, d, -1e4f, 0.125f, o.data());
  for (int64_t i = 0; i < d; ++i) {
    EXPECT_LE(o[i], std::max(kv[i], kv[d + i]) + 1e-2f);
    EXPECT_GE(o[i], std::min(kv[i], kv[d + i]) - 1e-2f);
  }
}

TEST(V41Ops, RmsNormMatchesScalarFormulaOnEveryPath) {
  // y = bf16(bf16(w) * (x * rs)), rs = 1 / sqrt(torch_sum(x*x) / n + eps): recomputed here
  // from the formula for n with and without a tail of the 16-lane loop, with and without w.
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (int64_t n : {int64_t{2048}, int64_t{519}}) {
    const int64_t rows = 3;
    std::vector<float> x(rows * n);
    for (auto& v : x) v = nd(rng);
    x[5] = std::numeric_limits<float>::infinity();  // row 0: inf / NaN lanes round as scalar
    std::vector<uint16_t> wbits(n);
    for (auto& b : wbits) b = static_cast<uint16_t>(f32_to_bf16(nd(rng)));
    TensorView w;
    w.name = "norm.weight";
    w.dtype = DType::kBF16;
    w.shape = {n};
    w.data = reinterpret_cast<const uint8_t*>(wbits.data());
    w.num_bytes = 2 * static_cast<size_t>(n);
    for (bool with_w : {true, false})
      for (bool e512 : {true, false}) {
        kernels::set_avx512_enabled(e512);
        std::vector<float> y(rows * n, -1.0f);
        rms_norm(x.data(), rows, n, with_w ? &w : nullptr, 1e-6, y.data());
        kernels::set_avx512_enabled(true);
        for (int64_t r = 0; r < rows; ++r) {
          std::vector<float> sq(n);
          for (int64_t i = 0; i < n; ++i) sq[i] = x[r * n + i] * x[r * n + i];
          const float rs = 1.0f / std::sqrt(torch_sum(sq.data(), n) / static_cast<float>(n) + 1e-6f);
          for (int64_t i = 0; i < n; ++i) {
            float v = x[r * n + i] * rs;
            if (with_w) v = bf16_to_f32(wbits[i]) * v;
            const float want = round_to_bf16(v);
            const float got = y[r * n + i];
            ASSERT_TRUE(std::memcmp(&got, &want, 4) == 0)
                << "n=" << n << " r=" << r << " i=" << i << " w=" << with_w << " avx512=" << e512
                << " got " << got << " want " << want;
          }
        }
      }
  }
}

TEST(V41Ops, QkScoresHeadsMatchPerHeadSequentialLoop) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  const int64_t d = 96;
  // Rows from t0 = 3, every fifth one null (-inf, skipped by the vector kernels): n = 37 leaves
  // 28 live rows = 3 x 8 + 4, n = 15 leaves 10 = 8 + 2 singles (each row-group width of the
  // AVX-512 path and of the ymm path, which nh <= 8 takes with AVX-512 on too)
  for (int64_t n : {37, 15})
  for (int64_t nh : {16, 5, 8, 13, 21}) {
    std::vector<float> kv(n * d), qT(d * nh);
    for (auto& v : kv) v = nd(rng);
    for (auto& v : qT) v = nd(rng);
    std::vector<const float*> rows(n);
    for (int64_t t = 0; t < n; ++t) rows[t] = (t % 5 == 2) ? nullptr : &kv[t * d];
    for (int mode : {0, 1, 2}) {  // scalar, AVX2, AVX-512
      const auto old = kernels::active_isa();
      kernels::force_isa(mode == 0 ? kernels::Isa::kScalar : kernels::Isa::kAvx2);
      kernels::set_avx512_enabled(mode == 2);
      std::vector<float> got(nh * n, 7.0f);
      qk_scores_heads(qT.data(), rows.data(), n, d, nh, 0.25f, got.data(), 3, n);
      kernels::force_isa(old);
      for (int64_t h = 0; h < nh; ++h)
        for (int64_t t = 0; t < n; ++t) {
          float want = 7.0f;  // rows before t0 = 3 untouched
          if (t >= 3) {
            if (!rows[t]) {
              want = -std::numeric_limits<float>::infinity();
            } else {
              float acc = 0.0f;
              for (int64_t i = 0; i < d; ++i) acc = std::fma(qT[i * nh + h], kv[t * d + i], acc);
              want = acc * 0.25f;
            }
          }
          ASSERT_EQ(got[h * n + t], want) << "nh=" << nh << " h=" << h << " t=" << t;
        }
    }
  }
}

// sparse_attn_heads = sparse_attn_head for every head, bit for bit: 11 heads (one batch of 8
// plus 3 single heads), 150 rows (a short last block of 64) with null rows, with and without
// the AVX-512 path, with the reference-position (SLEEF vs scalar tail) arguments.
TEST(V41Ops, SparseAttnHeadsMatchPerHeadCalls) {
  std::mt19937 rng(21);
  std::normal_distribution<float> nd;
  const int64_t d = 64, n = 150, H = 11;
  std::vector<float> kv(n * d), q(H * d), sinks(H);
  for (auto& v : kv) v = round_to_bf16(nd(rng));
  for (auto& v : q) v = round_to_bf16(nd(rng) * 0.3f);
  for (auto& v : sinks) v = nd(rng);
  std::vector<const float*> rows(n);
  for (int64_t t = 0; t < n; ++t) rows[t] = (t % 7 == 3 || t == 149) ? nullptr : &kv[t * d];
  std::vector<float> qT(d * H);
  for (int64_t i = 0; i < d; ++i)
    for (int64_t h = 0; h < H; ++h) qT[i * H + h] = q[h * d + i];
  const float scale = 0.125f;
  std::vector<float> scores(H * n);
  qk_scores_heads(qT.data(), rows.data(), n, d, H, scale, scores.data(), 0, n);
  for (bool e512 : {true, false}) {
    kernels::set_avx512_enabled(e512);
    for (int64_t SH : {int64_t{0}, 3 * H}) {
      const int64_t qh0 = SH == 0 ? 0 : 2 * H;
      std::vector<float> want(H * d), got(H * d, -1.0f);
      for (int64_t h = 0; h < H; ++h)
        sparse_attn_head(&q[h * d], rows.data(), n, d, sinks[h], scale, &want[h * d], qh0 + h, SH,
                         &scores[h * n]);
      sparse_attn_heads(rows.data(), n, d, H, sinks.data(), scores.data(), got.data(), qh0, SH);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4))
          << "avx512 " << e512 << " SH " << SH;
    }
  }
  kernels::set_avx512_enabled(true);
}

// linear_batch (one dispatch for several weights on the same x) gives the bits of one
// linear() per weight: packed FP8 with 32- and 128-wide blocks (two quantizations of x) and
// packed FP4 together; and the fallback when one weight is not packed.
TEST(V41Ops, LinearBatchMatchesOneLinearPerWeight) {
  std::mt19937 rng(3);
  const int64_t K = 256;
  struct W {
    std::vector<uint8_t> codes, scales;
    V41Linear l;
  };
  auto make = [&](V41WeightKind kind, int64_t out, int block) {
    W w;
    const bool fp4 = kind == V41WeightKind::kFp4;
    w.codes.resize(fp4 ? out * K / 2 : out * K);
    for (auto& c : w.codes) {
      c = static_cast<uint8_t>(rng());
      if (!fp4 && (c & 0x7f) == 0x7f) c = 0x11;  // no NaN codes
    }
    const int64_t srows = fp4 ? out : (out + block - 1) / block, scols = fp4 ? K / 32 : K / block;
    w.scales.resize(srows * scols);
    for (auto& v : w.scales) v = static_cast<uint8_t>(118 + rng() % 12);
    w.l.kind = kind;
    w.l.out = out;
    w.l.in = K;
    w.l.block = block;
    w.l.weight.dtype = fp4 ? DType::kI8 : DType::kF8_E4M3;
    w.l.weight.data = w.codes.data();
    w.l.scale.dtype = DType::kF8_E8M0;
    w.l.scale.data = w.scales.data();
    w.l.packed = pack_linear(w.l);
    return w;
  };
  std::vector<W> ws;
  ws.push_back(make(V41WeightKind::kFp8, 96, 32));
  ws.push_back(make(V41WeightKind::kFp4, 64, 32));
  ws.push_back(make(V41WeightKind::kFp8, 200, 128));
  std::normal_distribution<float> nd;
  for (const int64_t M : {int64_t{1}, int64_t{3}}) {
    std::vector<float> x(M * K);
    for (auto& v : x) v = nd(rng);
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      for (const bool all_packed : {true, false}) {
        std::vector<V41Linear> ls;
        for (const W& w : ws) ls.push_back(w.l);
        if (!all_packed) ls[1].packed = nullptr;  // the scalar reference path for that one
        std::vector<std::vector<float>> want(ls.size()), got(ls.size());
        const V41Linear* wp[3];
        float* yp[3];
        for (size_t i = 0; i < ls.size(); ++i) {
          want[i].assign(M * ls[i].out, -1.0f);
          got[i].assign(M * ls[i].out, -2.0f);
          linear(x.data(), M, ls[i], want[i].data(), &pool);
          wp[i] = &ls[i];
          yp[i] = got[i].data();
        }
        linear_batch(x.data(), M, wp, yp, 3, &pool);
        for (size_t i = 0; i < ls.size(); ++i)
          EXPECT_EQ(0, std::memcmp(got[i].data(), want[i].data(), got[i].size() * 4))
              << "weight " << i << " M " << M << " threads " << threads << " packed " << all_packed;
      }
    }
  }
}

// The AVX-512 FP4 QDQ (16 lanes) gives the scalar loop's bits: random values, every E2M1
// midpoint and grid point times the block scale (ties), signed zeros, values past the clamp,
// and NaN / inf lanes (their 16-lane chunk falls back to the scalar loop).
TEST(V41Ops, QdqFp4VectorMatchesScalar) {
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const int64_t n = 64 * 32;
  std::vector<float> x(n);
  for (auto& v : x) v = nd(rng);
  // Block 3: E2M1 midpoints and grid points; with its block scale (1 or 2, from amax 6) they
  // stay exact ties and grid values.
  const float special[] = {0.25f, -0.25f, 0.75f, -0.75f, 1.25f, 1.75f, -1.75f, 2.5f, 3.5f, -3.5f,
                           5.0f, -5.0f, 0.0f, -0.0f, 6.0f, -6.0f, 0.5f, 1.5f, 3.0f, 4.0f};
  for (int i = 0; i < 20; ++i) x[3 * 32 + i] = special[i];
  x[5 * 32 + 7] = 1e30f;                                         // clamps
  x[6 * 32 + 1] = std::numeric_limits<float>::quiet_NaN();       // NaN lane
  x[7 * 32 + 20] = -std::numeric_limits<float>::infinity();      // inf: NaN after / inf
  for (int i = 0; i < 32; ++i) x[8 * 32 + i] = 1e-30f * static_cast<float>(i - 16);  // floor scale
  auto bits_equal = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
  };
  const bool was = kernels::avx512_enabled();
  for (const int block : {32, 16}) {
    std::vector<float> a8 = x, a4 = x, v8 = x, v4 = x;
    kernels::set_avx512_enabled(false);
    qdq_fp4_e8m0(a8.data(), n, block);
    qdq_fp4_e4m3(a4.data(), n, block);
    kernels::set_avx512_enabled(true);
    qdq_fp4_e8m0(v8.data(), n, block);
    qdq_fp4_e4m3(v4.data(), n, block);
    EXPECT_TRUE(bits_equal(a8, v8)) << "e8m0 block " << block;
    EXPECT_TRUE(bits_equal(a4, v4)) << "e4m3 block " << block;
    if (block == 32) {  // a tie went where round_e2m1 sends it
      EXPECT_EQ(a8[3 * 32 + 2], 1.0f);
    }
  }
  kernels::set_avx512_enabled(was);
}

// swiglu_bf16's AVX-512 lanes against its scalar loop (the reference's Expert activation):
// magnitudes from 1e-3 to 1e3, exp's under/overflow cuts (g near ±104), the clamp's edges,
// ±0, ±inf and NaN in g and u, a tail that is not a multiple of 16, with and without the
// clamp and the route weight, and h aliasing g.
TEST(V41Ops, SwigluVectorMatchesScalar) {
  if (!kernels::cpu_has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-10, 10);
  const int64_t n = 16 * 40 + 7;
  std::vector<float> g(n), u(n);
  for (int64_t k = 0; k < n; ++k) {
    g[k] = nd(rng) * std::ldexp(1.0f, ex(rng));
    u[k] = nd(rng) * std::ldexp(1.0f, ex(rng));
  }
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float special[] = {0.0f,    -0.0f,   inf,      -inf,    nan,   103.9f, 104.0f, 104.1f,
                           -103.9f, -104.0f, -104.1f, 87.0f,   -88.0f, 7.0f,   -7.0f,  7.0001f,
                           -7.0001f, 1e-38f, -1e-38f,  1e-45f};
  for (int i = 0; i < 20; ++i) {
    g[32 + i] = special[i];
    u[80 + i] = special[i];
    g[n - 1 - i % 7] = special[i];
  }
  const float rw = 0.37f;
  const bool was = kernels::avx512_enabled();
  for (bool clamp : {false, true})
    for (const float* w : {static_cast<const float*>(nullptr), &rw}) {
      std::vector<float> want(n), got(n), alias = g;
      kernels::set_avx512_enabled(false);
      swiglu_bf16(g.data(), u.data(), n, 7.0f, clamp, w, want.data());
      kernels::set_avx512_enabled(true);
      swiglu_bf16(g.data(), u.data(), n, 7.0f, clamp, w, got.data());
      swiglu_bf16(alias.data(), u.data(), n, 7.0f, clamp, w, alias.data());
      for (int64_t k = 0; k < n; ++k) {
        uint32_t a, b, c;
        std::memcpy(&a, &want[k], 4);
        std::memcpy(&b, &got[k], 4);
        std::memcpy(&c, &alias[k], 4);
        ASSERT_EQ(a, b) << "k=" << k << " g=" << g[k] << " u=" << u[k] << " clamp=" << clamp
                        << " w=" << (w != nullptr);
        ASSERT_EQ(a, c) << "aliased, k=" << k;
      }
    }
  // By hand: g = 1, u = 2 -> 2 / (1 + e^-1) = 1.46211716..., whose bf16 is 1 + 59/128.
  const float g1 = 1.0f, u2 = 2.0f;
  float h = 0.0f;
  swiglu_bf16(&g1, &u2, 1, 7.0f, false, nullptr, &h);
  EXPECT_EQ(h, 1.4609375f);
  kernels::set_avx512_enabled(was);
}

}  // namespace
}  // namespace strata::v41
