// Tests for kernels/block_gemm: hand-derived small cases (scales, nibble order, the
// block-sequential accumulation order) and bit-exact agreement with a test-local scalar
// transcription of the reference loop (kernel_cpu.py _block_scaled_gemm), across ISA,
// thread counts and batch composition.
#include "kernels/block_gemm.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "base/thread_pool.h"
#include "kernels/block_gemm_test_ref.h"
#include "kernels/cpu_features.h"

namespace strata::kernels {
namespace {

// Independent decoders (from the format definitions).
float dec_e4m3(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const float v = e == 0 ? m * std::ldexp(1.0f, -9) : (1.0f + m / 8.0f) * std::ldexp(1.0f, e - 7);
  return (b & 0x80) ? -v : v;
}
float dec_e8m0(uint8_t b) { return std::ldexp(1.0f, b - 127); }
float bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(BlockGemm, Fp8HandExampleTwoBlocks) {
  // K = 64 (two 32-blocks), N = 1. x = 1.0 -> act scale 2^-8, q = 256.
  // W = 1.0 everywhere; block scales 1.0 and 0.5: 32*256*2^-8*1 + 32*256*2^-8*0.5 = 48.
  std::vector<float> x(64, 1.0f);
  std::vector<uint8_t> w(64, 0x38);
  std::vector<uint8_t> ws = {127, 126};
  Fp8BlockWeight W{w.data(), ws.data(), nullptr, 1, 64, 32, 32};
  float y = 0;
  linear_fp8(x.data(), 1, W, &y, nullptr);
  EXPECT_EQ(y, 48.0f);
}

TEST(BlockGemm, Fp8AccumulatesScaledBlockPartialsSequentially) {
  // Block partials (after scaling) are 2^24, 1, 1. Sequential f32 accumulation gives
  // (2^24 + 1) -> 2^24 (tie to even), + 1 -> 2^24; an exact or reordered sum would give 2^24+2.
  std::vector<float> x(96, 1.0f);
  std::vector<uint8_t> w(96, 0x38);
  std::vector<uint8_t> ws = {127 + 19, 127 - 5, 127 - 5};  // 32*2^19 = 2^24, 32*2^-5 = 1
  Fp8BlockWeight W{w.data(), ws.data(), nullptr, 1, 96, 32, 32};
  std::vector<float> q(96), s(3);
  act_quant_fp8(x.data(), 1, 96, 32, ScaleFmt::kUe8m0, nullptr, q.data(), s.data());
  QuantActs a{q.data(), s.data(), 1, 96, 32};
  float y = 0;
  fp8_gemm(a, W, &y, OutRound::kF32, nullptr);
  EXPECT_EQ(y, 16777216.0f);
}

TEST(BlockGemm, Fp4HandExampleNibbleOrderAndGroupScales) {
  // K = 64, N = 1. x = 1 at even k, 0 at odd k (act scale 2^-8, q = 256 / 0).
  // Byte 0x72: low nibble (even k) = 1.0, high nibble (odd k) = 6.0.
  // Group scales 1 and 2: 16*256*2^-8*1 + 16*256*2^-8*2 = 16 + 32 = 48.
  std::vector<float> x(64);
  for (int k = 0; k < 64; ++k) x[k] = (k % 2 == 0) ? 1.0f : 0.0f;
  std::vector<uint8_t> w(32, 0x72);
  std::vector<uint8_t> ws = {127, 128};
  Fp4Weight W{w.data(), ws.data(), 1, 64, 32};
  float y = 0;
  linear_fp4(x.data(), 1, W, 32, &y, nullptr);
  EXPECT_EQ(y, 48.0f);
  // act block 64 (V4 style uses 128): same scale for both groups here
  linear_fp4(x.data(), 1, W, 64, &y, nullptr);
  EXPECT_EQ(y, 48.0f);
}

TEST(BlockGemm, OutputIsRoundedToBf16) {
  // partial = 32 * 256 * q_w; choose W so the f32 result is 1 + 2^-8 + 2^-9 -> bf16 1.0078125
  std::vector<float> x(32, 1.0f);
  std::vector<uint8_t> w(32, 0x00);
  w[0] = 0x38;  // 1.0
  w[1] = 0x08;  // 2^-6
  w[2] = 0x04;  // 4 * 2^-9 = 2^-7
  std::vector<uint8_t> ws = {127};
  Fp8BlockWeight W{w.data(), ws.data(), nullptr, 1, 32, 32, 32};
  float y = 0;
  linear_fp8(x.data(), 1, W, &y, nullptr);
  // exact f32 value 1 + 2^-6 + 2^-7 = 1.0234375 (bf16-representable: 3 bits after the point)
  EXPECT_EQ(y, 1.0234375f);
  w[3] = 0x03;  // + 3*2^-9 -> f32 1.029296875, nearest bf16 is 1.03125
  linear_fp8(x.data(), 1, W, &y, nullptr);
  EXPECT_EQ(y, 1.03125f);
}

// Scalar transcription of the reference loop.
void ref_fp8(const std::vector<float>& q, const std::vector<float>& s, int64_t M, int64_t K,
             const std::vector<uint8_t>& w, const std::vector<uint8_t>& ws, int64_t N, int bn,
             int bk, std::vector<float>* y) {
  const int64_t nkb = K / bk, sc = (K + bk - 1) / bk;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0;
      for (int64_t kb = 0; kb < nkb; ++kb) {
        float p = 0;
        for (int k = 0; k < bk; ++k) p = std::fma(q[m * K + kb * bk + k], dec_e4m3(w[n * K + kb * bk + k]), p);
        acc = acc + (p * s[m * nkb + kb]) * dec_e8m0(ws[(n / bn) * sc + kb]);
      }
      (*y)[m * N + n] = bf16(acc);
    }
}

struct Rand {
  std::mt19937 g{1234};
  std::vector<float> bf16_normal(size_t n, float scale) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = bf16(d(g));
    return v;
  }
  std::vector<uint8_t> bytes(size_t n, int lo, int hi) {
    std::uniform_int_distribution<int> d(lo, hi);
    std::vector<uint8_t> v(n);
    for (auto& x : v) x = static_cast<uint8_t>(d(g));
    return v;
  }
};

std::vector<uint8_t> random_e4m3(Rand& r, size_t n) {
  auto v = r.bytes(n, 0, 255);
  for (auto& b : v)
    if ((b & 0x7f) == 0x7f) b = 0x7e;  // no NaN codes
  return v;
}

TEST(BlockGemm, Fp8MatchesReferenceLoopBitExactAcrossIsaThreadsAndBatch) {
  Rand r;
  // M = 29: the panel path's 12-, 4- and 1-row blocks; N: 2 whole packed groups of 64 rows +
  // a ragged tile
  const int64_t M = 29, K = 128, N = 141;
  for (int bk : {32, 128}) {
    const int bn = bk;
    auto x = r.bf16_normal(M * K, 2.0f);
    auto w = random_e4m3(r, N * K);
    const int64_t sr = (N + bn - 1) / bn, sc = K / bk;
    auto ws = r.bytes(sr * sc, 110, 130);
    std::vector<float> q(M * K), s(M * (K / bk));
    act_quant_fp8(x.data(), M, K, bk, ScaleFmt::kUe8m0, nullptr, q.data(), s.data());
    std::vector<float> expect(M * N);
    ref_fp8(q, s, M, K, w, ws, N, bn, bk, &expect);
    Fp8BlockWeight W{w.data(), ws.data(), nullptr, N, K, bn, bk};
    QuantActs a{q.data(), s.data(), M, K, bk};
    for (Isa isa : {Isa::kScalar, Isa::kAvx2}) {
      force_isa(isa);
      for (int threads : {1, 3}) {
        ThreadPool pool(threads);
        std::vector<float> y(M * N, -1.0f);
        for (bool e512 : {false, true}) {  // panel path: AVX2, then 16 rows per zmm
          set_avx512_enabled(e512);
          fp8_gemm(a, W, y.data(), OutRound::kBf16, &pool);
          for (int64_t i = 0; i < M * N; ++i)
            ASSERT_EQ(y[i], expect[i]) << "i=" << i << " bk=" << bk << " avx512=" << e512;
        }
        // one row alone gives the same bits as inside the batch
        QuantActs a1{q.data() + 3 * K, s.data() + 3 * (K / bk), 1, K, bk};
        std::vector<float> y1(N);
        fp8_gemm(a1, W, y1.data(), OutRound::kBf16, &pool);
        for (int64_t n = 0; n < N; ++n) ASSERT_EQ(y1[n], expect[3 * N + n]);
        // repacked weights: same bits, for M = 1, 2 (register path) and 5 (panel path)
        // (with and without the AVX-512 decode path where the CPU has it)
        // both scale forms of the packed layout (UE8M0 bytes, f32)
        for (PackedScales form : {PackedScales::kAuto, PackedScales::kF32}) {
        const PackedFp8Weight P = pack_fp8_weight(W, form);
        ASSERT_EQ(P.scales_e8m0.empty(), form == PackedScales::kF32);
        ASSERT_EQ(P.scales.empty(), form == PackedScales::kAuto);
        for (int mode : {0, 1, 2}) {  // AVX2 only, AVX-512, AVX-512 + extension paths
          set_avx512_enabled(mode >= 1);
          set_avx512_ext_enabled(mode == 2);
          for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{3}, M}) {
            QuantActs am{q.data(), s.data(), m, K, bk};
            std::vector<float> yp(m * N, -1.0f);
            fp8_gemm_packed(am, P, yp.data(), OutRound::kBf16, &pool);
            for (int64_t i = 0; i < m * N; ++i)
              ASSERT_EQ(yp[i], expect[i]) << "packed m=" << m << " i=" << i << " mode=" << mode
                                          << " f32 scales=" << (form == PackedScales::kF32);
          }
        }
        }
      }
    }
    force_isa(Isa::kAvx2);
  }
}

TEST(BlockGemm, Fp4MatchesReferenceLoopBitExactAcrossIsaThreadsAndBatch) {
  Rand r;
  const int64_t M = 29, K = 256, N = 134;  // M: the panel path's 12-, 4- and 1-row blocks
  for (int act_block : {32, 128}) {
    auto x = r.bf16_normal(M * K, 1.0f);
    auto w = r.bytes(N * K / 2, 0, 255);
    auto ws = r.bytes(N * (K / 32), 115, 130);
    std::vector<float> q(M * K), s(M * (K / act_block));
    act_quant_fp8(x.data(), M, K, act_block, ScaleFmt::kUe8m0, nullptr, q.data(), s.data());
    std::vector<float> expect(M * N);
    testref::ref_fp4(q, s, M, K, act_block, w, ws, N, &expect);
    Fp4Weight W{w.data(), ws.data(), N, K, 32};
    QuantActs a{q.data(), s.data(), M, K, act_block};
    for (Isa isa : {Isa::kScalar, Isa::kAvx2}) {
      force_isa(isa);
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        std::vector<float> y(M * N, -1.0f);
        for (bool e512 : {false, true}) {
          set_avx512_enabled(e512);
          fp4_gemm(a, W, y.data(), OutRound::kBf16, &pool);
          for (int64_t i = 0; i < M * N; ++i) ASSERT_EQ(y[i], expect[i]) << "i=" << i << " avx512=" << e512;
        }
        // both scale forms of the packed layout (UE8M0 bytes, f32)
        for (PackedScales form : {PackedScales::kAuto, PackedScales::kF32}) {
        const PackedFp4Weight P = pack_fp4_weight(W, form);
        ASSERT_EQ(P.scales_e8m0.empty(), form == PackedScales::kF32);
        ASSERT_EQ(P.scales.empty(), form == PackedScales::kAuto);
        for (int mode : {0, 1, 2}) {  // AVX2 only, AVX-512, AVX-512 + extension paths
          set_avx512_enabled(mode >= 1);
          set_avx512_ext_enabled(mode == 2);
          for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{3}, M}) {
            QuantActs am{q.data(), s.data(), m, K, act_block};
            std::vector<float> yp(m * N, -1.0f);
            fp4_gemm_packed(am, P, yp.data(), OutRound::kBf16, &pool);
            for (int64_t i = 0; i < m * N; ++i)
              ASSERT_EQ(yp[i], expect[i]) << "packed m=" << m << " i=" << i << " mode=" << mode
                                          << " f32 scales=" << (form == PackedScales::kF32);
          }
        }
        }
      }
    }
    force_isa(Isa::kAvx2);
  }
}

TEST(BlockGemm, Fp8F32ScalesAndPartialColumnRange) {
  Rand r;
  const int64_t M = 2, K = 64, N = 10;
  auto x = r.bf16_normal(M * K, 1.0f);
  auto w = random_e4m3(r, N * K);
  std::vector<uint8_t> ws = {120, 121};  // 1 row-block (bn 32) x 2 col-blocks
  std::vector<float> wsf = {dec_e8m0(120), dec_e8m0(121)};
  std::vector<float> q(M * K), s(M * 2);
  act_quant_fp8(x.data(), M, K, 32, ScaleFmt::kUe8m0, nullptr, q.data(), s.data());
  QuantActs a{q.data(), s.data(), M, K, 32};
  std::vector<float> y1(M * N), y2(M * N, 0.0f);
  fp8_gemm(a, Fp8BlockWeight{w.data(), ws.data(), nullptr, N, K, 32, 32}, y1.data(), OutRound::kBf16, nullptr);
  ref::fp8_gemm_cols(a, Fp8BlockWeight{w.data(), nullptr, wsf.data(), N, K, 32, 32}, y2.data(),
                     OutRound::kBf16, 3, 7);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      if (n >= 3 && n < 7) {
        EXPECT_EQ(y2[m * N + n], y1[m * N + n]);
      } else {
        EXPECT_EQ(y2[m * N + n], 0.0f);  // outside the range: untouched
      }
    }
}

TEST(BlockGemm, PackedScaleFormFollowsTheCheckpointScales) {
  Rand r;
  const int64_t M = 2, K = 64, N = 70;
  auto x = r.bf16_normal(M * K, 1.0f);
  auto w = random_e4m3(r, N * K);
  auto w4 = r.bytes(N * K / 2, 0, 255);
  std::vector<float> q(M * K), s(M * 2);
  act_quant_fp8(x.data(), M, K, 32, ScaleFmt::kUe8m0, nullptr, q.data(), s.data());
  QuantActs a{q.data(), s.data(), M, K, 32};
  // FP8, 32x32 blocks: 3 row-blocks x 2 col-blocks. UE8M0 bytes 1..254 -> byte form
  // (1/32 byte per weight); a 0 byte (2^-127, an f32 subnormal) -> f32 form; f32 scales ->
  // f32 form. Every form gives the reference's bits.
  for (uint8_t extreme : {uint8_t{1}, uint8_t{254}, uint8_t{0}}) {
    std::vector<uint8_t> ws = {120, extreme, 127, 131, 126, 110};
    Fp8BlockWeight W{w.data(), ws.data(), nullptr, N, K, 32, 32};
    const PackedFp8Weight P = pack_fp8_weight(W);
    EXPECT_EQ(P.scales_e8m0.empty(), extreme == 0);
    const int64_t padded_rows = 128;  // 70 rows -> 2 packed groups of 64
    // + one subnormal flag per 64-row group and K block, none when every block has one
    EXPECT_TRUE(P.subnormal_blocks.empty() ||
                static_cast<int64_t>(P.subnormal_blocks.size()) == (padded_rows / 64) * (K / 32));
    EXPECT_EQ(P.bytes(), padded_rows * K + padded_rows * (K / 32) * (extreme == 0 ? 4 : 1) +
                             static_cast<int64_t>(P.subnormal_blocks.size()));
    std::vector<float> want(M * N), got(M * N);
    ref::fp8_gemm_cols(a, W, want.data(), OutRound::kF32, 0, N);
    for (int mode : {0, 1, 2}) {
      set_avx512_enabled(mode >= 1);
      set_avx512_ext_enabled(mode == 2);
      fp8_gemm_packed(a, P, got.data(), OutRound::kF32, nullptr);
      for (int64_t i = 0; i < M * N; ++i)
        ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << "i=" << i << " extreme=" << int(extreme) << " mode=" << mode;
    }
  }
  std::vector<float> wsf = {dec_e8m0(120), dec_e8m0(121), dec_e8m0(122), dec_e8m0(123), 0.75f, 3.0f};
  EXPECT_TRUE(pack_fp8_weight(Fp8BlockWeight{w.data(), nullptr, wsf.data(), N, K, 32, 32}).scales_e8m0.empty());
  // FP4: a 255 (NaN) scale byte anywhere -> f32 form
  std::vector<uint8_t> ws4(N * (K / 32), 125);
  EXPECT_FALSE(pack_fp4_weight(Fp4Weight{w4.data(), ws4.data(), N, K, 32}).scales_e8m0.empty());
  ws4[77] = 255;
  EXPECT_TRUE(pack_fp4_weight(Fp4Weight{w4.data(), ws4.data(), N, K, 32}).scales_e8m0.empty());
}

// pack_fp4_weight's layout against the per-code definition in block_gemm.h (code (k, row n)
// at packed_code_offset(tile, k / 32) + packed_fp4_byte(k % 32, n % 8), nibble n % 2; scale at
// packed_scale_offset + n % 8), for a ragged row count (odd: a last pair without its odd row)
// and both scale forms; and pack_fp4_weight_stacked(top, bottom) == packing [top; bottom].
TEST(BlockGemm, Fp4PackingMatchesTheLayoutDefinitionAndStacks) {
  Rand r;
  const int64_t N = 77, K = 96, nkb = K / 32;
  const auto w = r.bytes(N * K / 2, 0, 255);
  auto ws = r.bytes(N * nkb, 110, 140);
  for (PackedScales form : {PackedScales::kAuto, PackedScales::kF32}) {
    const PackedFp4Weight P = pack_fp4_weight(Fp4Weight{w.data(), ws.data(), N, K, 32}, form);
    const int64_t tiles = (N + 63) / 64 * 8;  // padded to whole groups of 8 tiles
    std::vector<uint8_t> want(static_cast<size_t>(tiles * K * 4 + kPackedFp4Padding), 0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const uint8_t byte = w[n * (K / 2) + k / 2];
        const uint8_t code = k % 2 == 0 ? (byte & 0xf) : (byte >> 4);
        want[packed_code_offset(n / 8, k / 32, nkb, 32, 4) + packed_fp4_byte(k % 32, n % 8)] |=
            static_cast<uint8_t>(code << ((n % 2) * 4));
      }
    ASSERT_EQ(P.codes.size(), want.size());
    EXPECT_EQ(P.codes, want);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t kb = 0; kb < nkb; ++kb) {
        const int64_t di = packed_scale_offset(n / 8, kb, nkb) + n % 8;
        if (form == PackedScales::kAuto) {
          ASSERT_EQ(P.scales_e8m0[di], ws[n * nkb + kb]);
        } else {
          ASSERT_EQ(P.scales[di], dec_e8m0(ws[n * nkb + kb]));
        }
      }
    // stacked: rows [0, 40) over [40, 77) from two separate arrays
    const int64_t top = 40;
    const PackedFp4Weight S = pack_fp4_weight_stacked(
        Fp4Weight{w.data(), ws.data(), top, K, 32},
        Fp4Weight{w.data() + top * K / 2, ws.data() + top * nkb, N - top, K, 32}, form);
    EXPECT_EQ(S.n, N);
    EXPECT_EQ(S.codes, P.codes);
    EXPECT_EQ(S.scales_e8m0, P.scales_e8m0);
    EXPECT_EQ(S.scales, P.scales);
  }
}

// pack_fp8_weight's layout against block_gemm.h's definition (code (k, row n) at
// packed_code_offset(tile, k / bk) + packed_k_offset(k % bk) + n % 8), the subnormal-block
// flags (one subnormal code planted), and pack_fp8_weight_stacked(top, bottom) == packing
// [top; bottom] (top: whole 32-row scale blocks).
TEST(BlockGemm, Fp8PackingMatchesTheLayoutDefinitionAndStacks) {
  Rand r;
  const int64_t N = 77, K = 96, bk = 32, nkb = K / bk, sr = (N + 31) / 32;
  auto w = random_e4m3(r, N * K);
  for (auto& c : w)
    if ((c & 0x78) == 0) c |= 0x08;  // no subnormals but the planted one
  w[70 * K + 40] = 0x03;             // row 70 (group 1), K block 1
  const auto ws = r.bytes(sr * nkb, 110, 140);
  const PackedFp8Weight P = pack_fp8_weight(Fp8BlockWeight{w.data(), ws.data(), nullptr, N, K, 32, 32});
  const int64_t tiles = (N + 63) / 64 * 8;
  std::vector<uint8_t> want(static_cast<size_t>(tiles * K * 8), 0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      want[packed_code_offset(n / 8, k / bk, nkb, bk, 8) + packed_k_offset(k % bk, 8) + n % 8] =
          w[n * K + k];
  EXPECT_EQ(P.codes, want);
  ASSERT_EQ(P.subnormal_blocks.size(), static_cast<size_t>(2 * nkb));  // 2 groups of 64 rows
  for (int64_t i = 0; i < 2 * nkb; ++i) EXPECT_EQ(P.subnormal_blocks[i], i == nkb + 1 ? 1 : 0) << i;
  const int64_t top = 32;
  const PackedFp8Weight S = pack_fp8_weight_stacked(
      Fp8BlockWeight{w.data(), ws.data(), nullptr, top, K, 32, 32},
      Fp8BlockWeight{w.data() + top * K, ws.data() + (top / 32) * nkb, nullptr, N - top, K, 32, 32});
  EXPECT_EQ(S.n, N);
  EXPECT_EQ(S.codes, P.codes);
  EXPECT_EQ(S.scales_e8m0, P.scales_e8m0);
  EXPECT_EQ(S.scales, P.scales);
  EXPECT_EQ(S.subnormal_blocks, P.subnormal_blocks);
}

// gemm_packed_batch: several FP8 and FP4 GEMMs of different shapes and row counts in one
// dispatch give, for every thread count and kernel path, the bits of the scalar reference
// loops (ref_fp8 / testref::ref_fp4) of each job on its own.
TEST(BlockGemm, PackedBatchMatchesEachGemmAlone) {
  Rand r;
  struct Case {
    bool fp4;
    int64_t m, n, k;
  };
  // ragged row counts (not multiples of 64), a 1-group job, M = 1..5 (register and panel paths)
  const std::vector<Case> cases = {{true, 1, 200, 256}, {false, 1, 141, 128}, {true, 2, 64, 96},
                                   {false, 3, 300, 64},  {true, 5, 70, 64},    {false, 1, 8, 32}};
  struct Data {
    std::vector<float> q, s, expect;
    std::vector<uint8_t> w, ws;
    PackedFp8Weight p8;
    PackedFp4Weight p4;
  };
  std::vector<Data> d(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    Data& e = d[i];
    auto x = r.bf16_normal(c.m * c.k, 1.5f);
    e.q.resize(c.m * c.k);
    e.s.resize(c.m * (c.k / 32));
    act_quant_fp8(x.data(), c.m, c.k, 32, ScaleFmt::kUe8m0, nullptr, e.q.data(), e.s.data());
    e.expect.resize(c.m * c.n);
    if (c.fp4) {
      e.w = r.bytes(c.n * c.k / 2, 0, 255);
      e.ws = r.bytes(c.n * (c.k / 32), 115, 130);
      testref::ref_fp4(e.q, e.s, c.m, c.k, 32, e.w, e.ws, c.n, &e.expect);
      e.p4 = pack_fp4_weight(Fp4Weight{e.w.data(), e.ws.data(), c.n, c.k, 32});
    } else {
      e.w = random_e4m3(r, c.n * c.k);
      e.ws = r.bytes(((c.n + 31) / 32) * (c.k / 32), 110, 130);
      ref_fp8(e.q, e.s, c.m, c.k, e.w, e.ws, c.n, 32, 32, &e.expect);
      e.p8 = pack_fp8_weight(Fp8BlockWeight{e.w.data(), e.ws.data(), nullptr, c.n, c.k, 32, 32});
    }
  }
  const bool was512 = avx512_enabled();
  int64_t stolen_total = 0;
  for (int mode : {0, 1, 2}) {  // AVX2 only, AVX-512, AVX-512 + extension paths
    set_avx512_enabled(mode >= 1);
    set_avx512_ext_enabled(mode == 2);
    // The home split (its FP4 cost, or every group on the last thread so the others can only
    // take from its back) moves rows between threads, never the bits.
    for (int threads : {1, 2, 3, 5})
    for (int split : {0, 1, 2, 3}) {
      int64_t stolen = 0;
      BatchOptions opt;
      opt.fp4_weight_cost = split == 0 ? kFp4WeightCost : split == 1 ? 0.01 : 100.0;
      opt.home_on_last_thread = split == 3;
      opt.min_parallel_macs = 0;  // these small jobs too run on the pool
      opt.stolen_groups = &stolen;
      ThreadPool pool(threads);
      std::vector<std::vector<float>> y(cases.size());
      std::vector<PackedGemmJob> jobs;
      for (size_t i = 0; i < cases.size(); ++i) {
        const Case& c = cases[i];
        y[i].assign(c.m * c.n, -1.0f);
        PackedGemmJob j;
        j.a = QuantActs{d[i].q.data(), d[i].s.data(), c.m, c.k, 32};
        if (c.fp4) {
          j.fp4 = &d[i].p4;
        } else {
          j.fp8 = &d[i].p8;
        }
        j.y = y[i].data();
        jobs.push_back(j);
      }
      gemm_packed_batch(jobs.data(), static_cast<int64_t>(jobs.size()), &pool, opt);
      if (threads > 1) stolen_total += stolen;
      for (size_t i = 0; i < cases.size(); ++i)
        for (size_t e = 0; e < y[i].size(); ++e)
          ASSERT_EQ(y[i][e], d[i].expect[e]) << "job " << i << " element " << e << " threads "
                                              << threads << " mode " << mode << " split "
                                              << split;
    }
  }
  // The runs with every group homed on the last thread cannot finish without other threads
  // taking from its back (the caller thread starts at once with an empty range).
  EXPECT_GT(stolen_total, 0);
  set_avx512_enabled(was512);
  set_avx512_ext_enabled(true);  // as the tests above leave it
}

// Jobs on the very same activations (the w1|w3 GEMMs of several experts in decode) share
// one prepared copy of them in the batch; a job on other activations of the same shape has
// its own. Every output still matches its GEMM run alone.
TEST(BlockGemm, PackedBatchJobsSharingActivations) {
  Rand r;
  const int64_t K = 256;
  for (const int64_t m : {int64_t{1}, int64_t{2}}) {
    auto x = r.bf16_normal(m * K, 1.0f);
    std::vector<float> q(m * K), s(m * (K / 32));
    act_quant_fp8(x.data(), m, K, 32, ScaleFmt::kUe8m0, nullptr, q.data(), s.data());
    const QuantActs a{q.data(), s.data(), m, K, 32};
    // and one job on other activations of the same shape, which must not share a's copy
    auto x2 = r.bf16_normal(m * K, 1.0f);
    std::vector<float> q2(m * K), s2(m * (K / 32));
    act_quant_fp8(x2.data(), m, K, 32, ScaleFmt::kUe8m0, nullptr, q2.data(), s2.data());
    const QuantActs a2{q2.data(), s2.data(), m, K, 32};
    std::vector<PackedFp4Weight> w4;
    std::vector<PackedFp8Weight> w8;
    for (int i = 0; i < 3; ++i) {
      auto c = r.bytes(192 * K / 2, 0, 255), sc = r.bytes(192 * (K / 32), 118, 126);
      w4.push_back(pack_fp4_weight(Fp4Weight{c.data(), sc.data(), 192, K, 32}));
    }
    for (int i = 0; i < 2; ++i) {
      auto c = random_e4m3(r, 128 * K), sc = r.bytes(4 * (K / 32), 118, 126);
      w8.push_back(pack_fp8_weight(Fp8BlockWeight{c.data(), sc.data(), nullptr, 128, K, 32, 32}));
    }
    // Order mixes the formats: fp4, fp8, fp4, fp4, fp8.
    const std::vector<std::pair<bool, int>> order = {{true, 0}, {false, 0}, {true, 1}, {true, 2}, {false, 1}};
    const size_t other = 2;  // this job reads a2
    std::vector<std::vector<float>> want(order.size()), got(order.size());
    std::vector<PackedGemmJob> jobs;
    for (size_t j = 0; j < order.size(); ++j) {
      const auto [fp4, i] = order[j];
      const int64_t n = fp4 ? 192 : 128;
      want[j].assign(m * n, -1.0f);
      got[j].assign(m * n, -2.0f);
      PackedGemmJob job;
      job.a = j == other ? a2 : a;
      if (fp4) {
        fp4_gemm_packed(job.a, w4[i], want[j].data(), OutRound::kBf16, nullptr);
        job.fp4 = &w4[i];
      } else {
        fp8_gemm_packed(job.a, w8[i], want[j].data(), OutRound::kBf16, nullptr);
        job.fp8 = &w8[i];
      }
      job.y = got[j].data();
      jobs.push_back(job);
    }
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      BatchOptions opt;
      opt.min_parallel_macs = 0;
      gemm_packed_batch(jobs.data(), static_cast<int64_t>(jobs.size()), &pool, opt);
      for (size_t j = 0; j < order.size(); ++j)
        EXPECT_EQ(got[j], want[j]) << "job " << j << " m " << m << " threads " << threads;
    }
    // Under the default size threshold (M = 1 here: ~213K multiply-adds) this batch runs on
    // the calling thread: with every group homed on the last thread, nothing is taken from
    // it, and the bits hold.
    if (m != 1) continue;
    ThreadPool pool(2);
    int64_t stolen = -1;
    BatchOptions small;
    small.home_on_last_thread = true;
    small.stolen_groups = &stolen;
    for (auto& g : got) std::fill(g.begin(), g.end(), -3.0f);
    gemm_packed_batch(jobs.data(), static_cast<int64_t>(jobs.size()), &pool, small);
    EXPECT_EQ(stolen, 0);
    for (size_t j = 0; j < order.size(); ++j) EXPECT_EQ(got[j], want[j]) << "inline, job " << j;
  }
}

}  // namespace
}  // namespace strata::kernels
