// Activation quantization (see act_quant.h for the rules and their source).
#include "kernels/act_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <immintrin.h>

#include "base/check.h"
#include "kernels/cpu_features.h"

namespace strata::kernels {
namespace {

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float bf16_round(float f) { return round_bf16(f); }

// The reciprocals the kernels use, as f32 constants (kernel.py fp8_max_inv / fp4_max_inv).
const float kFp8MaxInv = static_cast<float>(1.0 / 448.0);
const float kFp4MaxInv = static_cast<float>(1.0 / 6.0);

const float kE2m1Values[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
const float kE2m1Mids[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
const bool kE2m1TieUp[7] = {false, true, false, true, false, true, false};

inline float fp8_block_scale(float amax, ScaleFmt fmt) {
  amax = std::max(amax, 1e-4f);
  const float t = amax * kFp8MaxInv;
  return fmt == ScaleFmt::kUe8m0 ? pow2ceil_scale(t) : t;
}

inline float fp4_block_scale(float amax, Fp4ScaleFmt fmt) {
  if (fmt == Fp4ScaleFmt::kE4M3) {
    amax = std::max(amax, 6.0f * 0x1p-9f);
    return e4m3_round(std::clamp(amax / 6.0f, -kFp8Max, kFp8Max));
  }
  amax = std::max(amax, 6.0f * 0x1p-126f);
  return pow2ceil_scale(amax * kFp4MaxInv);
}

inline float block_amax(const float* x, int block) {
  float m = 0.0f;
  for (int i = 0; i < block; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// ---- AVX-512 form of the FP8 block quantization (same bits as the scalar loops) ----
#define STRATA_AVX512_AQ __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl")))
// GCC 12's avx512fintrin.h trips -Wmaybe-uninitialized on its own _mm512_undefined_* use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// e4m3_round(clamp(x / s, -448, 448)) for 16 lanes, as f32_to_e4m3 + the value table: normal
// range by rounding the f32 mantissa to 3 bits (half to even), subnormal range (< 2^-6) by
// the 2^23 trick on x·512, sign restored. Lanes must not be NaN (callers check).
STRATA_AVX512_AQ inline __m512 e4m3_round16(__m512 x, __m512 s) {
  const __m512 v = _mm512_max_ps(_mm512_min_ps(_mm512_div_ps(x, s), _mm512_set1_ps(kFp8Max)),
                                 _mm512_set1_ps(-kFp8Max));
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN));
  const __m512 a = _mm512_abs_ps(v);
  __m512i r = _mm512_castps_si512(a);
  r = _mm512_add_epi32(r, _mm512_add_epi32(_mm512_set1_epi32(0x7ffff),
                                           _mm512_and_si512(_mm512_srli_epi32(r, 20),
                                                            _mm512_set1_epi32(1))));
  r = _mm512_and_si512(r, _mm512_set1_epi32(static_cast<int>(0xfff00000u)));
  const __m512 big = _mm512_set1_ps(0x1p23f);
  const __m512 sub = _mm512_mul_ps(
      _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(a, _mm512_set1_ps(512.0f)), big), big),
      _mm512_set1_ps(0x1p-9f));
  const __mmask16 small = _mm512_cmp_ps_mask(a, _mm512_set1_ps(0x1p-6f), _CMP_LT_OQ);
  const __m512 q = _mm512_mask_blend_ps(small, _mm512_castsi512_ps(r), sub);
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(q), sign));
}

STRATA_AVX512_AQ inline bool block_has_nan16(const float* x, int block) {
  __mmask16 m = 0;
  for (int i = 0; i < block; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    m |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  }
  return m != 0;
}

// q_vals of one block; false (nothing written) when the block holds a NaN.
STRATA_AVX512_AQ bool quant_block_avx512(const float* x, int block, float s, float* q) {
  if (block_has_nan16(x, block)) return false;
  const __m512 vs = _mm512_set1_ps(s);
  for (int i = 0; i < block; i += 16) _mm512_storeu_ps(q + i, e4m3_round16(_mm512_loadu_ps(x + i), vs));
  return true;
}

// In-place QDQ of one block: bf16(e4m3(x/s) * s), round-half-to-even to bf16 on the bits as
// round_bf16 does (inputs are finite here).
STRATA_AVX512_AQ bool qdq_block_avx512(float* x, int block, float s) {
  if (block_has_nan16(x, block)) return false;
  const __m512 vs = _mm512_set1_ps(s);
  for (int i = 0; i < block; i += 16) {
    const __m512 p = _mm512_mul_ps(e4m3_round16(_mm512_loadu_ps(x + i), vs), vs);
    __m512i u = _mm512_castps_si512(p);
    u = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                             _mm512_and_si512(_mm512_srli_epi32(u, 16),
                                                              _mm512_set1_epi32(1))));
    u = _mm512_and_si512(u, _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
    _mm512_storeu_ps(x + i, _mm512_castsi512_ps(u));
  }
  return true;
}
#pragma GCC diagnostic pop

}  // namespace

float pow2ceil_scale(float a) {
  const int32_t bits = static_cast<int32_t>(f32_bits(a));
  const int32_t exp = (bits >> 23) & 0xff;
  const int32_t man = bits & ((1 << 23) - 1);
  const int32_t log2_ceil = exp - 127 + (man != 0 ? 1 : 0);
  return bits_f32(static_cast<uint32_t>((log2_ceil + 127) << 23));
}

uint8_t f32_to_e4m3(float x) {
  const uint32_t u = f32_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  if (std::isnan(x)) return static_cast<uint8_t>(sign | 0x7f);
  const float a = std::fabs(x);
  if (a >= kFp8Max) return static_cast<uint8_t>(sign | 0x7e);  // saturate (satfinite)
  if (a < 0x1p-6f) {
    // subnormal range: multiples of 2^-9. a * 512 < 8 is exact; adding 2^23 rounds it to an
    // integer (round half to even, the default FP mode), which the subtraction recovers.
    const int q = static_cast<int>((a * 512.0f + 0x1p23f) - 0x1p23f);  // 0..8 (8 = 2^-6)
    return static_cast<uint8_t>(sign | q);
  }
  // Normal range: round the f32 mantissa to 3 bits, half to even (a carry moves into the
  // exponent field, as it should).
  uint32_t r = f32_bits(a);
  r += 0x7ffffu + ((r >> 20) & 1u);
  r &= 0xfff00000u;
  const int biased = static_cast<int>(r >> 23) - 127 + 7;
  const int mant = static_cast<int>((r >> 20) & 7u);
  if (biased > 15 || (biased == 15 && mant == 7)) return static_cast<uint8_t>(sign | 0x7e);
  return static_cast<uint8_t>(sign | (biased << 3) | mant);
}

namespace {
float e4m3_code_value(uint8_t c) {
  const int exp = (c >> 3) & 0xf;
  const int mant = c & 7;
  float v;
  if (exp == 15 && mant == 7) {
    v = NAN;
  } else if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -9);
  } else {
    v = std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, exp - 7);
  }
  return (c & 0x80) ? -v : v;
}
struct E4m3Table {
  float v[256];
  E4m3Table() {
    for (int c = 0; c < 256; ++c) v[c] = e4m3_code_value(static_cast<uint8_t>(c));
  }
};
const E4m3Table kE4m3Table;
}  // namespace

float e4m3_round(float x) { return kE4m3Table.v[f32_to_e4m3(x)]; }

uint8_t f32_to_e2m1(float x) {
  const float mag = std::fabs(x);
  int code = 0;
  for (int i = 0; i < 7; ++i) {
    if (mag > kE2m1Mids[i]) ++code;
    if (mag == kE2m1Mids[i] && kE2m1TieUp[i]) ++code;
  }
  return static_cast<uint8_t>(code | (std::signbit(x) ? 8 : 0));
}

float e2m1_round(float x) { return kE2m1Values[f32_to_e2m1(x)]; }

float e2m1_value(uint8_t code) { return kE2m1Values[code & 0xf]; }

void act_quant_fp8(const float* x, int64_t rows, int64_t cols, int block, ScaleFmt fmt,
                   uint8_t* q_codes, float* q_vals, float* scales) {
  STRATA_CHECK(block > 0 && cols % block == 0);
  const int64_t nb = cols / block;
  const bool vec = q_codes == nullptr && q_vals != nullptr && block % 16 == 0 && avx512_active();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t off = r * cols + b * block;
      const float s = fp8_block_scale(block_amax(x + off, block), fmt);
      scales[r * nb + b] = s;
      if (vec && quant_block_avx512(x + off, block, s, q_vals + off)) continue;
      for (int i = 0; i < block; ++i) {
        const float v = std::clamp(x[off + i] / s, -kFp8Max, kFp8Max);
        const uint8_t c = f32_to_e4m3(v);
        if (q_codes) q_codes[off + i] = c;
        if (q_vals) q_vals[off + i] = e4m3_round(v);
      }
    }
  }
}

void act_qdq_fp8(float* x, int64_t rows, int64_t cols, int block, ScaleFmt fmt) {
  STRATA_CHECK(block > 0 && cols % block == 0);
  const int64_t nb = cols / block;
  const bool vec = block % 16 == 0 && avx512_active();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      float* p = x + r * cols + b * block;
      const float s = fp8_block_scale(block_amax(p, block), fmt);
      if (vec && qdq_block_avx512(p, block, s)) continue;
      for (int i = 0; i < block; ++i) {
        const float q = e4m3_round(std::clamp(p[i] / s, -kFp8Max, kFp8Max));
        p[i] = bf16_round(q * s);
      }
    }
  }
}

void act_quant_fp4(const float* x, int64_t rows, int64_t cols, int block, Fp4ScaleFmt fmt,
                   uint8_t* packed, float* q_vals, float* scales) {
  STRATA_CHECK(block > 0 && cols % block == 0 && cols % 2 == 0);
  const int64_t nb = cols / block;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t off = r * cols + b * block;
      const float s = fp4_block_scale(block_amax(x + off, block), fmt);
      scales[r * nb + b] = s;
      for (int i = 0; i < block; ++i) {
        const float v = std::clamp(x[off + i] / s, -kFp4Max, kFp4Max);
        const uint8_t c = f32_to_e2m1(v);
        if (q_vals) q_vals[off + i] = kE2m1Values[c];
        if (packed) {
          const int64_t idx = off + i;
          uint8_t& byte = packed[idx / 2];
          if (idx % 2 == 0) {
            byte = static_cast<uint8_t>((byte & 0xf0) | c);
          } else {
            byte = static_cast<uint8_t>((byte & 0x0f) | (c << 4));
          }
        }
      }
    }
  }
}

void act_qdq_fp4(float* x, int64_t rows, int64_t cols, int block, Fp4ScaleFmt fmt) {
  STRATA_CHECK(block > 0 && cols % block == 0);
  const int64_t nb = cols / block;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      float* p = x + r * cols + b * block;
      const float s = fp4_block_scale(block_amax(p, block), fmt);
      for (int i = 0; i < block; ++i) {
        const float q = e2m1_round(std::clamp(p[i] / s, -kFp4Max, kFp4Max));
        p[i] = bf16_round(q * s);
      }
    }
  }
}

void round_bf16_inplace(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = bf16_round(x[i]);
}

void f32_to_bf16_array(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<uint16_t>(f32_bits(bf16_round(x[i])) >> 16);
}

void bf16_to_f32_array(const uint16_t* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = bits_f32(static_cast<uint32_t>(x[i]) << 16);
}

}  // namespace strata::kernels
