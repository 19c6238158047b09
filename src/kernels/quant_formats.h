// Serving-format codecs for cached vectors: FP8 E4M3 with UE8M0 block scales, FP4 E2M1 with
// UE8M0 block scales, FP4 E2M1 with E4M3 block scales. These are the byte formats the state
// graph stores (spec docs v41-architecture.md §3: V4.1 window KV FP8 + UE8M0/32, compressed
// KV FP4 + E4M3/16, index keys FP4 + UE8M0/32; V4 KV nope part FP8 + UE8M0/64).
//
// Scale choice (spec §2.1, reference kernel.py as ported in tt-metal kernel_cpu.py):
//   FP8 / UE8M0:  amax = max(max|x_blk|, 1e-4); s = pow2ceil(amax * f32(1/448));
//                 code = e4m3_rne(clamp(x/s, -448, 448)); scale byte = log2(s) + 127.
//   FP4 / UE8M0:  amax = max(max|x_blk|, 6*2^-126); s = pow2ceil(amax * f32(1/6)).
//   FP4 / E4M3:   amax = max(max|x_blk|, 6*2^-9);   s = e4m3_rne(amax / 6)  (not a power of 2).
//   FP4 code   =  e2m1_rne(clamp(f32(x/s), -6, 6)), ties to the even code (0.25->0, 0.75->1,
//                 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4); sign in bit 3.
//   Packing: two FP4 codes per byte, even element in the low nibble.
// Decoding a stored block gives code_value * scale exactly (all products are exact in f32 and
// in bf16), which equals the reference's QDQ (quantize-dequantize-to-bf16) value: so a cache
// stored in these formats reads back bit-identical to the reference's bf16 QDQ caches.
//
// The *_qdq functions compute the QDQ values directly by float arithmetic (value rounding, no
// byte codes); tests use them as the independent expectation for the byte round trip.
// Thread safety: pure functions. Shapes: n % block == 0 (CHECKed); FP4 block even.
#pragma once

#include <cstdint>

namespace strata::quant {

inline constexpr float kE4m3Max = 448.0f;
inline constexpr float kE2m1Max = 6.0f;

// 2^ceil(log2(a)) for a > 0 normal, on the f32 bit pattern (exponent, +1 if mantissa != 0).
float pow2_ceil(float a);

// The single scalar codec of these formats (kernels/act_quant and exec/deepseek_v41/v41_ops
// use it too).
// E4M3 (fn): RNE, saturates to +-448; NaN -> sign | 0x7F. Subnormals (step 2^-9) supported.
uint8_t e4m3_encode(float x);
float e4m3_decode(uint8_t b);  // table lookup
float e4m3_round(float x);     // decode(encode(x)): NaN stays NaN

// E2M1: RNE with ties to the even code; magnitudes past 6 saturate to 6; NaN -> +-0.
// Inline and branch-free (the state stores and the indexer encode every cached FP4 value):
// the code is the number of midpoints between E2M1 magnitudes below |x| (0.25, 0.75, 1.25,
// 1.75, 2.5, 3.5, 5), counting a midpoint |x| sits on where the upper neighbour is the even
// code (0.75, 1.75, 3.5); a NaN compares false everywhere (code 0).
inline uint8_t e2m1_encode(float x) {
  const float m = __builtin_fabsf(x);
  const int code = (m > 0.25f) + (m >= 0.75f) + (m > 1.25f) + (m >= 1.75f) + (m > 2.5f) +
                   (m >= 3.5f) + (m > 5.0f);
  return static_cast<uint8_t>(code | (__builtin_signbit(x) ? 8 : 0));
}
float e2m1_decode(uint8_t nibble);  // low 4 bits, table lookup
float e2m1_round(float x);          // decode(encode(x))

// UE8M0: s must be a positive normal power of two; byte = biased exponent.
uint8_t ue8m0_encode(float pow2);
float ue8m0_decode(uint8_t b);  // 2^(b-127); 255 -> NaN

// ---- row codecs (n elements, one scale per `block`) ----
// FP8 E4M3 codes [n] + UE8M0 scales [n/block].
void fp8_ue8m0_quantize(const float* x, int n, int block, uint8_t* codes, uint8_t* scales);
void fp8_ue8m0_dequantize(const uint8_t* codes, const uint8_t* scales, int n, int block,
                          float* out);
void fp8_ue8m0_qdq(float* x, int n, int block);

// FP4 E2M1 packed [n/2] + UE8M0 scales [n/block] (index keys / indexer Q).
void fp4_ue8m0_quantize(const float* x, int n, int block, uint8_t* packed, uint8_t* scales);
void fp4_ue8m0_dequantize(const uint8_t* packed, const uint8_t* scales, int n, int block,
                          float* out);
void fp4_ue8m0_qdq(float* x, int n, int block);

// FP4 E2M1 packed [n/2] + E4M3 scales [n/block] (V4.1 compressed KV, block 16).
void fp4_e4m3_quantize(const float* x, int n, int block, uint8_t* packed, uint8_t* scales);
void fp4_e4m3_dequantize(const uint8_t* packed, const uint8_t* scales, int n, int block,
                         float* out);
void fp4_e4m3_qdq(float* x, int n, int block);

// Round-to-nearest-even f32 -> bf16 bits and back (torch .to(bfloat16)).
uint16_t bf16_encode(float x);
float bf16_decode(uint16_t b);

}  // namespace strata::quant
