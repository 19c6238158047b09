// fp8_dequant_gemm_f64 (see fp8_einsum.h).
#include "kernels/fp8_einsum.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/thread_pool.h"
#include "kernels/avx2_common.h"
#include "kernels/cpu_features.h"

namespace strata::kernels {
namespace {

constexpr int kTile = 8;

inline float bf16_round(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    u = (u | 0x00400000u) & 0xffff0000u;
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
  }
  std::memcpy(&v, &u, 4);
  return v;
}

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
  const int64_t nkb = w.k / w.block_k;
  const float s = w.scales[(t * nkb + k / w.block_k) * kTile + l];
  return kTable.v[w.codes[(t * w.k + k) * kTile + l]] * s;
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

// One tile (8 rows) at a time; the K loop is split in blocks so the decoded f32 weights
// of a block stay in registers / L1 while every activation row consumes them.
STRATA_AVX2 void tiles_avx2(const float* x, int64_t m, int64_t ldx, const PackedFp8Weight& w,
                            int64_t t0, int64_t t1, int64_t n_begin, int64_t n_end, float* y,
                            int64_t ldy) {
  const int64_t K = w.k, bk = w.block_k, nkb = K / bk;
  std::vector<double> acc(static_cast<size_t>(m * kTile));
  alignas(32) float panel[64 * kTile];
  STRATA_CHECK(bk <= 64 || bk % 64 == 0);
  const int64_t chunk = std::min<int64_t>(bk, 64);
  for (int64_t t = t0; t < t1; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t k0 = 0; k0 < K; k0 += chunk) {
      const __m256 sc = _mm256_loadu_ps(&w.scales[(t * nkb + k0 / bk) * kTile]);
      const uint8_t* codes = &w.codes[(t * K + k0) * kTile];
      for (int64_t j = 0; j < chunk; ++j) {
        alignas(32) float tmp[kTile];
        for (int l = 0; l < kTile; ++l) tmp[l] = kTable.v[codes[j * kTile + l]];
        _mm256_store_ps(&panel[j * kTile], _mm256_mul_ps(_mm256_load_ps(tmp), sc));
      }
      for (int64_t r = 0; r < m; ++r) {
        __m256d lo = _mm256_loadu_pd(&acc[r * kTile]);
        __m256d hi = _mm256_loadu_pd(&acc[r * kTile + 4]);
        const float* xr = x + r * ldx + k0;
        for (int64_t j = 0; j < chunk; ++j) {
          const __m256 wv = _mm256_load_ps(&panel[j * kTile]);
          const __m256d xb = _mm256_set1_pd(static_cast<double>(xr[j]));
          lo = _mm256_fmadd_pd(xb, _mm256_cvtps_pd(_mm256_castps256_ps128(wv)), lo);
          hi = _mm256_fmadd_pd(xb, _mm256_cvtps_pd(_mm256_extractf128_ps(wv, 1)), hi);
        }
        _mm256_storeu_pd(&acc[r * kTile], lo);
        _mm256_storeu_pd(&acc[r * kTile + 4], hi);
      }
    }
    for (int l = 0; l < kTile; ++l) {
      const int64_t n = t * kTile + l;
      if (n < n_begin || n >= n_end) continue;
      for (int64_t r = 0; r < m; ++r)
        y[r * ldy + (n - n_begin)] = bf16_round(static_cast<float>(acc[r * kTile + l]));
    }
  }
}

}  // namespace

void fp8_dequant_gemm_f64(const float* x, int64_t m, int64_t ldx, const PackedFp8Weight& w,
                          int64_t n_begin, int64_t n_end, float* y, int64_t ldy,
                          ThreadPool* pool) {
  STRATA_CHECK(n_begin % kTile == 0 && n_begin >= 0 && n_end <= w.n && n_begin <= n_end);
  STRATA_CHECK(ldx >= w.k && w.k % w.block_k == 0);
  if (m == 0 || n_begin == n_end) return;
  const int64_t t0 = n_begin / kTile, t1 = (n_end + kTile - 1) / kTile;
  const bool avx = active_isa() == Isa::kAvx2;
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
  pool->parallel_for(t1 - t0, [&](int64_t a, int64_t b) { run(t0 + a, t0 + b); });
}

}  // namespace strata::kernels
