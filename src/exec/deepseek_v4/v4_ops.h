// DeepSeek-V4 forward primitives that differ from V4.1's (exec/deepseek_v41/v41_ops.h is reused for the
// rest: RMSNorm, RoPE/YaRN tables, sparse attention, SLEEF exp, torch sum / topk orders,
// FP8/FP4 QDQ, hc_split_sinkhorn).
//
//   linear         model.py `linear` with V4's block sizes: FP8 weights with `w.block`-square
//                  scale tiles (128 in the releases) and act_quant block = w.block; FP4
//                  experts with act_quant block 128 (kernel_cpu_v4: per-128 activation scales,
//                  K walked in 32-blocks); BF16 -> F.linear (bf16 output). Uses
//                  kernels/block_gemm.h.
//   hadamard       rotate_activation: Sylvester Walsh-Hadamard over the last n (power of 2)
//                  values, fp32, times n^-1/2, rounded to bf16 (golden PATCHES.md item 3).
//   head_rms       V4's per-head query norm q *= rsqrt(mean(q^2) + eps) done in bf16 ops
//                  (square, mean, +eps, rsqrt each rounded to bf16), no weight.
//   hc_mixes/pre/post/head  Block.hc_pre / hc_post and ParallelHead.hc_head (spec §2.7).
//
// Shapes: x row-major [M, K] f32 holding bf16 values. Every function computes each row
// independently with a fixed reduction order (batch- and chunk-invariant).
// Sources: DeepSeek-V4-Flash inference/model.py (Mockingjay1316/deepseek-v4-flash-spark
// @0825add); spec docs/v41-architecture.md §2.1, §2.3, §2.7.
// Thread safety: pure functions.
#pragma once

#include <cstdint>

#include "exec/deepseek_v41/v41_ops.h"
#include "kernels/block_gemm.h"
#include "model/deepseek_v41_weights.h"

namespace strata::v4 {

// With w.packed set (DeepseekV4Weights::pack_for_kernels) the packed multi-threaded kernels
// run over `pool` (may be null), bit-identical to the loops used without it.
void linear(const float* x, int64_t M, const V41Linear& w, float* y, ThreadPool* pool = nullptr);
// The activation block linear() quantizes x with for an FP8 / FP4 weight (0 for BF16 / F32:
// not quantized).
int act_block(const V41Linear& w);
// linear() on rows already quantized the way linear() quantizes them (a.block == act_block(w),
// UE8M0 scales; expert-parallel dispatch, exec/ep_moe.h): the same GEMM, so
// linear_q(act_quant(x), w) == linear(x, w) bit for bit. w FP8 or FP4 (CHECKed); y [a.m, w.out].
void linear_q(const kernels::QuantActs& a, const V41Linear& w, float* y,
              ThreadPool* pool = nullptr);

// F.linear with an fp32 (or bf16-promoted) weight, fp32 output: one sequential FMA chain
// over K per output (the per-element order of a BLAS sgemm micro-kernel). Used for the mHC
// mixes, compressor wkv/wgate, the MoE gate and the LM head. (Tried: lane-split orders for
// BLAS tail rows / GEMV; they changed no golden bit, so the single chain is kept.)
// `packed` (w in kernels/seq_gemm.h's layout, or null) runs the same order vectorized over
// `pool`.
void linear_f32(const float* x, int64_t M, const TensorView& w, int64_t out, int64_t in, float* y,
                const kernels::PackedSeqWeight* packed = nullptr, ThreadPool* pool = nullptr);

// In place over `rows` rows of n values (n a power of two).
void hadamard(float* x, int64_t rows, int64_t n);

// In place over rows of n values. Row r is element row_base + r of torch's [total_rows]
// (= [S, H, 1]) rsqrt tensor of the reference call.
void head_rms(float* x, int64_t rows, int64_t n, double eps, int64_t row_base, int64_t total_rows);

// torch's elementwise CPU loops (vectorized_loop) run 2*Vec::size() elements per step with
// the vectorized op (SLEEF exp, fp32 rsqrt) and the remaining elements of a contiguous tensor
// with the scalar op (libm exp; bf16 rsqrt = 1 / bf16(sqrt)). On the reference's AVX2 build
// a step is 16 fp32 or 32 bf16 elements. True when element `e` of an n-element contiguous
// tensor is in that scalar tail.
inline bool torch_scalar_tail(int64_t e, int64_t n, int64_t step = 16) { return e >= (n / step) * step; }
// exp as torch computes element e of an n-element tensor (SLEEF or libm, see above).
float torch_exp_at(float x, int64_t e, int64_t n);

// log1pf as SLEEF's u10 vector kernel computes it on AVX2+FMA (double-float reduction with
// the 1/0.75 exponent split), the vectorized path of torch.log1p / F.softplus.
float sleef_log1pf(float d);
// F.softplus(x) (beta 1, threshold 20) for element e of an n-element tensor: vectorized
// log1p(exp(x)) with SLEEF, scalar tail std::log1p(std::exp(x)).
float torch_softplus_at(float x, int64_t e, int64_t n);

// hc_split_sinkhorn for token `i` of S (the element positions decide SLEEF vs libm exp).
void hc_split_sinkhorn(const float* mixes, const float* scale, const float* base, int hc, int iters,
                       float eps, int64_t i, int64_t S, float* pre, float* post, float* comb);

// kernel_cpu_v4 sparse_attn for one (query, head): rows are K = V (nullptr = index -1), online
// softmax over blocks of 64 list entries starting from a -inf running max, bf16 probabilities
// in PV, fp32 denominator, attention sink (not scaled). `qh` = query*H + head and `SH` =
// S*H locate the exps in torch's tensors. out rounded to bf16.
void sparse_attn_head(const float* q, const float* const* rows, int64_t n_rows, int64_t d,
                      float sink, float scale, int64_t qh, int64_t SH, float* out);
// sparse_attn_head for heads [0, n_heads) of one query against one shared row list (MQA):
// head h reads q[h*d..] and sinks[h], writes out[h*d..], at reference position qh0 + h. Same
// bits as the per-head calls: the scores are computed for all heads at once
// (v41::qk_scores_heads, the same sequential FMA over d) and softmax/PV run in
// v41::sparse_attn_heads, whose steps equal this kernel's whenever the first block of 64
// entries has a valid row scoring above -1e30 and no score is +inf (V4.1 starts its running
// max at -1e30 and gives invalid entries p = 0 directly; V4 starts at -inf and computes
// exp(-inf - m)). Otherwise the per-head kernel runs. Thread safety: thread-local scratch.
void sparse_attn_heads(const float* q, const float* const* rows, int64_t n_rows, int64_t d,
                       int64_t n_heads, const float* sinks, float scale, int64_t qh0, int64_t SH,
                       float* out);

// mixes -> pre/post/comb for every token of h [S, hc*D].
// Token i of this call is token vrows.tok(i) of a vrows.n-token call (v41::CallRows).
void hc_mixes(const float* h, int64_t S, int hc, int64_t D, const V41MhcWeights& w, int iters,
              double norm_eps, double hc_eps, v41::CallRows vrows, float* pre, float* post,
              float* comb, ThreadPool* pool = nullptr);
// y[s, :] = bf16(sum_c pre[s, c] * h[s, c, :]) (the sum starts from the first product).
// Tokens split over `pool` (optional); AVX-512 lanes where active: same bits either way.
void hc_pre(const float* h, const float* pre, int64_t S, int hc, int64_t D, float* y,
            ThreadPool* pool = nullptr);
// h[s, j, :] <- bf16(post[s, j] * f[s, :] + sum_i comb[s, i, j] * h[s, i, :]).
// Tokens split over `pool` (optional); AVX-512 lanes where active: same bits either way.
void hc_post(const float* f, const float* post, const float* comb, int64_t S, int hc, int64_t D,
             float* h, ThreadPool* pool = nullptr);
// ParallelHead.hc_head: pre = sigmoid(mixes * scale + base) + hc_eps; y = bf16(sum pre * h).
void hc_head(const float* h, int64_t S, int hc, int64_t D, const float* fn, const float* base,
             const float* scale, double norm_eps, double hc_eps, v41::CallRows vrows,
             float* y, ThreadPool* pool = nullptr);

}  // namespace strata::v4
