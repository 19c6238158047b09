// v41::index_dots_fp4 (see v41_ops.h): the indexer's per-head dot products straight from the
// FP4 E2M1 + UE8M0 (block 32) codes of the query and the stored index keys. Within a block
// every product is an integer times one power of two, so the block's sum is an exact integer
// (|sum| <= 32 * 144); the blocks are then added in f64 in block order. Scalar reference and
// an AVX2 path (d = 64 or 128, heads in groups of 4: nibbles through a shuffle table, products
// by maddubs, block sums by hadd), same bits.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/check.h"
#include "exec/deepseek_v41/v41_index_fp4_internal.h"
#include "exec/deepseek_v41/v41_ops.h"
#include "kernels/cpu_features.h"
#include "kernels/quant_formats.h"

namespace strata::v41 {

namespace fp4_detail {

Pow2Table::Pow2Table(int shift) {
  for (int e = 0; e < 255; ++e) v[e] = std::ldexp(1.0, e - 127 - shift);
  v[255] = std::numeric_limits<double>::quiet_NaN();
}
const Pow2Table& key_pow2() {
  static const Pow2Table t(0);
  return t;
}
const Pow2Table& query_pow2() {
  static const Pow2Table t(2);
  return t;
}

}  // namespace fp4_detail

using fp4_detail::key_pow2;
using fp4_detail::kE2m1x2;
using fp4_detail::Pow2Table;
using fp4_detail::query_pow2;

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

void index_scores_fp4(const IndexQueryFp4& q, const uint8_t* const* keys, int64_t n_keys,
                      const float* w, float* score) {
  if (n_keys <= 0) return;
  if (fp4_detail::scores_vnni_usable(q)) {
    fp4_detail::scores_vnni(q, keys, n_keys, w, score);
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
