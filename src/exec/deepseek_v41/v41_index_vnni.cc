// v41::index_scores_fp4's AVX-512 VNNI kernel (see v41_ops.h, v41_index_fp4_internal.h): 16
// keys at a time, fused with the weighting.
//
// Per 32-byte chunk c of a key row (blocks 2c and 2c+1), keys i and i + 4 (i < 4), i + 8 and
// i + 12 share a register; an 8 x 8 dword transpose per 256-bit half leaves T[g] = dword g
// (bytes 4g .. 4g + 3) of the 16 keys in key order. Their nibbles become bytes v + 12 in
// [0, 24] (unsigned): the low nibbles are elements 8g, 8g + 2, 8g + 4, 8g + 6, the high ones
// the odd elements between. VPDPBUSD against the query's matching 4 signed values adds each
// key's 4 products; a block sum is sum((k + 12) * q) - 12 * sum(q): the exact integer I_b of
// the reference.
//
// The dot of d = 64 (two blocks) is I_0 * s_0 + I_1 * s_1, s_b = 2^(eq_b + ek_b - 256). When
// every s_b and every I_b * s_b is a normal f32 (key scale bytes in a per-block range set by
// the query), each product is exact in f32 and one FMA rounds their exact sum once: the f32
// the reference gets from its exact f64 sum (when the f64 sum is not exact the block exponents
// are > 40 binades apart and both round to the larger term). Other 16-key groups, and d = 128
// (four blocks added in f64), run the reference's f64 block order per lane. The weighting is
// ref::index_weighted_scores per lane.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "exec/deepseek_v41/v41_index_fp4_internal.h"
#include "exec/deepseek_v41/v41_index_simd.h"
#include "exec/deepseek_v41/v41_simd.h"
#include "kernels/cpu_features.h"

namespace strata::v41::fp4_detail {

bool scores_vnni_usable(const IndexQueryFp4& q) {
#if defined(__x86_64__)
  static const bool cpu = __builtin_cpu_supports("avx512vnni");
  return cpu && kernels::avx512_active() && (q.d == 64 || q.d == 128);
#else
  (void)q;
  return false;
#endif
}

#if defined(__x86_64__)
namespace {

// GCC 12's avx512fintrin.h trips -W(maybe-)uninitialized on its own _mm512_undefined_* use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// The query in the kernel's form.
struct QueryVnni {
  int64_t nh = 0, nc = 0, nb = 0;
  std::vector<int32_t> qd;    // [nh][nc][16]: dword g < 8 the low-nibble elements of T[g],
                              // 8 + g the high-nibble ones (4 signed doubled E2M1 values)
  std::vector<int32_t> qsum;  // [nh][nb]: the sum of the block's doubled values
  std::vector<double> qsc;    // [nh][nb]: 2^(eq - 129) as f64 (the f64 block order)
  std::vector<float> qsf;     // [nh][nb]: the same as f32 (the f32 path)
  bool f32_path = false;      // d = 64, every query scale in [3, 254], every weight finite
  int32_t ek_lo[2] = {0, 0}, ek_span[2] = {0, 0};  // per block: key scale bytes in
                                                   // [lo, lo + span] take the f32 path
};

void prepare(const IndexQueryFp4& q, const float* w, QueryVnni* o) {
  const int64_t nh = q.n_heads, d = q.d, nc = d / 64, nb = d / 32;
  o->nh = nh;
  o->nc = nc;
  o->nb = nb;
  o->qd.assign(nh * nc * 16, 0);
  o->qsum.assign(nh * nb, 0);
  o->qsc.resize(nh * nb);
  o->qsf.resize(nh * nb);
  const Pow2Table& qp = query_pow2();
  for (int64_t h = 0; h < nh; ++h) {
    for (int64_t c = 0; c < nc; ++c) {
      const uint8_t* qc = &q.codes[h * d / 2 + 32 * c];
      int8_t v[64];
      for (int g = 0; g < 8; ++g) {
        for (int t = 0; t < 4; ++t) {
          const uint8_t byte = qc[4 * g + t];
          v[4 * g + t] = kE2m1x2[byte & 15];
          v[32 + 4 * g + t] = kE2m1x2[byte >> 4];
          o->qsum[h * nb + 2 * c + g / 4] += kE2m1x2[byte & 15] + kE2m1x2[byte >> 4];
        }
      }
      std::memcpy(&o->qd[(h * nc + c) * 16], v, 64);
    }
    for (int64_t b = 0; b < nb; ++b) {
      const int eq = q.scales[h * nb + b];
      o->qsc[h * nb + b] = qp.v[eq];
      o->qsf[h * nb + b] = static_cast<float>(qp.v[eq]);
    }
  }
  // The f32 path needs s_b = 2^(eq_b + ek_b - 256) normal (so it is exact as the product of
  // 2^(eq_b - 129) and 2^(ek_b - 127), both normal) and |I_b| * s_b < 2^126 with |I_b| < 2^13
  // (so the dot is finite, and with finite weights no NaN arises before the head sum):
  // eq_b + ek_b in [130, 369], eq_b in [3, 254], ek_b in [1, 254].
  bool f32 = d == 64 && std::all_of(w, w + nh, [](float v) { return std::isfinite(v); });
  for (int64_t b = 0; b < nb && f32; ++b) {
    int eq_min = 255, eq_max = 0;
    for (int64_t h = 0; h < nh; ++h) {
      eq_min = std::min<int>(eq_min, q.scales[h * nb + b]);
      eq_max = std::max<int>(eq_max, q.scales[h * nb + b]);
    }
    const int lo = std::max(1, 130 - eq_min), hi = std::min(254, 369 - eq_max);
    f32 = eq_min >= 3 && eq_max <= 254 && lo <= hi;
    if (f32) {
      o->ek_lo[b] = lo;
      o->ek_span[b] = hi - lo;
    }
  }
  o->f32_path = f32;
}

// T[g], g < 8: dword g of chunk c of the 16 key rows kr[0..15], lanes in key order.
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) inline void load_transposed(
    const uint8_t* const* kr, int64_t c, __m512i T[8]) {
  __m512i R[8];
  for (int i = 0; i < 4; ++i) {
    // R[i]: keys i (bits 0-255) and i + 4; R[4 + i]: keys 8 + i and 12 + i.
    R[i] = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(kr[i] + 32 * c))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kr[4 + i] + 32 * c)), 1);
    R[4 + i] = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(kr[8 + i] + 32 * c))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kr[12 + i] + 32 * c)), 1);
  }
  __m512i t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm512_unpacklo_epi32(R[i], R[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(R[i], R[i + 1]);
  }
  // u[k] (k < 4), 128-bit lanes: dword k of keys 0-3, dword 4 + k of keys 0-3, dword k of
  // keys 4-7, dword 4 + k of keys 4-7; u[4 + k] the same of keys 8-15.
  for (int a = 0; a < 8; a += 4) {
    u[a] = _mm512_unpacklo_epi64(t[a], t[a + 2]);
    u[a + 1] = _mm512_unpackhi_epi64(t[a], t[a + 2]);
    u[a + 2] = _mm512_unpacklo_epi64(t[a + 1], t[a + 3]);
    u[a + 3] = _mm512_unpackhi_epi64(t[a + 1], t[a + 3]);
  }
  for (int k = 0; k < 4; ++k) {
    T[k] = _mm512_shuffle_i32x4(u[k], u[4 + k], 0x88);      // lanes 0, 2 of each
    T[4 + k] = _mm512_shuffle_i32x4(u[k], u[4 + k], 0xDD);  // lanes 1, 3 of each
  }
}

// L[g] / H[g]: the low / high nibbles of T[g] as bytes v + 12 (see the top of the file).
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) inline void decode_keys(
    const uint8_t* const* kr, int64_t c, __m512i lut, __m512i L[8], __m512i H[8]) {
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  __m512i T[8];
  load_transposed(kr, c, T);
  for (int g = 0; g < 8; ++g) {
    L[g] = _mm512_shuffle_epi8(lut, _mm512_and_si512(T[g], m4));
    H[g] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(T[g], 4), m4));
  }
}

// Head h's exact block sums I_{2c} (a0) and I_{2c+1} (a1) of the 16 keys; four independent
// VPDPBUSD chains of 4 (integer sums: any order is the same).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"), always_inline)) inline void
block_sums(
    const QueryVnni& Q, int64_t h, int64_t c, const __m512i L[8], const __m512i H[8],
    __m512i* a0, __m512i* a1) {
  const int32_t* qv = &Q.qd[(h * Q.nc + c) * 16];
  __m512i x0 = _mm512_set1_epi32(-12 * Q.qsum[h * Q.nb + 2 * c]);
  __m512i x1 = _mm512_set1_epi32(-12 * Q.qsum[h * Q.nb + 2 * c + 1]);
  __m512i y0 = _mm512_setzero_si512(), y1 = _mm512_setzero_si512();
  for (int g = 0; g < 4; ++g) {
    x0 = _mm512_dpbusd_epi32(x0, L[g], _mm512_set1_epi32(qv[g]));
    y0 = _mm512_dpbusd_epi32(y0, H[g], _mm512_set1_epi32(qv[8 + g]));
    x1 = _mm512_dpbusd_epi32(x1, L[4 + g], _mm512_set1_epi32(qv[4 + g]));
    y1 = _mm512_dpbusd_epi32(y1, H[4 + g], _mm512_set1_epi32(qv[12 + g]));
  }
  *a0 = _mm512_add_epi32(x0, y0);
  *a1 = _mm512_add_epi32(x1, y1);
}


// round_to_bf16 for lanes that are not NaN (finite or infinite).
__attribute__((target("avx512f"), always_inline)) inline __m512 bf16_round16_no_nan(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  return _mm512_castsi512_ps(
      _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd),
                       _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}

// One head's 16 keys: acc + bf16(max(bf16(dot), 0) * wh), as ref::index_weighted_scores,
// for a finite dot and weight (the f32 path): no NaN arises before the head sum.
__attribute__((target("avx512f"), always_inline)) inline __m512 add_head16_finite(__m512 acc,
                                                                                 __m512 dot,
                                                                                 float wh) {
  const __m512 dv = _mm512_max_ps(_mm512_setzero_ps(), bf16_round16_no_nan(dot));
  return _mm512_add_ps(acc, bf16_round16_no_nan(_mm512_mul_ps(dv, _mm512_set1_ps(wh))));
}

}  // namespace

__attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni"))) void scores_vnni(
    const IndexQueryFp4& q, const uint8_t* const* keys, int64_t n_keys, const float* w,
    float* score) {
  QueryVnni Q;
  prepare(q, w, &Q);
  const int64_t nh = Q.nh, nc = Q.nc, nb = Q.nb, d = q.d;
  const Pow2Table& kp = key_pow2();
  // A null key reads as this row: zero codes, scales 1 (dot 0 on either path).
  alignas(64) uint8_t zero_row[64 + 4];
  std::memset(zero_row, 0, sizeof zero_row);
  std::memset(zero_row + d / 2, 127, d / 32);
  const __m512i lut = _mm512_broadcast_i32x4(
      _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
  // Block sums per 16 keys: S[h * nb + b] (nh * nb <= 256 on the stack, else on the heap).
  alignas(64) int32_t sums[256][16];
  std::vector<std::array<int32_t, 16>> big;
  int32_t (*S)[16] = sums;
  if (nh * nb > 256) {
    big.resize(nh * nb);
    S = reinterpret_cast<int32_t(*)[16]>(big.data());
  }
  alignas(64) int32_t kscale[4][16];
  for (int64_t r0 = 0; r0 < n_keys; r0 += 16) {
    const int nv = static_cast<int>(std::min<int64_t>(16, n_keys - r0));
    // The keys 8 groups ahead, with the non-temporal hint: at long context a decode token
    // streams ~1 MB of index keys once, which would otherwise push the weights out of the
    // cache (`bench model` at 16K context: decode ~10 % faster than without it, noisy VM).
    for (int64_t i = r0 + 128; i < std::min(n_keys, r0 + 144); ++i) {
      if (keys[i] == nullptr) continue;
      _mm_prefetch(reinterpret_cast<const char*>(keys[i]), _MM_HINT_NTA);
      _mm_prefetch(reinterpret_cast<const char*>(keys[i] + d / 2 + d / 32 - 1), _MM_HINT_NTA);
    }
    alignas(64) const uint8_t* kr[16];
    uint32_t null_mask = 0;
    if (nv == 16) {
      // The 16 row pointers (null -> zero_row) and their scale bytes (one dword gather: the
      // row's last 4 bytes end with its nb scales) in vectors.
      const __m512i zr = _mm512_set1_epi64(reinterpret_cast<int64_t>(zero_row));
      __m512i p[2];
      __m256i last4[2];
      for (int half = 0; half < 2; ++half) {
        p[half] = _mm512_loadu_si512(keys + r0 + 8 * half);
        const __mmask8 z = _mm512_cmpeq_epi64_mask(p[half], _mm512_setzero_si512());
        null_mask |= static_cast<uint32_t>(z) << (8 * half);
        p[half] = _mm512_mask_mov_epi64(p[half], z, zr);
        _mm512_store_si512(&kr[8 * half], p[half]);
        last4[half] = _mm512_i64gather_epi32(
            _mm512_add_epi64(p[half], _mm512_set1_epi64(d / 2 + nb - 4)), nullptr, 1);
      }
      const __m512i sc =
          _mm512_inserti64x4(_mm512_castsi256_si512(last4[0]), last4[1], 1);
      for (int64_t b = 0; b < nb; ++b)
        _mm512_store_si512(kscale[b], _mm512_and_si512(_mm512_srli_epi32(sc, 8 * (4 - nb + b)),
                                                       _mm512_set1_epi32(0xff)));
    } else {
      for (int i = 0; i < 16; ++i) {
        const uint8_t* k = i < nv ? keys[r0 + i] : nullptr;
        if (k == nullptr) null_mask |= 1u << i;
        kr[i] = k != nullptr ? k : zero_row;
        for (int64_t b = 0; b < nb; ++b) kscale[b][i] = kr[i][d / 2 + b];
      }
    }
    const __mmask16 live = static_cast<__mmask16>((1u << nv) - 1);
    if (Q.f32_path) {
      const __m512i ek0 = _mm512_load_si512(kscale[0]), ek1 = _mm512_load_si512(kscale[1]);
      const __mmask16 ok =
          _mm512_cmp_epu32_mask(_mm512_sub_epi32(ek0, _mm512_set1_epi32(Q.ek_lo[0])),
                                _mm512_set1_epi32(Q.ek_span[0]), _MM_CMPINT_LE) &
          _mm512_cmp_epu32_mask(_mm512_sub_epi32(ek1, _mm512_set1_epi32(Q.ek_lo[1])),
                                _mm512_set1_epi32(Q.ek_span[1]), _MM_CMPINT_LE);
      if (ok == 0xffff) {
        __m512i L[8], H[8];
        decode_keys(kr, 0, lut, L, H);
        const __m512 ks0 = _mm512_castsi512_ps(_mm512_slli_epi32(ek0, 23));  // 2^(ek - 127)
        const __m512 ks1 = _mm512_castsi512_ps(_mm512_slli_epi32(ek1, 23));
        __m512 acc = _mm512_setzero_ps();
        for (int64_t h = 0; h < nh; ++h) {
          __m512i a0, a1;
          block_sums(Q, h, 0, L, H, &a0, &a1);
          const __m512 s0 = _mm512_mul_ps(_mm512_set1_ps(Q.qsf[h * 2]), ks0);
          const __m512 s1 = _mm512_mul_ps(_mm512_set1_ps(Q.qsf[h * 2 + 1]), ks1);
          __m512 dot = _mm512_mul_ps(_mm512_cvtepi32_ps(a0), s0);
          dot = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a1), s1, dot);
          acc = add_head16_finite(acc, dot, w[h]);
        }
        _mm512_mask_storeu_ps(score + r0, live, bf16_round16(acc));
        continue;
      }
    }
    for (int64_t c = 0; c < nc; ++c) {
      __m512i L[8], H[8];
      decode_keys(kr, c, lut, L, H);
      for (int64_t h = 0; h < nh; ++h) {
        __m512i a0, a1;
        block_sums(Q, h, c, L, H, &a0, &a1);
        _mm512_store_si512(S[h * nb + 2 * c], a0);
        _mm512_store_si512(S[h * nb + 2 * c + 1], a1);
      }
    }
    // The reference's f64 block order per lane, 8 keys at a time.
    for (int half = 0; half < 2 && 8 * half < nv; ++half) {
      __m512d ks[4];
      for (int64_t b = 0; b < nb; ++b)
        ks[b] = _mm512_i32gather_pd(
            _mm256_load_si256(reinterpret_cast<const __m256i*>(&kscale[b][8 * half])), kp.v, 8);
      const __mmask8 nul = static_cast<__mmask8>(null_mask >> (8 * half));
      __m256 acc = _mm256_setzero_ps();
      for (int64_t h = 0; h < nh; ++h) {
        __m512d dot = _mm512_setzero_pd();
        for (int64_t b = 0; b < nb; ++b) {
          const __m512d s = _mm512_cvtepi32_pd(
              _mm256_load_si256(reinterpret_cast<const __m256i*>(&S[h * nb + b][8 * half])));
          const __m512d scale = _mm512_mul_pd(_mm512_set1_pd(Q.qsc[h * nb + b]), ks[b]);
          dot = _mm512_add_pd(dot, _mm512_mul_pd(s, scale));
        }
        dot = _mm512_mask_mov_pd(dot, nul, _mm512_setzero_pd());  // a null key's dots are 0
        acc = simd::add_head(acc, _mm512_cvtpd_ps(dot), w[h]);
      }
      const int n8 = std::min(8, nv - 8 * half);
      _mm256_mask_storeu_ps(score + r0 + 8 * half, static_cast<__mmask8>((1u << n8) - 1),
                            simd::round_bf16_8(acc));
    }
  }
}

#pragma GCC diagnostic pop

#else
void scores_vnni(const IndexQueryFp4&, const uint8_t* const*, int64_t, const float*, float*) {}
#endif

}  // namespace strata::v41::fp4_detail
