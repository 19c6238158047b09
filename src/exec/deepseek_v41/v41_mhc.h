// V4.1 manifold hyper-connections (mHC) on the hc residual streams, with the reference's
// rounding points: Block.hc_mixes (mixes -> Sinkhorn split), Block.hc_pre (collapse) and
// Block.hc_post (expand + residual mix). Reference: DeepSeek V4.1 inference/model.py Block,
// kernel_cpu.py hc_split_sinkhorn; spec v41-architecture.md §2.7. Used by the backbone
// blocks and the DSpark stages alike.
// Shapes: h [S, hc, D] row-major bf16 values in f32; pre/post [S, hc]; comb [S, hc, hc]
// (row i = source stream, column j = destination); y / f [S, D].
// Thread safety: pure functions (thread-local scratch only).
#pragma once

#include <cstdint>

#include "exec/deepseek_v41/v41_ops.h"
#include "model/deepseek_v41_weights.h"

namespace strata {
class ThreadPool;
}

namespace strata::v41 {

// pre/post/comb for every token of h (hcD = hc * D). `vrows` locates each row in the
// reference call's tensors (see CallRows); `pool` may be null.
void hc_mixes(const float* h, int64_t S, int64_t hcD, const V41MhcWeights& w, int hc, int iters,
              double norm_eps, double hc_eps, float* pre, float* post, float* comb,
              CallRows vrows, ThreadPool* pool);
// Where the fp32 sums over the streams start: from 0 (V4.1's reference), or from the first
// product (V4's: the two differ only where every product is -0).
enum class SumStart { kZero, kFirstTerm };
// y[s, d] = bf16(sum_c pre[s, c] * h[s, c, d]).
// Tokens split over `pool` (optional); AVX-512 lanes where active: same bits either way.
void hc_pre(const float* h, const float* pre, int64_t S, int hc, int64_t D, float* y,
            ThreadPool* pool = nullptr, SumStart start = SumStart::kZero);
// h[s, j, d] <- bf16(post[s, j] * f[s, d] + sum_i comb[s, i, j] * h[s, i, d]) (in place).
// Tokens split over `pool` (optional); AVX-512 lanes where active: same bits either way.
void hc_post(const float* f, const float* post, const float* comb, int64_t S, int hc, int64_t D,
             float* h, ThreadPool* pool = nullptr, SumStart start = SumStart::kZero);

}  // namespace strata::v41
