// Activation quantization of DeepSeek-V4 / V4.1: FP8 (E4M3) and FP4 (E2M1) with per-block
// scales, in the "quantize" form (codes + scales, the input of the block GEMMs) and the
// "QDQ" form (quantize, then dequantize back to bf16 in place, the reference's
// `inplace=True` fake-quant of cached vectors).
//
// Source of the rules: DeepSeek-V4.1-Flash reference inference/model.py (call sites) and its
// kernel.py as ported bit-exactly by tenstorrent/tt-metal
// models/demos/deepseek_v3_d_p/reference/deepseek_v41/kernel_cpu.py (act_quant,
// fp4_act_quant, fast_round_scale); spec docs/v41-architecture.md §2.1.
//
//   pow2ceil(a)     = 2^ceil(log2(a)) on the f32 bit pattern: exponent field, +1 when the
//                     mantissa is non-zero (a > 0 normal; result is a float).
//   FP8 act quant   per block of `block` elements along the last dim (V4.1: 32 for GEMM
//                   activations and window KV; V4: 128 GEMM / 64 KV):
//                     amax = max(max|x|, 1e-4)
//                     s    = pow2ceil(amax * f32(1/448))        (ScaleFmt::kUe8m0)
//                          = amax * f32(1/448)                  (ScaleFmt::kNone, plain f32)
//                     q    = e4m3_rne(clamp(x / s, -448, 448))  (x/s rounded in f32 first)
//                     QDQ  = bf16(q * s)
//   FP4 act quant   per group of `block`:
//                     kE8M0 (indexer Q/K, group 32): s = pow2ceil(max(amax, 6*2^-126) * f32(1/6))
//                     kE4M3 (V4.1 compressed KV, group 16): s = e4m3_rne(max(amax, 6*2^-9) / 6)
//                     v = clamp(f32(x / s), -6, 6); q = e2m1_rne(v) (ties to the even code:
//                     0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4)
//                     QDQ = bf16(q * s)
//                   Packed FP4: two codes per byte, even element in the low nibble, bit 3 sign.
//
// Inputs are f32 arrays whose values are the reference's bf16 activations (the reference
// asserts bf16 input; callers round first, e.g. with round_to_bf16 from model/dtype.h).
// Exactness: every function here is bit-exact w.r.t. the reference (elementwise over fixed
// groups; no reductions whose order matters except max, which is order-free).
// Shapes: x row-major [rows, cols], cols % block == 0 (CHECKed).
// Thread safety: pure functions; rows are independent (batch-invariant).
#pragma once

#include <cstdint>

#include "kernels/quant_formats.h"

namespace strata::kernels {

inline constexpr float kFp8Max = 448.0f;
inline constexpr float kFp4Max = 6.0f;

enum class ScaleFmt : uint8_t {
  kUe8m0,  // power-of-two scales (scale_fmt = "ue8m0"; used everywhere in V4 and V4.1)
  kNone,   // plain f32 scales amax/448 (scale_fmt = None)
};
enum class Fp4ScaleFmt : uint8_t {
  kE8M0,  // power-of-two scale, default group 32 (indexer Q / index keys)
  kE4M3,  // E4M3-rounded scale, default group 16 (V4.1 compressed KV)
};

// Scalar primitives (pow2_ceil, E4M3 / E2M1 encode, decode, round): kernels/quant_formats.h,
// the one codec of these formats.

// --- FP8 activation quantization ---
// q_codes [rows, cols] E4M3 bytes (may be null), q_vals [rows, cols] the same values as f32
// (may be null; exact), scales [rows, cols/block] f32.
void act_quant_fp8(const float* x, int64_t rows, int64_t cols, int block, ScaleFmt fmt,
                   uint8_t* q_codes, float* q_vals, float* scales);
// In-place QDQ: x <- bf16(e4m3(x/s) * s) per block (the reference's act_quant(..., True)).
void act_qdq_fp8(float* x, int64_t rows, int64_t cols, int block, ScaleFmt fmt);

// --- FP4 activation quantization ---
// packed [rows, cols/2] (may be null), q_vals [rows, cols] f32 values of the codes (may be
// null), scales [rows, cols/block] f32 (a power of two for kE8M0, an E4M3 value for kE4M3).
void act_quant_fp4(const float* x, int64_t rows, int64_t cols, int block, Fp4ScaleFmt fmt,
                   uint8_t* packed, float* q_vals, float* scales);
// In-place QDQ: x <- bf16(e2m1(x/s) * s) (the reference's fp4_act_quant(..., inplace=True)).
void act_qdq_fp4(float* x, int64_t rows, int64_t cols, int block, Fp4ScaleFmt fmt);

// --- bf16 helpers ---
// f32 -> nearest bf16 value (round half to even; NaN stays NaN, quieted), as an f32.
inline float round_bf16(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    u = (u | 0x00400000u) & 0xffff0000u;
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
  }
  __builtin_memcpy(&f, &u, 4);
  return f;
}
// Rounds every element to bf16 (round-to-nearest-even, as torch .to(bfloat16)).
void round_bf16_inplace(float* x, int64_t n);
// f32 -> bf16 bits / bf16 bits -> f32 for arrays.
void f32_to_bf16_array(const float* x, int64_t n, uint16_t* out);
void bf16_to_f32_array(const uint16_t* x, int64_t n, float* out);

}  // namespace strata::kernels
