// Rotary position embedding (RoPE; Su et al. 2021, "RoFormer", eq. 34).
//
// For head dimension d (even) and pair index i in [0, d/2): inv_freq_i = theta^(-2i/d),
// angle = pos * inv_freq_i (computed in double, cos/sin rounded to f32). A pair (a, b) is
// rotated to (a*c - b*s, a*s + b*c).
// Two pair layouts:
//   kInterleaved: pairs (2i, 2i+1) — llama2.c run.c / Meta's original Llama code.
//   kHalfSplit:   pairs (i, i + d/2) — Hugging Face transformers LlamaRotaryEmbedding
//                 (rotate_half). Converting weights between the two is a fixed row
//                 permutation of W_q/W_k within each head (docs/models.md).
// Shapes: v [n_heads, head_dim] f32, rotated in place; cos/sin [head_dim/2].
// Thread safety: pure functions.
#pragma once

#include <cstdint>

namespace strata::kernels {

enum class RopeStyle { kInterleaved, kHalfSplit };

// cos/sin tables for one position.
void rope_table(int64_t pos, int head_dim, double theta, float* cos_out, float* sin_out);
void rope_apply(float* v, int n_heads, int head_dim, const float* cos, const float* sin,
                RopeStyle style);

}  // namespace strata::kernels
