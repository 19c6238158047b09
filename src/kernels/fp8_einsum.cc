// fp8_dequant_gemm_f64 (see fp8_einsum.h).
#include "kernels/fp8_einsum.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/phase_profile.h"
#include "base/thread_pool.h"
#include "kernels/act_quant.h"
#include "kernels/avx2_common.h"
#include "kernels/block_gemm_internal.h"
#include "kernels/cpu_features.h"
#include "kernels/simd_decode.h"

namespace strata::kernels {
namespace {

constexpr int kTile = 8;

inline float bf16_round(float v) { return round_bf16(v); }

float e4m3_value(uint8_t b) {
  const int e = (b >> 3) & 15, mm = b & 7;
  float v = (e == 15 && mm == 7) ? NAN
            : e == 0             ? std::ldexp(static_cast<float>(mm), -9)
                                 : std::ldexp(1.0f + mm / 8.0f, e - 7);
  return (b & 0x80) ? -v : v;
}
struct Table {
  float v[256];
  Table() {
    for (int b = 0; b < 256; ++b) v[b] = e4m3_value(static_cast<uint8_t>(b));
  }
};
const Table kTable;

// Dequantized weight of row (tile t, lane l) at k.
inline float weight_at(const PackedFp8Weight& w, int64_t t, int l, int64_t k) {
  const int64_t nkb = w.k / w.block_k, bk = w.block_k;
  const float s = detail::packed_scale_ref(w, t, k / bk, nkb).at(l);
  return kTable.v[w.codes[packed_code_offset(t, k / bk, nkb, bk, kTile) +
                            packed_k_offset(k % bk, kTile) + l]] * s;
}

void tiles_scalar(const float* x, int64_t m, int64_t ldx, const PackedFp8Weight& w, int64_t t0,
                  int64_t t1, int64_t n_begin, int64_t n_end, float* y, int64_t ldy) {
  for (int64_t t = t0; t < t1; ++t)
    for (int l = 0; l < kTile; ++l) {
      const int64_t n = t * kTile + l;
      if (n < n_begin || n >= n_end) continue;
      for (int64_t r = 0; r < m; ++r) {
        double acc = 0.0;
        for (int64_t k = 0; k < w.k; ++k)
          acc = std::fma(static_cast<double>(x[r * ldx + k]), static_cast<double>(weight_at(w, t, l, k)), acc);
        y[r * ldy + (n - n_begin)] = bf16_round(static_cast<float>(acc));
      }
    }
}

#define STRATA_AVX2_F16C STRATA_TARGET_F16C

// kNt tiles (8 rows each) at a time, all activation rows; f64 accumulators in memory
// between K blocks, in registers inside one (2 chains per tile: rows 0-3 and 4-7).
template <int kNt>
STRATA_AVX2_F16C void tiles_pass(const float* x, int64_t m, int64_t ldx, const PackedFp8Weight& w,
                                 int64_t t, double* acc) {
  const int64_t K = w.k, bk = w.block_k, nkb = K / bk;
  for (int64_t kb = 0; kb < nkb; ++kb) {
    __m256 sc[kNt];
    const uint8_t* src[kNt];
    for (int i = 0; i < kNt; ++i) {
      // the decode carries 2^-8; fold 256 into the (power-of-two) scale: exact
      const detail::ScaleRef r = detail::packed_scale_ref(w, t + i, kb, nkb);
      sc[i] = _mm256_mul_ps(simd::load_scales8(r.f32, r.e8m0), _mm256_set1_ps(256.0f));
      src[i] = &w.codes[packed_code_offset(t + i, kb, nkb, bk, kTile)];
    }
    for (int64_t r = 0; r < m; ++r) {
      double* ar = acc + r * kNt * kTile;
      __m256d a[kNt][2];
      for (int i = 0; i < kNt; ++i) {
        a[i][0] = _mm256_loadu_pd(ar + i * kTile);
        a[i][1] = _mm256_loadu_pd(ar + i * kTile + 4);
      }
      const float* xr = x + r * ldx + kb * bk;
      for (int64_t j = 0; j < bk; j += 2) {
        const __m256d x0 = _mm256_set1_pd(static_cast<double>(xr[j]));
        const __m256d x1 = _mm256_set1_pd(static_cast<double>(xr[j + 1]));
        for (int i = 0; i < kNt; ++i) {
          __m256 w0, w1;
          simd::decode16_e4m3(src[i] + packed_k_offset(j, kTile), &w0, &w1);
          w0 = _mm256_mul_ps(w0, sc[i]);
          w1 = _mm256_mul_ps(w1, sc[i]);
          a[i][0] = _mm256_fmadd_pd(x0, _mm256_cvtps_pd(_mm256_castps256_ps128(w0)), a[i][0]);
          a[i][1] = _mm256_fmadd_pd(x0, _mm256_cvtps_pd(_mm256_extractf128_ps(w0, 1)), a[i][1]);
          a[i][0] = _mm256_fmadd_pd(x1, _mm256_cvtps_pd(_mm256_castps256_ps128(w1)), a[i][0]);
          a[i][1] = _mm256_fmadd_pd(x1, _mm256_cvtps_pd(_mm256_extractf128_ps(w1, 1)), a[i][1]);
        }
      }
      for (int i = 0; i < kNt; ++i) {
        _mm256_storeu_pd(ar + i * kTile, a[i][0]);
        _mm256_storeu_pd(ar + i * kTile + 4, a[i][1]);
      }
    }
  }
}

// ---- AVX-512: one whole packed group (8 tiles = 64 rows) per pass, one zmm of 8 f64 per
// tile and activation row; two tiles decoded per instruction sequence.
#define STRATA_AVX512 STRATA_TARGET_AVX512
#define STRATA_AVX512_EXT STRATA_TARGET_AVX512_EXT
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// 64 f64 accumulators (8 tiles x 8 rows) of one activation row: named members, so GCC keeps
// them in registers.
// Bytes between consecutive tiles of a packed chunk (block_gemm.h layout).
constexpr int64_t kTs = kPackChunkK * kTile;
struct Acc64 {
  __m512d a0, a1, a2, a3, a4, a5, a6, a7;
};
// acc += f64(xk) * f64(u) for the 4 zmm of f32 weights u0..u3 (tile pairs 0..3).
STRATA_AVX512 inline __attribute__((always_inline)) __m512d lo(__m512 v) {
  return _mm512_cvtps_pd(_mm512_castps512_ps256(v));
}
STRATA_AVX512 inline __attribute__((always_inline)) __m512d hi(__m512 v) {
  return _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1));
}
STRATA_AVX512 inline __attribute__((always_inline)) void fma_tiles(Acc64& A, __m512d xk, __m512 u0,
                                                                   __m512 u1, __m512 u2, __m512 u3) {
  A.a0 = _mm512_fmadd_pd(xk, lo(u0), A.a0);
  A.a1 = _mm512_fmadd_pd(xk, hi(u0), A.a1);
  A.a2 = _mm512_fmadd_pd(xk, lo(u1), A.a2);
  A.a3 = _mm512_fmadd_pd(xk, hi(u1), A.a3);
  A.a4 = _mm512_fmadd_pd(xk, lo(u2), A.a4);
  A.a5 = _mm512_fmadd_pd(xk, hi(u2), A.a5);
  A.a6 = _mm512_fmadd_pd(xk, lo(u3), A.a6);
  A.a7 = _mm512_fmadd_pd(xk, hi(u3), A.a7);
}
STRATA_AVX512 inline __attribute__((always_inline)) Acc64 load_acc(const double* p) {
  return Acc64{_mm512_loadu_pd(p),      _mm512_loadu_pd(p + 8),  _mm512_loadu_pd(p + 16),
               _mm512_loadu_pd(p + 24), _mm512_loadu_pd(p + 32), _mm512_loadu_pd(p + 40),
               _mm512_loadu_pd(p + 48), _mm512_loadu_pd(p + 56)};
}
STRATA_AVX512 inline __attribute__((always_inline)) void store_acc(double* p, const Acc64& A) {
  _mm512_storeu_pd(p, A.a0);
  _mm512_storeu_pd(p + 8, A.a1);
  _mm512_storeu_pd(p + 16, A.a2);
  _mm512_storeu_pd(p + 24, A.a3);
  _mm512_storeu_pd(p + 32, A.a4);
  _mm512_storeu_pd(p + 40, A.a5);
  _mm512_storeu_pd(p + 48, A.a6);
  _mm512_storeu_pd(p + 56, A.a7);
}

// Prefetch of group t's row scales of K block kb + 8 (the codes are left to the hardware
// prefetchers, see simd_decode.h; a prefetch past the end never faults).
STRATA_AVX512 inline __attribute__((always_inline)) void prefetch_ahead(const PackedFp8Weight& w,
                                                                        int64_t t, int64_t kb) {
  const detail::ScaleRef r = detail::packed_scale_ref(w, t, kb + 8, w.k / w.block_k);
  const char* c = static_cast<const char*>(r.addr());
  for (int off = 0; off < 64 * r.bytes_per_scale(); off += 64) _mm_prefetch(c + off, _MM_HINT_T0);
}
// The group's 64 row scales of one K block, times `fold`.
STRATA_AVX512 inline __attribute__((always_inline)) __m512 scales16(const detail::ScaleRef& r,
                                                                    int i) {
  return simd::load_scales16(r.f32 != nullptr ? r.f32 + i : nullptr,
                             r.e8m0 != nullptr ? r.e8m0 + i : nullptr);
}
STRATA_AVX512 inline __attribute__((always_inline)) void load_scales(const detail::ScaleRef& sc,
                                                                     __m512 fold, __m512* s0,
                                                                     __m512* s1, __m512* s2,
                                                                     __m512* s3) {
  *s0 = _mm512_mul_ps(scales16(sc, 0), fold);
  *s1 = _mm512_mul_ps(scales16(sc, 16), fold);
  *s2 = _mm512_mul_ps(scales16(sc, 32), fold);
  *s3 = _mm512_mul_ps(scales16(sc, 48), fold);
}

// K block kb of group t (tiles t..t+7): its codes, its 64 row scales times `fold`, and a
// prefetch of the block 8 ahead.
struct GroupBlock {
  const uint8_t* base;
  __m512 s0, s1, s2, s3;
};
STRATA_AVX512 inline __attribute__((always_inline)) GroupBlock group_block(
    const PackedFp8Weight& w, int64_t t, int64_t kb, __m512 fold) {
  const int64_t nkb = w.k / w.block_k;
  GroupBlock g;
  g.base = &w.codes[packed_code_offset(t, kb, nkb, w.block_k, kTile)];
  prefetch_ahead(w, t, kb);
  load_scales(detail::packed_scale_ref(w, t, kb, nkb), fold, &g.s0, &g.s1, &g.s2, &g.s3);
  return g;
}

// K indices k (u*) and k + 1 (v*) of a group's 64 rows (tile pairs 0-1, 2-3, 4-5, 6-7), decoded
// from the block at `base` (+off = packed_k_offset(k, 8); tile i at +i·ts, ts = 32 bytes) and
// times the row scales s0..s3: u = fl32(v·2^-8 · s·256).
struct Scaled2 {
  __m512 u0, u1, u2, u3, v0, v1, v2, v3;
};
STRATA_AVX512 inline __attribute__((always_inline)) Scaled2 decode_scaled2(
    const uint8_t* base, int64_t off, int64_t ts, __m512 s0, __m512 s1, __m512 s2, __m512 s3) {
  Scaled2 d;
  simd::decode_pair512_fp8(base + off, base + ts + off, &d.u0, &d.v0);
  simd::decode_pair512_fp8(base + 2 * ts + off, base + 3 * ts + off, &d.u1, &d.v1);
  simd::decode_pair512_fp8(base + 4 * ts + off, base + 5 * ts + off, &d.u2, &d.v2);
  simd::decode_pair512_fp8(base + 6 * ts + off, base + 7 * ts + off, &d.u3, &d.v3);
  d.u0 = _mm512_mul_ps(d.u0, s0);
  d.u1 = _mm512_mul_ps(d.u1, s1);
  d.u2 = _mm512_mul_ps(d.u2, s2);
  d.u3 = _mm512_mul_ps(d.u3, s3);
  d.v0 = _mm512_mul_ps(d.v0, s0);
  d.v1 = _mm512_mul_ps(d.v1, s1);
  d.v2 = _mm512_mul_ps(d.v2, s2);
  d.v3 = _mm512_mul_ps(d.v3, s3);
  return d;
}

// acc[r][8 tiles][8 rows] (f64) over all K for tiles t..t+7 (t % 8 == 0).
STRATA_AVX512 void group_pass512(const float* x, int64_t m, int64_t ldx, const PackedFp8Weight& w,
                                 int64_t t, double* acc) {
  const int64_t K = w.k, bk = w.block_k, nkb = K / bk;
  const __m512 fold = _mm512_set1_ps(256.0f);
  for (int64_t kb = 0; kb < nkb; ++kb) {
    const GroupBlock gb = group_block(w, t, kb, fold);
    const uint8_t* base = gb.base;
    const __m512 s0 = gb.s0, s1 = gb.s1, s2 = gb.s2, s3 = gb.s3;
    for (int64_t r = 0; r < m; ++r) {
      double* ar = acc + r * 64;
      Acc64 A = load_acc(ar);
      const float* xr = x + r * ldx + kb * bk;
      for (int64_t j = 0; j < bk; j += 2) {
        const Scaled2 d = decode_scaled2(base, packed_k_offset(j, kTile), kTs, s0, s1, s2, s3);
        fma_tiles(A, _mm512_set1_pd(static_cast<double>(xr[j])), d.u0, d.u1, d.u2, d.u3);
        fma_tiles(A, _mm512_set1_pd(static_cast<double>(xr[j + 1])), d.v0, d.v1, d.v2, d.v3);
      }
      store_acc(ar, A);
    }
  }
}

// kRows activation rows (stride ldx, this K block's bk values each) against the decoded block
// u [bk][64] f64: per row its 8 f64 FMA chains over k in order, as the one-row loop; the rows
// share each u load (3 rows: 24 accumulators; one row alone spent 8 loads on 8 FMAs).
template <int kRows>
STRATA_AVX512 inline __attribute__((always_inline)) void rows_pass_u(const float* x, int64_t ldx,
                                                                     const double* u, int64_t bk,
                                                                     double* acc) {
  __m512d A[kRows][8];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) A[r][c] = _mm512_loadu_pd(acc + r * 64 + c * 8);
  for (int64_t j = 0; j < bk; ++j) {
    const double* uj = u + j * 64;
    __m512d xk[kRows];
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) xk[r] = _mm512_set1_pd(static_cast<double>(x[r * ldx + j]));
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      const __m512d w = _mm512_loadu_pd(uj + c * 8);
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) A[r][c] = _mm512_fmadd_pd(xk[r], w, A[r][c]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) _mm512_storeu_pd(acc + r * 64 + c * 8, A[r][c]);
}

// The same pass for several activation rows (prefill): each K block's 64 x bk weights are
// decoded and scaled once into u [bk][64] f64 (the values group_pass512 computes per row),
// then every row runs its 8 f64 FMA chains over them in the same k order: same bits, without
// decoding the block again for every row.
STRATA_AVX512 void group_pass512_rows(const float* x, int64_t m, int64_t ldx,
                                      const PackedFp8Weight& w, int64_t t, double* acc) {
  const int64_t K = w.k, bk = w.block_k, nkb = K / bk;
  const __m512 fold = _mm512_set1_ps(256.0f);
  thread_local std::vector<double> ubuf;
  ubuf.resize(static_cast<size_t>(bk * 64));
  double* u = ubuf.data();
  auto put = [](double* dst, __m512 a, __m512 b, __m512 c, __m512 d) STRATA_AVX512
      __attribute__((always_inline)) {
    _mm512_storeu_pd(dst, lo(a));
    _mm512_storeu_pd(dst + 8, hi(a));
    _mm512_storeu_pd(dst + 16, lo(b));
    _mm512_storeu_pd(dst + 24, hi(b));
    _mm512_storeu_pd(dst + 32, lo(c));
    _mm512_storeu_pd(dst + 40, hi(c));
    _mm512_storeu_pd(dst + 48, lo(d));
    _mm512_storeu_pd(dst + 56, hi(d));
  };
  for (int64_t kb = 0; kb < nkb; ++kb) {
    const GroupBlock gb = group_block(w, t, kb, fold);
    const uint8_t* base = gb.base;
    const __m512 s0 = gb.s0, s1 = gb.s1, s2 = gb.s2, s3 = gb.s3;
    for (int64_t j = 0; j < bk; j += 2) {
      const Scaled2 d = decode_scaled2(base, packed_k_offset(j, kTile), kTs, s0, s1, s2, s3);
      put(u + j * 64, d.u0, d.u1, d.u2, d.u3);
      put(u + (j + 1) * 64, d.v0, d.v1, d.v2, d.v3);
    }
    int64_t r = 0;
    for (; r + 3 <= m; r += 3) rows_pass_u<3>(x + r * ldx + kb * bk, ldx, u, bk, acc + r * 64);
    for (; r < m; ++r) rows_pass_u<1>(x + r * ldx + kb * bk, ldx, u, bk, acc + r * 64);
  }
}

// Whether every row scale of group t (8 tiles, all K blocks) is zero or a power of two with
// |s| < limit (the one-row f64 passes' exactness conditions), and, when `uniform_tiles`, the
// same for the 8 rows of each tile in every K block.
STRATA_AVX512 bool group_scales_pow2(const PackedFp8Weight& w, int64_t t, float limit,
                                     bool uniform_tiles) {
  const int64_t nkb = w.k / w.block_k;
  if (!w.scales_e8m0.empty() && limit == std::ldexp(1.0f, std::ilogb(limit))) {
    // UE8M0 bytes (1..254, always a normal power of two): |s| < limit = 2^e means byte <
    // 127 + e; a tile is uniform when its 8 bytes equal its first (VPSHUFB replicates it).
    const int e = std::ilogb(limit);
    const __m512i below = _mm512_set1_epi8(static_cast<char>(std::clamp(127 + e, 0, 255)));
    // per 128-bit lane: byte 0 for the low qword's 8 bytes, byte 8 for the high qword's
    const __m512i first = _mm512_broadcast_i32x4(_mm_set_epi64x(0x0808080808080808ll, 0));
    for (int64_t kb = 0; kb < nkb; ++kb) {
      const uint8_t* b = detail::packed_scale_ref(w, t, kb, nkb).e8m0;
      const __m512i v = _mm512_loadu_si512(b);  // the group's 64 row scales of this block
      if (127 + e <= 255 && _mm512_cmplt_epu8_mask(v, below) != ~__mmask64{0}) return false;
      if (uniform_tiles &&
          _mm512_cmpeq_epi8_mask(v, _mm512_shuffle_epi8(v, first)) != ~__mmask64{0})
        return false;
    }
    return true;
  }
  // lane 8j of each 16 (row 0 of the zmm's two tiles) against all 16
  const __m512i row0 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 8, 8, 8, 8, 8, 8, 8, 8);
  const __m512 lim = _mm512_set1_ps(limit);
  const __m512i mant = _mm512_set1_epi32(0x007FFFFF);
  for (int64_t kb = 0; kb < nkb; ++kb) {
    const detail::ScaleRef sc = detail::packed_scale_ref(w, t, kb, nkb);
    for (int i = 0; i < 64; i += 16) {
      const __m512 v = scales16(sc, i);
      const __m512i b = _mm512_castps_si512(v);
      if (_mm512_cmp_ps_mask(_mm512_abs_ps(v), lim, _CMP_LT_OQ) != 0xFFFF ||
          _mm512_test_epi32_mask(b, mant) != 0 ||
          (uniform_tiles &&
           _mm512_cmpeq_epi32_mask(b, _mm512_permutexvar_epi32(row0, b)) != 0xFFFF))
        return false;
    }
  }
  return true;
}

// One activation row, the E4M3 codes widened straight to f64 (no f32 stage, no vcvtps2pd):
// VPMOVSXBQ puts tile row r's code of K index k in qword lane r, a shift by 49 moves its
// exponent and mantissa bits to f64 bits 55..49 (sign, replicated by the sign extension, in
// bits 63..56) and an AND clears bits 62..56. That f64 is v·2^-1016 for every code, E4M3
// subnormals included (they land on f64 subnormals with the same significand). One FMA with
// -0 then forms u = v·(s·2^1016) = v·s exactly, the value the f32 paths compute (fl32(v·s)
// is exact too when s is a power of two), and the f64 FMA chain over k is unchanged: the same
// bits as group_pass512. Needs every scale of the group to be a power of two below 2^7
// (UE8M0 scales always are powers of two; s·2^1016 finite); returns false, having changed
// nothing, otherwise (group_pass512 then runs).
STRATA_AVX512 bool group_pass512_direct(const float* x, const PackedFp8Weight& w, int64_t t,
                                        double* acc) {
  const int64_t K = w.k, bk = w.block_k, nkb = K / bk;
  if (bk % kPackChunkK != 0 || !group_scales_pow2(w, t, 128.0f, false)) return false;
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512d fold = _mm512_set1_pd(std::ldexp(1.0, 1016));
  const __m512i keep = _mm512_set1_epi64(static_cast<long long>(0x80FFFFFFFFFFFFFFull));
  const __m512d nz = _mm512_set1_pd(-0.0);
  const __m512d z = _mm512_setzero_pd();
  __m512d a0 = z, a1 = z, a2 = z, a3 = z, a4 = z, a5 = z, a6 = z, a7 = z;
  for (int64_t kb = 0; kb < nkb; ++kb) {
    const GroupBlock gb = group_block(w, t, kb, one);
    // s·2^1016 per row, tile i's 8 rows in one zmm (exact: powers of two below 2^7).
    const __m512d s0 = _mm512_mul_pd(lo(gb.s0), fold), s1 = _mm512_mul_pd(hi(gb.s0), fold);
    const __m512d s2 = _mm512_mul_pd(lo(gb.s1), fold), s3 = _mm512_mul_pd(hi(gb.s1), fold);
    const __m512d s4 = _mm512_mul_pd(lo(gb.s2), fold), s5 = _mm512_mul_pd(hi(gb.s2), fold);
    const __m512d s6 = _mm512_mul_pd(lo(gb.s3), fold), s7 = _mm512_mul_pd(hi(gb.s3), fold);
    const float* xr = x + kb * bk;
    for (int64_t c = 0; c < bk; c += kPackChunkK) {
      const uint8_t* q = gb.base + packed_k_offset(c, kTile);
      for (int k = 0; k < kPackChunkK; ++k) {
        const __m512d xk = _mm512_set1_pd(static_cast<double>(xr[c + k]));
        const uint8_t* qk = q + k * kTile;
#define STRATA_F64_TILE(acc, i, si)                                                            \
  {                                                                                            \
    const __m512i b = _mm512_cvtepi8_epi64(                                                    \
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(qk + (i) * kTs)));                    \
    const __m512d v = _mm512_castsi512_pd(_mm512_and_si512(_mm512_slli_epi64(b, 49), keep));   \
    acc = _mm512_fmadd_pd(xk, _mm512_fmadd_pd(v, si, nz), acc);                                \
  }
        STRATA_F64_TILE(a0, 0, s0)
        STRATA_F64_TILE(a1, 1, s1)
        STRATA_F64_TILE(a2, 2, s2)
        STRATA_F64_TILE(a3, 3, s3)
        STRATA_F64_TILE(a4, 4, s4)
        STRATA_F64_TILE(a5, 5, s5)
        STRATA_F64_TILE(a6, 6, s6)
        STRATA_F64_TILE(a7, 7, s7)
#undef STRATA_F64_TILE
      }
    }
  }
  store_acc(acc, Acc64{a0, a1, a2, a3, a4, a5, a6, a7});
  return true;
}

// VPERMT2B index for group_pass512_perm: qword r takes byte 6 from table A and byte 7 from
// table B at code j*8 + r (j = tt*4 + kk: tile tt of the pair, K index kk of the chunk).
STRATA_AVX512 inline __m512i perm_index(int j) {
  alignas(64) uint8_t b[64] = {};
  for (int r = 0; r < 8; ++r) {
    b[r * 8 + 6] = static_cast<uint8_t>(j * 8 + r);
    b[r * 8 + 7] = static_cast<uint8_t>(64 + j * 8 + r);
  }
  return _mm512_load_si512(b);
}
// group_pass512_direct's bits with about half the vector work per weight, for groups whose
// 8 rows of each tile share one power-of-two scale per K block (every checkpoint with row
// blocks of 8 or more: V4.1 uses 128 or 32). Two changes, each exact:
//  * The decode: E4M3 code c of (row r, k) must become the f64 bits of v·2^-1016, i.e.
//    byte 7 = c & 0x80 and byte 6 = (c << 1) & 0xFE of qword r, every other byte zero (the
//    same bits as group_pass512_direct's sign-extend, shift and AND). For 64 codes (2 tiles
//    x 4 K x 8 rows, one zmm) the two byte forms are made once (an AND and an ADD); then each
//    tile's 8 rows at one k are a single zero-masked two-table byte permute (VPERMT2B).
//  * The scale: the tile's one scale s moves from the weight to the activation, xs = x·s·2^512
//    (exact: s is a power of two, and |x·s·2^512| < 2^760). Each FMA then adds
//    xs·(v·2^-1016) = (x·v·s)·2^-504 exactly, and every partial sum of the chain is the
//    direct pass's partial sum times 2^-504: all of them (nonzero ones ≥ 2^-1000 in magnitude,
//    far below 2^1023) stay normal, where rounding commutes with a power-of-two scale. The
//    final ·2^504 gives the direct pass's bits.
// Returns false, having changed nothing, when a tile's rows have different scales in some K
// block, or a scale is not a power of two (or zero) below 2^120: above that v·s overflows
// f32 (and bf16, where the reference dequantizes wo_a) for the largest codes, which the
// f32-stage pass reproduces and this one would not.
// The chunk loop of group_pass512_perm over one K block at `base`. xs holds the activations
// times a scale and 2^512 as [set][k in block]: kSets = 8 gives each tile its own set; with
// kSets = 2 tiles 0-3 share set 0 and tiles 4-7 set 1 (row blocks of 32, as V4.1's 32x32
// FP8 blocks); with kSets = 1 all 8 tiles share one (row blocks of 64 rows or more).
template <int kSets>
STRATA_AVX512_EXT inline __attribute__((always_inline)) void perm_block(
    const uint8_t* base, int64_t bk, const double* xs, const __m512i (&ix)[8], Acc64& acc) {
  const __mmask64 top2 = 0xC0C0C0C0C0C0C0C0ull;
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512d a0 = acc.a0, a1 = acc.a1, a2 = acc.a2, a3 = acc.a3;
  __m512d a4 = acc.a4, a5 = acc.a5, a6 = acc.a6, a7 = acc.a7;
  for (int64_t c = 0; c < bk; c += kPackChunkK) {
    const uint8_t* q = base + packed_k_offset(c, kTile);
    const double* xc = xs + c;
    const __m512i c0 = _mm512_loadu_si512(q), c1 = _mm512_loadu_si512(q + 64);
    const __m512i c2 = _mm512_loadu_si512(q + 128), c3 = _mm512_loadu_si512(q + 192);
    const __m512i A0 = _mm512_add_epi8(c0, c0), B0 = _mm512_and_si512(c0, sign);
    const __m512i A1 = _mm512_add_epi8(c1, c1), B1 = _mm512_and_si512(c1, sign);
    const __m512i A2 = _mm512_add_epi8(c2, c2), B2 = _mm512_and_si512(c2, sign);
    const __m512i A3 = _mm512_add_epi8(c3, c3), B3 = _mm512_and_si512(c3, sign);
#define STRATA_PERM_FMA(acc, A, B, idx, tile, kk)                                              \
  acc = _mm512_fmadd_pd(_mm512_set1_pd(xc[(tile) * kSets / 8 * bk + (kk)]),                   \
                        _mm512_castsi512_pd(_mm512_maskz_permutex2var_epi8(top2, A, idx, B)), acc);
#define STRATA_PERM_K(kk, i0, i1)                                                              \
  STRATA_PERM_FMA(a0, A0, B0, i0, 0, kk)                                                       \
  STRATA_PERM_FMA(a1, A0, B0, i1, 1, kk)                                                       \
  STRATA_PERM_FMA(a2, A1, B1, i0, 2, kk)                                                       \
  STRATA_PERM_FMA(a3, A1, B1, i1, 3, kk)                                                       \
  STRATA_PERM_FMA(a4, A2, B2, i0, 4, kk)                                                       \
  STRATA_PERM_FMA(a5, A2, B2, i1, 5, kk)                                                       \
  STRATA_PERM_FMA(a6, A3, B3, i0, 6, kk)                                                       \
  STRATA_PERM_FMA(a7, A3, B3, i1, 7, kk)
    STRATA_PERM_K(0, ix[0], ix[4])
    STRATA_PERM_K(1, ix[1], ix[5])
    STRATA_PERM_K(2, ix[2], ix[6])
    STRATA_PERM_K(3, ix[3], ix[7])
#undef STRATA_PERM_K
#undef STRATA_PERM_FMA
  }
  acc = Acc64{a0, a1, a2, a3, a4, a5, a6, a7};
}

STRATA_AVX512_EXT bool group_pass512_perm(const float* x, const PackedFp8Weight& w, int64_t t,
                                          double* acc) {
  const int64_t K = w.k, bk = w.block_k, nkb = K / bk;
  // bk % 8 == 0 holds for every packed weight (pack_fp8_weight's rule)
  if (bk % kPackChunkK != 0 || bk > 256 || !group_scales_pow2(w, t, 0x1p120f, true)) return false;
  __m512i ix[8];
  for (int j = 0; j < 8; ++j) ix[j] = perm_index(j);
  const double up = std::ldexp(1.0, 512);
  alignas(64) double xs[8 * 256];  // [set][k in block]
  alignas(64) double xd[256];      // f64(x) of the block
  const __m512d z = _mm512_setzero_pd();
  Acc64 A{z, z, z, z, z, z, z, z};
  for (int64_t kb = 0; kb < nkb; ++kb) {
    const detail::ScaleRef sc = detail::packed_scale_ref(w, t, kb, nkb);
    prefetch_ahead(w, t, kb);
    double s8[8];
    for (int i = 0; i < 8; ++i) s8[i] = static_cast<double>(sc.at(i * 8)) * up;
    const bool half = s8[0] == s8[1] && s8[0] == s8[2] && s8[0] == s8[3] && s8[4] == s8[5] &&
                      s8[4] == s8[6] && s8[4] == s8[7];
    const int sets = !half ? 8 : s8[0] == s8[4] ? 1 : 2;
    const float* xr = x + kb * bk;
    for (int64_t k = 0; k < bk; k += 8)
      _mm512_store_pd(xd + k, _mm512_cvtps_pd(_mm256_loadu_ps(xr + k)));
    for (int j = 0; j < sets; ++j) {  // x·s·2^512 is exact: s is a power of two
      const __m512d s = _mm512_set1_pd(s8[j * 8 / sets]);
      for (int64_t k = 0; k < bk; k += 8)
        _mm512_store_pd(xs + j * bk + k, _mm512_mul_pd(_mm512_load_pd(xd + k), s));
    }
    const uint8_t* base = &w.codes[packed_code_offset(t, kb, nkb, bk, kTile)];
    if (sets == 1) {
      perm_block<1>(base, bk, xs, ix, A);
    } else if (sets == 2) {
      perm_block<2>(base, bk, xs, ix, A);
    } else {
      perm_block<8>(base, bk, xs, ix, A);
    }
  }
  const __m512d down = _mm512_set1_pd(std::ldexp(1.0, 504));
  store_acc(acc, Acc64{_mm512_mul_pd(A.a0, down), _mm512_mul_pd(A.a1, down), _mm512_mul_pd(A.a2, down),
                       _mm512_mul_pd(A.a3, down), _mm512_mul_pd(A.a4, down), _mm512_mul_pd(A.a5, down),
                       _mm512_mul_pd(A.a6, down), _mm512_mul_pd(A.a7, down)});
  return true;
}
#pragma GCC diagnostic pop

void tiles_avx2(const float* x, int64_t m, int64_t ldx, const PackedFp8Weight& w, int64_t t0,
                int64_t t1, int64_t n_begin, int64_t n_end, float* y, int64_t ldy) {
  STRATA_CHECK(w.block_k % 2 == 0);
  constexpr int kNt = 4;
  std::vector<double> acc(static_cast<size_t>(m * kNt * kTile));
  const bool use512 = avx512_active() && w.block_k % 2 == 0;
  const bool use_perm = use512 && avx512_ext_active();
  std::vector<double> acc512(use512 ? static_cast<size_t>(m * 64) : 0);
  for (int64_t t = t0; t < t1;) {
    if (use512 && t % kPackGroup == 0 && t + kPackGroup <= t1) {
      std::fill(acc512.begin(), acc512.end(), 0.0);
      if (m >= 2) {
        group_pass512_rows(x, m, ldx, w, t, acc512.data());
      } else if (!(use_perm && group_pass512_perm(x, w, t, acc512.data())) &&
                 !group_pass512_direct(x, w, t, acc512.data())) {
        group_pass512(x, m, ldx, w, t, acc512.data());
      }
      for (int i = 0; i < kPackGroup * kTile; ++i) {
        const int64_t n = t * kTile + i;
        if (n < n_begin || n >= n_end) continue;
        for (int64_t r = 0; r < m; ++r) y[r * ldy + (n - n_begin)] = bf16_round(static_cast<float>(acc512[r * 64 + i]));
      }
      t += kPackGroup;
      continue;
    }
    const int nt = t + kNt <= t1 ? kNt : 1;
    std::fill(acc.begin(), acc.end(), 0.0);
    if (nt == kNt) {
      tiles_pass<kNt>(x, m, ldx, w, t, acc.data());
    } else {
      tiles_pass<1>(x, m, ldx, w, t, acc.data());
    }
    for (int i = 0; i < nt; ++i)
      for (int l = 0; l < kTile; ++l) {
        const int64_t n = (t + i) * kTile + l;
        if (n < n_begin || n >= n_end) continue;
        for (int64_t r = 0; r < m; ++r)
          y[r * ldy + (n - n_begin)] = bf16_round(static_cast<float>(acc[(r * nt + i) * kTile + l]));
      }
    t += nt;
  }
}

}  // namespace

void fp8_dequant_gemm_f64(const float* x, int64_t m, int64_t ldx, const PackedFp8Weight& w,
                          int64_t n_begin, int64_t n_end, float* y, int64_t ldy,
                          ThreadPool* pool) {
  profile::PhaseScope phase("fp8 einsum, f64 (wo_a)", static_cast<double>(w.bytes()) *
                                                          static_cast<double>(n_end - n_begin) /
                                                          static_cast<double>(std::max<int64_t>(w.n, 1)));
  STRATA_CHECK(n_begin % kTile == 0 && n_begin >= 0 && n_end <= w.n && n_begin <= n_end);
  STRATA_CHECK(ldx >= w.k && w.k % w.block_k == 0);
  if (m == 0 || n_begin == n_end) return;
  const int64_t t0 = n_begin / kTile, t1 = (n_end + kTile - 1) / kTile;
  static const bool f16c = __builtin_cpu_supports("f16c");
  const bool avx = active_isa() == Isa::kAvx2 && f16c;
  auto run = [&](int64_t a, int64_t b) {
    if (avx) {
      tiles_avx2(x, m, ldx, w, a, b, n_begin, n_end, y, ldy);
    } else {
      tiles_scalar(x, m, ldx, w, a, b, n_begin, n_end, y, ldy);
    }
  };
  const bool small = m * (n_end - n_begin) * w.k < (int64_t{1} << 18);
  if (pool == nullptr || pool->num_threads() <= 1 || small || t1 - t0 < 2) {
    run(t0, t1);
    return;
  }
  // chunks of whole packed groups (8 tiles) so the AVX-512 pass sees aligned groups
  const int64_t chunks = (t1 - t0 + kPackGroup - 1) / kPackGroup;
  pool->parallel_for_stealing(chunks, [&](int64_t a, int64_t b) {
    run(t0 + a * kPackGroup, std::min(t1, t0 + b * kPackGroup));
  });
}

void fp8_dequant_gemm_f64_grouped(const float* x, int64_t m, int64_t ldx,
                                  const PackedFp8Weight& w, int64_t groups,
                                  int64_t x_group_stride, float* y, int64_t ldy,
                                  ThreadPool* pool) {
  profile::PhaseScope phase("fp8 einsum, f64 (wo_a)", static_cast<double>(w.bytes()));
  STRATA_CHECK(groups >= 1 && w.n % groups == 0 && (w.n / groups) % kTile == 0);
  STRATA_CHECK(ldx >= w.k && w.k % w.block_k == 0);
  if (m == 0) return;
  const int64_t R = w.n / groups, tpg = R / kTile;
  static const bool f16c = __builtin_cpu_supports("f16c");
  const bool avx = active_isa() == Isa::kAvx2 && f16c;
  // Tiles [a, b) of group g (tile indices within the whole weight).
  auto run = [&](int64_t g, int64_t a, int64_t b) {
    const float* xg = x + g * x_group_stride;
    float* yg = y + g * R;
    if (avx) {
      tiles_avx2(xg, m, ldx, w, a, b, g * R, (g + 1) * R, yg, ldy);
    } else {
      tiles_scalar(xg, m, ldx, w, a, b, g * R, (g + 1) * R, yg, ldy);
    }
  };
  const bool small = m * w.n * w.k < (int64_t{1} << 18);
  if (pool == nullptr || pool->num_threads() <= 1 || small || w.n / kTile < 2) {
    for (int64_t g = 0; g < groups; ++g) run(g, g * tpg, (g + 1) * tpg);
    return;
  }
  // Units: chunks of whole packed groups (8 tiles) within each output group, as above.
  const int64_t cpg = (tpg + kPackGroup - 1) / kPackGroup;
  pool->parallel_for_stealing(groups * cpg, [&](int64_t u0, int64_t u1) {
    while (u0 < u1) {
      const int64_t g = u0 / cpg, last = std::min(u1, (g + 1) * cpg);  // units of group g
      run(g, g * tpg + (u0 - g * cpg) * kPackGroup,
          std::min((g + 1) * tpg, g * tpg + (last - g * cpg) * kPackGroup));
      u0 = last;
    }
  });
}

}  // namespace strata::kernels
