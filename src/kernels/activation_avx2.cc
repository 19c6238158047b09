// AVX2/FMA softmax / swiglu / exp: the same operations, in the same order, as the scalar
// definitions in activation.cc (bit-identical results).
#include <immintrin.h>

#include <cstdint>

#include "kernels/activation.h"
#include "kernels/avx2_common.h"

namespace strata::kernels::avx2 {
namespace {

STRATA_AVX2 inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.0f));
  const __m256 n =
      _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693359375f), x);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 r2 = _mm256_mul_ps(r, r);
  y = _mm256_fmadd_ps(y, r2, r);
  y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
}

}  // namespace

// Loads the n < 8 trailing floats into lanes 0..n-1 (others zero).
STRATA_AVX2 inline __m256 load_tail(const float* p, int64_t n) {
  alignas(32) float t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < n; ++i) t[i] = p[i];
  return _mm256_load_ps(t);
}
STRATA_AVX2 inline void store_tail(float* p, __m256 v, int64_t n) {
  alignas(32) float t[8];
  _mm256_store_ps(t, v);
  for (int64_t i = 0; i < n; ++i) p[i] = t[i];
}

STRATA_AVX2 void exp_inplace(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, exp8(_mm256_loadu_ps(x + i)));
  if (i < n) store_tail(x + i, exp8(load_tail(x + i, n - i)), n - i);
}

STRATA_AVX2 void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const int64_t n8 = n & ~int64_t{7};
  float mx = x[0];
  if (n8 > 0) {
    __m256 m = _mm256_loadu_ps(x);
    for (int64_t i = 8; i < n8; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
    alignas(32) float t[8];
    _mm256_store_ps(t, m);
    for (float v : t) mx = v > mx ? v : mx;
  }
  for (int64_t i = n8; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  const __m256 vmx = _mm256_set1_ps(mx);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n8; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmx));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  float sum = _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
  if (n8 < n) {
    store_tail(x + n8, exp8(_mm256_sub_ps(load_tail(x + n8, n - n8), vmx)), n - n8);
    for (int64_t i = n8; i < n; ++i) sum += x[i];
  }
  const __m256 vs = _mm256_set1_ps(sum);
  int64_t i = 0;
  for (; i < n8; i += 8) _mm256_storeu_ps(x + i, _mm256_div_ps(_mm256_loadu_ps(x + i), vs));
  for (; i < n; ++i) x[i] /= sum;
}

STRATA_AVX2 void swiglu(float* gate, const float* up, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 zero = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = exp8(_mm256_sub_ps(zero, g));
    const __m256 sig = _mm256_div_ps(one, _mm256_add_ps(one, e));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_mul_ps(g, sig), _mm256_loadu_ps(up + i)));
  }
  if (i < n) {
    const __m256 g = load_tail(gate + i, n - i);
    const __m256 e = exp8(_mm256_sub_ps(zero, g));
    const __m256 sig = _mm256_div_ps(one, _mm256_add_ps(one, e));
    store_tail(gate + i, _mm256_mul_ps(_mm256_mul_ps(g, sig), load_tail(up + i, n - i)), n - i);
  }
}

}  // namespace strata::kernels::avx2
