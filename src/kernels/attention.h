// Causal GQA attention for one query token and one head over a paged KV cache.
//
// Formula (Vaswani et al. 2017; GQA: Ainslie et al. 2023): for query head h with KV head
// g = h / (n_heads / n_kv_heads):
//   s_t = dot(q_h, k_{t,g}) / sqrtf(head_dim),  t = 0..T-1 (the visible positions)
//   p = softmax(s)                              (kernels/activation.h, index order)
//   out_h[d] = (S_0 + S_1) + (S_2 + S_3), S_j = sum over t ≡ j (mod 4) of p_t * v_{t,g}[d]
//              as an fma chain in increasing t starting from +0 (four independent chains
//              keep the FMA pipeline busy; the order is a function of T only)
// dot() is the canonical 8-lane reduction (matmul.h). The order over t is fixed, so the
// result depends only on q and the cached rows — not on batch composition, chunking or
// thread count. Same semantics as llama2.c run.c's attention loop.
//
// KV layout (KvBlocks): position t lives in block t / block_size, at row t % block_size;
// a row holds n_kv_heads * head_dim floats (row_stride) and head g starts at g * head_dim.
// Shapes: q, out [head_dim]; scratch [T] floats.
// The AVX2 version needs block_size % 4 == 0 (else it falls back to the scalar reference).
// Thread safety: pure functions; KV blocks are only read.
#pragma once

#include <cstdint>

namespace strata::kernels {

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

void attention_head(const float* q, const KvBlocks& kv, int kv_head, int head_dim, int64_t T,
                    float* scratch, float* out);

namespace ref {
void attention_head(const float* q, const KvBlocks& kv, int kv_head, int head_dim, int64_t T,
                    float* scratch, float* out);
}
namespace avx2 {
void attention_head(const float* q, const KvBlocks& kv, int kv_head, int head_dim, int64_t T,
                    float* scratch, float* out);
}

}  // namespace strata::kernels
