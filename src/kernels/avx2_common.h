// Internal helpers shared by the *_avx2.cc kernel files (not a public header): horizontal
// sums in the canonical order of matmul.h and a scalar FMA, all with target("avx2,fma").
// Include only from translation units whose callers check cpu_has_avx2_fma().
#pragma once

#include <immintrin.h>

#define STRATA_AVX2 __attribute__((target("avx2,fma")))

namespace strata::kernels::avx2 {
namespace {

STRATA_AVX2 inline float hsum8(__m256 a) {
  // ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7))
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));  // t0 = s0+s2, t1 = s1+s3
  __m128 r = _mm_add_ss(t, _mm_shuffle_ps(t, t, 1));
  return _mm_cvtss_f32(r);
}

// [hsum8(a), hsum8(b), hsum8(c), hsum8(d)] with exactly hsum8's additions:
// s_l = x_l + x_{l+4}; u0 = s0 + s2, u1 = s1 + s3; r = u0 + u1.
STRATA_AVX2 inline __m128 hsum8x4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m128 sa = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 sb = _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps(b, 1));
  const __m128 sc = _mm_add_ps(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1));
  const __m128 sd = _mm_add_ps(_mm256_castps256_ps128(d), _mm256_extractf128_ps(d, 1));
  // [a.s0+a.s2, a.s1+a.s3, b.s0+b.s2, b.s1+b.s3]
  const __m128 wab = _mm_add_ps(_mm_shuffle_ps(sa, sb, _MM_SHUFFLE(1, 0, 1, 0)),
                                _mm_shuffle_ps(sa, sb, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m128 wcd = _mm_add_ps(_mm_shuffle_ps(sc, sd, _MM_SHUFFLE(1, 0, 1, 0)),
                                _mm_shuffle_ps(sc, sd, _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm_add_ps(_mm_shuffle_ps(wab, wcd, _MM_SHUFFLE(2, 0, 2, 0)),
                    _mm_shuffle_ps(wab, wcd, _MM_SHUFFLE(3, 1, 3, 1)));
}

STRATA_AVX2 inline float fma1(float a, float b, float c) {
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

}  // namespace
}  // namespace strata::kernels::avx2
