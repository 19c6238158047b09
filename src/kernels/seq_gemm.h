// Sequential-FMA GEMM over BF16 / F32 weights: y[M, N] = x[M, K] · W[N, K]^T where every
// output element is computed as
//     acc = +0.0f;  for k in 0..K-1 (in order): acc = fma(x[m, k], w[n, k], acc)
// in fp32, i.e. the per-element order of a BLAS sgemm micro-kernel, which is how torch's
// CPU F.linear (weights promoted to fp32) reaches the DeepSeek reference's results
// (inference/model.py: compressor wkv/wgate at ratio > 1, the MoE gate, the LM head, the
// mHC mixes; exec/deepseek_v41/v41_ops.h linear_f32 is the scalar statement of the same order).
//
// Layout: the weight is repacked once (e.g. at model load) into tiles of 8 rows, grouped in
// blocks of 8 tiles (64 rows) stored [K][tiles in the block][8] (the last block may hold
// fewer tiles), so that for each k a block's rows are contiguous (one address stream per
// pass) and a vector lane holds one output row: lanes never mix rows, so the vector kernels produce
// bit-identical results to the scalar loop, for every M, N split and thread count
// (batch- and thread-count-invariant; work is split over N only, never over K).
// BF16 weights stay 2 bytes per element (widened in registers), F32 stay 4.
//
// Errors: shape mismatches are broken invariants (STRATA_CHECK).
// Thread safety: pure functions of their inputs; `pool` may be null (caller thread only).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/weight_buffer.h"

namespace strata {
class ThreadPool;
}

namespace strata::kernels {

struct PackedSeqWeight {
  int64_t n = 0, k = 0;
  bool bf16 = true;             // element type of `data16` (true) or `data32` (false)
  WeightBuffer<uint16_t> data16; // blocks of [K][<= 8 tiles][8] bf16 bits, padding rows 0
  WeightBuffer<float> data32;   // the same layout, f32
  int64_t bytes() const {
    return static_cast<int64_t>(data16.size() * 2 + data32.size() * 4);
  }
};

// w: [N, K] row-major, bf16 bits / f32.
PackedSeqWeight pack_seq_weight_bf16(const uint16_t* w, int64_t n, int64_t k);
PackedSeqWeight pack_seq_weight_f32(const float* w, int64_t n, int64_t k);

// y [M, N] f32 (not rounded).
void seq_gemm_packed(const float* x, int64_t m, const PackedSeqWeight& w, float* y,
                     ThreadPool* pool);

namespace ref {
// Scalar statement of the order above on the unpacked weight, columns [n_begin, n_end).
void seq_gemm_cols(const float* x, int64_t m, const uint16_t* w_bf16, const float* w_f32,
                   int64_t n, int64_t k, float* y, int64_t n_begin, int64_t n_end);
}  // namespace ref

}  // namespace strata::kernels
