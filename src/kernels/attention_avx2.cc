// AVX2/FMA attention chunk partials and their merge: the same per-element operation order
// as ref:: (attention.h), bit-identical.
#include <immintrin.h>

#include <algorithm>
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

// U[d0 .. d0 + 8*NC) of a chunk: even / odd offset chains (attention.h), in registers.
template <int NC>
STRATA_AVX2 inline void chunk_values(const float* e, const float* row, int64_t rs, int64_t n,
                                     float* U) {
  __m256 acc[2][NC];
#pragma GCC unroll 8
  for (int c = 0; c < NC; ++c) acc[0][c] = acc[1][c] = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 2 <= n; j += 2, row += 2 * rs) {
    const __m256 p0 = _mm256_set1_ps(e[j]), p1 = _mm256_set1_ps(e[j + 1]);
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      acc[0][c] = _mm256_fmadd_ps(p0, _mm256_loadu_ps(row + 8 * c), acc[0][c]);
      acc[1][c] = _mm256_fmadd_ps(p1, _mm256_loadu_ps(row + rs + 8 * c), acc[1][c]);
    }
  }
  if (j < n) {
    const __m256 p0 = _mm256_set1_ps(e[j]);
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c)
      acc[0][c] = _mm256_fmadd_ps(p0, _mm256_loadu_ps(row + 8 * c), acc[0][c]);
  }
#pragma GCC unroll 8
  for (int c = 0; c < NC; ++c) _mm256_storeu_ps(U + 8 * c, _mm256_add_ps(acc[0][c], acc[1][c]));
}

}  // namespace

STRATA_AVX2 void attention_chunk_partial(const float* q, const KvBlocks& kv, int g, int hd,
                                         int64_t r0, int64_t n, float* part) {
  const int64_t bs = kv.block_size;
  if (bs % 4 != 0 || r0 / bs != (r0 + n - 1) / bs || n > kAttnChunk) {
    ref::attention_chunk_partial(q, kv, g, hd, r0, n, part);
    return;
  }
  const float denom = std::sqrt(static_cast<float>(hd));
  const int64_t rs = kv.row_stride;
  const float* kblk = kv.k_blocks[r0 / bs] + (r0 % bs) * rs + int64_t{g} * hd;
  alignas(32) float e[kAttnChunk];
  int64_t j = 0;
  if (hd % 8 == 0) {
    // Eight positions at once: independent accumulators, then two 4-way canonical sums.
    for (; j + 8 <= n; j += 8) {
      const float* blk = kblk + j * rs;
      __m256 acc[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
      for (int d = 0; d < hd; d += 8) {
        const __m256 qv = _mm256_loadu_ps(q + d);
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i)
          acc[i] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(blk + i * rs + d), acc[i]);
      }
      _mm_storeu_ps(e + j, hsum8x4(acc[0], acc[1], acc[2], acc[3]));
      _mm_storeu_ps(e + j + 4, hsum8x4(acc[4], acc[5], acc[6], acc[7]));
    }
  }
  for (; j < n; ++j) e[j] = dot_canonical(q, kblk + j * rs, hd);
  float m = -INFINITY;
  for (j = 0; j < n; ++j) m = std::max(m, e[j] /= denom);
  for (j = 0; j < n; ++j) e[j] -= m;
  avx2::exp_inplace(e, n);
  float z = 0.0f;
  for (j = 0; j < n; ++j) z += e[j];
  part[0] = m;
  part[1] = z;
  float* U = part + 2;
  const float* vrow = kv.v_blocks[r0 / bs] + (r0 % bs) * rs + int64_t{g} * hd;
  const int hd8 = hd & ~7;
  int d0 = 0;
  for (; d0 + 16 <= hd8; d0 += 16) chunk_values<2>(e, vrow + d0, rs, n, U + d0);
  if (d0 < hd8) chunk_values<1>(e, vrow + d0, rs, n, U + d0);
  for (int d = hd8; d < hd; ++d) {
    float a[2] = {0.0f, 0.0f};
    for (j = 0; j < n; ++j) a[j & 1] = fma1(e[j], vrow[j * rs + d], a[j & 1]);
    U[d] = a[0] + a[1];
  }
}

STRATA_AVX2 void attention_merge(const float* parts, int64_t n_chunks, int64_t stride, int hd,
                                 float* out) {
  float M = -INFINITY;
  for (int64_t c = 0; c < n_chunks; ++c) M = std::max(M, parts[c * stride]);
  const int hd8 = hd & ~7;
  float Z = 0.0f;
  for (int d = 0; d < hd; ++d) out[d] = 0.0f;
  for (int64_t c = 0; c < n_chunks; ++c) {
    const float* p = parts + c * stride;
    const float w = exp_canonical(p[0] - M);
    Z = fma1(w, p[1], Z);
    const __m256 wv = _mm256_set1_ps(w);
    int d = 0;
    for (; d < hd8; d += 8)
      _mm256_storeu_ps(out + d, _mm256_fmadd_ps(wv, _mm256_loadu_ps(p + 2 + d),
                                                _mm256_loadu_ps(out + d)));
    for (; d < hd; ++d) out[d] = fma1(w, p[2 + d], out[d]);
  }
  const __m256 zv = _mm256_set1_ps(Z);
  int d = 0;
  for (; d < hd8; d += 8) _mm256_storeu_ps(out + d, _mm256_div_ps(_mm256_loadu_ps(out + d), zv));
  for (; d < hd; ++d) out[d] /= Z;
}

}  // namespace strata::kernels::avx2
