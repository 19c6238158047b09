// v41::index_dots_fp4 (see v41_ops.h): the indexer's per-head dot products straight from the
// FP4 E2M1 + UE8M0 (block 32) codes of the query and the stored index keys. Within a block
// every product is an integer times one power of two, so the block's sum is an exact integer
// (|sum| <= 32 * 144); the blocks are then added in f64 in block order. Scalar reference and
// an AVX2 path (d = 64 or 128, heads in groups of 4: nibbles through a shuffle table, products
// by maddubs, block sums by hadd), same bits.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/check.h"
#include "exec/deepseek_v41/v41_index_simd.h"
#include "exec/deepseek_v41/v41_ops.h"
#include "kernels/cpu_features.h"
#include "kernels/quant_formats.h"

namespace strata::v41 {

namespace {

// 2 x E2M1 value of a nibble (an integer).
constexpr int8_t kE2m1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// UE8M0 byte -> 2^(e - 127 - shift) as f64 (255 -> NaN).
struct Pow2Table {
  double v[256];
  explicit Pow2Table(int shift) {
    for (int e = 0; e < 255; ++e) v[e] = std::ldexp(1.0, e - 127 - shift);
    v[255] = std::numeric_limits<double>::quiet_NaN();
  }
};
const Pow2Table& key_pow2() {
  static const Pow2Table t(0);
  return t;
}
// The query side carries the 1/4 of the two doubled E2M1 integers.
const Pow2Table& query_pow2() {
  static const Pow2Table t(2);
  return t;
}

}  // namespace

void IndexQueryFp4::set(const float* q, int64_t heads, int64_t dim) {
  STRATA_CHECK_MSG(dim % 32 == 0, "index head dim {} is not a multiple of 32", dim);
  n_heads = heads;
  d = dim;
  codes.resize(heads * dim / 2);
  scales.resize(heads * dim / 32);
  std::vector<float> back(dim);
  for (int64_t h = 0; h < heads; ++h) {
    quant::fp4_ue8m0_quantize(q + h * dim, static_cast<int>(dim), 32, &codes[h * dim / 2],
                              &scales[h * dim / 32]);
    // The query must already be FP4-QDQ'd (then the codes hold it exactly).
    quant::fp4_ue8m0_dequantize(&codes[h * dim / 2], &scales[h * dim / 32], static_cast<int>(dim),
                                32, back.data());
    STRATA_CHECK_MSG(std::memcmp(back.data(), q + h * dim, dim * sizeof(float)) == 0 ||
                         std::any_of(q + h * dim, q + (h + 1) * dim,
                                     [](float v) { return v != v; }),
                     "indexer query head {} is not FP4-representable", h);
  }
}

namespace ref {
void index_dots_fp4(const IndexQueryFp4& q, const uint8_t* const* keys, int64_t n_keys,
                    double* out) {
  const int64_t nh = q.n_heads, d = q.d, nb = d / 32;
  const Pow2Table& qp = query_pow2();
  const Pow2Table& kp = key_pow2();
  for (int64_t r = 0; r < n_keys; ++r) {
    const uint8_t* k = keys[r];
    for (int64_t h = 0; h < nh; ++h) {
      double acc = 0.0;
      if (k != nullptr) {
        const uint8_t* qc = &q.codes[h * d / 2];
        for (int64_t b = 0; b < nb; ++b) {
          int32_t s = 0;
          for (int64_t j = b * 16; j < b * 16 + 16; ++j)
            s += kE2m1x2[qc[j] & 15] * kE2m1x2[k[j] & 15] + kE2m1x2[qc[j] >> 4] * kE2m1x2[k[j] >> 4];
          const double scale = qp.v[q.scales[h * nb + b]] * kp.v[k[d / 2 + b]];
          acc += static_cast<double>(s) * scale;
        }
      }
      out[r * nh + h] = acc;
    }
  }
}
}  // namespace ref

namespace {

// The query of 4 heads (h0..h0+3) in the AVX2 kernel's form: per head and 32-byte chunk c
// (blocks 2c, 2c+1), the low / high nibbles as int8 and their magnitudes; the query scales
// laid out as the block sums come out of the hadd tree ([B0 h, B2 h, B0 h+1, B2 h+1] and
// [B1 h, B3 h, B1 h+1, B3 h+1] for the head pairs (0,1) and (2,3)).
// For d = 64 (one chunk) the scales are per block over the 4 heads: qs_l01 = block 0 of heads
// 0..3, qs_h01 = block 1.
struct Q4 {
  __m256i lo[4][2], hi[4][2], alo[4][2], ahi[4][2];
  __m256d qs_l01, qs_h01, qs_l23, qs_h23;
};

__attribute__((target("avx2,fma"))) inline __m256i lut8(__m256i nib) {
  const __m256i t = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0, 1,
                                     2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  return _mm256_shuffle_epi8(t, nib);
}

__attribute__((target("avx2,fma"))) void prepare_q4(const IndexQueryFp4& q, int64_t h0, Q4* o) {
  const __m256i m = _mm256_set1_epi8(0x0f);
  const Pow2Table& qp = query_pow2();
  const int nc = static_cast<int>(q.d / 64), nb = static_cast<int>(q.d / 32);
  for (int i = 0; i < 4; ++i) {
    const uint8_t* qc = &q.codes[(h0 + i) * q.d / 2];
    for (int c = 0; c < nc; ++c) {
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qc + 32 * c));
      o->lo[i][c] = lut8(_mm256_and_si256(b, m));
      o->hi[i][c] = lut8(_mm256_and_si256(_mm256_srli_epi16(b, 4), m));
      o->alo[i][c] = _mm256_abs_epi8(o->lo[i][c]);
      o->ahi[i][c] = _mm256_abs_epi8(o->hi[i][c]);
    }
  }
  auto s = [&](int i, int b) { return qp.v[q.scales[(h0 + i) * nb + b]]; };
  if (nc == 1) {
    o->qs_l01 = _mm256_setr_pd(s(0, 0), s(1, 0), s(2, 0), s(3, 0));
    o->qs_h01 = _mm256_setr_pd(s(0, 1), s(1, 1), s(2, 1), s(3, 1));
    return;
  }
  o->qs_l01 = _mm256_setr_pd(s(0, 0), s(0, 2), s(1, 0), s(1, 2));
  o->qs_h01 = _mm256_setr_pd(s(0, 1), s(0, 3), s(1, 1), s(1, 3));
  o->qs_l23 = _mm256_setr_pd(s(2, 0), s(2, 2), s(3, 0), s(3, 2));
  o->qs_h23 = _mm256_setr_pd(s(2, 1), s(2, 3), s(3, 1), s(3, 3));
}

// Block partial sums of head i, chunk c against the key's nibbles: 8 int32, lanes 0-3 block
// 2c, lanes 4-7 block 2c+1.
__attribute__((target("avx2,fma"))) inline __m256i chunk_sums(const Q4& q, int i, int c,
                                                            __m256i klo, __m256i khi) {
  const __m256i p = _mm256_add_epi16(
      _mm256_maddubs_epi16(q.alo[i][c], _mm256_sign_epi8(klo, q.lo[i][c])),
      _mm256_maddubs_epi16(q.ahi[i][c], _mm256_sign_epi8(khi, q.hi[i][c])));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

__attribute__((target("avx2,fma"))) void dots4_avx2(const Q4& q, const uint8_t* k, double* out) {
  const __m256i m = _mm256_set1_epi8(0x0f);
  const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k));
  const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + 32));
  const __m256i klo[2] = {lut8(_mm256_and_si256(b0, m)), lut8(_mm256_and_si256(b1, m))};
  const __m256i khi[2] = {lut8(_mm256_and_si256(_mm256_srli_epi16(b0, 4), m)),
                          lut8(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m))};
  __m256i x[4];
  for (int i = 0; i < 4; ++i)
    x[i] = _mm256_hadd_epi32(chunk_sums(q, i, 0, klo[0], khi[0]),
                             chunk_sums(q, i, 1, klo[1], khi[1]));
  const __m256i y01 = _mm256_hadd_epi32(x[0], x[1]);  // [B0 h0, B2 h0, B0 h1, B2 h1 | B1.., B3..]
  const __m256i y23 = _mm256_hadd_epi32(x[2], x[3]);
  const Pow2Table& kp = key_pow2();
  const double k0 = kp.v[k[64]], k1 = kp.v[k[65]], k2 = kp.v[k[66]], k3 = kp.v[k[67]];
  const __m256d ks_l = _mm256_setr_pd(k0, k2, k0, k2), ks_h = _mm256_setr_pd(k1, k3, k1, k3);
  const __m256d l01 = _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(y01)),
                                    _mm256_mul_pd(q.qs_l01, ks_l));
  const __m256d h01 = _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(y01, 1)),
                                    _mm256_mul_pd(q.qs_h01, ks_h));
  const __m256d l23 = _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(y23)),
                                    _mm256_mul_pd(q.qs_l23, ks_l));
  const __m256d h23 = _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(y23, 1)),
                                    _mm256_mul_pd(q.qs_h23, ks_h));
  // Lanes in head order (0, 2, 1, 3): block b of every head, added in block order.
  __m256d acc = _mm256_setzero_pd();
  acc = _mm256_add_pd(acc, _mm256_unpacklo_pd(l01, l23));  // block 0
  acc = _mm256_add_pd(acc, _mm256_unpacklo_pd(h01, h23));  // block 1
  acc = _mm256_add_pd(acc, _mm256_unpackhi_pd(l01, l23));  // block 2
  acc = _mm256_add_pd(acc, _mm256_unpackhi_pd(h01, h23));  // block 3
  _mm256_storeu_pd(out, _mm256_permute4x64_pd(acc, _MM_SHUFFLE(3, 1, 2, 0)));
}

// d = 64: one 32-byte chunk (blocks 0, 1) per head; two hadd levels per head pair, a third
// across the pairs: [B0 h0..h3 | B1 h0..h3].
__attribute__((target("avx2,fma"))) void dots4_d64_avx2(const Q4& q, const uint8_t* k,
                                                        double* out) {
  const __m256i m = _mm256_set1_epi8(0x0f);
  const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k));
  const __m256i klo = lut8(_mm256_and_si256(b0, m));
  const __m256i khi = lut8(_mm256_and_si256(_mm256_srli_epi16(b0, 4), m));
  const __m256i y01 = _mm256_hadd_epi32(chunk_sums(q, 0, 0, klo, khi), chunk_sums(q, 1, 0, klo, khi));
  const __m256i y23 = _mm256_hadd_epi32(chunk_sums(q, 2, 0, klo, khi), chunk_sums(q, 3, 0, klo, khi));
  const __m256i z = _mm256_hadd_epi32(y01, y23);  // [B0 h0, h1, h2, h3 | B1 h0, h1, h2, h3]
  const Pow2Table& kp = key_pow2();
  const __m256d t0 = _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(z)),
                                   _mm256_mul_pd(q.qs_l01, _mm256_set1_pd(kp.v[k[32]])));
  const __m256d t1 = _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(z, 1)),
                                   _mm256_mul_pd(q.qs_h01, _mm256_set1_pd(kp.v[k[33]])));
  _mm256_storeu_pd(out, _mm256_add_pd(_mm256_add_pd(_mm256_setzero_pd(), t0), t1));
}

}  // namespace

namespace {

// GCC 12's avx512fintrin.h trips -Wmaybe-uninitialized on its own _mm512_undefined_* use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// ---- AVX-512 VNNI: 16 keys at a time, fused with the weighting (index_scores_fp4). ----
//
// Per 32-byte chunk c of a key (blocks 2c and 2c+1), the 64 nibbles become bytes v + 12 in
// [0, 24] (unsigned) laid out as 16 dwords: dwords 0-3 the low nibbles of bytes 0-15 (block
// 2c), 4-7 the low nibbles of bytes 16-31 (block 2c+1), 8-11 and 12-15 the high nibbles.
// A 16 x 16 dword transpose makes dword g of 16 keys one vector; VPDPBUSD against the query's
// dword g (4 signed values, broadcast) adds each key's 4 products. The block sum is then
// sum((k + 12) * q) - 12 * sum(q): an exact integer, as in the reference. Scales and the f64
// block order are the reference's; the weighting is ref::index_weighted_scores per lane.

// out[g] = dword g of the 16 rows r[0..15] (rows = keys).
__attribute__((target("avx512f"))) inline void transpose16x16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // r[4a + e], 128-bit lane L: dword 4L + e of rows 4a .. 4a + 3.
  __m512i o[16];
  for (int e = 0; e < 4; ++e) {
    const __m512i a = _mm512_shuffle_i32x4(r[e], r[4 + e], 0x88);
    const __m512i b = _mm512_shuffle_i32x4(r[e], r[4 + e], 0xDD);
    const __m512i c = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], 0x88);
    const __m512i d = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], 0xDD);
    o[e] = _mm512_shuffle_i32x4(a, c, 0x88);
    o[8 + e] = _mm512_shuffle_i32x4(a, c, 0xDD);
    o[4 + e] = _mm512_shuffle_i32x4(b, d, 0x88);
    o[12 + e] = _mm512_shuffle_i32x4(b, d, 0xDD);
  }
  for (int g = 0; g < 16; ++g) r[g] = o[g];
}

bool vnni_usable(const IndexQueryFp4& q) {
#if defined(__x86_64__)
  static const bool cpu = __builtin_cpu_supports("avx512vnni");
  // Below 8 heads the per-key AVX2 path is as fast (`strata bench indexer --heads 4 --dim 64`:
  // 10.8 vs 9.1 ns per key; 8 heads 15.9 vs 18.0; 64 heads x 128: 140 vs 243).
  return cpu && kernels::avx512_active() && (q.d == 64 || q.d == 128) && q.n_heads >= 8;
#else
  (void)q;
  return false;
#endif
}

__attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni"))) void scores_vnni(
    const IndexQueryFp4& q, const uint8_t* const* keys, int64_t n_keys, const float* w,
    float* score) {
  const int64_t nh = q.n_heads, d = q.d, nc = d / 64, nb = d / 32;
  // The query: per head and chunk 16 dwords of signed doubled E2M1 values (the key layout);
  // per head and block the sum of those values and the scale.
  std::vector<int32_t> qd(nh * nc * 16), qsum(nh * nb, 0);
  std::vector<double> qsc(nh * nb);
  const Pow2Table& qp = query_pow2();
  const Pow2Table& kp = key_pow2();
  for (int64_t h = 0; h < nh; ++h) {
    for (int64_t c = 0; c < nc; ++c) {
      int8_t v[64];
      const uint8_t* qc = &q.codes[h * d / 2 + 32 * c];
      for (int j = 0; j < 32; ++j) {
        v[j] = kE2m1x2[qc[j] & 15];
        v[32 + j] = kE2m1x2[qc[j] >> 4];
        qsum[h * nb + 2 * c + j / 16] += v[j] + v[32 + j];
      }
      std::memcpy(&qd[(h * nc + c) * 16], v, 64);
    }
    for (int64_t b = 0; b < nb; ++b) qsc[h * nb + b] = qp.v[q.scales[h * nb + b]];
  }
  alignas(64) static const uint8_t zero_row[64 + 4] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                                        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                                        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                                        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                                        127, 127, 127, 127};
  const __m256i lut = _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
                                       12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  alignas(64) int32_t sums[64 * 4][16];  // [head][block] per 16 keys (nh * nb <= 256 here)
  std::vector<std::array<int32_t, 16>> big;  // beyond that
  int32_t (*S)[16] = sums;
  if (nh * nb > 256) {
    big.resize(nh * nb);
    S = reinterpret_cast<int32_t(*)[16]>(big.data());
  }
  alignas(32) int32_t kscale_idx[4][16];
  for (int64_t r0 = 0; r0 < n_keys; r0 += 16) {
    const int nv = static_cast<int>(std::min<int64_t>(16, n_keys - r0));
    const uint8_t* kr[16];
    uint32_t null_mask = 0;
    for (int i = 0; i < 16; ++i) {
      const uint8_t* k = i < nv ? keys[r0 + i] : nullptr;
      if (k == nullptr) null_mask |= 1u << i;
      kr[i] = k != nullptr ? k : zero_row;
      for (int64_t b = 0; b < nb; ++b) kscale_idx[b][i] = kr[i][d / 2 + b];
    }
    for (int64_t c = 0; c < nc; ++c) {
      __m512i R[16];
      for (int i = 0; i < 16; ++i) {
        const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kr[i] + 32 * c));
        const __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(bytes, m4));
        const __m256i hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(bytes, 4), m4));
        R[i] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
      }
      transpose16x16(R);
      for (int64_t h = 0; h < nh; ++h) {
        const int32_t* qv = &qd[(h * nc + c) * 16];
        __m512i a0 = _mm512_set1_epi32(-12 * qsum[h * nb + 2 * c]);
        __m512i a1 = _mm512_set1_epi32(-12 * qsum[h * nb + 2 * c + 1]);
        for (int g : {0, 1, 2, 3, 8, 9, 10, 11}) a0 = _mm512_dpbusd_epi32(a0, R[g], _mm512_set1_epi32(qv[g]));
        for (int g : {4, 5, 6, 7, 12, 13, 14, 15}) a1 = _mm512_dpbusd_epi32(a1, R[g], _mm512_set1_epi32(qv[g]));
        _mm512_storeu_si512(S[h * nb + 2 * c], a0);
        _mm512_storeu_si512(S[h * nb + 2 * c + 1], a1);
      }
    }
    // Per 8 keys: the f64 dots of every head in block order, then the weighting in head order.
    for (int half = 0; half < 2 && 8 * half < nv; ++half) {
      __m512d ks[4];
      for (int64_t b = 0; b < nb; ++b)
        ks[b] = _mm512_i32gather_pd(_mm256_load_si256(reinterpret_cast<const __m256i*>(&kscale_idx[b][8 * half])),
                                    kp.v, 8);
      const __mmask8 nul = static_cast<__mmask8>(null_mask >> (8 * half));
      __m256 acc = _mm256_setzero_ps();
      for (int64_t h = 0; h < nh; ++h) {
        __m512d dot = _mm512_setzero_pd();
        for (int64_t b = 0; b < nb; ++b) {
          const __m512d s = _mm512_cvtepi32_pd(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(&S[h * nb + b][8 * half])));
          const __m512d scale = _mm512_mul_pd(_mm512_set1_pd(qsc[h * nb + b]), ks[b]);
          dot = _mm512_add_pd(dot, _mm512_mul_pd(s, scale));
        }
        dot = _mm512_mask_mov_pd(dot, nul, _mm512_setzero_pd());  // a null key's dots are 0
        acc = simd::add_head(acc, _mm512_cvtpd_ps(dot), w[h]);
      }
      const __m256 out = simd::round_bf16_8(acc);
      const int n8 = std::min(8, nv - 8 * half);
      _mm256_mask_storeu_ps(score + r0 + 8 * half, static_cast<__mmask8>((1u << n8) - 1), out);
    }
  }
}

#pragma GCC diagnostic pop

}  // namespace

void index_scores_fp4(const IndexQueryFp4& q, const uint8_t* const* keys, int64_t n_keys,
                      const float* w, float* score) {
  if (n_keys <= 0) return;
  if (vnni_usable(q)) {
    scores_vnni(q, keys, n_keys, w, score);
    return;
  }
  thread_local std::vector<double> dots;
  dots.resize(static_cast<size_t>(n_keys * q.n_heads));
  index_dots_fp4(q, keys, n_keys, dots.data());
  index_weighted_scores(dots.data(), n_keys, q.n_heads, w, score);
}

void index_dots_fp4(const IndexQueryFp4& q, const uint8_t* const* keys, int64_t n_keys,
                    double* out) {
  const int64_t nh = q.n_heads;
  if (kernels::active_isa() != kernels::Isa::kAvx2 || (q.d != 128 && q.d != 64) || nh % 4 != 0) {
    ref::index_dots_fp4(q, keys, n_keys, out);
    return;
  }
  Q4 g;
  for (int64_t h0 = 0; h0 < nh; h0 += 4) {
    prepare_q4(q, h0, &g);
    for (int64_t r = 0; r < n_keys; ++r) {
      double* o = out + r * nh + h0;
      if (keys[r] == nullptr) {
        std::memset(o, 0, 4 * sizeof(double));
      } else if (q.d == 128) {
        dots4_avx2(g, keys[r], o);
      } else {
        dots4_d64_avx2(g, keys[r], o);
      }
    }
  }
}

}  // namespace strata::v41
