// Element types found in checkpoints and caches, and their scalar decode rules.
//
// Decode rules (validated against real bytes in
// testdata/quant/deepseek-v4.1-flash.quant-golden-vectors.json):
//   F8_E4M3 (e4m3fn): 1 sign, 4 exponent (bias 7), 3 mantissa; no infinities; 0x7F/0xFF NaN.
//   F8_E8M0 (ue8m0 scale): value 2^(byte-127); 0xFF is NaN.
//   FP4 E2M1: 1 sign, 2 exponent (bias 1), 1 mantissa; values {0,.5,1,1.5,2,3,4,6}; packed
//     two per byte, even element in the low nibble. Stored as I8/U8 in safetensors.
//   BF16: upper 16 bits of an IEEE f32.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace strata {

enum class DType : uint8_t {
  kF32, kF16, kBF16, kF64, kI64, kI32, kI16, kI8, kU8, kBool,
  kF8_E4M3, kF8_E5M2, kF8_E8M0,
};

// Safetensors dtype string <-> DType. Returns nullopt for an unknown string.
std::optional<DType> dtype_from_string(std::string_view s);
const char* dtype_name(DType t);
// Bytes per element (1 for the 8-bit types; FP4 is stored as I8/U8 bytes of 2 values).
size_t dtype_size(DType t);
// Elements of `n_bytes` bytes of dtype `t` that are NaN or +-Inf: F32/F64/F16/BF16 (exponent
// all ones), F8_E4M3 (the NaN codes 0x7F/0xFF; it has no Inf), F8_E5M2 (exponent all ones),
// F8_E8M0 (0xFF, its NaN). Integer and bool dtypes hold none (0). `data` need not be
// aligned. Thread safety: pure.
int64_t count_nonfinite(DType t, const uint8_t* data, size_t n_bytes);

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Round-to-nearest-even f32 -> bf16 (NaN stays NaN), as torch's .to(bfloat16).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float round_to_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

// F16 (IEEE half) -> f32.
float f16_to_f32(uint16_t h);
// FP8 E4M3 (fn variant) byte -> f32.
float fp8_e4m3_to_f32(uint8_t b);
// UE8M0 scale byte -> f32 (2^(b-127)); 255 -> NaN.
float ue8m0_to_f32(uint8_t b);
// FP4 E2M1 nibble (low 4 bits used) -> f32.
float fp4_e2m1_to_f32(uint8_t nibble);

}  // namespace strata
