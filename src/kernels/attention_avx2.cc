// AVX2/FMA attention for one head: the same per-element operation order as
// ref::attention_head (attention.h), bit-identical.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/avx2_common.h"

namespace strata::kernels::avx2 {
namespace {

// The canonical dot (matmul.h) of q and k over hd elements.
STRATA_AVX2 inline float dot_canonical(const float* q, const float* k, int hd) {
  const int hd8 = hd & ~7;
  __m256 acc = _mm256_setzero_ps();
  for (int d = 0; d < hd8; d += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), acc);
  float s = hsum8(acc);
  for (int d = hd8; d < hd; ++d) s = fma1(q[d], k[d], s);
  return s;
}

// out[d0 .. d0 + 8*NC): four t-residue partial sums per element (attention.h), in registers.
template <int NC>
STRATA_AVX2 inline void weighted_sum_chunk(const float* p, const KvBlocks& kv, int g, int hd,
                                           int64_t T, int d0, float* out) {
  __m256 acc[4][NC];
#pragma GCC unroll 8
  for (int j = 0; j < 4; ++j)
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) acc[j][c] = _mm256_setzero_ps();
  const int64_t rs = kv.row_stride;
  int64_t t = 0;
  for (int64_t b = 0; t < T; ++b) {
    const float* row = kv.v_blocks[b] + int64_t{g} * hd + d0;
    const int64_t end = t + kv.block_size < T ? t + kv.block_size : T;
    for (; t + 4 <= end; t += 4, row += 4 * rs) {
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const __m256 pv = _mm256_set1_ps(p[t + j]);
#pragma GCC unroll 8
        for (int c = 0; c < NC; ++c)
          acc[j][c] = _mm256_fmadd_ps(pv, _mm256_loadu_ps(row + j * rs + 8 * c), acc[j][c]);
      }
    }
    for (int j = 0; t < end; ++t, ++j, row += rs) {  // only in the last block (T % 4 != 0)
      const __m256 pv = _mm256_set1_ps(p[t]);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c)
        acc[j][c] = _mm256_fmadd_ps(pv, _mm256_loadu_ps(row + 8 * c), acc[j][c]);
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < NC; ++c)
    _mm256_storeu_ps(out + d0 + 8 * c, _mm256_add_ps(_mm256_add_ps(acc[0][c], acc[1][c]),
                                                     _mm256_add_ps(acc[2][c], acc[3][c])));
}

}  // namespace

STRATA_AVX2 void attention_head(const float* q, const KvBlocks& kv, int g, int hd, int64_t T,
                                float* sc, float* out) {
  if (kv.block_size % 4 != 0) {
    ref::attention_head(q, kv, g, hd, T, sc, out);
    return;
  }
  const float denom = std::sqrt(static_cast<float>(hd));
  {
    const bool batch8 = hd % 8 == 0 && kv.block_size % 8 == 0;
    int64_t t = 0;
    for (int64_t b = 0; t < T; ++b) {
      const float* blk = kv.k_blocks[b] + int64_t{g} * hd;
      const int64_t end = t + kv.block_size < T ? t + kv.block_size : T;
      if (batch8) {
        // Eight positions at once: independent accumulators, then two 4-way canonical sums.
        const int64_t rs = kv.row_stride;
        for (; t + 8 <= end; t += 8, blk += 8 * rs) {
          __m256 acc[8];
#pragma GCC unroll 8
          for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
          for (int d = 0; d < hd; d += 8) {
            const __m256 qv = _mm256_loadu_ps(q + d);
#pragma GCC unroll 8
            for (int j = 0; j < 8; ++j)
              acc[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(blk + j * rs + d), acc[j]);
          }
          _mm_storeu_ps(sc + t, hsum8x4(acc[0], acc[1], acc[2], acc[3]));
          _mm_storeu_ps(sc + t + 4, hsum8x4(acc[4], acc[5], acc[6], acc[7]));
        }
      }
      for (; t < end; ++t, blk += kv.row_stride) sc[t] = dot_canonical(q, blk, hd);
    }
  }
  {
    const __m256 vd = _mm256_set1_ps(denom);
    int64_t t = 0;
    for (; t + 8 <= T; t += 8) _mm256_storeu_ps(sc + t, _mm256_div_ps(_mm256_loadu_ps(sc + t), vd));
    for (; t < T; ++t) sc[t] /= denom;
  }
  avx2::softmax(sc, T);
  const int hd8 = hd & ~7;
  int d0 = 0;
  for (; d0 + 16 <= hd8; d0 += 16) weighted_sum_chunk<2>(sc, kv, g, hd, T, d0, out);
  if (d0 < hd8) weighted_sum_chunk<1>(sc, kv, g, hd, T, d0, out);
  for (int d = hd8; d < hd; ++d) {
    float s4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t t = 0; t < T; ++t) s4[t & 3] = fma1(sc[t], kv.v(t, g, hd)[d], s4[t & 3]);
    out[d] = (s4[0] + s4[1]) + (s4[2] + s4[3]);
  }
}

}  // namespace strata::kernels::avx2
