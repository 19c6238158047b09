// Block-scaled FP8 / FP4 GEMMs (see block_gemm.h for the reduction order and its source).
//
// Structure: output columns are processed in tiles of 8 weight rows, in groups of kGroup
// tiles. For each K block the group's weights are decoded once into transposed [block][8]
// f32 panels; then every activation row m runs the sequential-FMA partial over the block
// for the 8 columns of each tile at once (lane l = column n0+l, so each output sees exactly
// the scalar order; the kGroup tiles are independent FMA chains that hide latency), and adds
// the scaled partial to its f32 accumulator. The AVX2 path decodes with vector code (FP8 via
// F16C half conversion, FP4 via a lane permute) and uses the same arithmetic, so it is
// bit-identical to the scalar path. Packed weights ([N/8][K][8] layout) avoid the 8x8
// transposes the raw checkpoint layout needs.
#include "kernels/block_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/phase_profile.h"
#include "base/scratch.h"
#include "base/thread_pool.h"
#include "kernels/cpu_features.h"
#include "kernels/block_gemm_internal.h"
#include "kernels/simd_decode.h"
#include "kernels/matmul.h"

namespace strata::kernels {
namespace {

using detail::kTile;
using detail::round_out;
using detail::ExtActs;
using detail::Src;

constexpr int kGroup = 4;

struct Luts {
  std::array<float, 256> e4m3{};
  std::array<float, 256> e8m0{};
  std::array<float, 16> e2m1{};
  Luts() {
    for (int b = 0; b < 256; ++b) {
      const int exp = (b >> 3) & 0xf, mant = b & 7;
      float v;
      if (exp == 15 && mant == 7) {
        v = NAN;
      } else if (exp == 0) {
        v = std::ldexp(static_cast<float>(mant), -9);
      } else {
        v = std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, exp - 7);
      }
      e4m3[b] = (b & 0x80) ? -v : v;
      e8m0[b] = b == 255 ? NAN : std::ldexp(1.0f, b - 127);
    }
    for (int c = 0; c < 16; ++c) e2m1[c] = quant::e2m1_decode(static_cast<uint8_t>(c));
  }
};
const Luts& luts() {
  static const Luts l;
  return l;
}

// Tiles of 8 rows, rounded up to whole groups of kPackGroup (packed layouts).
inline int64_t padded_tiles(int64_t n) {
  const int64_t tiles = (n + kTile - 1) / kTile;
  return (tiles + kPackGroup - 1) / kPackGroup * kPackGroup;
}

// ---- scalar panel fill: panel [bk][8] for rows n0..n0+7 (rows >= n are zero), sw [8]
void fill_panel_scalar(const Src& s, int64_t n0, int64_t kb, float* panel, float* sw) {
  const Luts& L = luts();
  const int bk = s.bk;
  const int64_t nkb = s.k / bk;
  for (int l = 0; l < kTile; ++l) {
    const int64_t n = n0 + l;
    if (n >= s.n) {
      sw[l] = 0.0f;
      for (int k = 0; k < bk; ++k) panel[k * kTile + l] = 0.0f;
      continue;
    }
    const int64_t k0 = kb * bk;
    switch (s.kind) {
      case Src::kFp8Raw: {
        const int64_t si = (n / s.block_n) * ((s.k + bk - 1) / bk) + kb;
        sw[l] = s.scales_e8m0 ? L.e8m0[s.scales_e8m0[si]] : s.scales_f32[si];
        const uint8_t* src = s.codes + n * s.k + k0;
        for (int k = 0; k < bk; ++k) panel[k * kTile + l] = L.e4m3[src[k]];
        break;
      }
      case Src::kFp8Packed: {
        sw[l] = s.pscales(n0 / kTile, kb).at(l);
        const uint8_t* src = s.pcodes(n0 / kTile, kb) + l;
        for (int k = 0; k < bk; ++k) panel[k * kTile + l] = L.e4m3[src[packed_k_offset(k, kTile)]];
        break;
      }
      case Src::kFp4Raw: {
        sw[l] = L.e8m0[s.scales_e8m0[n * nkb + kb]];
        const uint8_t* src = s.codes + n * (s.k / 2) + k0 / 2;
        for (int j = 0; j < bk / 2; ++j) {
          panel[(2 * j) * kTile + l] = L.e2m1[src[j] & 0xf];
          panel[(2 * j + 1) * kTile + l] = L.e2m1[src[j] >> 4];
        }
        break;
      }
      case Src::kFp4Packed: {
        sw[l] = s.pscales(n0 / kTile, kb).at(l);
        const uint8_t* src = s.pcodes(n0 / kTile, kb);
        const int shift = (l % 2) * 4;
        for (int k = 0; k < bk; ++k)
          panel[k * kTile + l] = L.e2m1[(src[packed_fp4_byte(k, l)] >> shift) & 0xf];
        break;
      }
    }
  }
}

// acc[m][g][8] += (Σ_k fma-seq x[m][k0+k] * panel_g[k]) * sx[m] * sw_g   for g < ng
void accumulate_scalar(const float* panels, const float* sws, int ng, int bk, const QuantActs& a,
                       int64_t kb, float* acc) {
  const int64_t K = a.k;
  const int64_t act_per = a.block / bk;
  const int64_t ldsx = K / a.block;
  for (int64_t m = 0; m < a.m; ++m) {
    const float* xr = a.q + m * K + kb * bk;
    const float sx = a.scales[m * ldsx + kb / act_per];
    for (int g = 0; g < ng; ++g) {
      const float* panel = panels + g * bk * kTile;
      float p[kTile] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int k = 0; k < bk; ++k)
        for (int l = 0; l < kTile; ++l) p[l] = std::fma(xr[k], panel[k * kTile + l], p[l]);
      float* ac = acc + (m * kGroup + g) * kTile;
      for (int l = 0; l < kTile; ++l) ac[l] = ac[l] + (p[l] * sx) * sws[g * kTile + l];
    }
  }
}

void gemm_cols_scalar(const QuantActs& a, const Src& s, float* y, OutRound out, int64_t n_begin,
                      int64_t n_end) {
  const int bk = s.bk;
  const int64_t nkb = s.k / bk;
  std::vector<float> panels(static_cast<size_t>(kGroup * bk * kTile));
  std::vector<float> sws(kGroup * kTile);
  std::vector<float> acc(static_cast<size_t>(a.m * kGroup * kTile));
  for (int64_t g0 = n_begin; g0 < n_end; g0 += kGroup * kTile) {
    const int ng = static_cast<int>(std::min<int64_t>(kGroup, (n_end - g0 + kTile - 1) / kTile));
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t kb = 0; kb < nkb; ++kb) {
      for (int g = 0; g < ng; ++g) {
        fill_panel_scalar(s, g0 + g * kTile, kb, panels.data() + g * bk * kTile,
                          sws.data() + g * kTile);
      }
      accumulate_scalar(panels.data(), sws.data(), ng, bk, a, kb, acc.data());
    }
    for (int64_t m = 0; m < a.m; ++m)
      for (int g = 0; g < ng; ++g)
        for (int l = 0; l < kTile; ++l) {
          const int64_t n = g0 + g * kTile + l;
          if (n < n_end && n < s.n) y[m * s.n + n] = round_out(acc[(m * kGroup + g) * kTile + l], out);
        }
  }
}

// ---- AVX2 path ----
#define STRATA_AVX2 __attribute__((target("avx2,fma,f16c")))


STRATA_AVX2 inline void transpose8_store(const float* rows, int ld, float* out) {
  // rows: 8 rows of 8 floats (stride ld); out: 8 x 8, out[j*8 + l] = rows[l*ld + j]
  __m256 r0 = _mm256_loadu_ps(rows + 0 * ld), r1 = _mm256_loadu_ps(rows + 1 * ld);
  __m256 r2 = _mm256_loadu_ps(rows + 2 * ld), r3 = _mm256_loadu_ps(rows + 3 * ld);
  __m256 r4 = _mm256_loadu_ps(rows + 4 * ld), r5 = _mm256_loadu_ps(rows + 5 * ld);
  __m256 r6 = _mm256_loadu_ps(rows + 6 * ld), r7 = _mm256_loadu_ps(rows + 7 * ld);
  __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
  __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
  __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(out + 0 * 8, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(out + 1 * 8, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(out + 2 * 8, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(out + 3 * 8, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(out + 4 * 8, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(out + 5 * 8, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(out + 6 * 8, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(out + 7 * 8, _mm256_permute2f128_ps(u3, u7, 0x31));
}

// panel [bk][ldk] (ldk = kTile: one tile's panel; 32 with four tiles interleaved, the AVX-512
// prefill layout): row k's 8 lanes at panel + k * ldk. ldk != kTile only for the packed kinds.
STRATA_AVX2 void fill_panel_avx2(const Src& s, int64_t n0, int64_t kb, float* panel, float* sw,
                                 float* rowbuf /* [8][bk] */, int64_t ldk = kTile) {
  const int bk = s.bk;
  const int64_t k0 = kb * bk;
  const bool full = n0 + kTile <= s.n;
  if (!full) {  // ragged last tile: scalar
    STRATA_CHECK(ldk == kTile);
    fill_panel_scalar(s, n0, kb, panel, sw);
    return;
  }
  const Luts& L = luts();
  const int64_t nkb = s.k / bk;
  constexpr float kFold = 256.0f;  // see decode16_e4m3
  __m256 lo, hi;
  switch (s.kind) {
    case Src::kFp8Packed: {
      for (int l = 0; l < kTile; ++l) sw[l] = s.pscales(n0 / kTile, kb).at(l) * kFold;
      const uint8_t* src = s.pcodes(n0 / kTile, kb);
      for (int k = 0; k < bk; k += 2) {
        simd::decode16_e4m3(src + packed_k_offset(k, kTile), &lo, &hi);
        _mm256_storeu_ps(panel + k * ldk, lo);
        _mm256_storeu_ps(panel + (k + 1) * ldk, hi);
      }
      return;
    }
    case Src::kFp4Packed: {
      for (int l = 0; l < kTile; ++l) sw[l] = s.pscales(n0 / kTile, kb).at(l) * kFold;
      const uint8_t* src = s.pcodes(n0 / kTile, kb);
      for (int k = 0; k < bk; k += 2) {  // the transposed tile chunks (block_gemm.h)
        simd::decode16_e2m1_bytes(
            simd::fp4_pair_bytes(src + packed_k_offset(k - k % kPackChunkK, kTile / 2), k), &lo,
            &hi);
        _mm256_storeu_ps(panel + k * ldk, lo);
        _mm256_storeu_ps(panel + (k + 1) * ldk, hi);
      }
      return;
    }
    case Src::kFp8Raw: {
      const int64_t scols = (s.k + bk - 1) / bk;
      for (int l = 0; l < kTile; ++l) {
        const int64_t n = n0 + l;
        const int64_t si = (n / s.block_n) * scols + kb;
        sw[l] = (s.scales_e8m0 ? L.e8m0[s.scales_e8m0[si]] : s.scales_f32[si]) * kFold;
        const uint8_t* src = s.codes + n * s.k + k0;
        for (int k = 0; k < bk; k += 16) {
          simd::decode16_e4m3(src + k, &lo, &hi);
          _mm256_storeu_ps(rowbuf + l * bk + k, lo);
          _mm256_storeu_ps(rowbuf + l * bk + k + 8, hi);
        }
      }
      break;
    }
    case Src::kFp4Raw: {
      for (int l = 0; l < kTile; ++l) {
        const int64_t n = n0 + l;
        sw[l] = L.e8m0[s.scales_e8m0[n * nkb + kb]] * kFold;
        const uint8_t* src = s.codes + n * (s.k / 2) + k0 / 2;
        for (int k = 0; k < bk; k += 16) {
          simd::decode16_e2m1(src + k / 2, &lo, &hi);
          _mm256_storeu_ps(rowbuf + l * bk + k, lo);
          _mm256_storeu_ps(rowbuf + l * bk + k + 8, hi);
        }
      }
      break;
    }
  }
  STRATA_CHECK(ldk == kTile);
  for (int k = 0; k < bk; k += 8) transpose8_store(rowbuf + k, bk, panel + k * kTile);
}

STRATA_AVX2 void accumulate_avx2(const float* panels, const float* sws, int ng, int bk,
                                 const QuantActs& a, int64_t kb, float* acc) {
  const int64_t K = a.k;
  const int64_t act_per = a.block / bk;
  const int64_t ldsx = K / a.block;
  const int64_t stride = static_cast<int64_t>(bk) * kTile;
  auto finish = [&](int64_t m, int g, __m256 p) __attribute__((always_inline, target("avx2,fma,f16c"))) {
    const __m256 sx = _mm256_set1_ps(a.scales[m * ldsx + kb / act_per]);
    float* ac = acc + (m * kGroup + g) * kTile;
    const __m256 t = _mm256_mul_ps(_mm256_mul_ps(p, sx), _mm256_loadu_ps(sws + g * kTile));
    _mm256_storeu_ps(ac, _mm256_add_ps(_mm256_loadu_ps(ac), t));
  };
  if (ng == kGroup) {
    int64_t m = 0;
    for (; m + 2 <= a.m; m += 2) {  // two rows x four tiles: 8 independent chains
      const float* x0 = a.q + m * K + kb * bk;
      const float* x1 = x0 + K;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
      for (int k = 0; k < bk; ++k) {
        const __m256 w0 = _mm256_loadu_ps(panels + k * kTile);
        const __m256 w1 = _mm256_loadu_ps(panels + stride + k * kTile);
        const __m256 w2 = _mm256_loadu_ps(panels + 2 * stride + k * kTile);
        const __m256 w3 = _mm256_loadu_ps(panels + 3 * stride + k * kTile);
        const __m256 xb = _mm256_set1_ps(x0[k]);
        const __m256 yb = _mm256_set1_ps(x1[k]);
        a0 = _mm256_fmadd_ps(xb, w0, a0);
        a1 = _mm256_fmadd_ps(xb, w1, a1);
        a2 = _mm256_fmadd_ps(xb, w2, a2);
        a3 = _mm256_fmadd_ps(xb, w3, a3);
        b0 = _mm256_fmadd_ps(yb, w0, b0);
        b1 = _mm256_fmadd_ps(yb, w1, b1);
        b2 = _mm256_fmadd_ps(yb, w2, b2);
        b3 = _mm256_fmadd_ps(yb, w3, b3);
      }
      finish(m, 0, a0);
      finish(m, 1, a1);
      finish(m, 2, a2);
      finish(m, 3, a3);
      finish(m + 1, 0, b0);
      finish(m + 1, 1, b1);
      finish(m + 1, 2, b2);
      finish(m + 1, 3, b3);
    }
    for (; m < a.m; ++m) {
      const float* x0 = a.q + m * K + kb * bk;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int k = 0; k < bk; ++k) {
        const __m256 xb = _mm256_set1_ps(x0[k]);
        a0 = _mm256_fmadd_ps(xb, _mm256_loadu_ps(panels + k * kTile), a0);
        a1 = _mm256_fmadd_ps(xb, _mm256_loadu_ps(panels + stride + k * kTile), a1);
        a2 = _mm256_fmadd_ps(xb, _mm256_loadu_ps(panels + 2 * stride + k * kTile), a2);
        a3 = _mm256_fmadd_ps(xb, _mm256_loadu_ps(panels + 3 * stride + k * kTile), a3);
      }
      finish(m, 0, a0);
      finish(m, 1, a1);
      finish(m, 2, a2);
      finish(m, 3, a3);
    }
    return;
  }
  for (int64_t m = 0; m < a.m; ++m) {
    const float* xr = a.q + m * K + kb * bk;
    for (int g = 0; g < ng; ++g) {
      const float* q = panels + g * stride;
      __m256 p = _mm256_setzero_ps();
      for (int k = 0; k < bk; ++k) p = _mm256_fmadd_ps(_mm256_set1_ps(xr[k]), _mm256_loadu_ps(q + k * kTile), p);
      finish(m, g, p);
    }
  }
}

// Small-M fast path for packed weights: decode straight into registers (no panel), one or
// two activation rows, kGroup tiles -> up to 8 independent FMA chains. Same arithmetic.
template <bool kFp4, int kRows>
STRATA_AVX2 inline void direct_block(const Src& s, int64_t g0, int ng, int64_t kb,
                                     const QuantActs& a, int64_t m0, float* acc) {
  const int bk = s.bk;
  const int64_t K = s.k, nkb = K / bk;
  const int64_t k0 = kb * bk;
  const int64_t act_per = a.block / bk, ldsx = K / a.block;
  constexpr int bytes_per_k = kFp4 ? kTile / 2 : kTile;
  const uint8_t* src[kGroup];
  for (int g = 0; g < kGroup; ++g) {
    const int gg = g < ng ? g : 0;
    src[g] = s.pcodes(g0 / kTile + gg, kb);
  }
  // Decode (M <= 4) streams 2 x kGroup arrays (codes and scales per tile) once; without
  // software prefetch the scale loads miss to DRAM on every K block (measured: ~30% of the
  // kernel's time stalled on them). Prefetch both kAhead blocks ahead.
  // The group's K block is one run shared by its two halves (tiles interleave every 4 K
  // indices): the first half prefetches all of it.
  if (m0 == 0) {
    constexpr int kAhead = 8;
    if (kb + kAhead < nkb) {
      const int64_t t0 = g0 / kTile;
      if (t0 % kPackGroup == 0) {
        const int64_t run = static_cast<int64_t>(bk) * bytes_per_k * kPackGroup;
        const char* c = reinterpret_cast<const char*>(s.pcodes(t0, kb + kAhead));
        for (int64_t off = 0; off < run; off += 64) _mm_prefetch(c + off, _MM_HINT_T0);
      }
      for (int g = 0; g < ng; ++g)
        _mm_prefetch(static_cast<const char*>(s.pscales(t0 + g, kb + kAhead).addr()), _MM_HINT_T0);
    }
  }
  // explicit registers (GCC keeps arrays of vectors in memory at -O2)
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;  // row 0, tiles 0..3
  __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;                   // row 1
  const float* x0 = a.q + m0 * K + k0;
  const float* x1 = x0 + K;
  // q: the tile's K block start (`off` is added here: FP4 reads its transposed chunk).
  auto dec = [](const uint8_t* q, int k, __m256* lo, __m256* hi) __attribute__((always_inline, target("avx2,fma,f16c"))) {
    if constexpr (kFp4) {
      simd::decode16_e2m1_bytes(
          simd::fp4_pair_bytes(q + packed_k_offset(k - k % kPackChunkK, bytes_per_k), k), lo, hi);
    } else {
      simd::decode16_e4m3(q + packed_k_offset(k, bytes_per_k), lo, hi);
    }
  };
  const uint8_t* s0 = src[0];
  const uint8_t* s1 = src[1];
  const uint8_t* s2 = src[2];
  const uint8_t* s3 = src[3];
  for (int k = 0; k < bk; k += 2) {
    __m256 w0l, w0h, w1l, w1h, w2l, w2h, w3l, w3h;
    dec(s0, k, &w0l, &w0h);
    dec(s1, k, &w1l, &w1h);
    dec(s2, k, &w2l, &w2h);
    dec(s3, k, &w3l, &w3h);
    __m256 xb = _mm256_set1_ps(x0[k]);
    a0 = _mm256_fmadd_ps(xb, w0l, a0);
    a1 = _mm256_fmadd_ps(xb, w1l, a1);
    a2 = _mm256_fmadd_ps(xb, w2l, a2);
    a3 = _mm256_fmadd_ps(xb, w3l, a3);
    if constexpr (kRows == 2) {
      const __m256 yb = _mm256_set1_ps(x1[k]);
      b0 = _mm256_fmadd_ps(yb, w0l, b0);
      b1 = _mm256_fmadd_ps(yb, w1l, b1);
      b2 = _mm256_fmadd_ps(yb, w2l, b2);
      b3 = _mm256_fmadd_ps(yb, w3l, b3);
    }
    xb = _mm256_set1_ps(x0[k + 1]);
    a0 = _mm256_fmadd_ps(xb, w0h, a0);
    a1 = _mm256_fmadd_ps(xb, w1h, a1);
    a2 = _mm256_fmadd_ps(xb, w2h, a2);
    a3 = _mm256_fmadd_ps(xb, w3h, a3);
    if constexpr (kRows == 2) {
      const __m256 yb = _mm256_set1_ps(x1[k + 1]);
      b0 = _mm256_fmadd_ps(yb, w0h, b0);
      b1 = _mm256_fmadd_ps(yb, w1h, b1);
      b2 = _mm256_fmadd_ps(yb, w2h, b2);
      b3 = _mm256_fmadd_ps(yb, w3h, b3);
    }
  }
  const __m256 p[2][kGroup] = {{a0, a1, a2, a3}, {b0, b1, b2, b3}};
  for (int r = 0; r < kRows; ++r) {
    const __m256 sx = _mm256_set1_ps(a.scales[(m0 + r) * ldsx + kb / act_per]);
    for (int g = 0; g < ng; ++g) {
      const detail::ScaleRef sr = s.pscales(g0 / kTile + g, kb);
      const __m256 sw = _mm256_mul_ps(simd::load_scales8(sr.f32, sr.e8m0),
                                      _mm256_set1_ps(256.0f));  // see decode16_e4m3
      float* ac = acc + ((m0 + r) * kGroup + g) * kTile;
      const __m256 t = _mm256_mul_ps(_mm256_mul_ps(p[r][g], sx), sw);
      _mm256_storeu_ps(ac, _mm256_add_ps(_mm256_loadu_ps(ac), t));
    }
  }
}

STRATA_AVX2 void gemm_cols_avx2(const QuantActs& a, const Src& s, const ExtActs* ext, float* y,
                                OutRound out, int64_t n_begin, int64_t n_end) {
  const int bk = s.bk;
  const int64_t nkb = s.k / bk;
  const bool packed = s.kind == Src::kFp8Packed || s.kind == Src::kFp4Packed;
  const bool use512 = avx512_active();
  if (packed && a.m <= 4 && s.bk % 2 == 0 && use512)
    n_begin = detail::gemm_cols_avx512(a, s, ext, y, out, n_begin, std::min(n_end, s.n));
  if (n_begin >= n_end) return;  // decode on AVX-512: no scratch needed below
  std::vector<float> panels(static_cast<size_t>(kGroup * bk * kTile));
  std::vector<float> rowbuf(static_cast<size_t>(kTile * bk));
  alignas(32) float sws[kGroup * kTile];
  std::vector<float> acc(static_cast<size_t>(a.m * kGroup * kTile));
  std::vector<float> panel32;  // sized on first use by the panel path (not in decode)
  std::vector<uint32_t> panel_pairs;  // the VDPBF16PS panel path's bf16 pairs
  const bool pair_dot = ext != nullptr && ext->panel_dot;
  auto accumulate_panel = [&](int64_t kb) {
    if (pair_dot) {
      panel_pairs.resize(static_cast<size_t>(kGroup * bk * kTile / 2));
      detail::accumulate_panel_pairs_avx512(panel32.data(), sws, bk, a, *ext, kb,
                                            panel_pairs.data(), acc.data());
    } else {
      detail::accumulate_panel32_avx512(panel32.data(), sws, bk, a, kb, acc.data());
    }
  };
  for (int64_t g0 = n_begin; g0 < n_end; g0 += kGroup * kTile) {
    const int ng = static_cast<int>(std::min<int64_t>(kGroup, (n_end - g0 + kTile - 1) / kTile));
    std::fill(acc.begin(), acc.end(), 0.0f);
    if (packed && a.m <= 4 && g0 + ng * kTile <= s.n) {
      for (int64_t kb = 0; kb < nkb; ++kb) {
        for (int64_t m0 = 0; m0 < a.m; m0 += 2) {
          const bool two = m0 + 2 <= a.m;
          if (s.kind == Src::kFp4Packed) {
            if (two) direct_block<true, 2>(s, g0, ng, kb, a, m0, acc.data());
            else direct_block<true, 1>(s, g0, ng, kb, a, m0, acc.data());
          } else {
            if (two) direct_block<false, 2>(s, g0, ng, kb, a, m0, acc.data());
            else direct_block<false, 1>(s, g0, ng, kb, a, m0, acc.data());
          }
        }
      }
    } else for (int64_t kb = 0; kb < nkb; ++kb) {
      if (packed && ng == kGroup && use512 && g0 + ng * kTile <= s.n) {
        // prefill on packed weights: decoded straight into the interleaved panel
        panel32.resize(static_cast<size_t>(kGroup * bk * kTile));
        for (int g = 0; g < kGroup; ++g)
          fill_panel_avx2(s, g0 + g * kTile, kb, panel32.data() + g * kTile, sws + g * kTile,
                          rowbuf.data(), kGroup * kTile);
        accumulate_panel(kb);
        continue;
      }
      for (int g = 0; g < ng; ++g) {
        fill_panel_avx2(s, g0 + g * kTile, kb, panels.data() + g * bk * kTile, sws + g * kTile,
                        rowbuf.data());
      }
      if (ng == kGroup && use512) {  // prefill: 16 rows per zmm over the interleaved panels
        panel32.resize(static_cast<size_t>(kGroup * bk * kTile));
        for (int k = 0; k < bk; ++k)
          for (int g = 0; g < kGroup; ++g)
            std::memcpy(&panel32[(k * kGroup + g) * kTile], &panels[(g * bk + k) * kTile], kTile * 4);
        accumulate_panel(kb);
      } else {
        accumulate_avx2(panels.data(), sws, ng, bk, a, kb, acc.data());
      }
    }
    for (int64_t m = 0; m < a.m; ++m)
      for (int g = 0; g < ng; ++g)
        for (int l = 0; l < kTile; ++l) {
          const int64_t n = g0 + g * kTile + l;
          if (n < n_end && n < s.n) y[m * s.n + n] = round_out(acc[(m * kGroup + g) * kTile + l], out);
        }
  }
}

bool have_f16c() {
  static const bool v = __builtin_cpu_supports("f16c");
  return v;
}

void run_cols(const QuantActs& a, const Src& s, const ExtActs* ext, float* y, OutRound out,
              int64_t b, int64_t e, bool avx) {
  if (avx) {
    gemm_cols_avx2(a, s, ext, y, out, b, e);
  } else {
    gemm_cols_scalar(a, s, y, out, b, e);
  }
}

// Bytes of weight codes and scales a GEMM over `s` reads (packed layouts; raw layouts: 0), for
// profile::PhaseScope.
double packed_bytes(const Src& s) {
  if (s.kind != Src::kFp8Packed && s.kind != Src::kFp4Packed) return 0;
  const double scales = static_cast<double>(s.n) * static_cast<double>(s.k / s.bk) *
                        (s.pscales_e8m0 != nullptr ? 1.0 : 4.0);
  return static_cast<double>(s.n) * static_cast<double>(s.k) * (s.fp4() ? 0.5 : 1.0) + scales;
}

// Splits N in whole groups of kPackGroup tiles (the packed layouts' streams) with
// ThreadPool::parallel_for_stealing: one contiguous home range per thread, read in address
// order, and groups taken from a slower thread's back at the end. (Measured earlier: handing
// out small ranges round-robin was no faster at 2 threads, 1-group ranges 25 % slower; the
// home ranges keep each thread's stream contiguous.) The extension paths' activation data
// is prepared once here, not per range and thread.
void run(const QuantActs& a, const Src& s, float* y, OutRound out, ThreadPool* pool) {
  profile::PhaseScope phase(s.fp4() ? "fp4 gemm" : "fp8 gemm", packed_bytes(s));
  const bool avx = active_isa() == Isa::kAvx2 && have_f16c();
  const int64_t n = s.n;
  const int64_t tiles = (n + kTile - 1) / kTile;
  thread_local ExtActs ext;
  const bool packed = s.kind == Src::kFp8Packed || s.kind == Src::kFp4Packed;
  const bool use_ext = avx && packed && avx512_active();
  if (use_ext) prepare_ext_acts(a, s, &ext);
  const ExtActs* e = use_ext ? &ext : nullptr;
  // Below ~256K multiply-adds a pool dispatch (several us) costs more than it saves.
  const bool small = a.m * n * s.k < (int64_t{1} << 18);
  if (pool == nullptr || pool->num_threads() <= 1 || tiles <= kPackGroup || small) {
    run_cols(a, s, e, y, out, 0, n, avx);
    return;
  }
  const int64_t groups = (tiles + kPackGroup - 1) / kPackGroup;
  pool->parallel_for_stealing(groups, [&](int64_t g0, int64_t g1) {
    run_cols(a, s, e, y, out, g0 * kPackGroup * kTile, std::min(n, g1 * kPackGroup * kTile), avx);
  });
}

void check_fp8(const QuantActs& a, const Fp8BlockWeight& w) {
  STRATA_CHECK(w.codes != nullptr && (w.scales_e8m0 != nullptr) != (w.scales_f32 != nullptr));
  STRATA_CHECK(w.block_k > 0 && w.block_k % 8 == 0 && w.block_n > 0 && w.k % w.block_k == 0);
  STRATA_CHECK(a.k == w.k && a.block == w.block_k);
}
void check_fp4(const QuantActs& a, int64_t k, int group) {
  STRATA_CHECK(group == 32);
  STRATA_CHECK(k % 32 == 0 && a.k == k && a.block % 32 == 0 && k % a.block == 0);
}

Src src_of(const Fp8BlockWeight& w) {
  Src s{Src::kFp8Raw};
  s.codes = w.codes;
  s.scales_e8m0 = w.scales_e8m0;
  s.scales_f32 = w.scales_f32;
  s.n = w.n;
  s.k = w.k;
  s.bk = w.block_k;
  s.block_n = w.block_n;
  return s;
}
Src src_of(const Fp4Weight& w) {
  Src s{Src::kFp4Raw};
  s.codes = w.packed;
  s.scales_e8m0 = w.scales_e8m0;
  s.n = w.n;
  s.k = w.k;
  s.bk = 32;
  return s;
}
Src src_of(const PackedFp8Weight& w) {
  Src s{Src::kFp8Packed};
  s.codes = w.codes.data();
  s.fp8_subnormal = w.subnormal_blocks.empty() ? nullptr : w.subnormal_blocks.data();
  s.scales_f32 = w.scales.empty() ? nullptr : w.scales.data();
  s.pscales_e8m0 = w.scales_e8m0.empty() ? nullptr : w.scales_e8m0.data();
  s.n = w.n;
  s.k = w.k;
  s.bk = w.block_k;
  return s;
}
Src src_of(const PackedFp4Weight& w) {
  Src s{Src::kFp4Packed};
  s.codes = w.codes.data();
  s.scales_f32 = w.scales.empty() ? nullptr : w.scales.data();
  s.pscales_e8m0 = w.scales_e8m0.empty() ? nullptr : w.scales_e8m0.data();
  s.n = w.n;
  s.k = w.k;
  s.bk = 32;
  return s;
}

}  // namespace

namespace ref {
void fp8_gemm_cols(const QuantActs& a, const Fp8BlockWeight& w, float* y, OutRound out,
                   int64_t n_begin, int64_t n_end) {
  check_fp8(a, w);
  gemm_cols_scalar(a, src_of(w), y, out, n_begin, n_end);
}
void fp4_gemm_cols(const QuantActs& a, const Fp4Weight& w, float* y, OutRound out,
                   int64_t n_begin, int64_t n_end) {
  STRATA_CHECK(w.packed != nullptr && w.scales_e8m0 != nullptr);
  check_fp4(a, w.k, w.group);
  gemm_cols_scalar(a, src_of(w), y, out, n_begin, n_end);
}
}  // namespace ref

void fp8_gemm(const QuantActs& a, const Fp8BlockWeight& w, float* y, OutRound out,
              ThreadPool* pool) {
  check_fp8(a, w);
  run(a, src_of(w), y, out, pool);
}

void fp4_gemm(const QuantActs& a, const Fp4Weight& w, float* y, OutRound out, ThreadPool* pool) {
  STRATA_CHECK(w.packed != nullptr && w.scales_e8m0 != nullptr);
  check_fp4(a, w.k, w.group);
  run(a, src_of(w), y, out, pool);
}

// True when every UE8M0 byte is a normal f32 power of two (1..254): the byte form applies.
bool e8m0_bytes_normal(const uint8_t* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (b[i] == 0 || b[i] == 255) return false;
  return true;
}

PackedFp8Weight pack_fp8_weight(const Fp8BlockWeight& w, PackedScales form) {
  Fp8BlockWeight none = w;
  none.codes = nullptr;
  none.scales_e8m0 = nullptr;
  none.scales_f32 = nullptr;
  none.n = 0;
  return pack_fp8_weight_stacked(w, none, form);
}

PackedFp8Weight pack_fp8_weight_stacked(const Fp8BlockWeight& top, const Fp8BlockWeight& bottom,
                                        PackedScales form) {
  const Fp8BlockWeight& w = top;
  STRATA_CHECK(w.codes != nullptr && (w.scales_e8m0 != nullptr) != (w.scales_f32 != nullptr));
  STRATA_CHECK(w.block_k > 0 && w.block_k % 8 == 0 && w.k % w.block_k == 0);
  STRATA_CHECK(bottom.n == 0 ||
               (bottom.codes != nullptr && bottom.k == w.k && bottom.block_k == w.block_k &&
                bottom.block_n == w.block_n && w.n % w.block_n == 0 &&
                (bottom.scales_e8m0 != nullptr) == (w.scales_e8m0 != nullptr) &&
                (bottom.scales_f32 != nullptr) == (w.scales_f32 != nullptr)));
  const Luts& L = luts();
  const int64_t N = top.n + bottom.n;
  PackedFp8Weight p;
  p.n = N;
  p.k = w.k;
  p.block_k = w.block_k;
  const int64_t tiles = padded_tiles(N), nkb = w.k / w.block_k, bk = w.block_k;
  const int64_t scols = (w.k + w.block_k - 1) / w.block_k;
  auto srows = [&](const Fp8BlockWeight& x) { return (x.n + x.block_n - 1) / x.block_n; };
  const bool bytes = form == PackedScales::kAuto && w.scales_e8m0 != nullptr &&
                     e8m0_bytes_normal(w.scales_e8m0, srows(w) * scols) &&
                     (bottom.n == 0 || e8m0_bytes_normal(bottom.scales_e8m0, srows(bottom) * scols));
  p.codes.assign(static_cast<size_t>(tiles * w.k * kTile), 0);
  const size_t nscales = static_cast<size_t>(tiles * kTile * nkb);
  if (bytes) {
    p.scales_e8m0.assign(nscales, 127);  // padding rows: 1.0 (their codes are zero)
  } else {
    p.scales.assign(nscales, 0.0f);
  }
  // Groups and K blocks holding an E4M3 subnormal code (padding rows are zero codes).
  p.subnormal_blocks.assign(static_cast<size_t>(tiles / kPackGroup * nkb), 0);
  std::vector<int64_t> koff(static_cast<size_t>(bk));  // packed_k_offset per K index in a block
  for (int64_t kk = 0; kk < bk; ++kk) koff[kk] = packed_k_offset(kk, kTile);
  for (int64_t n = 0; n < N; ++n) {
    const bool in_top = n < top.n;
    const Fp8BlockWeight& src = in_top ? top : bottom;
    const int64_t sn = in_top ? n : n - top.n;  // row in its source
    const int64_t t = n / kTile, l = n % kTile;
    uint8_t* sub = p.subnormal_blocks.data() + (t / kPackGroup) * nkb;
    const uint8_t* row = src.codes + sn * w.k;
    for (int64_t kb = 0; kb < nkb; ++kb) {
      uint8_t* dst = p.codes.data() + packed_code_offset(t, kb, nkb, bk, kTile) + l;
      const uint8_t* c = row + kb * bk;
      uint8_t any_sub = 0;
      for (int64_t kk = 0; kk < bk; ++kk) {
        dst[koff[kk]] = c[kk];
        any_sub |= static_cast<uint8_t>((c[kk] & 0x78) == 0 && (c[kk] & 0x07) != 0);
      }
      sub[kb] |= any_sub;
      const int64_t si = (sn / w.block_n) * scols + kb;
      const int64_t di = packed_scale_offset(t, kb, nkb) + l;
      if (bytes) {
        p.scales_e8m0[di] = src.scales_e8m0[si];
      } else {
        p.scales[di] = src.scales_e8m0 ? L.e8m0[src.scales_e8m0[si]] : src.scales_f32[si];
      }
    }
  }
  if (std::find(p.subnormal_blocks.begin(), p.subnormal_blocks.end(), 0) ==
      p.subnormal_blocks.end())
    p.subnormal_blocks.clear();  // every block flagged: nothing for the shift decode
  return p;
}

PackedFp4Weight pack_fp4_weight(const Fp4Weight& w, PackedScales form) {
  return pack_fp4_weight_stacked(w, Fp4Weight{nullptr, nullptr, 0, w.k, w.group}, form);
}

PackedFp4Weight pack_fp4_weight_stacked(const Fp4Weight& top, const Fp4Weight& bottom,
                                        PackedScales form) {
  STRATA_CHECK(top.packed != nullptr && top.scales_e8m0 != nullptr && top.group == 32 &&
               top.k % 32 == 0);
  STRATA_CHECK(bottom.n == 0 || (bottom.packed != nullptr && bottom.scales_e8m0 != nullptr &&
                                 bottom.group == 32 && bottom.k == top.k));
  const Luts& L = luts();
  const int64_t N = top.n + bottom.n, K = top.k, nkb = K / 32;
  PackedFp4Weight p;
  p.n = N;
  p.k = K;
  const int64_t tiles = padded_tiles(N);
  // Row n's codes and scales: the top weight's rows, then the bottom's.
  auto row_codes = [&](int64_t n) {
    return n < top.n ? top.packed + n * (K / 2) : bottom.packed + (n - top.n) * (K / 2);
  };
  auto row_scales = [&](int64_t n) {
    return n < top.n ? top.scales_e8m0 + n * nkb : bottom.scales_e8m0 + (n - top.n) * nkb;
  };
  const bool bytes = form == PackedScales::kAuto && e8m0_bytes_normal(top.scales_e8m0, top.n * nkb) &&
                     (bottom.n == 0 || e8m0_bytes_normal(bottom.scales_e8m0, bottom.n * nkb));
  p.codes.assign(static_cast<size_t>(tiles * K * (kTile / 2) + kPackedFp4Padding), 0);
  const size_t nscales = static_cast<size_t>(tiles * kTile * nkb);
  if (bytes) {
    p.scales_e8m0.assign(nscales, 127);
  } else {
    p.scales.assign(nscales, 0.0f);
  }
  // Where code (k, row l) of a K block goes, for the even rows (their odd neighbour shares the
  // byte, high nibble): one table instead of the offset arithmetic per code.
  int64_t off[32][kTile / 2];
  for (int k = 0; k < 32; ++k)
    for (int lp = 0; lp < kTile / 2; ++lp) off[k][lp] = packed_fp4_byte(k, 2 * lp);
  static const uint8_t kZeroRow[16] = {};
  for (int64_t t = 0; t * kTile < N; ++t) {
    for (int lp = 0; lp < kTile / 2; ++lp) {
      const int64_t r0 = t * kTile + 2 * lp, r1 = r0 + 1;
      if (r0 >= N) break;
      const uint8_t* s0 = row_codes(r0);
      const uint8_t* s1 = r1 < N ? row_codes(r1) : nullptr;
      for (int64_t kb = 0; kb < nkb; ++kb) {
        uint8_t* dst = p.codes.data() + packed_code_offset(t, kb, nkb, 32, kTile / 2);
        const uint8_t* a = s0 + kb * 16;
        const uint8_t* b = s1 ? s1 + kb * 16 : kZeroRow;
        for (int j = 0; j < 16; ++j) {  // byte j: codes k = 2j (low nibble), 2j + 1 (high)
          dst[off[2 * j][lp]] = static_cast<uint8_t>((a[j] & 0x0f) | ((b[j] & 0x0f) << 4));
          dst[off[2 * j + 1][lp]] = static_cast<uint8_t>((a[j] >> 4) | (b[j] & 0xf0));
        }
      }
    }
    for (int64_t l = 0; l < kTile && t * kTile + l < N; ++l) {
      const uint8_t* sc = row_scales(t * kTile + l);
      for (int64_t kb = 0; kb < nkb; ++kb) {
        const int64_t di = packed_scale_offset(t, kb, nkb) + l;
        if (bytes) {
          p.scales_e8m0[di] = sc[kb];
        } else {
          p.scales[di] = L.e8m0[sc[kb]];
        }
      }
    }
  }
  return p;
}

void fp8_gemm_packed(const QuantActs& a, const PackedFp8Weight& w, float* y, OutRound out,
                     ThreadPool* pool) {
  STRATA_CHECK(a.k == w.k && a.block == w.block_k);
  run(a, src_of(w), y, out, pool);
}

void fp4_gemm_packed(const QuantActs& a, const PackedFp4Weight& w, float* y, OutRound out,
                     ThreadPool* pool) {
  check_fp4(a, w.k, 32);
  run(a, src_of(w), y, out, pool);
}

void gemm_packed_batch(const PackedGemmJob* jobs, int64_t n_jobs, ThreadPool* pool,
                       const BatchOptions& options) {
  STRATA_CHECK(options.fp4_weight_cost > 0);
  const bool avx = active_isa() == Isa::kAvx2 && have_f16c();
  const bool use_ext = avx && avx512_active();
  struct Prep {
    Src s{Src::kFp8Packed};
    ExtActs ext;
    int64_t groups = 0, first = 0;  // 64-row groups; index of the first in the batch order
    double group_cost = 0;          // estimated time of one group (FP8 weight units)
    int64_t ext_of = -1;            // the job whose ext this one shares (same activations)
  };
  // Kept across calls on this thread (each Prep's activation buffers keep their capacity);
  // every field a job reads is set for it below. Not re-entrant: pool workers never start a
  // batch of their own.
  thread_local std::vector<Prep> t_prep;
  if (t_prep.size() < static_cast<size_t>(n_jobs)) t_prep.resize(static_cast<size_t>(n_jobs));
  Prep* const prep = t_prep.data();
  bool any_fp4 = false;
  double batch_bytes = 0;  // for the profile only
  for (int64_t j = 0; j < n_jobs; ++j) {
    any_fp4 = any_fp4 || jobs[j].fp4 != nullptr;
    if (profile::enabled() && jobs[j].a.m > 0)
      batch_bytes += jobs[j].fp4 != nullptr ? packed_bytes(src_of(*jobs[j].fp4))
                     : jobs[j].fp8 != nullptr ? packed_bytes(src_of(*jobs[j].fp8))
                                              : 0.0;
  }
  profile::PhaseScope phase(any_fp4 ? "gemm batch with fp4 (experts)" : "gemm batch fp8",
                            batch_bytes);
  double total = 0;
  int64_t all_groups = 0;
  for (int64_t j = 0; j < n_jobs; ++j) {
    const PackedGemmJob& job = jobs[j];
    STRATA_CHECK((job.fp8 != nullptr) != (job.fp4 != nullptr) && job.y != nullptr);
    Prep& p = prep[j];
    if (job.fp8 != nullptr) {
      STRATA_CHECK(job.a.k == job.fp8->k && job.a.block == job.fp8->block_k);
      p.s = src_of(*job.fp8);
    } else {
      check_fp4(job.a, job.fp4->k, 32);
      p.s = src_of(*job.fp4);
    }
    // Jobs on the same activations and weight format (e.g. the w1|w3 GEMMs of experts that
    // every token of the call routes to) share one prepared copy.
    p.ext_of = j;
    for (int64_t i = 0; i < j; ++i)
      if (prep[i].ext_of == i && prep[i].s.fp4() == p.s.fp4() && jobs[i].a.q == job.a.q &&
          jobs[i].a.scales == job.a.scales && jobs[i].a.m == job.a.m && jobs[i].a.k == job.a.k &&
          jobs[i].a.block == job.a.block && prep[i].s.bk == p.s.bk) {
        p.ext_of = i;
        break;
      }
    p.groups = job.a.m > 0 ? (p.s.n + kPackGroup * kTile - 1) / (kPackGroup * kTile) : 0;
    p.first = all_groups;
    all_groups += p.groups;
    p.group_cost = static_cast<double>(kPackGroup * kTile) * static_cast<double>(p.s.k) *
                   static_cast<double>(std::max<int64_t>(job.a.m, 1)) *
                   (p.s.fp4() ? options.fp4_weight_cost : 1.0);
    total += p.group_cost * static_cast<double>(p.groups);
  }
  // Groups [g0, g1) of job j.
  auto cols = [&](int64_t j, int64_t g0, int64_t g1) {
    const PackedGemmJob& job = jobs[j];
    const Prep& p = prep[j];
    const ExtActs* e = use_ext ? &prep[p.ext_of].ext : nullptr;
    run_cols(job.a, p.s, e, job.y, job.out, g0 * kPackGroup * kTile,
             std::min(p.s.n, g1 * kPackGroup * kTile), avx);
  };
  // As run(): below ~256K multiply-adds in all, a pool dispatch costs more than it saves.
  int64_t macs = 0;
  for (int64_t j = 0; j < n_jobs; ++j) macs += jobs[j].a.m * prep[j].s.n * prep[j].s.k;
  const int threads =
      pool == nullptr || macs < options.min_parallel_macs ? 1 : pool->num_threads();
  // The extension paths' activation data, once per distinct activations: over the pool when
  // the batch runs there (each job's prepared copy is its own; MoE experts each have their
  // own gathered rows, so a prefill prepares as many copies as it has picked experts).
  if (use_ext) {
    std::vector<int64_t> own;
    for (int64_t j = 0; j < n_jobs; ++j)
      if (prep[j].ext_of == j) own.push_back(j);
    auto prepare = [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        prepare_ext_acts(jobs[own[i]].a, prep[own[i]].s, &prep[own[i]].ext);
    };
    const int64_t n_own = static_cast<int64_t>(own.size());
    if (threads > 1 && n_own > 1) {
      pool->parallel_for(n_own, prepare);
    } else {
      prepare(0, n_own);
    }
  }
  if (threads <= 1 || total <= 0) {
    for (int64_t j = 0; j < n_jobs; ++j)
      if (prep[j].groups > 0) cols(j, 0, prep[j].groups);
    if (options.stolen_groups != nullptr) *options.stolen_groups = 0;
    return;
  }
  // Home ranges over the batch's groups (all jobs' groups in job order): thread t owns the
  // groups whose cost midpoint lies in [t, t+1) · total / threads; ThreadPool::
  // parallel_for_stealing runs them, moving groups from a slower thread's back to an idle one.
  std::vector<int64_t> home(threads + 1, all_groups);
  home[0] = 0;
  if (options.home_on_last_thread) {
    std::fill(home.begin(), home.end() - 1, 0);
  } else {
    double pos = 0;
    int next = 1;
    for (int64_t j = 0; j < n_jobs; ++j)
      for (int64_t g = 0; g < prep[j].groups; ++g, pos += prep[j].group_cost) {
        const double mid = pos + 0.5 * prep[j].group_cost;
        while (next < threads && mid >= total * next / threads) home[next++] = prep[j].first + g;
      }
  }
  // Batch groups [b0, b1) -> each job's part of it.
  auto run_units = [&](int64_t b0, int64_t b1) {
    for (int64_t j = 0; j < n_jobs && b0 < b1; ++j) {
      const int64_t lo = std::max(b0, prep[j].first), hi = std::min(b1, prep[j].first + prep[j].groups);
      if (lo < hi) cols(j, lo - prep[j].first, hi - prep[j].first);
    }
  };
  pool->parallel_for_stealing(all_groups, run_units, 4, home.data(), options.stolen_groups);
}

namespace {
// x quantized to FP8 with UE8M0 block scales into the calling thread's scratch (kept across
// calls; written whole here). The result is valid until the thread's next call.
QuantActs quantize_acts(const float* x, int64_t m, int64_t k, int block) {
  thread_local Scratch<float> s_q, s_s;
  float* const q = s_q.get(static_cast<size_t>(m * k));
  float* const s = s_s.get(static_cast<size_t>(m * (k / block)));
  act_quant_fp8(x, m, k, block, ScaleFmt::kUe8m0, nullptr, q, s);
  return QuantActs{q, s, m, k, block};
}
}  // namespace

void linear_fp8(const float* x, int64_t m, const Fp8BlockWeight& w, float* y, ThreadPool* pool) {
  fp8_gemm(quantize_acts(x, m, w.k, w.block_k), w, y, OutRound::kBf16, pool);
}

void linear_fp4(const float* x, int64_t m, const Fp4Weight& w, int act_block, float* y,
                ThreadPool* pool) {
  fp4_gemm(quantize_acts(x, m, w.k, act_block), w, y, OutRound::kBf16, pool);
}

void linear_fp8_packed(const float* x, int64_t m, const PackedFp8Weight& w, float* y,
                       ThreadPool* pool) {
  fp8_gemm_packed(quantize_acts(x, m, w.k, w.block_k), w, y, OutRound::kBf16, pool);
}

void linear_fp4_packed(const float* x, int64_t m, const PackedFp4Weight& w, int act_block,
                       float* y, ThreadPool* pool) {
  fp4_gemm_packed(quantize_acts(x, m, w.k, act_block), w, y, OutRound::kBf16, pool);
}

void linear_bf16(const float* x, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y,
                 OutRound out, ThreadPool* pool) {
  WeightMatrix wm{WType::kBF16, w, n, k};
  matmul(x, m, wm, y, pool);
  if (out == OutRound::kBf16) round_bf16_inplace(y, m * n);
}

}  // namespace strata::kernels
