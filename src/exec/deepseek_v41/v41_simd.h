// AVX-512 helpers shared by the V4 / V4.1 forward passes (exec-internal; callers check
// kernels::avx512_active() before using them).
#pragma once

#include <immintrin.h>

namespace strata::v41 {

// GCC 12's avx512fintrin.h trips -Wmaybe-uninitialized on its own _mm512_undefined_* use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// bf16(v) for 16 lanes exactly as round_to_bf16 (model/dtype.h): round to nearest even on the
// bits; NaN lanes keep their top half with the quiet bit set.
__attribute__((target("avx512f"), always_inline)) inline __m512 bf16_round16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i r = _mm512_and_si512(
      _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                           _mm512_and_si512(_mm512_srli_epi32(u, 16),
                                                            _mm512_set1_epi32(1)))),
      _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
  const __mmask16 nan = _mm512_cmp_epu32_mask(
      _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000),
      _MM_CMPINT_NLE);
  const __m512i q = _mm512_and_si512(_mm512_or_si512(u, _mm512_set1_epi32(0x00400000)),
                                     _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
  return _mm512_castsi512_ps(_mm512_mask_mov_epi32(r, nan, q));
}
#pragma GCC diagnostic pop

}  // namespace strata::v41
