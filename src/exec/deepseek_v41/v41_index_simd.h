// Lane helpers shared by the indexer's SIMD kernels (v41_index_scores.cc, v41_index_vnni.cc):
// the weighting of one head's dots for 8 keys, each lane the scalar sequence of
// ref::index_weighted_scores. Internal header (exec/deepseek_v41 only).
#pragma once

#include <immintrin.h>

namespace strata::v41::simd {

// round_to_bf16 on 8 lanes: round half to even; a NaN stays NaN (quieted).
__attribute__((target("avx2,fma"))) inline __m256 round_bf16_8(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rne = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd));
  const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
  const __m256i r = _mm256_and_si256(_mm256_blendv_epi8(rne, quiet, nan),
                                     _mm256_set1_epi32(static_cast<int>(0xffff0000u)));
  return _mm256_castsi256_ps(r);
}

// One head of 8 keys: d = float(dots) (lanes = keys); returns acc + bf16(max(bf16(d), 0) * wh).
__attribute__((target("avx2,fma"))) inline __m256 add_head(__m256 acc, __m256 d, float wh) {
  const __m256 zero = _mm256_setzero_ps();
  __m256 dv = round_bf16_8(d);
  dv = _mm256_blendv_ps(dv, zero, _mm256_cmp_ps(dv, zero, _CMP_LT_OQ));  // max(dv, 0)
  return _mm256_add_ps(acc, round_bf16_8(_mm256_mul_ps(dv, _mm256_set1_ps(wh))));
}

}  // namespace strata::v41::simd
