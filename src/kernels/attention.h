// Causal GQA attention for one query token and one head over a paged KV cache, computed in
// chunks of kAttnChunk positions whose partials merge in chunk order (split-K, as in
// flash-decoding) -- the one canonical form, single-rank and under decode context
// parallelism alike (a DCP rank computes the partials of the chunks it stores; the merge of
// all chunks' partials in chunk order is the same arithmetic: bit-identical logits).
//
// Formula (Vaswani et al. 2017; GQA: Ainslie et al. 2023): for query head h with KV head
// g = h / (n_heads / n_kv_heads), positions t = 0..T-1, chunk c = positions
// [c*C, min((c+1)*C, T)) with C = kAttnChunk:
//   s_t = dot(q_h, k_{t,g}) / sqrtf(head_dim)     (dot: the canonical 8-lane reduction, matmul.h)
//   chunk partial (m_c, z_c, U_c[head_dim]):
//     m_c = max over the chunk of s_t;  e_t = exp(s_t - m_c)   (exp_canonical, activation.h)
//     z_c = the canonical 8-lane tree (matmul.h, hsum8: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)))
//           of a_l = e_{c*C+l} + e_{c*C+l+8}, l = 0..7 (a missing position counts +0)
//     U_c[d] = A_even[d] + A_odd[d], A_* = fma chains e_t * v_{t,g}[d] over the chunk's
//              even / odd offsets in t order from +0
//   merge over chunks c = 0..n-1 in order: M = max m_c; w_c = exp(m_c - M) (exp_canonical);
//     Z = fma chain w_c * z_c from +0; O[d] = fma chain w_c * U_c[d] from +0;
//     out_h[d] = O[d] / Z
// The order is a function of T only: the result depends only on q and the cached rows -- not
// on batch composition, chunking of the prefill, thread count or how many DCP ranks hold
// the chunks. (Mathematically the softmax-weighted sum of llama2.c run.c's loop; rounding
// differs from it in the last bits.)
//
// KV layout (KvBlocks): row t lives in block t / block_size, at row t % block_size; a row
// holds the KV heads' values (row_stride floats apart) and head g starts at g * head_dim.
// A DCP rank's view holds only its own rows, densely (dist/dcp.h local_index), so a chunk it
// owns is rows [r0, r0 + n) of that view.
// Shapes: q, out [head_dim]; partial [head_dim + 2] floats laid out (m, z, U[head_dim]);
// attention_head's scratch: attention_scratch_floats(T, head_dim) floats.
// The AVX2 kernels need block_size % 16 == 0 (chunks then never straddle a block); else the
// scalar reference runs (same bits).
// Thread safety: pure functions; KV blocks are only read.
#pragma once

#include <cstdint>

namespace strata::kernels {

inline constexpr int64_t kAttnChunk = 16;

struct KvBlocks {
  const float* const* k_blocks = nullptr;
  const float* const* v_blocks = nullptr;
  int64_t block_size = 0;
  int64_t row_stride = 0;  // floats per position (n_kv_heads * head_dim)

  const float* k(int64_t t, int g, int head_dim) const {
    return k_blocks[t / block_size] + (t % block_size) * row_stride + int64_t{g} * head_dim;
  }
  const float* v(int64_t t, int g, int head_dim) const {
    return v_blocks[t / block_size] + (t % block_size) * row_stride + int64_t{g} * head_dim;
  }
};

inline int64_t attention_chunks(int64_t T) { return (T + kAttnChunk - 1) / kAttnChunk; }
inline int64_t attention_scratch_floats(int64_t T, int head_dim) {
  return attention_chunks(T) * (head_dim + 2 + kAttnChunk);
}

// The partial of rows [r0, r0 + n) of the view (1 <= n <= kAttnChunk), written to
// part[0 .. head_dim + 2).
void attention_chunk_partial(const float* q, const KvBlocks& kv, int kv_head, int head_dim,
                             int64_t r0, int64_t n, float* part);
// Merges n_chunks >= 1 partials (partial c at parts + c * stride) in order into out[head_dim].
void attention_merge(const float* parts, int64_t n_chunks, int64_t stride, int head_dim,
                     float* out);
// All of it for positions [0, T), T >= 1: the partial of every chunk, then the merge.
void attention_head(const float* q, const KvBlocks& kv, int kv_head, int head_dim, int64_t T,
                    float* scratch, float* out);

namespace ref {
void attention_chunk_partial(const float* q, const KvBlocks& kv, int kv_head, int head_dim,
                             int64_t r0, int64_t n, float* part);
void attention_merge(const float* parts, int64_t n_chunks, int64_t stride, int head_dim,
                     float* out);
void attention_head(const float* q, const KvBlocks& kv, int kv_head, int head_dim, int64_t T,
                    float* scratch, float* out);
}  // namespace ref
namespace avx2 {
void attention_chunk_partial(const float* q, const KvBlocks& kv, int kv_head, int head_dim,
                             int64_t r0, int64_t n, float* part);
void attention_merge(const float* parts, int64_t n_chunks, int64_t stride, int head_dim,
                     float* out);
void attention_head(const float* q, const KvBlocks& kv, int kv_head, int head_dim, int64_t T,
                    float* scratch, float* out);
}  // namespace avx2

}  // namespace strata::kernels
