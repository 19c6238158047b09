// Tests for kernels/fp8_einsum: the packed AVX2 and scalar paths against a test-local f64
// loop over independently decoded weights, for row ranges, strides, M and thread counts.
#include "kernels/fp8_einsum.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/thread_pool.h"
#include "kernels/cpu_features.h"

namespace strata::kernels {
namespace {

float dec_e4m3(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const float v = e == 0 ? m * std::ldexp(1.0f, -9) : (1.0f + m / 8.0f) * std::ldexp(1.0f, e - 7);
  return (b & 0x80) ? -v : v;
}
float bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  std::memcpy(&f, &u, 4);
  return f;
}

// n random E4M3 codes, NaN codes (0x7F / 0xFF) replaced by `nan_to`.
std::vector<uint8_t> random_codes(std::mt19937& rng, int64_t n, uint8_t nan_to) {
  std::vector<uint8_t> codes(n);
  for (auto& c : codes) {
    c = static_cast<uint8_t>(rng());
    if ((c & 0x7f) == 0x7f) c = nan_to;
  }
  return codes;
}

// One activation row through every ISA mode (AVX2 only, AVX-512, AVX-512 + extension
// passes): each must give `want` bit for bit. Leaves both AVX-512 switches on.
void expect_one_row_all_modes(const std::vector<float>& x, const PackedFp8Weight& p,
                              const std::vector<float>& want, const std::string& what) {
  for (int mode : {0, 1, 2}) {
    set_avx512_enabled(mode >= 1);
    set_avx512_ext_enabled(mode == 2);
    std::vector<float> y(p.n, -7.0f);
    fp8_dequant_gemm_f64(x.data(), 1, p.k, p, 0, p.n, y.data(), p.n, nullptr);
    EXPECT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4)) << "mode " << mode << what;
  }
  set_avx512_enabled(true);
  set_avx512_ext_enabled(true);
}

TEST(Fp8Einsum, MatchesF64LoopBitExact) {
  std::mt19937 rng(11);
  // M = 5: the prefill pass's 3-row block and single rows (m = 2: single rows only)
  const int64_t N = 144, K = 96, B = 32, M = 5, ldx = K + 5, ldy = 150;
  const std::vector<uint8_t> codes = random_codes(rng, N * K, 0x10);  // no NaN codes
  std::vector<uint8_t> sc((N / B) * (K / B) + 8);
  for (auto& s : sc) s = static_cast<uint8_t>(120 + rng() % 10);
  for (const bool big_scale : {false, true}) {
  // a block scale of 2^8 sends the groups holding it from the direct one-row pass to the
  // f32-stage pass (mode 1); the VPERMT2B pass (mode 2) takes them
  if (big_scale) sc[1] = 135;
  std::vector<float> x(M * ldx);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = bf16(nd(rng));
  for (const PackedScales form : {PackedScales::kAuto, PackedScales::kF32}) {
  PackedFp8Weight p = pack_fp8_weight({codes.data(), sc.data(), nullptr, N, K, B, B}, form);
  ASSERT_EQ(p.scales_e8m0.empty(), form == PackedScales::kF32);
  ThreadPool pool(2);
  for (auto [nb, ne] : {std::pair<int64_t, int64_t>{0, 144}, {64, 128}, {8, 40}, {16, 21}}) {
    std::vector<float> want(M * ldy, -7.0f);
    for (int64_t r = 0; r < M; ++r)
      for (int64_t n = nb; n < ne; ++n) {
        double acc = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          const float w = dec_e4m3(codes[n * K + k]) * std::ldexp(1.0f, sc[(n / B) * (K / B) + k / B] - 127);
          acc += static_cast<double>(x[r * ldx + k]) * w;
        }
        want[r * ldy + (n - nb)] = bf16(static_cast<float>(acc));
      }
    for (Isa isa : {Isa::kScalar, Isa::kAvx2}) {
      const Isa old = active_isa();
      force_isa(isa);
      for (int mode : {0, 1, 2}) {  // AVX2 only, AVX-512, AVX-512 + extension paths
        set_avx512_enabled(mode >= 1);
        set_avx512_ext_enabled(mode == 2);
        for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool})
          for (const int64_t m : {int64_t{1}, int64_t{2}, M}) {  // the extension pass: M = 1
            std::vector<float> y(m * ldy, -7.0f);
            fp8_dequant_gemm_f64(x.data(), m, ldx, p, nb, ne, y.data(), ldy, tp);
            EXPECT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4))
                << "rows [" << nb << "," << ne << ") isa " << isa_name(active_isa())
                << " mode " << mode << " m " << m << " big scale " << big_scale
                << " f32 scales " << (form == PackedScales::kF32);
          }
      }
      force_isa(old);
    }
  }
  }
  }
}

// The grouped form (wo_a's G groups in one dispatch) gives, bit for bit, what one call per
// group gives (the per-group call is checked against the f64 loop above), for group sizes
// that are and are not whole packed groups (64 rows), M = 1 and 3, and 1-3 threads.
TEST(Fp8Einsum, GroupedMatchesOneCallPerGroup) {
  std::mt19937 rng(5);
  const int64_t N = 1024, K = 256, B = 32;
  const std::vector<uint8_t> codes = random_codes(rng, N * K, 0x10);
  std::vector<uint8_t> sc((N / B) * (K / B));
  for (auto& v : sc) v = static_cast<uint8_t>(118 + rng() % 12);
  const PackedFp8Weight p = pack_fp8_weight({codes.data(), sc.data(), nullptr, N, K, B, B});
  std::normal_distribution<float> nd;
  for (const int64_t groups : {int64_t{1}, int64_t{4}, int64_t{32}}) {  // R = 1024, 256, 32
    const int64_t R = N / groups, ldx = groups * K + 3, ldy = N + 5;
    for (const int64_t m : {int64_t{1}, int64_t{3}}) {
      std::vector<float> x(m * ldx);
      for (auto& v : x) v = bf16(nd(rng));
      std::vector<float> want(m * ldy, -7.0f);
      for (int64_t g = 0; g < groups; ++g)
        fp8_dequant_gemm_f64(x.data() + g * K, m, ldx, p, g * R, (g + 1) * R, want.data() + g * R,
                             ldy, nullptr);
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        std::vector<float> y(m * ldy, -7.0f);
        fp8_dequant_gemm_f64_grouped(x.data(), m, ldx, p, groups, K, y.data(), ldy, &pool);
        EXPECT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4))
            << "groups " << groups << " m " << m << " threads " << threads;
      }
    }
  }
}

// Block scales that are not powers of two (f32 scales, as a non-UE8M0 checkpoint would
// have): every ISA mode gives the f64 loop over fl32(v·s) weights at M = 1. (The AVX-512
// one-row pass leaves such groups to the f32-stage pass, whose products are fl32(v·s); the
// two differ by at most an f32 ulp per product, which the bf16 output hides here, so this
// checks the f32-scale handling of every path, not that choice.)
TEST(Fp8Einsum, F32ScalesThatAreNotPowersOfTwo) {
  std::mt19937 rng(17);
  const int64_t N = 128, K = 64, B = 32;
  const std::vector<uint8_t> codes = random_codes(rng, N * K, 0x10);
  std::vector<float> sc((N / B) * (K / B));
  for (auto& v : sc) v = std::ldexp(1.0f + static_cast<float>(rng() % 1000) / 997.0f, -3 + static_cast<int>(rng() % 5));
  const PackedFp8Weight p = pack_fp8_weight({codes.data(), nullptr, sc.data(), N, K, B, B});
  std::normal_distribution<float> nd;
  std::vector<float> x(K);
  for (auto& v : x) v = bf16(nd(rng));
  std::vector<float> want(N);
  for (int64_t n = 0; n < N; ++n) {
    double acc = 0.0;
    for (int64_t k = 0; k < K; ++k)
      acc += static_cast<double>(x[k]) * (dec_e4m3(codes[n * K + k]) * sc[(n / B) * (K / B) + k / B]);
    want[n] = bf16(static_cast<float>(acc));
  }
  expect_one_row_all_modes(x, p, want, "");
}

// The one-row passes on activations and scales far from 1 (f32 subnormals, 1e30, zeros of
// both signs; UE8M0 scales from 2^-100 to 2^100), for K blocks of 32 and 128 and for row
// blocks of 32, 128 and 4. With row blocks of 4 a tile's 8 rows have two scales, which the
// VPERMT2B pass (one scale per tile) must leave to the direct pass.
TEST(Fp8Einsum, OneRowExtremeValuesAndMixedTileScales) {
  std::mt19937 rng(23);
  const int64_t N = 192, K = 256;
  const std::vector<uint8_t> codes = random_codes(rng, N * K, 0x01);
  std::normal_distribution<float> nd;
  std::vector<float> x(K);
  for (int64_t k = 0; k < K; ++k) {
    const float v = bf16(nd(rng));
    switch (rng() % 8) {
      case 0: x[k] = v * 1e-40f; break;  // f32 subnormal
      case 1: x[k] = bf16(v * 1e30f); break;
      case 2: x[k] = bf16(v * 1e-30f); break;
      case 3: x[k] = (rng() & 1) ? 0.0f : -0.0f; break;
      default: x[k] = v;
    }
  }
  for (const int bn : {32, 128, 4})
    for (const int bk : {32, 128}) {
      std::vector<uint8_t> sc(((N + bn - 1) / bn) * (K / bk));
      for (auto& v : sc) v = static_cast<uint8_t>(27 + rng() % 201);  // 2^-100 .. 2^100
      const PackedFp8Weight p = pack_fp8_weight({codes.data(), sc.data(), nullptr, N, K, bn, bk});
      std::vector<float> want(N);
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          const double s = std::ldexp(1.0, sc[(n / bn) * (K / bk) + k / bk] - 127);
          acc += static_cast<double>(x[k]) * (static_cast<double>(dec_e4m3(codes[n * K + k])) * s);
        }
        want[n] = bf16(static_cast<float>(acc));
      }
      expect_one_row_all_modes(x, p, want,
                               " block_n " + std::to_string(bn) + " block_k " + std::to_string(bk));
    }
}

// UE8M0 scales of 2^120 and more: v·s overflows f32 (and bf16, where the reference
// dequantizes wo_a) for the largest codes, which the f32-stage pass reproduces (infinite or
// NaN outputs); the VPERMT2B pass must leave such groups to it. One group with a 2^125 scale
// block, one with 2^119: the extension mode gives the AVX-512 mode's bits.
TEST(Fp8Einsum, HugeScalesKeepTheF32StageOverflow) {
  std::mt19937 rng(29);
  const int64_t N = 128, K = 64, B = 32;
  const std::vector<uint8_t> codes = random_codes(rng, N * K, 0x7E);
  std::vector<uint8_t> sc((N / B) * (K / B), 120);
  sc[0] = 252;  // 2^125: rows 0-31, K 0-31
  sc[4] = 246;  // 2^119: rows 64-95
  const PackedFp8Weight p = pack_fp8_weight({codes.data(), sc.data(), nullptr, N, K, B, B});
  std::normal_distribution<float> nd;
  std::vector<float> x(K);
  for (auto& v : x) v = bf16(nd(rng));
  std::vector<float> y1(N), y2(N);
  set_avx512_enabled(true);
  set_avx512_ext_enabled(false);
  fp8_dequant_gemm_f64(x.data(), 1, K, p, 0, N, y1.data(), N, nullptr);
  set_avx512_ext_enabled(true);
  fp8_dequant_gemm_f64(x.data(), 1, K, p, 0, N, y2.data(), N, nullptr);
  int nonfinite = 0;
  for (float v : y1) nonfinite += !std::isfinite(v);
  EXPECT_GT(nonfinite, 0);  // the 2^125 block overflowed
  EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * 4));
}

}  // namespace
}  // namespace strata::kernels
