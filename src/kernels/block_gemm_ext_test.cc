// Tests for the AVX-512 extension paths of the decode GEMMs (kernels/block_gemm_avx512.cc):
// the exactness predicate that lets the FP4 path reorder its block sums, and bit-exact
// agreement with a scalar transcription of the reference loop on inputs built to send some
// blocks down each branch (FP4 dot path and chain fallback; FP8 dot path and chain fallback).
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "base/thread_pool.h"
#include "kernels/act_quant.h"
#include "kernels/block_gemm.h"
#include "kernels/block_gemm_internal.h"
#include "kernels/block_gemm_test_ref.h"
#include "kernels/cpu_features.h"

namespace strata::kernels {
namespace {

using detail::fp4_block_sums_exact;

const float kE2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};

float dec_e4m3(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const float v = e == 0 ? m * std::ldexp(1.0f, -9) : (1.0f + m / 8.0f) * std::ldexp(1.0f, e - 7);
  return (b & 0x80) ? -v : v;
}

// Quantized activation blocks of 32 as the model produces them (act_quant, ue8m0 scales).
std::vector<float> quantized_blocks(std::mt19937& g, int blocks) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(blocks) * 32), q(x.size()), s(blocks);
  for (auto& v : x) v = d(g);
  act_quant_fp8(x.data(), 1, static_cast<int64_t>(x.size()), 32, ScaleFmt::kUe8m0, nullptr,
                q.data(), s.data());
  return q;
}

// What prepare_ext_acts makes of activations `a` for packed FP8 weights [N, a.k], blocks bk.
detail::ExtActs fp8_ext_acts(const QuantActs& a, int64_t N, int64_t bk) {
  detail::Src src{};
  src.kind = detail::Src::kFp8Packed;
  src.n = N;
  src.k = a.k;
  src.bk = static_cast<int>(bk);
  detail::ExtActs e;
  detail::prepare_ext_acts(a, src, &e);
  return e;
}

bool e4m3_is_subnormal(uint8_t c) { return ((c >> 3) & 15) == 0 && (c & 7) != 0; }

float chain(const float* x, const float* w, bool reverse) {
  float p = 0.0f;
  for (int i = 0; i < 32; ++i) {
    const int k = reverse ? 31 - i : i;
    p = std::fma(x[k], w[k], p);
  }
  return p;
}

TEST(Fp4BlockSumsExact, TrueBlocksSumExactlyInAnyOrder) {
  std::mt19937 g(7);
  const int blocks = 400;
  const std::vector<float> q = quantized_blocks(g, blocks);
  std::uniform_int_distribution<int> code(0, 15);
  int exact_blocks = 0;
  for (int b = 0; b < blocks; ++b) {
    const float* x = q.data() + b * 32;
    if (!fp4_block_sums_exact(x)) continue;
    ++exact_blocks;
    for (int trial = 0; trial < 50; ++trial) {
      float w[32];
      double exact = 0.0;
      for (int k = 0; k < 32; ++k) {
        w[k] = kE2m1[code(g)];
        exact += static_cast<double>(x[k]) * w[k];  // exact in f64 (27-bit integers x 2^-10)
      }
      ASSERT_EQ(static_cast<double>(chain(x, w, false)), exact) << "block " << b;
      ASSERT_EQ(static_cast<double>(chain(x, w, true)), exact) << "block " << b;
    }
  }
  // Gaussian activations pass almost always (the kernel's fast path is the common case).
  EXPECT_GE(exact_blocks, blocks * 9 / 10);
}

TEST(Fp4BlockSumsExact, RejectsBlocksWhoseChainRounds) {
  // 31 activations at the E4M3 maximum and one at the smallest subnormal: with w = 6 the
  // chain reaches 83328 (ulp 2^-7) and then adds 6 * 2^-9, which cannot be represented.
  float x[32], w[32];
  for (int k = 0; k < 32; ++k) {
    x[k] = 448.0f;
    w[k] = 6.0f;
  }
  x[31] = std::ldexp(1.0f, -9);
  const double exact = 31.0 * 448.0 * 6.0 + 6.0 * std::ldexp(1.0, -9);
  EXPECT_NE(static_cast<double>(chain(x, w, false)), exact);  // the case the test guards
  EXPECT_FALSE(fp4_block_sums_exact(x));
  x[31] = 0.125f;  // lsb 2^-3: 6 * Σ|x| = 83328.75 <= 2^24 * 2^-4 -> provably exact
  EXPECT_TRUE(fp4_block_sums_exact(x));
  EXPECT_EQ(static_cast<double>(chain(x, w, false)), 31.0 * 448.0 * 6.0 + 0.75);
}

TEST(Fp4BlockSumsExact, RejectsValuesOutsideBf16AndSpecials) {
  float x[32] = {};
  EXPECT_TRUE(fp4_block_sums_exact(x));  // all zero
  x[0] = 1.0f + std::ldexp(1.0f, -10);     // needs more than bf16's 8 significant bits
  EXPECT_FALSE(fp4_block_sums_exact(x));
  x[0] = std::ldexp(1.0f, -130);  // f32 subnormal
  EXPECT_FALSE(fp4_block_sums_exact(x));
  x[0] = INFINITY;
  EXPECT_FALSE(fp4_block_sums_exact(x));
}

// N = 192: three whole groups (decode reads the first two as a pair, the third alone), on one
// thread; N = 1088: seventeen, large enough to run on both threads.
TEST(BlockGemmExt, Fp4MixedExactAndFallbackBlocksBitExact) {
  for (int64_t N : {192, 1088}) {
    std::mt19937 g(11);
    const int64_t M = 3, K = 512, nkb = K / 32;
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> x(M * K);
    for (auto& v : x) v = round_bf16(d(g));
    // In every third block, one activation ~2^-14 of the block's largest: after quantization it is
    // a small E4M3 value with a low lowest-set-bit, which defeats the exactness bound.
    for (int64_t m = 0; m < M; ++m)
      for (int64_t kb = m % 3; kb < nkb; kb += 3) x[m * K + kb * 32 + 5] = 1.0e-4f;
    std::vector<float> q(M * K), s(M * nkb);
    act_quant_fp8(x.data(), M, K, 32, ScaleFmt::kUe8m0, nullptr, q.data(), s.data());
    int exact = 0, inexact = 0;
    for (int64_t b = 0; b < M * nkb; ++b)
      (fp4_block_sums_exact(q.data() + b * 32) ? exact : inexact)++;
    ASSERT_GT(exact, 0);
    ASSERT_GT(inexact, 0);  // both branches of the kernel run
    std::uniform_int_distribution<int> byte(0, 255), sc(118, 130);
    std::vector<uint8_t> w(N * K / 2), ws(N * nkb);
    for (auto& b : w) b = static_cast<uint8_t>(byte(g));
    for (auto& b : ws) b = static_cast<uint8_t>(sc(g));
    const PackedFp4Weight P = pack_fp4_weight(Fp4Weight{w.data(), ws.data(), N, K, 32});
    std::vector<float> expect(M * N);
    testref::ref_fp4(q, s, M, K, 32, w, ws, N, &expect);
    ThreadPool pool(2);
    for (bool ext : {false, true}) {
      set_avx512_ext_enabled(ext);
      for (int64_t m = 1; m <= M; ++m) {
        std::vector<float> y(m * N, -1.0f);
        fp4_gemm_packed(QuantActs{q.data(), s.data(), m, K, 32}, P, y.data(), OutRound::kBf16,
                        &pool);
        for (int64_t i = 0; i < m * N; ++i)
          ASSERT_EQ(y[i], expect[i]) << "N=" << N << " m=" << m << " i=" << i;
      }
    }
    set_avx512_ext_enabled(true);
  }
}

// The FP8 dot path (VDPBF16PS in the chain's order) against the scalar reference loop: every
// non-NaN E4M3 code (subnormals, both zeros) in the weights and activations, 32- and 128-wide
// blocks, M = 1..4, 1 and 2 threads, a ragged last group (AVX2 rows), an odd and an even number of
// whole groups (decode reads them in pairs, the last odd one alone; N = 1000 is large enough to run
// on both threads), an activation of 65536 (bf16-exact, so still the dot path), and a non-bf16
// activation (a contract violation) that must take the chain path with the same bits.
TEST(BlockGemmExt, Fp8DotPathAllCodesBitExact) {
  for (int64_t bk : {32, 128})
    for (int64_t N : {200, 1000}) {
      const int64_t K = 4 * bk, nkb = K / bk;
      std::vector<uint8_t> w(N * K);
      for (int64_t i = 0; i < N * K; ++i) {
        w[i] = static_cast<uint8_t>((i * 37 + i / K) & 0xFF);
        if ((w[i] & 0x7F) == 0x7F) w[i] = 0x7E;  // the scalar path decodes NaN codes as NaN
      }
      std::vector<float> wsf(((N + bk - 1) / bk) * nkb);
      for (size_t i = 0; i < wsf.size(); ++i)
        wsf[i] = std::ldexp(1.0f, static_cast<int>(i % 7) - 10);
      std::mt19937 g(3);
      std::uniform_int_distribution<int> code(0, 255);
      for (float odd : {0.0f, 65536.0f, 1.0f + std::ldexp(1.0f, -20)}) {
        std::vector<float> q(4 * K), s(4 * nkb);
        for (auto& v : q) {
          int c = code(g);
          if ((c & 0x7F) == 0x7F) c = 0x7E;
          v = dec_e4m3(static_cast<uint8_t>(c));
        }
        for (size_t i = 0; i < s.size(); ++i) s[i] = std::ldexp(1.0f, -static_cast<int>(i % 5));
        if (odd != 0.0f) q[17] = odd;
        const Fp8BlockWeight W{
            w.data(), nullptr, wsf.data(), N, K, static_cast<int>(bk), static_cast<int>(bk)};
        const PackedFp8Weight P = pack_fp8_weight(W);
        ThreadPool pool(2);
        for (int64_t m = 1; m <= 4; ++m) {
          const QuantActs a{q.data(), s.data(), m, K, static_cast<int>(bk)};
          std::vector<float> expect(m * N), y(m * N);
          ref::fp8_gemm_cols(a, W, expect.data(), OutRound::kF32, 0, N);
          for (bool ext : {false, true}) {
            set_avx512_ext_enabled(ext);
            if (ext && avx512_ext_active()) {  // the path under test is the one that runs
              const detail::ExtActs e = fp8_ext_acts(a, N, bk);
              const bool bf16_acts = !(odd > 1.0f && odd < 2.0f);
              EXPECT_EQ(e.fp8_dot, bf16_acts && detail::dpbf16_is_sequential()) << "odd=" << odd;
            }
            for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool}) {
              std::fill(y.begin(), y.end(), -1.0f);
              fp8_gemm_packed(a, P, y.data(), OutRound::kF32, tp);
              for (int64_t i = 0; i < m * N; ++i)
                ASSERT_EQ(y[i], expect[i]) << "bk=" << bk << " N=" << N << " odd=" << odd
                                           << " m=" << m << " ext=" << ext << " i=" << i;
            }
          }
        }
      }
    }
  set_avx512_ext_enabled(true);
}

// The FP8 decode's shift path (K blocks with no E4M3 subnormal weight code) next to the
// table path (blocks with one) in the same GEMM: pack_fp8_weight's flags against a count made
// here from the raw codes, then every output against the scalar reference loop, bit for bit,
// for 32- and 128-wide blocks, M = 1..4, 1 and 2 threads, a ragged last group. The weights
// hold every normal code, both zeros and ±448 (0x7E / 0xFE); subnormal codes are placed in a
// few (group, K block) pairs only. Activations: E4M3 values (the shift path runs; checked on
// ExtActs), then one bf16 activation of 65536 and one of 2^-12, outside the shift path's
// range (x·2^112 would overflow / products could reach f32 subnormals): all blocks then take
// the tables, with the same bits.
TEST(BlockGemmExt, Fp8ShiftDecodeAndTableBlocksBitExact) {
  if (!avx512_ext_active() || !detail::dpbf16_is_sequential()) GTEST_SKIP() << "no AVX-512 ext";
  std::mt19937 g(41);
  for (int64_t bk : {32, 128})
    for (int64_t N : {200, 1000}) {
      const int64_t K = 4 * bk, nkb = K / bk, groups = (N + 63) / 64;
      std::vector<uint8_t> w(N * K);
      std::uniform_int_distribution<int> byte(0, 255);
      for (auto& c : w) {
        c = static_cast<uint8_t>(byte(g));
        if ((c & 0x7F) == 0x7F) c ^= 0x01;                    // no NaN codes
        if ((c & 0x78) == 0 && (c & 0x07) != 0) c |= 0x08;    // no subnormal codes yet
      }
      // subnormal codes in (group 0, K block 1), (group 2, K block 0) and the last group's
      // last K block (ragged rows included)
      const int64_t K1 = bk, Klast = K - 1;
      w[5 * K + K1 + 3] = 0x01;
      w[(2 * 64 + 63) * K + 7] = 0x87;
      w[(N - 1) * K + Klast] = 0x04;
      std::vector<uint8_t> flags(groups * nkb, 0);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) {
          const uint8_t c = w[n * K + k];
          if (e4m3_is_subnormal(c)) flags[(n / 64) * nkb + k / bk] = 1;
        }
      std::vector<float> wsf(((N + bk - 1) / bk) * nkb);
      for (size_t i = 0; i < wsf.size(); ++i)
        wsf[i] = std::ldexp(1.0f, static_cast<int>(i % 7) - 10);
      const Fp8BlockWeight W{w.data(), nullptr, wsf.data(), N, K, static_cast<int>(bk),
                             static_cast<int>(bk)};
      const PackedFp8Weight P = pack_fp8_weight(W);
      ASSERT_EQ(P.subnormal_blocks, flags) << "bk=" << bk << " N=" << N;
      ThreadPool pool(2);
      for (float odd : {0.0f, 65536.0f, std::ldexp(1.0f, -12)}) {
        std::vector<float> q(4 * K), sx(4 * nkb);
        for (auto& v : q) {
          int c = byte(g);
          if ((c & 0x7F) == 0x7F) c = 0x7E;
          v = dec_e4m3(static_cast<uint8_t>(c));  // every E4M3 value, subnormals and zeros
        }
        for (size_t i = 0; i < sx.size(); ++i) sx[i] = std::ldexp(1.0f, -static_cast<int>(i % 5));
        if (odd != 0.0f) q[K + 17] = odd;  // activation row 1
        for (int64_t m = 1; m <= 4; ++m) {
          const QuantActs a{q.data(), sx.data(), m, K, static_cast<int>(bk)};
          detail::ExtActs e;
          detail::prepare_ext_acts(a, detail::Src{detail::Src::kFp8Packed, P.codes.data(),
                                                  nullptr, nullptr, nullptr,
                                                  P.subnormal_blocks.data(), N, K,
                                                  static_cast<int>(bk)},
                                   &e);
          ASSERT_TRUE(e.fp8_dot);
          const bool in_range = odd == 0.0f || m == 1;  // the odd value sits in row 1
          ASSERT_EQ(e.pairs112.empty(), !in_range) << "odd=" << odd << " m=" << m;
          for (size_t i = 0; i < e.pairs112.size(); ++i)
            for (int h = 0; h < 2; ++h) {  // pairs112 holds x·2^112 in the pairs' places
              const uint32_t b112 = (e.pairs112[i] >> (16 * (1 - h))) << 16;
              float v;
              std::memcpy(&v, &b112, 4);
              ASSERT_EQ(v, q[2 * i + h] * 0x1p112f) << "i=" << i;
            }
          std::vector<float> expect(m * N), y(m * N);
          ref::fp8_gemm_cols(a, W, expect.data(), OutRound::kF32, 0, N);
          for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool}) {
            std::fill(y.begin(), y.end(), -1.0f);
            fp8_gemm_packed(a, P, y.data(), OutRound::kF32, tp);
            for (int64_t i = 0; i < m * N; ++i)
              ASSERT_EQ(std::memcmp(&y[i], &expect[i], 4), 0)
                  << "bk=" << bk << " N=" << N << " odd=" << odd << " m=" << m << " i=" << i;
          }
        }
      }
    }
}

// Flags are not kept when every block has a subnormal code (nothing for the shift path).
TEST(BlockGemmExt, Fp8SubnormalFlagsDroppedWhenEveryBlockHasOne) {
  const int64_t N = 64, K = 64;
  std::vector<uint8_t> w(N * K, 0x38);  // 1.0
  std::vector<uint8_t> ws(2 * 2, 127);
  const Fp8BlockWeight W{w.data(), ws.data(), nullptr, N, K, 32, 32};
  EXPECT_EQ(pack_fp8_weight(W).subnormal_blocks, std::vector<uint8_t>(2, 0));
  w[0] = 0x05;  // K block 0
  EXPECT_EQ(pack_fp8_weight(W).subnormal_blocks, (std::vector<uint8_t>{1, 0}));
  w[40] = 0x81;  // K block 1
  EXPECT_TRUE(pack_fp8_weight(W).subnormal_blocks.empty());
}


// Prefill (M > 4) on the VDPBF16PS panel path: activations and weights whose products
// alternate between large (E4M3 exponents near the top) and small ones with full mantissas,
// so the chain's partial sums round and the order of every addition shows in the f32 output.
// Every output equals the scalar reference loop's bit for bit (FP8 with 32- and 128-wide
// blocks, FP4; M = 29: the 12-, 4- and 1-row blocks; 1 and 2 threads); a chain that adds each
// pair's second product first gives other bits somewhere (the inputs can tell the orders
// apart).
TEST(BlockGemmExt, PrefillPanelPairsBitExactWhereOrderMatters) {
  if (!avx512_ext_active() || !detail::dpbf16_is_sequential()) GTEST_SKIP() << "no AVX-512 ext";
  std::mt19937 g(97);
  std::uniform_int_distribution<int> mant(0, 7), sign(0, 1), big(11, 14), small(5, 8), f4(1, 7);
  auto e4m3 = [&](bool large) {
    return dec_e4m3(static_cast<uint8_t>((sign(g) << 7) | ((large ? big(g) : small(g)) << 3) |
                                         mant(g)));
  };
  auto enc = [](float v) {  // E4M3 byte of an E4M3 value
    for (int c = 0; c < 256; ++c)
      if ((c & 0x7F) != 0x7F && dec_e4m3(static_cast<uint8_t>(c)) == v) return static_cast<uint8_t>(c);
    ADD_FAILURE() << v;
    return uint8_t{0};
  };
  const int64_t M = 29, N = 128;
  ThreadPool pool(2);
  // Runs the GEMM on the calling thread, then on 2 threads: every output == expect.
  auto each_pool = [&](const std::function<void(ThreadPool*)>& gemm, std::vector<float>& y,
                       const std::vector<float>& expect, const char* what) {
    for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool}) {
      std::fill(y.begin(), y.end(), -1.0f);
      gemm(tp);
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_EQ(y[i], expect[i]) << what << " i=" << i << " threads=" << (tp ? 2 : 1);
    }
  };
  for (int64_t bk : {32, 128}) {
    const int64_t K = 2 * bk, nkb = K / bk;
    std::vector<float> q(M * K), sx(M * nkb, 1.0f);
    for (int64_t i = 0; i < M * K; ++i) q[i] = e4m3(i % 2 == 0);
    const QuantActs a{q.data(), sx.data(), M, K, static_cast<int>(bk)};
    ASSERT_TRUE(fp8_ext_acts(a, N, bk).panel_dot);
    // FP8 weights, f32 scales of 1.
    std::vector<uint8_t> w(N * K);
    std::vector<float> wv(N * K);
    for (int64_t i = 0; i < N * K; ++i) w[i] = enc(wv[i] = e4m3(i % 2 == 0));
    std::vector<float> ws(((N + bk - 1) / bk) * nkb, 1.0f);
    const Fp8BlockWeight W{w.data(), nullptr, ws.data(), N, K, static_cast<int>(bk),
                           static_cast<int>(bk)};
    std::vector<float> expect(M * N), y(M * N);
    ref::fp8_gemm_cols(a, W, expect.data(), OutRound::kF32, 0, N);
    const PackedFp8Weight P = pack_fp8_weight(W);
    each_pool([&](ThreadPool* tp) { fp8_gemm_packed(a, P, y.data(), OutRound::kF32, tp); }, y,
              expect, "fp8");
    int64_t differ = 0;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        float acc = 0.0f;
        for (int64_t kb = 0; kb < nkb; ++kb) {
          float p = 0.0f;
          for (int64_t k = kb * bk; k < (kb + 1) * bk; k += 2) {
            p = std::fma(q[m * K + k + 1], wv[n * K + k + 1], p);
            p = std::fma(q[m * K + k], wv[n * K + k], p);
          }
          acc = acc + p;
        }
        differ += acc != expect[m * N + n];
      }
    EXPECT_GT(differ, 0) << "bk=" << bk;
  }
  // FP4 weights (E2M1, unit scales) against the same kind of activations, act blocks of 32.
  const int64_t K = 128, nkb = K / 32;
  std::vector<float> q(M * K), sx(M * nkb, 1.0f);
  for (int64_t i = 0; i < M * K; ++i) q[i] = e4m3(i % 4 < 2);
  std::vector<uint8_t> w4(N * K / 2), ws4(N * nkb, 127);
  for (auto& b : w4) b = static_cast<uint8_t>(f4(g) | (sign(g) << 3) | (f4(g) << 4) | (sign(g) << 7));
  const Fp4Weight W4{w4.data(), ws4.data(), N, K, 32};
  const QuantActs a{q.data(), sx.data(), M, K, 32};
  std::vector<float> expect(M * N), y(M * N);
  ref::fp4_gemm_cols(a, W4, expect.data(), OutRound::kF32, 0, N);
  const PackedFp4Weight P4 = pack_fp4_weight(W4);
  each_pool([&](ThreadPool* tp) { fp4_gemm_packed(a, P4, y.data(), OutRound::kF32, tp); }, y,
            expect, "fp4");
}

}  // namespace
}  // namespace strata::kernels
