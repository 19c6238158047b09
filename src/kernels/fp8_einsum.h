// FP8 weight times activations with an f64 accumulator, for the grouped low-rank output
// projection of DeepSeek-V4.1 (wo_a): the reference dequantizes wo_a to bf16 at load (each
// value e4m3 × UE8M0 block scale, exact in bf16) and runs a bf16 einsum; Strata keeps the
// FP8 bytes and dequantizes inside the kernel (exec/deepseek_v41/v41_attention.cc; spec §2.6,
// inference/model.py Attention.forward "wo_a").
//
// For rows n in [n_begin, n_end) of the packed weight W [N, K] and every activation row m:
//     acc = 0.0 (f64);  for k in order: acc = acc + f64(x[m, k]) * f64(w[n, k])
//     y[m * ldy + (n - n_begin)] = bf16(f32(acc))
// The products are exact in f64 (24-bit × 4-bit significands), so an f64 FMA gives the same
// value as multiply-then-add; vector lanes hold output rows, so the AVX2 path is
// bit-identical to the scalar loop for every M and thread count.
//
// Shapes: x [M, K] with row stride ldx (floats); w packed by pack_fp8_weight (any block_k);
// n_begin % 8 == 0. Errors: STRATA_CHECK on shape mismatch.
// Thread safety: pure; `pool` may be null (work is split over rows n only).
#pragma once

#include <cstdint>

#include "kernels/block_gemm.h"

namespace strata::kernels {

void fp8_dequant_gemm_f64(const float* x, int64_t m, int64_t ldx, const PackedFp8Weight& w,
                          int64_t n_begin, int64_t n_end, float* y, int64_t ldy,
                          ThreadPool* pool);

// The grouped low-rank form in one dispatch: for each g in [0, groups), rows
// [g·R, (g+1)·R) of W (R = N / groups) times x + g·x_group_stride, written to y + g·R
// (row stride ldy). Identical, bit for bit, to calling fp8_dequant_gemm_f64(x +
// g·x_group_stride, m, ldx, w, g·R, (g+1)·R, y + g·R, ldy, pool) for each g; the pool runs
// all groups' rows together (ThreadPool::parallel_for_stealing) instead of one dispatch
// per group. Shapes: N % groups == 0, R % 8 == 0. Errors: STRATA_CHECK. Thread safety: pure.
void fp8_dequant_gemm_f64_grouped(const float* x, int64_t m, int64_t ldx,
                                  const PackedFp8Weight& w, int64_t groups,
                                  int64_t x_group_stride, float* y, int64_t ldy,
                                  ThreadPool* pool);

}  // namespace strata::kernels
