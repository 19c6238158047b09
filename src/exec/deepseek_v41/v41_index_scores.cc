// v41::index_weighted_scores (see v41_ops.h): the indexer's weighting of per-head dots, scalar
// and with 8 keys per AVX2 vector (each lane the scalar sequence of operations).
#include <immintrin.h>

#include <algorithm>

#include "exec/deepseek_v41/v41_index_simd.h"
#include "exec/deepseek_v41/v41_ops.h"
#include "kernels/cpu_features.h"
#include "model/dtype.h"

namespace strata::v41 {

namespace ref {
void index_weighted_scores(const double* dots, int64_t n_keys, int64_t n_heads, const float* w,
                           float* score) {
  for (int64_t r = 0; r < n_keys; ++r) {
    const double* d = dots + r * n_heads;
    float acc = 0.0f;
    for (int64_t h = 0; h < n_heads; ++h) {
      const float dv = std::max(round_to_bf16(static_cast<float>(d[h])), 0.0f);
      acc += round_to_bf16(dv * w[h]);
    }
    score[r] = round_to_bf16(acc);
  }
}
}  // namespace ref

namespace {

using simd::add_head;
using simd::round_bf16_8;

__attribute__((target("avx2,fma"))) void scores8_avx2(const double* dots, int64_t n_heads,
                                                      const float* w, float* score) {
  const __m128i stride = _mm_setr_epi32(0, 1, 2, 3);
  const __m128i lo = _mm_mullo_epi32(stride, _mm_set1_epi32(static_cast<int>(n_heads)));
  const __m128i hi = _mm_add_epi32(lo, _mm_set1_epi32(static_cast<int>(4 * n_heads)));
  __m256 acc = _mm256_setzero_ps();
  int64_t h = 0;
  // Four heads at a time: 8 contiguous [4] f64 loads, converted and transposed to lanes = keys.
  for (; h + 4 <= n_heads; h += 4) {
    __m128 r[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_cvtpd_ps(_mm256_loadu_pd(dots + i * n_heads + h));
    _MM_TRANSPOSE4_PS(r[0], r[1], r[2], r[3]);
    _MM_TRANSPOSE4_PS(r[4], r[5], r[6], r[7]);
    for (int c = 0; c < 4; ++c) acc = add_head(acc, _mm256_set_m128(r[4 + c], r[c]), w[h + c]);
  }
  const __m256d zd = _mm256_setzero_pd(), all = _mm256_castsi256_pd(_mm256_set1_epi64x(-1));
  for (; h < n_heads; ++h) {
    const __m128 a = _mm256_cvtpd_ps(_mm256_mask_i32gather_pd(zd, dots + h, lo, all, 8));
    const __m128 b = _mm256_cvtpd_ps(_mm256_mask_i32gather_pd(zd, dots + h, hi, all, 8));
    acc = add_head(acc, _mm256_set_m128(b, a), w[h]);
  }
  _mm256_storeu_ps(score, round_bf16_8(acc));
}

}  // namespace

void index_weighted_scores(const double* dots, int64_t n_keys, int64_t n_heads, const float* w,
                           float* score) {
  int64_t r = 0;
  if (kernels::active_isa() == kernels::Isa::kAvx2 && n_heads * 8 < (int64_t{1} << 31))
    for (; r + 8 <= n_keys; r += 8) scores8_avx2(dots + r * n_heads, n_heads, w, score + r);
  ref::index_weighted_scores(dots + r * n_heads, n_keys - r, n_heads, w, score + r);
}

}  // namespace strata::v41
