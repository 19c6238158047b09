// V4.1 mHC: hc_mixes / hc_pre / hc_post (see v41_mhc.h).
#include "exec/deepseek_v41/v41_mhc.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "base/scratch.h"
#include "base/thread_pool.h"
#include "exec/deepseek_v41/v41_simd.h"
#include "kernels/cpu_features.h"
#include "model/dtype.h"

namespace strata::v41 {

// mixes -> pre/post/comb for every token of h [S, hc*D] (Block.hc_mixes).
void hc_mixes(const float* h, int64_t S, int64_t hcD, const V41MhcWeights& w, int hc, int iters,
              double norm_eps, double hc_eps, float* pre, float* post, float* comb,
              v41::CallRows vrows, ThreadPool* pool) {
  const int64_t nmix = (2 + hc) * hc;
  thread_local Scratch<float> s_raw, s_sq;  // written whole before they are read
  float* const raw = s_raw.get(S * nmix);
  v41::linear_f32(h, S, w.fn, nmix, hcD, raw, w.fn_packed.get(), pool);
  const float eps = static_cast<float>(norm_eps);
  // Tokens are independent: split over the pool (s_sq is each running thread's own).
  parallel_rows(pool, S, 4, [&](int64_t i0, int64_t i1) {
    float* const sqr = s_sq.get(hcD);
    for (int64_t i = i0; i < i1; ++i) {
      const float* x = h + i * hcD;
      for (int64_t k = 0; k < hcD; ++k) sqr[k] = x[k] * x[k];
      const float ms = v41::torch_sum(sqr, hcD) / static_cast<float>(hcD);
      const float rs = 1.0f / std::sqrt(ms + eps);
      float* mix = &raw[i * nmix];
      for (int64_t k = 0; k < nmix; ++k) mix[k] = mix[k] * rs;
      v41::hc_split_sinkhorn(mix, w.scale.f32(), w.base.f32(), hc, iters,
                             static_cast<float>(hc_eps), pre + i * hc, post + i * hc,
                             comb + i * hc * hc, vrows.tok(i), vrows.n);
    }
  });
}

// GCC 12's avx512fintrin.h trips -Wmaybe-uninitialized on its own _mm512_undefined_* use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"


// The loops below over d are vectorized 16 lanes at a time on AVX-512 CPUs with each lane's
// operations in the scalar order (mul, then add, each rounded: the build has no FP
// contraction), so both forms give the same bits. kFirstTerm sums start from the first
// product instead of 0 (V4's order: they differ where every product is -0).

// y[s, d] = bf16(sum_c pre[s, c] * h[s, c, d])  (Block.hc_pre)
template <bool kFirst>
static __attribute__((target("avx512f"))) int64_t hc_pre_avx512(const float* h, const float* pre,
                                                                int64_t i, int hc, int64_t D,
                                                                float* y) {
  int64_t d = 0;
  for (; d + 16 <= D; d += 16) {
    auto term = [&](int c) __attribute__((always_inline, target("avx512f"))) {
      return _mm512_mul_ps(_mm512_set1_ps(pre[i * hc + c]), _mm512_loadu_ps(h + (i * hc + c) * D + d));
    };
    __m512 acc = kFirst ? term(0) : _mm512_setzero_ps();
    for (int c = kFirst ? 1 : 0; c < hc; ++c) acc = _mm512_add_ps(acc, term(c));
    _mm512_storeu_ps(y + i * D + d, bf16_round16(acc));
  }
  return d;
}

void hc_pre(const float* h, const float* pre, int64_t S, int hc, int64_t D, float* y,
            ThreadPool* pool, SumStart start) {
  const bool v512 = kernels::avx512_active() && hc >= 1;
  const bool first = start == SumStart::kFirstTerm;
  parallel_rows(pool, S, 8, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      int64_t d = !v512 ? 0 : first ? hc_pre_avx512<true>(h, pre, i, hc, D, y)
                                    : hc_pre_avx512<false>(h, pre, i, hc, D, y);
      for (; d < D; ++d) {
        float acc = 0.0f;
        for (int c = 0; c < hc; ++c) {
          const float p = pre[i * hc + c] * h[(i * hc + c) * D + d];
          acc = first && c == 0 ? p : acc + p;
        }
        y[i * D + d] = round_to_bf16(acc);
      }
    }
  });
}

// h[s, j, d] <- bf16(post[j] * f[d] + sum_i comb[i, j] * h[s, i, d])  (Block.hc_post)
template <bool kFirst>
static __attribute__((target("avx512f"))) int64_t hc_post_avx512(const float* f, float pj,
                                                                 const float* cb, const float* res,
                                                                 int hc, int j, int64_t D,
                                                                 float* out) {
  int64_t d = 0;
  for (; d + 16 <= D; d += 16) {
    auto term = [&](int i) __attribute__((always_inline, target("avx512f"))) {
      return _mm512_mul_ps(_mm512_set1_ps(cb[i * hc + j]), _mm512_loadu_ps(res + i * D + d));
    };
    __m512 acc = kFirst ? term(0) : _mm512_setzero_ps();
    for (int i = kFirst ? 1 : 0; i < hc; ++i) acc = _mm512_add_ps(acc, term(i));
    const __m512 t = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(pj), _mm512_loadu_ps(f + d)), acc);
    _mm512_storeu_ps(out + d, bf16_round16(t));
  }
  return d;
}
#pragma GCC diagnostic pop

void hc_post(const float* f, const float* post, const float* comb, int64_t S, int hc, int64_t D,
             float* h, ThreadPool* pool, SumStart start) {
  const bool v512 = kernels::avx512_active() && hc >= 1;
  const bool first = start == SumStart::kFirstTerm;
  parallel_rows(pool, S, 8, [&](int64_t s0, int64_t s1) {
    thread_local Scratch<float> s_res;
    float* const res = s_res.get(hc * D);  // a copy of each token's streams, written whole
    for (int64_t s = s0; s < s1; ++s) {
      float* hs = h + s * hc * D;
      std::copy_n(hs, hc * D, res);
      const float* cb = comb + s * hc * hc;
      for (int j = 0; j < hc; ++j) {
        const float pj = post[s * hc + j];
        int64_t d = !v512 ? 0
                    : first ? hc_post_avx512<true>(f + s * D, pj, cb, res, hc, j, D, hs + j * D)
                            : hc_post_avx512<false>(f + s * D, pj, cb, res, hc, j, D, hs + j * D);
        for (; d < D; ++d) {
          float acc = 0.0f;
          for (int i = 0; i < hc; ++i) {
            const float p = cb[i * hc + j] * res[i * D + d];
            acc = first && i == 0 ? p : acc + p;
          }
          hs[j * D + d] = round_to_bf16(pj * f[s * D + d] + acc);
        }
      }
    }
  });
}

}  // namespace strata::v41
