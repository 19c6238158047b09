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


inline float fp8_block_scale(float amax, ScaleFmt fmt) {
  amax = std::max(amax, 1e-4f);
  const float t = amax * kFp8MaxInv;
  return fmt == ScaleFmt::kUe8m0 ? quant::pow2_ceil(t) : t;
}

inline float fp4_block_scale(float amax, Fp4ScaleFmt fmt) {
  if (fmt == Fp4ScaleFmt::kE4M3) {
    amax = std::max(amax, 6.0f * 0x1p-9f);
    return quant::e4m3_round(std::clamp(amax / 6.0f, -kFp8Max, kFp8Max));
  }
  amax = std::max(amax, 6.0f * 0x1p-126f);
  return quant::pow2_ceil(amax * kFp4MaxInv);
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

// quant::e4m3_round(clamp(x / s, -448, 448)) for 16 lanes, as f32_to_e4m3 + the value table: normal
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
        const uint8_t c = quant::e4m3_encode(v);
        if (q_codes) q_codes[off + i] = c;
        if (q_vals) q_vals[off + i] = quant::e4m3_round(v);
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
        const float q = quant::e4m3_round(std::clamp(p[i] / s, -kFp8Max, kFp8Max));
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
        const uint8_t c = quant::e2m1_encode(v);
        if (q_vals) q_vals[off + i] = quant::e2m1_decode(c);
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
        const float q = quant::e2m1_round(std::clamp(p[i] / s, -kFp4Max, kFp4Max));
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
