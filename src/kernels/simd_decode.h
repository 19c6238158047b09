// Internal to the kernels' .cc files (not a public header): vector decoders of packed FP8
// E4M3 / FP4 E2M1 weight bytes into f32 lanes, shared by kernels/block_gemm.cc and
// kernels/fp8_einsum.cc. Every decoder returns the code values times 2^-8 (exact); callers
// fold 256 into the (power-of-two) weight scale. Include only from translation units whose
// callers check the CPU features (cpu_has_avx2_fma + F16C; cpu_has_avx512 for the zmm ones).
#pragma once

#include <immintrin.h>

#include <cstdint>

#define STRATA_TARGET_F16C __attribute__((target("avx2,fma,f16c")))
#define STRATA_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
// + the extensions of kernels::avx512_ext_active() (VBMI, BF16, GFNI)
#define STRATA_TARGET_AVX512_EXT                                                              \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi,gfni,avx2," \
                        "fma,f16c")))

namespace strata::kernels::simd {
namespace {

// Packed weight scales as f32 lanes: either f32 values, or UE8M0 bytes in 1..254 widened to
// the f32 bits b << 23 (exact; block_gemm.h "packed layouts"). Exactly one pointer is set.
STRATA_TARGET_F16C inline __m256 load_scales8(const float* f32, const uint8_t* e8m0) {
  if (f32 != nullptr) return _mm256_loadu_ps(f32);
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(e8m0));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu8_epi32(b), 23));
}
STRATA_TARGET_AVX512 inline __m512 load_scales16(const float* f32, const uint8_t* e8m0) {
  if (f32 != nullptr) return _mm512_loadu_ps(f32);
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(e8m0));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu8_epi32(b), 23));
}

// E4M3 -> f32 via binary16: the E4M3 bits placed as (sign << 15) | (exp_mant << 7) form a
// half whose value is exactly 2^-8 times the E4M3 value (subnormals included); F16C widens
// it exactly. The AVX2 kernels keep this 2^-8 factor in the decoded weights and fold 256
// into the weight scale instead: every partial and scaled partial is then an exact
// power-of-two multiple of the scalar path's value, so results are bit-identical (weight
// scales must stay below 2^119, far above anything UE8M0 checkpoints use).
// 16 E4M3 bytes -> two vectors of 8 (bytes 0..7, 8..15), scaled by 2^-8.
STRATA_TARGET_F16C inline void decode16_e4m3(const uint8_t* p, __m256* lo, __m256* hi) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i z = _mm_setzero_si128();
  const __m128i keep = _mm_set1_epi16(static_cast<short>(0xBFFF));
  // byte in the high half of each 16-bit lane, then an arithmetic shift moves exp|mant down by
  // one while copying the sign into bit 14, which the mask clears
  const __m128i h0 = _mm_and_si128(_mm_srai_epi16(_mm_unpacklo_epi8(z, b), 1), keep);
  const __m128i h1 = _mm_and_si128(_mm_srai_epi16(_mm_unpackhi_epi8(z, b), 1), keep);
  *lo = _mm256_cvtph_ps(h0);
  *hi = _mm256_cvtph_ps(h1);
}

// 8 bytes = 16 E2M1 nibbles (element 2j in the low nibble of byte j) -> two vectors of 8
// (elements 0..7, 8..15), scaled by 2^-8 like decode16_e4m3: a nibble maps to the high byte
// of the binary16 of value*2^-8 (all E2M1 values have a zero low byte there).
// (decode16_e2m1_bytes: the same from the low 8 bytes of a register.)
STRATA_TARGET_F16C inline void decode16_e2m1_bytes(__m128i b, __m256* lo, __m256* hi) {
  const __m128i m = _mm_set1_epi8(0x0f);
  const __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(b, m), _mm_and_si128(_mm_srli_epi16(b, 4), m));
  // binary16 high bytes of {0, .5, 1, 1.5, 2, 3, 4, 6} * 2^-8, then the negatives
  const __m128i table = _mm_setr_epi8(0x00, 0x18, 0x1C, 0x1E, 0x20, 0x22, 0x24, 0x26,
                                      static_cast<char>(0x80), static_cast<char>(0x98),
                                      static_cast<char>(0x9C), static_cast<char>(0x9E),
                                      static_cast<char>(0xA0), static_cast<char>(0xA2),
                                      static_cast<char>(0xA4), static_cast<char>(0xA6));
  const __m128i hb = _mm_shuffle_epi8(table, nib);
  const __m128i z = _mm_setzero_si128();
  *lo = _mm256_cvtph_ps(_mm_unpacklo_epi8(z, hb));
  *hi = _mm256_cvtph_ps(_mm_unpackhi_epi8(z, hb));
}
STRATA_TARGET_F16C inline void decode16_e2m1(const uint8_t* p, __m256* lo, __m256* hi) {
  decode16_e2m1_bytes(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)), lo, hi);
}

// A packed FP4 tile chunk (block_gemm.h: 16 bytes, byte j of K index q at 4j + q) in K order
// (byte 4q + j), then the 8 bytes of K indices (k, k+1), k even, in the low half: the bytes
// decode16_e2m1_bytes and decode_pair512_fp4 take. `chunk`: the tile's chunk start.
STRATA_TARGET_F16C inline __m128i fp4_pair_bytes(const uint8_t* chunk, int k) {
  const __m128i order = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m128i c =
      _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(chunk)), order);
  return (k & 2) != 0 ? _mm_srli_si128(c, 8) : c;
}

// No software prefetch of the packed codes in the AVX-512 decode kernels: they read them in
// address order and the hardware prefetchers keep up (the AVX2 block GEMM, compute-bound on
// the dev VM with or without it, keeps its own, block_gemm.cc). (Sessions 3-10 prefetched every chunk's lines 8 KB ahead,
// 4 KB on the two-group paths; in session 11, with the VDPBF16PS / VPERMT2B kernels, dropping
// it sped FP8 decode up by 15-18 % at 1 thread and 4-14 % at 2, FP4 and the f64 einsum by
// 0-6 %, and a decode token of the bench model by 4 % / 1.4-2.9 %: docs/PERFORMANCE.md,
// session 11.) The small scale arrays are still prefetched where they are read.

// GCC 12's avx512fintrin.h trips -Wmaybe-uninitialized on its own _mm512_undefined_* use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// FP4 tiles A and B at K indices (k, k+1) from the low 8 bytes of a8 / b8 (k: rows 0-7 in
// bytes 0-3, k+1: bytes 4-7; fp4_pair_bytes) -> zmm of k and zmm of k+1 (values * 2^-8), one
// tile per 256-bit half.
STRATA_TARGET_AVX512 inline void decode_pair512_fp4(__m128i a8, __m128i b8, __m512* wk,
                                                   __m512* wk1) {
  const __m256i z = _mm256_setzero_si256();
  const __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(a8), b8, 1);
  const __m256i m = _mm256_set1_epi8(0x0f);
  const __m256i nib = _mm256_unpacklo_epi8(_mm256_and_si256(b, m), _mm256_and_si256(_mm256_srli_epi16(b, 4), m));
  const __m256i table = _mm256_setr_epi8(
      0x00, 0x18, 0x1C, 0x1E, 0x20, 0x22, 0x24, 0x26, static_cast<char>(0x80), static_cast<char>(0x98),
      static_cast<char>(0x9C), static_cast<char>(0x9E), static_cast<char>(0xA0), static_cast<char>(0xA2),
      static_cast<char>(0xA4), static_cast<char>(0xA6), 0x00, 0x18, 0x1C, 0x1E, 0x20, 0x22, 0x24, 0x26,
      static_cast<char>(0x80), static_cast<char>(0x98), static_cast<char>(0x9C), static_cast<char>(0x9E),
      static_cast<char>(0xA0), static_cast<char>(0xA2), static_cast<char>(0xA4), static_cast<char>(0xA6));
  const __m256i hb = _mm256_shuffle_epi8(table, nib);
  *wk = _mm512_cvtph_ps(_mm256_unpacklo_epi8(z, hb));
  *wk1 = _mm512_cvtph_ps(_mm256_unpackhi_epi8(z, hb));
}

// FP8 tiles A and B at K indices (k, k+1) -> zmm of k and zmm of k+1 (values * 2^-8).
STRATA_TARGET_AVX512 inline void decode_pair512_fp8(const uint8_t* pa, const uint8_t* pb,
                                                   __m512* wk, __m512* wk1) {
  const __m256i z = _mm256_setzero_si256();
  // 16 bytes each: k in bytes 0-7, k+1 in bytes 8-15 (see decode16_e4m3)
  const __m256i b = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pa))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(pb)), 1);
  const __m256i keep = _mm256_set1_epi16(static_cast<short>(0xBFFF));
  *wk = _mm512_cvtph_ps(_mm256_and_si256(_mm256_srai_epi16(_mm256_unpacklo_epi8(z, b), 1), keep));
  *wk1 = _mm512_cvtph_ps(_mm256_and_si256(_mm256_srai_epi16(_mm256_unpackhi_epi8(z, b), 1), keep));
}

#pragma GCC diagnostic pop

}  // namespace
}  // namespace strata::kernels::simd
