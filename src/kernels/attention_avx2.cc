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

// Raw dots of rows [r0, r0 + n) of the view (not yet divided), into e[0, n): eight rows
// at once where the head dim and block allow (independent accumulators, then two 4-way
// canonical sums), else one at a time.
STRATA_AVX2 inline void raw_scores(const float* q, const KvBlocks& kv, int g, int hd, int64_t r0,
                                   int64_t n, float* e) {
  const int64_t bs = kv.block_size, rs = kv.row_stride;
  const bool batch8 = hd % 8 == 0 && bs % 8 == 0;
  int64_t t = r0;
  const int64_t T = r0 + n;
  while (t < T) {
    const float* blk = kv.k_blocks[t / bs] + (t % bs) * rs + int64_t{g} * hd;
    const int64_t end = std::min(T, (t / bs + 1) * bs);
    if (batch8) {
      for (; t + 8 <= end; t += 8, blk += 8 * rs) {
        __m256 acc[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
        for (int d = 0; d < hd; d += 8) {
          const __m256 qv = _mm256_loadu_ps(q + d);
#pragma GCC unroll 8
          for (int i = 0; i < 8; ++i)
            acc[i] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(blk + i * rs + d), acc[i]);
        }
        _mm_storeu_ps(e + (t - r0), hsum8x4(acc[0], acc[1], acc[2], acc[3]));
        _mm_storeu_ps(e + (t - r0) + 4, hsum8x4(acc[4], acc[5], acc[6], acc[7]));
      }
    }
    for (; t < end; ++t, blk += rs) e[t - r0] = dot_canonical(q, blk, hd);
  }
}

// One chunk's raw dots e[0, n) (e has kAttnChunk floats) -> s - m with s = dot / denom
// (e[n, 16) = -inf); returns m.
STRATA_AVX2 inline float chunk_shift(float* e, int64_t n, __m256 vd) {
  for (int64_t j = n; j < kAttnChunk; ++j) e[j] = -INFINITY;
  const __m256 lo = _mm256_div_ps(_mm256_loadu_ps(e), vd);
  const __m256 hi = _mm256_div_ps(_mm256_loadu_ps(e + 8), vd);
  __m256 mx = _mm256_max_ps(lo, hi);
  mx = _mm256_max_ps(mx, _mm256_permute2f128_ps(mx, mx, 1));
  mx = _mm256_max_ps(mx, _mm256_shuffle_ps(mx, mx, _MM_SHUFFLE(1, 0, 3, 2)));
  mx = _mm256_max_ps(mx, _mm256_shuffle_ps(mx, mx, _MM_SHUFFLE(2, 3, 0, 1)));
  _mm256_storeu_ps(e, _mm256_sub_ps(lo, mx));
  _mm256_storeu_ps(e + 8, _mm256_sub_ps(hi, mx));
  return _mm256_cvtss_f32(mx);
}

// z of a chunk's weights (e[n, 16) = 0).
STRATA_AVX2 inline float chunk_z(const float* e) {
  return hsum8(_mm256_add_ps(_mm256_loadu_ps(e), _mm256_loadu_ps(e + 8)));
}

// U of rows [r0, r0 + n) (inside one block) with weights e.
STRATA_AVX2 inline void chunk_u(const float* e, const KvBlocks& kv, int g, int hd, int64_t r0,
                                int64_t n, float* U) {
  const int64_t bs = kv.block_size, rs = kv.row_stride;
  const float* vrow = kv.v_blocks[r0 / bs] + (r0 % bs) * rs + int64_t{g} * hd;
  const int hd8 = hd & ~7;
  int d0 = 0;
  for (; d0 + 16 <= hd8; d0 += 16) chunk_values<2>(e, vrow + d0, rs, n, U + d0);
  if (d0 < hd8) chunk_values<1>(e, vrow + d0, rs, n, U + d0);
  for (int d = hd8; d < hd; ++d) {
    float a[2] = {0.0f, 0.0f};
    for (int64_t j = 0; j < n; ++j) a[j & 1] = fma1(e[j], vrow[j * rs + d], a[j & 1]);
    U[d] = a[0] + a[1];
  }
}

}  // namespace

STRATA_AVX2 void attention_chunk_partial(const float* q, const KvBlocks& kv, int g, int hd,
                                         int64_t r0, int64_t n, float* part) {
  const int64_t bs = kv.block_size;
  if (bs % kAttnChunk != 0 || r0 / bs != (r0 + n - 1) / bs || n > kAttnChunk) {
    ref::attention_chunk_partial(q, kv, g, hd, r0, n, part);
    return;
  }
  alignas(32) float e[kAttnChunk];
  raw_scores(q, kv, g, hd, r0, n, e);
  part[0] = chunk_shift(e, n, _mm256_set1_ps(std::sqrt(static_cast<float>(hd))));
  avx2::exp_inplace(e, kAttnChunk);
  for (int64_t j = n; j < kAttnChunk; ++j) e[j] = 0.0f;
  part[1] = chunk_z(e);
  chunk_u(e, kv, g, hd, r0, n, part + 2);
}

STRATA_AVX2 void attention_merge(const float* parts, int64_t n_chunks, int64_t stride, int hd,
                                 float* out) {
  float M = -INFINITY;
  for (int64_t c = 0; c < n_chunks; ++c) M = std::max(M, parts[c * stride]);
  const int hd8 = hd & ~7;
  float Z = 0.0f;
  for (int d = 0; d < hd; ++d) out[d] = 0.0f;
  constexpr int64_t kBatch = 64;
  alignas(32) float w[kBatch];
  for (int64_t c0 = 0; c0 < n_chunks; c0 += kBatch) {
    const int64_t nb = std::min(kBatch, n_chunks - c0);
    for (int64_t i = 0; i < nb; ++i) w[i] = parts[(c0 + i) * stride] - M;
    avx2::exp_inplace(w, nb);
    for (int64_t i = 0; i < nb; ++i) {
      const float* p = parts + (c0 + i) * stride;
      Z = fma1(w[i], p[1], Z);
      const __m256 wv = _mm256_set1_ps(w[i]);
      int d = 0;
      for (; d < hd8; d += 8)
        _mm256_storeu_ps(out + d, _mm256_fmadd_ps(wv, _mm256_loadu_ps(p + 2 + d),
                                                  _mm256_loadu_ps(out + d)));
      for (; d < hd; ++d) out[d] = fma1(w[i], p[2 + d], out[d]);
    }
  }
  const __m256 zv = _mm256_set1_ps(Z);
  int d = 0;
  for (; d < hd8; d += 8) _mm256_storeu_ps(out + d, _mm256_div_ps(_mm256_loadu_ps(out + d), zv));
  for (; d < hd; ++d) out[d] /= Z;
}

STRATA_AVX2 void attention_head(const float* q, const KvBlocks& kv, int g, int hd, int64_t T,
                                float* scratch, float* out) {
  if (kv.block_size % kAttnChunk != 0) {
    ref::attention_head(q, kv, g, hd, T, scratch, out);
    return;
  }
  const int64_t nc = attention_chunks(T), pf = hd + 2;
  float* parts = scratch;
  float* e = scratch + nc * pf;  // nc * kAttnChunk: raw dots, then each chunk's weights
  raw_scores(q, kv, g, hd, 0, T, e);
  const __m256 vd = _mm256_set1_ps(std::sqrt(static_cast<float>(hd)));
  for (int64_t c = 0; c < nc; ++c)
    parts[c * pf] = chunk_shift(e + c * kAttnChunk, std::min(kAttnChunk, T - c * kAttnChunk), vd);
  avx2::exp_inplace(e, nc * kAttnChunk);
  for (int64_t t = T; t < nc * kAttnChunk; ++t) e[t] = 0.0f;
  for (int64_t c = 0; c < nc; ++c) {
    const int64_t r0 = c * kAttnChunk;
    parts[c * pf + 1] = chunk_z(e + r0);
    chunk_u(e + r0, kv, g, hd, r0, std::min(kAttnChunk, T - r0), parts + c * pf + 2);
  }
  attention_merge(parts, nc, pf, hd, out);
}

}  // namespace strata::kernels::avx2
