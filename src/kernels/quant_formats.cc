// Serving-format codecs. See quant_formats.h for the rules and their sources.
#include "kernels/quant_formats.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "base/check.h"
#include "kernels/cpu_features.h"
#include "kernels/simd_decode.h"

namespace strata::quant {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float block_amax(const float* x, int n) {
  float m = 0.f;
  for (int i = 0; i < n; ++i) m = std::fmax(m, std::fabs(x[i]));
  return m;
}

float clampf(float v, float lo, float hi) { return v < lo ? lo : (v > hi ? hi : v); }

float fp8_scale(const float* x, int block) {
  float amax = std::fmax(block_amax(x, block), 1e-4f);
  return pow2_ceil(amax * (1.0f / kE4m3Max));
}
float fp4_ue8m0_scale(const float* x, int block) {
  float amax = std::fmax(block_amax(x, block), 6.0f * std::ldexp(1.0f, -126));
  return pow2_ceil(amax * (1.0f / kE2m1Max));
}
float fp4_e4m3_scale(const float* x, int block) {
  float amax = std::fmax(block_amax(x, block), 6.0f * std::ldexp(1.0f, -9));
  return e4m3_round(amax / kE2m1Max);
}

}  // namespace

float pow2_ceil(float a) {
  uint32_t u = bits_of(a);
  uint32_t e = (u >> 23) & 0xffu;
  uint32_t m = u & 0x7fffffu;
  if (m) e += 1;
  return float_of(e << 23);
}

// The one scalar codec of the FP8 / FP4 formats (kernels/act_quant and the DeepSeek ops use
// these too). Encoders work on the f32 bit pattern; round = decode(encode).
uint8_t e4m3_encode(float x) {
  const uint32_t u = bits_of(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  if (std::isnan(x)) return static_cast<uint8_t>(sign | 0x7f);
  const float a = std::fabs(x);
  if (a >= kE4m3Max) return static_cast<uint8_t>(sign | 0x7e);  // saturate (satfinite)
  if (a < 0x1p-6f) {
    // Subnormal range: multiples of 2^-9. a * 512 < 8 is exact; adding 2^23 rounds it to an
    // integer (round half to even, the default FP mode), which the subtraction recovers.
    const int q = static_cast<int>((a * 512.0f + 0x1p23f) - 0x1p23f);  // 0..8 (8 = 2^-6)
    return static_cast<uint8_t>(sign | q);
  }
  // Normal range: round the f32 mantissa to 3 bits, half to even (a carry moves into the
  // exponent field, as it should).
  uint32_t r = bits_of(a);
  r += 0x7ffffu + ((r >> 20) & 1u);
  r &= 0xfff00000u;
  const int biased = static_cast<int>(r >> 23) - 127 + 7;
  const int mant = static_cast<int>((r >> 20) & 7u);
  if (biased > 15 || (biased == 15 && mant == 7)) return static_cast<uint8_t>(sign | 0x7e);
  return static_cast<uint8_t>(sign | (biased << 3) | mant);
}

namespace {
float e4m3_decode_slow(uint8_t b) {
  int sign = b & 0x80 ? -1 : 1;
  int exp = (b >> 3) & 0xf;
  int mant = b & 7;
  if (exp == 15 && mant == 7) return std::numeric_limits<float>::quiet_NaN();
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -9);
  return sign * std::ldexp(1.0f + mant / 8.0f, exp - 7);
}
struct E4m3Lut {
  float v[256];
  E4m3Lut() {
    for (int b = 0; b < 256; ++b) v[b] = e4m3_decode_slow(static_cast<uint8_t>(b));
  }
};
const E4m3Lut kE4m3Lut;
const float kE2m1Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
}  // namespace

// Table lookup (the state reads decode every cached row each step).
float e4m3_decode(uint8_t b) { return kE4m3Lut.v[b]; }
float e4m3_round(float x) { return kE4m3Lut.v[e4m3_encode(x)]; }

float e2m1_decode(uint8_t nib) { return kE2m1Values[nib & 15]; }
float e2m1_round(float x) { return kE2m1Values[e2m1_encode(x)]; }

uint8_t ue8m0_encode(float pow2) {
  uint32_t u = bits_of(pow2);
  STRATA_CHECK_MSG((u & 0x807fffffu) == 0 && ((u >> 23) & 0xff) != 0 && ((u >> 23) & 0xff) != 0xff,
                   "ue8m0_encode: {} is not a positive normal power of two", pow2);
  return static_cast<uint8_t>(u >> 23);
}

float ue8m0_decode(uint8_t b) {
  if (b == 0xff) return std::numeric_limits<float>::quiet_NaN();
  if (b == 0) return std::ldexp(1.0f, -127);
  return float_of(static_cast<uint32_t>(b) << 23);
}

// ---- FP8 / UE8M0 ----
void fp8_ue8m0_quantize(const float* x, int n, int block, uint8_t* codes, uint8_t* scales) {
  STRATA_CHECK(block > 0 && n % block == 0);
  for (int b = 0; b < n / block; ++b) {
    const float* xb = x + b * block;
    float s = fp8_scale(xb, block);
    scales[b] = ue8m0_encode(s);
    for (int i = 0; i < block; ++i)
      codes[b * block + i] = e4m3_encode(clampf(xb[i] / s, -kE4m3Max, kE4m3Max));
  }
}
namespace {
// 16 codes of one block at a time with F16C (kernels/simd_decode.h: the decode gives v·2^-8,
// exact) times s·256: the exact product v·s rounded once, as the scalar v * s. Needs s < 2^100
// (s·256 finite) and no NaN code (0x7F / 0xFF) among the 16; returns how many it wrote.
STRATA_TARGET_F16C int fp8_dequant_block_f16c(const uint8_t* codes, float s, int block, float* out) {
  if (!(s < 0x1p100f)) return 0;
  const __m256 sv = _mm256_set1_ps(s * 256.0f);
  const __m128i nan = _mm_set1_epi8(0x7F);
  int i = 0;
  for (; i + 16 <= block; i += 16) {
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i));
    if (_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_and_si128(c, nan), nan)) != 0) break;
    __m256 lo, hi;
    kernels::simd::decode16_e4m3(codes + i, &lo, &hi);
    _mm256_storeu_ps(out + i, _mm256_mul_ps(lo, sv));
    _mm256_storeu_ps(out + i + 8, _mm256_mul_ps(hi, sv));
  }
  return i;
}
// GCC 12's avx512fintrin.h trips -Wmaybe-uninitialized on its own _mm512_undefined_* use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// fp8_dequant_block_f16c with AVX-512: 16 codes per step, zero-extended to 16-bit lanes,
// shifted into the binary16 bit positions (decode16_e4m3's trick) and widened to a zmm, times
// s·256: the same single rounded product per value. Same conditions and return value.
STRATA_TARGET_AVX512 int fp8_dequant_block_avx512(const uint8_t* codes, float s, int block,
                                                  float* out) {
  if (!(s < 0x1p100f)) return 0;
  const __m512 sv = _mm512_set1_ps(s * 256.0f);
  const __m128i nan = _mm_set1_epi8(0x7F);
  const __m256i keep = _mm256_set1_epi16(static_cast<short>(0xBFFF));
  int i = 0;
  for (; i + 16 <= block; i += 16) {
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i));
    if (_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_and_si128(c, nan), nan)) != 0) break;
    const __m256i h = _mm256_and_si256(
        _mm256_srai_epi16(_mm256_slli_epi16(_mm256_cvtepu8_epi16(c), 8), 1), keep);
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_cvtph_ps(h), sv));
  }
  return i;
}
#pragma GCC diagnostic pop
}  // namespace

void fp8_ue8m0_dequantize(const uint8_t* codes, const uint8_t* scales, int n, int block,
                          float* out) {
  STRATA_CHECK(block > 0 && n % block == 0);
  static const bool vec = kernels::active_isa() == kernels::Isa::kAvx2 &&
                          __builtin_cpu_supports("f16c");
  const bool v512 = vec && kernels::avx512_active();
  for (int b = 0; b < n / block; ++b) {
    const float s = ue8m0_decode(scales[b]);
    const uint8_t* cb = codes + b * block;
    float* ob = out + b * block;
    int i = v512 ? fp8_dequant_block_avx512(cb, s, block, ob)
            : vec ? fp8_dequant_block_f16c(cb, s, block, ob)
                  : 0;
    for (; i < block; ++i) ob[i] = e4m3_decode(cb[i]) * s;
  }
}
void fp8_ue8m0_qdq(float* x, int n, int block) {
  STRATA_CHECK(block > 0 && n % block == 0);
  for (int b = 0; b < n / block; ++b) {
    float* xb = x + b * block;
    float s = fp8_scale(xb, block);
    for (int i = 0; i < block; ++i)
      xb[i] = bf16_decode(bf16_encode(e4m3_round(clampf(xb[i] / s, -kE4m3Max, kE4m3Max)) * s));
  }
}

// ---- FP4 ----
namespace {
template <typename ScaleFn, typename EncodeScale>
void fp4_quantize(const float* x, int n, int block, uint8_t* packed, uint8_t* scales,
                  ScaleFn scale_fn, EncodeScale enc) {
  STRATA_CHECK(block > 0 && block % 2 == 0 && n % block == 0);
  for (int b = 0; b < n / block; ++b) {
    const float* xb = x + b * block;
    float s = scale_fn(xb, block);
    scales[b] = enc(s);
    for (int i = 0; i < block; i += 2) {
      uint8_t lo = e2m1_encode(clampf(xb[i] / s, -kE2m1Max, kE2m1Max));
      uint8_t hi = e2m1_encode(clampf(xb[i + 1] / s, -kE2m1Max, kE2m1Max));
      packed[(b * block + i) / 2] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}
// 8 values (4 bytes) of one block at a time with AVX2: lane i takes nibble i of the 32-bit
// word (element 2j in the low nibble of byte j), its magnitude from an 8-entry table and its
// sign from bit 3, times s: the same product as the scalar kVals[code] * s (exact either way:
// a 2-bit E2M1 significand times the scale). Returns how many values it wrote.
STRATA_TARGET_F16C int fp4_dequant_block_avx2(const uint8_t* src, float s, int block, float* dst) {
  const __m256 mag = _mm256_setr_ps(0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f);
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  const __m256i seven = _mm256_set1_epi32(7), eight = _mm256_set1_epi32(8);
  const __m256 sv = _mm256_set1_ps(s);
  int i = 0;
  for (; i + 8 <= block; i += 8) {
    uint32_t word;
    std::memcpy(&word, src + i / 2, 4);
    const __m256i nib = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(word)), shifts);
    const __m256 m = _mm256_permutevar8x32_ps(mag, _mm256_and_si256(nib, seven));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(nib, eight), 28);
    const __m256 v = _mm256_xor_ps(m, _mm256_castsi256_ps(sign));
    _mm256_storeu_ps(dst + i, _mm256_mul_ps(v, sv));
  }
  return i;
}

// GCC 12's avx512fintrin.h trips -Wmaybe-uninitialized on its own _mm512_undefined_* use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// fp4_dequant_block_avx2 with AVX-512: 16 values (8 bytes) per step, each nibble (sign in
// bit 3) an index into a 16-entry table of the signed E2M1 values, times s: the same exact
// product as the scalar kVals[code] * s.
STRATA_TARGET_AVX512 int fp4_dequant_block_avx512(const uint8_t* src, float s, int block,
                                                  float* dst) {
  const __m512 table = _mm512_setr_ps(0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -0.f, -0.5f,
                                      -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f);
  const __m128i m = _mm_set1_epi8(0x0f);
  const __m512 sv = _mm512_set1_ps(s);
  int i = 0;
  for (; i + 16 <= block; i += 16) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + i / 2));
    // element 2j in the low nibble of byte j
    const __m128i nib =
        _mm_unpacklo_epi8(_mm_and_si128(b, m), _mm_and_si128(_mm_srli_epi16(b, 4), m));
    const __m512 v = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(nib), table);
    _mm512_storeu_ps(dst + i, _mm512_mul_ps(v, sv));
  }
  return i;
}
#pragma GCC diagnostic pop

template <typename DecodeScale>
void fp4_dequantize(const uint8_t* packed, const uint8_t* scales, int n, int block, float* out,
                    DecodeScale dec) {
  STRATA_CHECK(block > 0 && block % 2 == 0 && n % block == 0);
  static const float kVals[16] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f,
                                  -0.f, -0.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};
  const bool vec = kernels::active_isa() == kernels::Isa::kAvx2;  // tests switch the ISA
  const bool v512 = vec && kernels::avx512_active();
  for (int b = 0; b < n / block; ++b) {
    const float s = dec(scales[b]);
    const uint8_t* src = packed + b * block / 2;
    float* dst = out + b * block;
    int done = v512 ? fp4_dequant_block_avx512(src, s, block, dst) : 0;
    if (vec) done += fp4_dequant_block_avx2(src + done / 2, s, block - done, dst + done);
    for (int j = done / 2; j < block / 2; ++j) {  // element 2j in the low nibble
      dst[2 * j] = kVals[src[j] & 0xf] * s;
      dst[2 * j + 1] = kVals[src[j] >> 4] * s;
    }
  }
}
template <typename ScaleFn>
void fp4_qdq(float* x, int n, int block, ScaleFn scale_fn) {
  STRATA_CHECK(block > 0 && n % block == 0);
  for (int b = 0; b < n / block; ++b) {
    float* xb = x + b * block;
    float s = scale_fn(xb, block);
    for (int i = 0; i < block; ++i)
      xb[i] = bf16_decode(bf16_encode(e2m1_round(clampf(xb[i] / s, -kE2m1Max, kE2m1Max)) * s));
  }
}
}  // namespace

void fp4_ue8m0_quantize(const float* x, int n, int block, uint8_t* packed, uint8_t* scales) {
  fp4_quantize(x, n, block, packed, scales, fp4_ue8m0_scale, ue8m0_encode);
}
void fp4_ue8m0_dequantize(const uint8_t* packed, const uint8_t* scales, int n, int block,
                          float* out) {
  fp4_dequantize(packed, scales, n, block, out, [](uint8_t b) { return ue8m0_decode(b); });
}
void fp4_ue8m0_qdq(float* x, int n, int block) { fp4_qdq(x, n, block, fp4_ue8m0_scale); }

void fp4_e4m3_quantize(const float* x, int n, int block, uint8_t* packed, uint8_t* scales) {
  fp4_quantize(x, n, block, packed, scales, fp4_e4m3_scale, e4m3_encode);
}
void fp4_e4m3_dequantize(const uint8_t* packed, const uint8_t* scales, int n, int block,
                         float* out) {
  fp4_dequantize(packed, scales, n, block, out, [](uint8_t b) { return e4m3_decode(b); });
}
void fp4_e4m3_qdq(float* x, int n, int block) { fp4_qdq(x, n, block, fp4_e4m3_scale); }

uint16_t bf16_encode(float f) {
  uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float bf16_decode(uint16_t b) { return float_of(static_cast<uint32_t>(b) << 16); }

}  // namespace strata::quant
