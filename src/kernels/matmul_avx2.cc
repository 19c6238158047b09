// AVX2/FMA matmul and dot (see matmul.h for the canonical reduction order these follow).
// Every function here carries __attribute__((target("avx2,fma"))) and is only called after
// cpu_has_avx2_fma(); no standard-library templates are instantiated inside them.
#include <immintrin.h>

#include <cstdint>

#include "kernels/avx2_common.h"
#include "kernels/matmul.h"

namespace strata::kernels::avx2 {
namespace {

template <bool kBf16>
STRATA_AVX2 inline __m256 load_w(const void* w, int64_t idx) {
  if constexpr (kBf16) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + idx));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    return _mm256_loadu_ps(static_cast<const float*>(w) + idx);
  }
}

template <bool kBf16>
STRATA_AVX2 inline float w_scalar(const void* w, int64_t idx) {
  if constexpr (kBf16) {
    return bf16_bits_to_f32(static_cast<const uint16_t*>(w)[idx]);
  } else {
    return static_cast<const float*>(w)[idx];
  }
}

// Computes y[m0..m0+MB) x [n0..n0+NB) with MB*NB independent 8-lane accumulators.
template <int MB, int NB, bool kBf16>
STRATA_AVX2 inline void tile(const float* x, int64_t K, const void* w, int64_t N, float* y,
                             int64_t m0, int64_t n0) {
  __m256 acc[MB][NB];
#pragma GCC unroll 16
  for (int i = 0; i < MB; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) acc[i][j] = _mm256_setzero_ps();
  const int64_t k8 = K & ~int64_t{7};
  const float* xr = x + m0 * K;
  const int64_t wbase = n0 * K;
  for (int64_t k = 0; k < k8; k += 8) {
    __m256 xv[MB];
#pragma GCC unroll 16
    for (int i = 0; i < MB; ++i) xv[i] = _mm256_loadu_ps(xr + i * K + k);
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) {
      // Software prefetch ~1 KiB ahead in each W row stream, once per 64-byte line (decode is
      // bandwidth-bound and the hardware prefetchers restart at every 4 KiB page).
      if (((k * (kBf16 ? 2 : 4)) & 63) == 0)
        _mm_prefetch(reinterpret_cast<const char*>(static_cast<const uint8_t*>(w) +
                                                   (wbase + j * K + k) * (kBf16 ? 2 : 4)) + 1024,
                     _MM_HINT_T0);
      __m256 wv = load_w<kBf16>(w, wbase + j * K + k);
#pragma GCC unroll 16
      for (int i = 0; i < MB; ++i) acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MB; ++i) {
    if constexpr (NB % 4 == 0) {
      // Four horizontal sums at once, in the canonical tree order of hsum8.
      alignas(16) float s4[NB];
#pragma GCC unroll 4
      for (int j = 0; j < NB; j += 4)
        _mm_store_ps(s4 + j, hsum8x4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]));
#pragma GCC unroll 8
      for (int j = 0; j < NB; ++j) {
        float s = s4[j];
        for (int64_t k = k8; k < K; ++k) s = fma1(xr[i * K + k], w_scalar<kBf16>(w, wbase + j * K + k), s);
        y[(m0 + i) * N + n0 + j] = s;
      }
    } else {
#pragma GCC unroll 16
      for (int j = 0; j < NB; ++j) {
        float s = hsum8(acc[i][j]);
        for (int64_t k = k8; k < K; ++k) s = fma1(xr[i * K + k], w_scalar<kBf16>(w, wbase + j * K + k), s);
        y[(m0 + i) * N + n0 + j] = s;
      }
    }
  }
}

// Rows [m0, m0+MB) against W rows [n0, n1): NB-row steps, then single rows.
template <int MB, int NB, bool kBf16>
STRATA_AVX2 inline void strip(const float* x, int64_t K, const void* w, int64_t N, float* y,
                              int64_t m0, int64_t n0, int64_t n1) {
  int64_t n = n0;
  for (; n + NB <= n1; n += NB) tile<MB, NB, kBf16>(x, K, w, N, y, m0, n);
  for (; n < n1; ++n) tile<MB, 1, kBf16>(x, K, w, N, y, m0, n);
}

template <bool kBf16>
STRATA_AVX2 void matmul_rows_t(const float* x, int64_t M, const void* w, int64_t N, int64_t K,
                               float* y, int64_t n_begin, int64_t n_end) {
  // W rows in blocks that stay in L2 while all M rows pass over them.
  int64_t nblk = (int64_t{1} << 18) / (K * (kBf16 ? 2 : 4));
  if (nblk < 4) nblk = 4;
  for (int64_t nb = n_begin; nb < n_end; nb += nblk) {
    const int64_t ne = nb + nblk < n_end ? nb + nblk : n_end;
    int64_t m = 0;
    for (; m + 4 <= M; m += 4) strip<4, 2, kBf16>(x, K, w, N, y, m, nb, ne);
    switch (M - m) {
      case 3: strip<3, 3, kBf16>(x, K, w, N, y, m, nb, ne); break;
      case 2: strip<2, 4, kBf16>(x, K, w, N, y, m, nb, ne); break;
      case 1: strip<1, 8, kBf16>(x, K, w, N, y, m, nb, ne); break;
      default: break;
    }
  }
}

}  // namespace

STRATA_AVX2 float dot(const float* a, const float* b, int64_t K) {
  __m256 acc = _mm256_setzero_ps();
  const int64_t k8 = K & ~int64_t{7};
  for (int64_t k = 0; k < k8; k += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), acc);
  float s = hsum8(acc);
  for (int64_t k = k8; k < K; ++k) s = fma1(a[k], b[k], s);
  return s;
}

STRATA_AVX2 void matmul_rows(const float* x, int64_t M, const WeightMatrix& w, float* y,
                             int64_t n_begin, int64_t n_end) {
  if (w.type == WType::kF32) {
    matmul_rows_t<false>(x, M, w.data, w.rows, w.cols, y, n_begin, n_end);
  } else {
    matmul_rows_t<true>(x, M, w.data, w.rows, w.cols, y, n_begin, n_end);
  }
}

}  // namespace strata::kernels::avx2

