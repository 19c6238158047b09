// V4.1 primitives; see v41_ops.h for the contract and sources.
#include "exec/deepseek_v41/v41_ops.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <limits>

#include "base/check.h"
#include "base/scratch.h"
#include "kernels/act_quant.h"
#include "kernels/block_gemm.h"
#include "kernels/cpu_features.h"
#include "kernels/fp8_einsum.h"
#include "kernels/matmul.h"
#include "kernels/seq_gemm.h"
#include "exec/deepseek_v4/v4_ops.h"
#include "exec/deepseek_v41/v41_simd.h"
#include "model/dtype.h"

// Scalar code using std::fma: an FMA-ISA clone (inline vfmadd instead of a libm call) picked
// at load time; results are identical (fma is exact either way).
#define STRATA_FMA_CLONES __attribute__((target_clones("fma", "default")))

namespace strata::v41 {

namespace {

// SLEEF's xexpf (u10) constants: 1/ln 2, ln 2 split in a high and a low part, and the
// polynomial's coefficients (highest degree first). Shared by sleef_expf and its 16-lane form
// (and the first three by sleef_expkf, whose polynomial differs), so they cannot drift apart.
constexpr float kExpRLn2 = 1.442695040888963407359924681001892137426645954152985934135449406931f;
constexpr float kExpL2U = 0.693145751953125f;
constexpr float kExpL2L = 1.428606765330187045e-06f;
constexpr float kExpPoly[6] = {0.000198527617612853646278381f, 0.00139304355252534151077271f,
                               0.00833336077630519866943359f, 0.0416664853692054748535156f,
                               0.166666671633720397949219f,   0.5f};

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
// sleef_expf on 16 lanes: the scalar function's operations in its order (FMA where it calls
// std::fma, the same underflow / overflow cuts, NaN passed through).
__attribute__((target("avx512f"), always_inline)) inline __m512 sleef_expf16(__m512 d) {
  // MXCSR's round-to-nearest-even conversion = std::nearbyint
  const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(d, _mm512_set1_ps(kExpRLn2)));
  const __m512 fq = _mm512_cvtepi32_ps(q);
  __m512 s = _mm512_fmadd_ps(fq, _mm512_set1_ps(-kExpL2U), d);
  s = _mm512_fmadd_ps(fq, _mm512_set1_ps(-kExpL2L), s);
  __m512 u = _mm512_set1_ps(kExpPoly[0]);
  for (int i = 1; i < 6; ++i) u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(kExpPoly[i]));
  u = _mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_fmadd_ps(_mm512_mul_ps(s, s), u, s));
  const __m512i bias = _mm512_set1_epi32(0x7f);
  const __m512i h = _mm512_srai_epi32(q, 1);
  const __m512 p1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(h, bias), 23));
  const __m512 p2 =
      _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_sub_epi32(q, h), bias), 23));
  u = _mm512_mul_ps(_mm512_mul_ps(u, p1), p2);
  u = _mm512_mask_mov_ps(u, _mm512_cmp_ps_mask(d, _mm512_set1_ps(-104.0f), _CMP_LT_OQ),
                         _mm512_setzero_ps());
  u = _mm512_mask_mov_ps(u, _mm512_cmp_ps_mask(d, _mm512_set1_ps(104.0f), _CMP_GT_OQ),
                         _mm512_set1_ps(std::numeric_limits<float>::infinity()));
  return _mm512_mask_mov_ps(u, _mm512_cmp_ps_mask(d, d, _CMP_UNORD_Q), d);
}

// p = isinf(s) ? 0 : sleef_expf(s - m) and its bf16 rounding pb, 16 lanes.
// (Out of line: the intrinsics' GCC 12 warnings are silenced only in this region.)
__attribute__((target("avx512f"), noinline)) void softmax_exp16(const float* s, float m, float* p,
                                                                float* pb) {
  const __m512 v = _mm512_loadu_ps(s);
  __m512 e = sleef_expf16(_mm512_sub_ps(v, _mm512_set1_ps(m)));
  const __mmask16 inf = _mm512_cmp_ps_mask(_mm512_abs_ps(v), _mm512_set1_ps(INFINITY), _CMP_EQ_OQ);
  e = _mm512_mask_mov_ps(e, inf, _mm512_setzero_ps());
  _mm512_storeu_ps(p, e);
  _mm512_storeu_ps(pb, bf16_round16(e));
}
#pragma GCC diagnostic pop

struct Luts {
  float e4m3[256];
  float e8m0[256];
  float e2m1[16];
  Luts() {
    for (int b = 0; b < 256; ++b) {
      e4m3[b] = fp8_e4m3_to_f32(static_cast<uint8_t>(b));
      e8m0[b] = ue8m0_to_f32(static_cast<uint8_t>(b));
    }
    for (int n = 0; n < 16; ++n) e2m1[n] = fp4_e2m1_to_f32(static_cast<uint8_t>(n));
  }
};
const Luts kLuts;
inline const Luts& luts() { return kLuts; }


constexpr float kFp8Max = 448.0f;
constexpr float kFp4Max = 6.0f;
// The kernels multiply by the reciprocal held as an fp32 constant.
const float kFp8MaxInv = static_cast<float>(1.0 / 448.0);
const float kFp4MaxInv = static_cast<float>(1.0 / 6.0);


}  // namespace

void act_quant_row(const float* x, int64_t K, int block, float* q, float* scales) {
  STRATA_CHECK(K % block == 0);
  for (int64_t b = 0; b < K / block; ++b) {
    const float* xb = x + b * block;
    float amax = 0.0f;
    for (int i = 0; i < block; ++i) amax = std::max(amax, std::fabs(xb[i]));
    amax = std::max(amax, 1e-4f);
    float s = pow2_ceil(amax * kFp8MaxInv);
    scales[b] = s;
    for (int i = 0; i < block; ++i) q[b * block + i] = round_e4m3(std::clamp(xb[i] / s, -kFp8Max, kFp8Max));
  }
}

void qdq_fp8(float* x, int64_t n, int block) {
  STRATA_CHECK(n % block == 0);
  std::vector<float> q(block);
  for (int64_t b = 0; b < n / block; ++b) {
    float s;
    act_quant_row(x + b * block, block, block, q.data(), &s);
    for (int i = 0; i < block; ++i) x[b * block + i] = round_to_bf16(q[i] * s);
  }
}

namespace {
// 16 lanes of xb <- bf16(round_e2m1(clamp(xb / s, -6, 6)) * s), each lane computed with the
// scalar loop's operations (IEEE division, the same threshold compares for RNE onto the
// E2M1 grid, sign from the clamped value, one product, RNE to bf16). Returns false, having
// written nothing, when a lane of xb / s is NaN (the scalar loop handles those).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's own _mm512_undefined_*
__attribute__((target("avx512f"))) bool qdq_e2m1_16(float* xb, float s) {
  const __m512 q = _mm512_div_ps(_mm512_loadu_ps(xb), _mm512_set1_ps(s));
  if (_mm512_cmp_ps_mask(q, q, _CMP_UNORD_Q) != 0) return false;
  const __m512 v = _mm512_max_ps(_mm512_min_ps(q, _mm512_set1_ps(kFp4Max)), _mm512_set1_ps(-kFp4Max));
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN));
  const __m512 mag = _mm512_castsi512_ps(_mm512_andnot_si512(sign, _mm512_castps_si512(v)));
  // round_e2m1: code = #midpoints below mag; at a midpoint, up where the upper neighbour is
  // the even code (0.75, 1.75, 3.5).
  const __m512i one = _mm512_set1_epi32(1);
  __m512i code = _mm512_setzero_si512();
  code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(mag, _mm512_set1_ps(0.25f), _CMP_GT_OQ), code, one);
  code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(mag, _mm512_set1_ps(0.75f), _CMP_GE_OQ), code, one);
  code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(mag, _mm512_set1_ps(1.25f), _CMP_GT_OQ), code, one);
  code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(mag, _mm512_set1_ps(1.75f), _CMP_GE_OQ), code, one);
  code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(mag, _mm512_set1_ps(2.5f), _CMP_GT_OQ), code, one);
  code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(mag, _mm512_set1_ps(3.5f), _CMP_GE_OQ), code, one);
  code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(mag, _mm512_set1_ps(5.0f), _CMP_GT_OQ), code, one);
  const __m512 grid = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512 r = _mm512_castsi512_ps(
      _mm512_or_si512(_mm512_castps_si512(_mm512_permutexvar_ps(code, grid)), sign));
  // bf16(r * s), RNE; r * s is finite (|r| <= 6, s a finite scale), so no NaN case.
  const __m512i u = _mm512_castps_si512(_mm512_mul_ps(r, _mm512_set1_ps(s)));
  const __m512i rounded = _mm512_and_si512(
      _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                           _mm512_and_si512(_mm512_srli_epi32(u, 16), one))),
      _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
  _mm512_storeu_ps(xb, _mm512_castsi512_ps(rounded));
  return true;
}
#pragma GCC diagnostic pop

// One QDQ block with scale s: 16-lane steps where AVX-512 is on, the scalar loop otherwise.
void qdq_e2m1_block(float* xb, int block, float s) {
  int i = 0;
  if (kernels::avx512_active())
    for (; i + 16 <= block && qdq_e2m1_16(xb + i, s); i += 16) {
    }
  for (; i < block; ++i) {
    const float v = std::clamp(xb[i] / s, -kFp4Max, kFp4Max);
    xb[i] = round_to_bf16(round_e2m1(v) * s);
  }
}
}  // namespace

void qdq_fp4_e8m0(float* x, int64_t n, int block) {
  STRATA_CHECK(n % block == 0);
  const float floor_amax = static_cast<float>(6.0 * std::ldexp(1.0, -126));
  for (int64_t b = 0; b < n / block; ++b) {
    float* xb = x + b * block;
    float amax = 0.0f;
    for (int i = 0; i < block; ++i) amax = std::max(amax, std::fabs(xb[i]));
    amax = std::max(amax, floor_amax);
    qdq_e2m1_block(xb, block, pow2_ceil(amax * kFp4MaxInv));
  }
}

void qdq_fp4_e4m3(float* x, int64_t n, int block) {
  STRATA_CHECK(n % block == 0);
  const float floor_amax = static_cast<float>(6.0 * std::ldexp(1.0, -9));
  for (int64_t b = 0; b < n / block; ++b) {
    float* xb = x + b * block;
    float amax = 0.0f;
    for (int i = 0; i < block; ++i) amax = std::max(amax, std::fabs(xb[i]));
    amax = std::max(amax, floor_amax);
    qdq_e2m1_block(xb, block, round_e4m3(amax / kFp4Max));
  }
}

namespace {

// Block-scaled GEMM over already-quantized activations (q values + per-32 scales) and a
// weight row decoded to its E4M3/E2M1 values + per-K-block scales. fp32 partial per K block
// (computed exactly in double, then rounded once: the products are exact in fp32 and the
// in-block sum of the reference is exact whenever it fits 24 bits), scaled partials added
// to an fp32 accumulator in K order.
float block_dot(const float* qa, const float* sa, const float* qw, const float* sw, int64_t K,
                int block) {
  float acc = 0.0f;
  for (int64_t kb = 0; kb < K / block; ++kb) {
    float part = 0.0f;
    const float* a = qa + kb * block;
    const float* w = qw + kb * block;
    for (int i = 0; i < block; ++i) part = std::fma(a[i], w[i], part);
    float t = part * sa[kb];
    t = t * sw[kb];
    acc += t;
  }
  return acc;
}

void linear_quant(const float* x, int64_t M, const V41Linear& w, float* y) {
  const int64_t K = w.in, N = w.out;
  const int block = 32;  // V4.1: activation block = weight K block = 32
  STRATA_CHECK_MSG(K % block == 0, "{}: K={} not a multiple of 32", w.weight.name, K);
  STRATA_CHECK(w.kind == V41WeightKind::kFp4 || w.block == block);
  const int64_t nkb = K / block;
  std::vector<float> qa(M * K), sa(M * nkb);
  for (int64_t m = 0; m < M; ++m) act_quant_row(x + m * K, K, block, &qa[m * K], &sa[m * nkb]);
  std::vector<float> qw(K), sw(nkb);
  const Luts& L = luts();
  const uint8_t* wd = w.weight.data;
  const uint8_t* sd = w.scale.data;
  for (int64_t n = 0; n < N; ++n) {
    if (w.kind == V41WeightKind::kFp8) {
      const uint8_t* row = wd + n * K;
      for (int64_t k = 0; k < K; ++k) qw[k] = L.e4m3[row[k]];
      const int64_t scols = (K + w.block - 1) / w.block;
      for (int64_t kb = 0; kb < nkb; ++kb) sw[kb] = L.e8m0[sd[(n / w.block) * scols + kb]];
    } else {
      const uint8_t* row = wd + n * (K / 2);
      for (int64_t k = 0; k < K / 2; ++k) {
        qw[2 * k] = L.e2m1[row[k] & 15];
        qw[2 * k + 1] = L.e2m1[row[k] >> 4];
      }
      for (int64_t kb = 0; kb < nkb; ++kb) sw[kb] = L.e8m0[sd[n * nkb + kb]];
    }
    for (int64_t m = 0; m < M; ++m)
      y[m * N + n] = round_to_bf16(block_dot(&qa[m * K], &sa[m * nkb], qw.data(), sw.data(), K, block));
  }
}

}  // namespace

void grouped_wo_a(const float* o, int64_t S, int64_t K, const V41Linear& woa, int64_t G,
                  int64_t R, float* u, ThreadPool* pool) {
  const int64_t Dg = K / G;
  if (woa.kind == V41WeightKind::kFp8 && woa.packed && R % 8 == 0) {
    kernels::fp8_dequant_gemm_f64_grouped(o, S, K, woa.packed->fp8, G, Dg, u, G * R, pool);
    return;
  }
  std::vector<float> wrow(Dg);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t r = 0; r < R; ++r) {
      const int64_t n = g * R + r;
      if (woa.kind == V41WeightKind::kFp8) {
        const int64_t scols = (Dg + woa.block - 1) / woa.block;
        const uint8_t* wr = woa.weight.data + n * Dg;
        const uint8_t* sr = woa.scale.data + (n / woa.block) * scols;
        for (int64_t k = 0; k < Dg; ++k)
          wrow[k] = round_to_bf16(e4m3_decode(wr[k]) * ue8m0_to_f32(sr[k / woa.block]));
      } else {
        const uint16_t* wr = woa.weight.u16() + n * Dg;
        for (int64_t k = 0; k < Dg; ++k) wrow[k] = bf16_to_f32(wr[k]);
      }
      for (int64_t i = 0; i < S; ++i) {
        const float* og = &o[i * K + g * Dg];
        double acc = 0.0;
        for (int64_t k = 0; k < Dg; ++k) acc += static_cast<double>(og[k]) * wrow[k];
        u[i * G * R + n] = round_to_bf16(static_cast<float>(acc));
      }
    }
}

void linear(const float* x, int64_t M, const V41Linear& w, float* y, ThreadPool* pool) {
  if (w.packed) {
    switch (w.kind) {
      case V41WeightKind::kFp8:
        kernels::linear_fp8_packed(x, M, w.packed->fp8, y, pool);
        return;
      case V41WeightKind::kFp4:
        kernels::linear_fp4_packed(x, M, w.packed->fp4, 32, y, pool);
        return;
      case V41WeightKind::kBf16:
      case V41WeightKind::kF32:
        kernels::seq_gemm_packed(x, M, w.packed->seq, y, pool);
        for (int64_t i = 0; i < M * w.out; ++i) y[i] = round_to_bf16(y[i]);
        return;
    }
  }
  switch (w.kind) {
    case V41WeightKind::kFp8:
    case V41WeightKind::kFp4:
      linear_quant(x, M, w, y);
      return;
    case V41WeightKind::kBf16:
    case V41WeightKind::kF32: {
      linear_f32(x, M, w.weight, w.out, w.in, y);
      for (int64_t i = 0; i < M * w.out; ++i) y[i] = round_to_bf16(y[i]);
      return;
    }
  }
}

bool packed_gemm_job(const V41PackedLinear* p, V41WeightKind kind, kernels::PackedGemmJob* job,
                     int* block) {
  if (p == nullptr) return false;
  if (kind == V41WeightKind::kFp8) {
    job->fp8 = &p->fp8;
    *block = static_cast<int>(p->fp8.block_k);
    return true;
  }
  if (kind == V41WeightKind::kFp4) {
    job->fp4 = &p->fp4;
    *block = 32;  // V4.1's FP4 activation block (linear_fp4_packed(.., 32, ..))
    return true;
  }
  return false;
}

void linear_batch(const float* x, int64_t M, const V41Linear* const* w, float* const* y, int n,
                  ThreadPool* pool) {
  STRATA_CHECK(n >= 0 && n <= 8);
  kernels::PackedGemmJob jobs[8];
  int block_of[8];
  bool batch = n > 1;
  for (int i = 0; i < n && batch; ++i)
    batch = w[i]->in == w[0]->in &&
            packed_gemm_job(w[i]->packed.get(), w[i]->kind, &jobs[i], &block_of[i]);
  if (!batch) {
    for (int i = 0; i < n; ++i) linear(x, M, *w[i], y[i], pool);
    return;
  }
  // One quantization of x per activation block, as linear_fp8_packed / linear_fp4_packed
  // quantize it.
  const int64_t K = w[0]->in;
  int blocks[8];
  thread_local Scratch<float> q[8], s[8];  // written whole by act_quant_fp8 before use
  float* qp[8];
  float* sp[8];
  int nq = 0;
  for (int i = 0; i < n; ++i) {
    const int block = block_of[i];
    int j = 0;
    while (j < nq && blocks[j] != block) ++j;
    if (j == nq) {
      blocks[nq] = block;
      qp[nq] = q[nq].get(static_cast<size_t>(M * K));
      sp[nq] = s[nq].get(static_cast<size_t>(M * (K / block)));
      kernels::act_quant_fp8(x, M, K, block, kernels::ScaleFmt::kUe8m0, nullptr, qp[nq], sp[nq]);
      ++nq;
    }
    jobs[i].a = kernels::QuantActs{qp[j], sp[j], M, K, block};
    jobs[i].y = y[i];
    jobs[i].out = kernels::OutRound::kBf16;
  }
  kernels::gemm_packed_batch(jobs, n, pool);
}

// Sequential single-accumulator FMA over K per output element: the per-element order of a
// BLAS sgemm micro-kernel (torch's CPU F.linear), which matches the reference's fp32 results
// far more often than a lane-split order (measured on the golden per-layer dumps).
void linear_f32(const float* x, int64_t M, const TensorView& w, int64_t out, int64_t in, float* y,
                const kernels::PackedSeqWeight* packed, ThreadPool* pool) {
  if (packed != nullptr) {
    STRATA_CHECK(packed->n == out && packed->k == in);
    kernels::seq_gemm_packed(x, M, *packed, y, pool);
    return;
  }
  STRATA_CHECK(w.dtype == DType::kF32 || w.dtype == DType::kBF16);
  std::vector<float> wrow(in);
  for (int64_t n = 0; n < out; ++n) {
    if (w.dtype == DType::kF32) {
      std::memcpy(wrow.data(), w.data + n * in * 4, in * 4);
    } else {
      const uint16_t* r = w.u16() + n * in;
      for (int64_t k = 0; k < in; ++k) wrow[k] = bf16_to_f32(r[k]);
    }
    for (int64_t m = 0; m < M; ++m) {
      const float* xr = x + m * in;
      float acc = 0.0f;
      for (int64_t k = 0; k < in; ++k) acc = std::fma(xr[k], wrow[k], acc);
      y[m * out + n] = acc;
    }
  }
}

int torch_sum_lanes() {
  static const int lanes = [] {
    const char* e = std::getenv("V41_SUM_LANES");
    return e ? std::atoi(e) : 8;
  }();
  return lanes;
}

namespace {
// multi_row_sum over `size` steps of `nrows` interleaved accumulators, each a vector of
// `lanes` floats: element (i, r) is the vector at index i*nrows + r of `vecs`.
void multi_row_sum(const float* x, int lanes, int64_t nrows, int64_t size, float* out /*nrows*lanes*/) {
  constexpr int kLevels = 4;
  int64_t ceil_log2 = 0;
  while ((int64_t{1} << ceil_log2) < size) ++ceil_log2;
  const int64_t level_power = std::max<int64_t>(4, ceil_log2 / kLevels);
  const int64_t level_step = int64_t{1} << level_power;
  const int64_t level_mask = level_step - 1;
  const int64_t W = nrows * lanes;
  thread_local Scratch<float> s_acc;
  float* const acc = s_acc.get_zeroed(kLevels * W);
  // Element-wise (each lane its own sum), so vectorizing it keeps the bits; dst never
  // overlaps src (acc is scratch, x the caller's data), which lets the compiler vectorize.
  auto add_vec = [W](float* __restrict dst, const float* __restrict src) {
    for (int64_t l = 0; l < W; ++l) dst[l] += src[l];
  };
  int64_t i = 0;
  for (; i + level_step <= size;) {
    for (int64_t j = 0; j < level_step; ++j, ++i) add_vec(&acc[0], x + i * W);
    for (int j = 1; j < kLevels; ++j) {
      add_vec(&acc[j * W], &acc[(j - 1) * W]);
      std::fill_n(&acc[(j - 1) * W], W, 0.0f);
      const int64_t mask = level_mask << (j * level_power);
      if ((i & mask) != 0) break;
    }
  }
  for (; i < size; ++i) add_vec(&acc[0], x + i * W);
  for (int j = 1; j < kLevels; ++j) add_vec(&acc[0], &acc[j * W]);
  std::copy_n(acc, W, out);
}
}  // namespace

float torch_sum(const float* x, int64_t n) {
  const int lanes = torch_sum_lanes();
  if (n < lanes) {
    // scalar_inner_sum: row_sum with scalar accumulators (ilp 4).
    const int64_t size_ilp = n / 4;
    float part[4];
    multi_row_sum(x, 1, 4, size_ilp, part);
    for (int64_t i = size_ilp * 4; i < n; ++i) part[0] += x[i];
    for (int k = 1; k < 4; ++k) part[0] += part[k];
    return part[0];
  }
  const int64_t vec_size = n / lanes;
  const int64_t size_ilp = vec_size / 4;
  thread_local Scratch<float> s_part;
  float* const part = s_part.get(4 * lanes);  // written whole by multi_row_sum
  multi_row_sum(x, lanes, 4, size_ilp, part);
  for (int64_t v = size_ilp * 4; v < vec_size; ++v)
    for (int l = 0; l < lanes; ++l) part[l] += x[v * lanes + l];
  for (int k = 1; k < 4; ++k)
    for (int l = 0; l < lanes; ++l) part[l] += part[k * lanes + l];
  float fin = 0.0f;
  for (int64_t k = vec_size * lanes; k < n; ++k) fin += x[k];
  for (int l = 0; l < lanes; ++l) fin += part[l];
  return fin;
}

namespace {
// GCC 12's avx512fintrin.h trips -Wmaybe-uninitialized on its own _mm512_undefined_* use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// y[i] = bf16(bf16(w[i]) * (x[i] * rs)) (w null: bf16(x[i] * rs)) for i in [0, n - n % 16):
// the scalar loop's two multiplications, each rounded, per lane. Returns how many it wrote.
__attribute__((target("avx512f"))) int64_t rms_scale_avx512(const float* x, float rs,
                                                           const uint16_t* w, int64_t n,
                                                           float* y) {
  const __m512 r = _mm512_set1_ps(rs);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), r);
    if (w) {
      const __m256i wb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i));
      v = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(wb), 16)), v);
    }
    _mm512_storeu_ps(y + i, bf16_round16(v));
  }
  return i;
}
#pragma GCC diagnostic pop
}  // namespace

void rms_norm(const float* x, int64_t rows, int64_t n, const TensorView* w, double eps, float* y) {
  const float feps = static_cast<float>(eps);
  const uint16_t* wv = w ? w->u16() : nullptr;
  const bool v512 = kernels::avx512_active();
  thread_local Scratch<float> s_sq;
  float* const sq = s_sq.get(n);  // written whole for each row
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    for (int64_t i = 0; i < n; ++i) sq[i] = xr[i] * xr[i];
    float var = torch_sum(sq, n) / static_cast<float>(n);
    float rs = 1.0f / std::sqrt(var + feps);
    for (int64_t i = v512 ? rms_scale_avx512(xr, rs, wv, n, yr) : 0; i < n; ++i) {
      float v = xr[i] * rs;
      if (wv) v = bf16_to_f32(wv[i]) * v;
      yr[i] = round_to_bf16(v);
    }
  }
}

RopeTable::RopeTable(int rope_dim, double theta, int64_t original_seq_len, double factor,
                     double beta_fast, double beta_slow)
    : rope_dim_(rope_dim), freqs_(rope_dim / 2) {
  const int dim = rope_dim;
  const float ftheta = static_cast<float>(theta);
  for (int i = 0; i < dim / 2; ++i) {
    float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    freqs_[i] = 1.0f / sleef_powf(ftheta, e);
  }
  if (original_seq_len > 0) {
    auto corrected = [&](double rot) {
      return dim * std::log(static_cast<double>(original_seq_len) / (rot * 2 * M_PI)) /
             (2 * std::log(theta));
    };
    int64_t low = std::max<int64_t>(static_cast<int64_t>(std::floor(corrected(beta_fast))), 0);
    int64_t high = std::min<int64_t>(static_cast<int64_t>(std::ceil(corrected(beta_slow))), dim - 1);
    const float denom = high - low > 0 ? static_cast<float>(high - low) : 1e-3f;
    const float ffactor = static_cast<float>(factor);
    for (int i = 0; i < dim / 2; ++i) {
      float ramp = (static_cast<float>(i) - static_cast<float>(low)) / denom;
      ramp = std::clamp(ramp, 0.0f, 1.0f);
      float smooth = 1.0f - ramp;
      float a = freqs_[i] / ffactor * (1.0f - smooth);
      float b = freqs_[i] * smooth;
      freqs_[i] = a + b;
    }
  }
}

void RopeTable::apply_heads(float* x_tail, int64_t n, int64_t stride, int64_t pos,
                            bool inverse) const {
  const float fp = static_cast<float>(pos);
  const int half = rope_dim_ / 2;
  thread_local std::vector<float> cs;
  cs.resize(static_cast<size_t>(2 * half));
  for (int i = 0; i < half; ++i) {
    const float ang = fp * freqs_[i];
    // torch.polar: scalar std::cos / std::sin on float (libm cosf / sinf).
    cs[2 * i] = std::cos(ang);
    const float s = std::sin(ang);
    cs[2 * i + 1] = inverse ? -s : s;
  }
  for (int64_t h = 0; h < n; ++h) {
    float* x = x_tail + h * stride;
    for (int i = 0; i < half; ++i) {
      const float c = cs[2 * i], s = cs[2 * i + 1];
      const float a = x[2 * i], b = x[2 * i + 1];
      const float ac = a * c, bs = b * s, as = a * s, bc = b * c;
      x[2 * i] = round_to_bf16(ac - bs);
      x[2 * i + 1] = round_to_bf16(as + bc);
    }
  }
}

namespace {

// dot[t] = sequential fma over i of q[i] * rows[t][i] from +0 (the reference's per-element
// BLAS order), 8 rows interleaved so their independent chains overlap. Null rows: -inf.
STRATA_FMA_CLONES void qk_scores(const float* q, const float* const* rows, int64_t nb, int64_t d,
                                 float scale, float* sc) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  static const std::vector<float> zeros(1 << 12, 0.0f);
  STRATA_CHECK(d <= static_cast<int64_t>(zeros.size()));
  int64_t t = 0;
  for (; t + 8 <= nb; t += 8) {
    const float* r0 = rows[t] ? rows[t] : zeros.data();
    const float* r1 = rows[t + 1] ? rows[t + 1] : zeros.data();
    const float* r2 = rows[t + 2] ? rows[t + 2] : zeros.data();
    const float* r3 = rows[t + 3] ? rows[t + 3] : zeros.data();
    const float* r4 = rows[t + 4] ? rows[t + 4] : zeros.data();
    const float* r5 = rows[t + 5] ? rows[t + 5] : zeros.data();
    const float* r6 = rows[t + 6] ? rows[t + 6] : zeros.data();
    const float* r7 = rows[t + 7] ? rows[t + 7] : zeros.data();
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f, a4 = 0.0f, a5 = 0.0f, a6 = 0.0f, a7 = 0.0f;
    for (int64_t i = 0; i < d; ++i) {
      const float qi = q[i];
      a0 = std::fma(qi, r0[i], a0);
      a1 = std::fma(qi, r1[i], a1);
      a2 = std::fma(qi, r2[i], a2);
      a3 = std::fma(qi, r3[i], a3);
      a4 = std::fma(qi, r4[i], a4);
      a5 = std::fma(qi, r5[i], a5);
      a6 = std::fma(qi, r6[i], a6);
      a7 = std::fma(qi, r7[i], a7);
    }
    const float a[8] = {a0, a1, a2, a3, a4, a5, a6, a7};
    for (int j = 0; j < 8; ++j) sc[t + j] = rows[t + j] ? a[j] * scale : kNegInf;
  }
  for (; t < nb; ++t) {
    const float* kv = rows[t];
    if (!kv) {
      sc[t] = kNegInf;
      continue;
    }
    float dot = 0.0f;
    for (int64_t i = 0; i < d; ++i) dot = std::fma(q[i], kv[i], dot);
    sc[t] = dot * scale;
  }
}

// The same with zmm (16 lanes x 4 per pass over the rows); bit-identical (lanes never mix).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f,avx2,fma"))) int64_t pv_accumulate_avx512(
    const float* const* rows, const float* pb, int64_t nb, int64_t d, float* acc) {
  int64_t i = 0;
  // 128 lanes per pass: 8 independent FMA chains (each chain is sequential over t, so 4
  // chains would leave the FMA units waiting on latency).
  // (Named registers: GCC keeps an array of vectors on the stack.)
  for (; i + 128 <= d; i += 128) {
    float* a = acc + i;
    __m512 c0 = _mm512_loadu_ps(a), c1 = _mm512_loadu_ps(a + 16), c2 = _mm512_loadu_ps(a + 32),
           c3 = _mm512_loadu_ps(a + 48), c4 = _mm512_loadu_ps(a + 64), c5 = _mm512_loadu_ps(a + 80),
           c6 = _mm512_loadu_ps(a + 96), c7 = _mm512_loadu_ps(a + 112);
    for (int64_t t = 0; t < nb; ++t) {
      const float* kv = rows[t];
      if (!kv) continue;
      const float* k = kv + i;
      const __m512 p = _mm512_set1_ps(pb[t]);
      c0 = _mm512_fmadd_ps(p, _mm512_loadu_ps(k), c0);
      c1 = _mm512_fmadd_ps(p, _mm512_loadu_ps(k + 16), c1);
      c2 = _mm512_fmadd_ps(p, _mm512_loadu_ps(k + 32), c2);
      c3 = _mm512_fmadd_ps(p, _mm512_loadu_ps(k + 48), c3);
      c4 = _mm512_fmadd_ps(p, _mm512_loadu_ps(k + 64), c4);
      c5 = _mm512_fmadd_ps(p, _mm512_loadu_ps(k + 80), c5);
      c6 = _mm512_fmadd_ps(p, _mm512_loadu_ps(k + 96), c6);
      c7 = _mm512_fmadd_ps(p, _mm512_loadu_ps(k + 112), c7);
    }
    _mm512_storeu_ps(a, c0);
    _mm512_storeu_ps(a + 16, c1);
    _mm512_storeu_ps(a + 32, c2);
    _mm512_storeu_ps(a + 48, c3);
    _mm512_storeu_ps(a + 64, c4);
    _mm512_storeu_ps(a + 80, c5);
    _mm512_storeu_ps(a + 96, c6);
    _mm512_storeu_ps(a + 112, c7);
  }
  for (; i + 64 <= d; i += 64) {
    __m512 c0 = _mm512_loadu_ps(acc + i), c1 = _mm512_loadu_ps(acc + i + 16);
    __m512 c2 = _mm512_loadu_ps(acc + i + 32), c3 = _mm512_loadu_ps(acc + i + 48);
    for (int64_t t = 0; t < nb; ++t) {
      const float* kv = rows[t];
      if (!kv) continue;
      const __m512 p = _mm512_set1_ps(pb[t]);
      c0 = _mm512_fmadd_ps(p, _mm512_loadu_ps(kv + i), c0);
      c1 = _mm512_fmadd_ps(p, _mm512_loadu_ps(kv + i + 16), c1);
      c2 = _mm512_fmadd_ps(p, _mm512_loadu_ps(kv + i + 32), c2);
      c3 = _mm512_fmadd_ps(p, _mm512_loadu_ps(kv + i + 48), c3);
    }
    _mm512_storeu_ps(acc + i, c0);
    _mm512_storeu_ps(acc + i + 16, c1);
    _mm512_storeu_ps(acc + i + 32, c2);
    _mm512_storeu_ps(acc + i + 48, c3);
  }
  return i;  // elements done; the AVX2 loop takes the rest
}
#pragma GCC diagnostic pop

// acc[i] = fma(pb[t], rows[t][i], acc[i]) for t in order (null rows skipped: fma(0, 0, a)
// == a), vectorized over i (lanes never mix t), so the order per element is unchanged.
// Columns [i0, d) (the AVX-512 loop may have done [0, i0)).
__attribute__((target("avx2,fma"))) void pv_accumulate_avx2(const float* const* rows,
                                                             const float* pb, int64_t nb,
                                                             int64_t d, float* acc, int64_t i0) {
  int64_t i = i0;
  for (; i + 32 <= d; i += 32) {
    __m256 c0 = _mm256_loadu_ps(acc + i), c1 = _mm256_loadu_ps(acc + i + 8);
    __m256 c2 = _mm256_loadu_ps(acc + i + 16), c3 = _mm256_loadu_ps(acc + i + 24);
    for (int64_t t = 0; t < nb; ++t) {
      const float* kv = rows[t];
      if (!kv) continue;
      const __m256 p = _mm256_set1_ps(pb[t]);
      c0 = _mm256_fmadd_ps(p, _mm256_loadu_ps(kv + i), c0);
      c1 = _mm256_fmadd_ps(p, _mm256_loadu_ps(kv + i + 8), c1);
      c2 = _mm256_fmadd_ps(p, _mm256_loadu_ps(kv + i + 16), c2);
      c3 = _mm256_fmadd_ps(p, _mm256_loadu_ps(kv + i + 24), c3);
    }
    _mm256_storeu_ps(acc + i, c0);
    _mm256_storeu_ps(acc + i + 8, c1);
    _mm256_storeu_ps(acc + i + 16, c2);
    _mm256_storeu_ps(acc + i + 24, c3);
  }
  for (int64_t t = 0; t < nb; ++t) {
    const float* kv = rows[t];
    if (!kv) continue;
    for (int64_t r = i; r < d; ++r) acc[r] = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(pb[t]), _mm_set_ss(kv[r]), _mm_set_ss(acc[r])));
  }
}

void pv_accumulate(const float* const* rows, const float* pb, int64_t nb, int64_t d, float* acc) {
  if (kernels::active_isa() == kernels::Isa::kAvx2) {
    const int64_t i0 = kernels::avx512_active() ? pv_accumulate_avx512(rows, pb, nb, d, acc) : 0;
    pv_accumulate_avx2(rows, pb, nb, d, acc, i0);
    return;
  }
  for (int64_t t = 0; t < nb; ++t) {
    const float* kv = rows[t];
    if (!kv) continue;
    for (int64_t r = 0; r < d; ++r) acc[r] = std::fma(pb[t], kv[r], acc[r]);
  }
}

}  // namespace

namespace {
__attribute__((target("avx2,fma"))) void index_dots_avx2(const double* qT, const float* key,
                                                          int64_t d, int64_t nh, double* out) {
  int64_t h = 0;
  for (; h + 16 <= nh; h += 16) {
    __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t j = 0; j < d; ++j) {
      const __m256d k = _mm256_set1_pd(static_cast<double>(key[j]));
      const double* qj = qT + j * nh + h;
      a0 = _mm256_fmadd_pd(_mm256_loadu_pd(qj), k, a0);
      a1 = _mm256_fmadd_pd(_mm256_loadu_pd(qj + 4), k, a1);
      a2 = _mm256_fmadd_pd(_mm256_loadu_pd(qj + 8), k, a2);
      a3 = _mm256_fmadd_pd(_mm256_loadu_pd(qj + 12), k, a3);
    }
    _mm256_storeu_pd(out + h, a0);
    _mm256_storeu_pd(out + h + 4, a1);
    _mm256_storeu_pd(out + h + 8, a2);
    _mm256_storeu_pd(out + h + 12, a3);
  }
  for (; h + 4 <= nh; h += 4) {
    __m256d a = _mm256_setzero_pd();
    for (int64_t j = 0; j < d; ++j)
      a = _mm256_fmadd_pd(_mm256_loadu_pd(qT + j * nh + h), _mm256_set1_pd(static_cast<double>(key[j])), a);
    _mm256_storeu_pd(out + h, a);
  }
  for (; h < nh; ++h) {
    double acc = 0.0;
    for (int64_t j = 0; j < d; ++j) acc += qT[j * nh + h] * static_cast<double>(key[j]);
    out[h] = acc;
  }
}
}  // namespace

void index_dots(const double* qT, const float* key, int64_t d, int64_t n_heads, double* out) {
  if (kernels::active_isa() == kernels::Isa::kAvx2) {
    index_dots_avx2(qT, key, d, n_heads, out);
    return;
  }
  for (int64_t h = 0; h < n_heads; ++h) {
    double acc = 0.0;
    for (int64_t j = 0; j < d; ++j) acc += qT[j * n_heads + h] * static_cast<double>(key[j]);
    out[h] = acc;
  }
}

namespace {
// 4 keys x 16 heads (two zmm of f64 per key): 8 FMA chains, each sequential over j.
__attribute__((target("avx512f,avx2,fma"))) void index_dots4x16_avx512(
    const double* qT, const float* const* k, int64_t d, int64_t nh, int64_t h, double* out) {
  __m512d a0 = _mm512_setzero_pd(), a1 = a0, b0 = a0, b1 = a0, c0 = a0, c1 = a0, e0 = a0, e1 = a0;
  for (int64_t j = 0; j < d; ++j) {
    const __m512d q0 = _mm512_loadu_pd(qT + j * nh + h), q1 = _mm512_loadu_pd(qT + j * nh + h + 8);
    const __m512d k0 = _mm512_set1_pd(static_cast<double>(k[0][j]));
    const __m512d k1 = _mm512_set1_pd(static_cast<double>(k[1][j]));
    const __m512d k2 = _mm512_set1_pd(static_cast<double>(k[2][j]));
    const __m512d k3 = _mm512_set1_pd(static_cast<double>(k[3][j]));
    a0 = _mm512_fmadd_pd(q0, k0, a0);
    a1 = _mm512_fmadd_pd(q1, k0, a1);
    b0 = _mm512_fmadd_pd(q0, k1, b0);
    b1 = _mm512_fmadd_pd(q1, k1, b1);
    c0 = _mm512_fmadd_pd(q0, k2, c0);
    c1 = _mm512_fmadd_pd(q1, k2, c1);
    e0 = _mm512_fmadd_pd(q0, k3, e0);
    e1 = _mm512_fmadd_pd(q1, k3, e1);
  }
  _mm512_storeu_pd(out + h, a0);
  _mm512_storeu_pd(out + h + 8, a1);
  _mm512_storeu_pd(out + nh + h, b0);
  _mm512_storeu_pd(out + nh + h + 8, b1);
  _mm512_storeu_pd(out + 2 * nh + h, c0);
  _mm512_storeu_pd(out + 2 * nh + h + 8, c1);
  _mm512_storeu_pd(out + 3 * nh + h, e0);
  _mm512_storeu_pd(out + 3 * nh + h + 8, e1);
}
}  // namespace

namespace {
// 8 keys x up to 4 heads (one ymm of f64 per key, lanes [h, h + nlane)): 8 independent FMA
// chains, each sequential over j -- the same bits as index_dots. For head counts below 16
// (the tiny models' 4 index heads), where the one-key path runs a single chain per key and
// waits on its latency.
__attribute__((target("avx2,fma"))) void index_dots8x4_avx2(const double* qT,
                                                            const float* const* k, int64_t d,
                                                            int64_t nh, int64_t h, int nlane,
                                                            double* out) {
  const __m256i m = _mm256_setr_epi64x(nlane > 0 ? -1 : 0, nlane > 1 ? -1 : 0,
                                       nlane > 2 ? -1 : 0, nlane > 3 ? -1 : 0);
  __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (int64_t j = 0; j < d; ++j) {
    const __m256d q = _mm256_maskload_pd(qT + j * nh + h, m);
    a0 = _mm256_fmadd_pd(q, _mm256_set1_pd(static_cast<double>(k[0][j])), a0);
    a1 = _mm256_fmadd_pd(q, _mm256_set1_pd(static_cast<double>(k[1][j])), a1);
    a2 = _mm256_fmadd_pd(q, _mm256_set1_pd(static_cast<double>(k[2][j])), a2);
    a3 = _mm256_fmadd_pd(q, _mm256_set1_pd(static_cast<double>(k[3][j])), a3);
    a4 = _mm256_fmadd_pd(q, _mm256_set1_pd(static_cast<double>(k[4][j])), a4);
    a5 = _mm256_fmadd_pd(q, _mm256_set1_pd(static_cast<double>(k[5][j])), a5);
    a6 = _mm256_fmadd_pd(q, _mm256_set1_pd(static_cast<double>(k[6][j])), a6);
    a7 = _mm256_fmadd_pd(q, _mm256_set1_pd(static_cast<double>(k[7][j])), a7);
  }
  _mm256_maskstore_pd(out + h, m, a0);
  _mm256_maskstore_pd(out + nh + h, m, a1);
  _mm256_maskstore_pd(out + 2 * nh + h, m, a2);
  _mm256_maskstore_pd(out + 3 * nh + h, m, a3);
  _mm256_maskstore_pd(out + 4 * nh + h, m, a4);
  _mm256_maskstore_pd(out + 5 * nh + h, m, a5);
  _mm256_maskstore_pd(out + 6 * nh + h, m, a6);
  _mm256_maskstore_pd(out + 7 * nh + h, m, a7);
}
}  // namespace

void index_dots_keys(const double* qT, const float* const* keys, int64_t n_keys, int64_t d,
                     int64_t n_heads, double* out) {
  static const std::vector<float> zeros(1 << 12, 0.0f);
  STRATA_CHECK(d <= static_cast<int64_t>(zeros.size()));
  int64_t r = 0;
  const int64_t h16 = n_heads / 16 * 16;
  if (h16 == 0 && kernels::active_isa() == kernels::Isa::kAvx2) {
    for (; r + 8 <= n_keys; r += 8) {
      const float* k[8];
      for (int i = 0; i < 8; ++i) k[i] = keys[r + i] ? keys[r + i] : zeros.data();
      for (int64_t h = 0; h < n_heads; h += 4)
        index_dots8x4_avx2(qT, k, d, n_heads, h,
                           static_cast<int>(std::min<int64_t>(4, n_heads - h)), out + r * n_heads);
    }
  }
  if (kernels::avx512_active() && h16 > 0) {
    for (; r + 4 <= n_keys; r += 4) {
      const float* k[4];
      for (int i = 0; i < 4; ++i) k[i] = keys[r + i] ? keys[r + i] : zeros.data();
      for (int64_t h = 0; h < h16; h += 16) index_dots4x16_avx512(qT, k, d, n_heads, h, out + r * n_heads);
      if (h16 < n_heads) {  // ragged heads: the one-key path for all heads (same bits)
        std::vector<double> tmp(n_heads);
        for (int i = 0; i < 4; ++i) {
          index_dots(qT, k[i], d, n_heads, tmp.data());
          std::copy(tmp.begin() + h16, tmp.end(), out + (r + i) * n_heads + h16);
        }
      }
    }
  }
  for (; r < n_keys; ++r) index_dots(qT, keys[r] ? keys[r] : zeros.data(), d, n_heads, out + r * n_heads);
}

namespace {
// Rows live[u..u+7] (all non-null) against one block of heads, for the zmm and ymm kernels
// below: 8 independent FMA chains (fewer leave the FMA units idle, each chain waiting on its
// previous FMA's latency), each sequential over i, then emit(row, acc) per row. Named
// accumulators: GCC keeps an array of vectors in memory and stores it on every iteration.
// LOADQ(i): the head block's q values at dim i.
#define STRATA_QK_8ROWS(VEC, ZERO, LOADQ, FMADD, SET1)                                   \
  for (; u + 8 <= nlive; u += 8) {                                                       \
    const float* r[8];                                                                   \
    for (int j = 0; j < 8; ++j) r[j] = rows[live[u + j]];                                \
    VEC a0 = ZERO, a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;        \
    for (int64_t i = 0; i < d; ++i) {                                                    \
      const VEC qv = LOADQ(i);                                                           \
      a0 = FMADD(qv, SET1(r[0][i]), a0);                                                 \
      a1 = FMADD(qv, SET1(r[1][i]), a1);                                                 \
      a2 = FMADD(qv, SET1(r[2][i]), a2);                                                 \
      a3 = FMADD(qv, SET1(r[3][i]), a3);                                                 \
      a4 = FMADD(qv, SET1(r[4][i]), a4);                                                 \
      a5 = FMADD(qv, SET1(r[5][i]), a5);                                                 \
      a6 = FMADD(qv, SET1(r[6][i]), a6);                                                 \
      a7 = FMADD(qv, SET1(r[7][i]), a7);                                                 \
    }                                                                                    \
    emit(live[u], a0);                                                                   \
    emit(live[u + 1], a1);                                                               \
    emit(live[u + 2], a2);                                                               \
    emit(live[u + 3], a3);                                                               \
    emit(live[u + 4], a4);                                                               \
    emit(live[u + 5], a5);                                                               \
    emit(live[u + 6], a6);                                                               \
    emit(live[u + 7], a7);                                                               \
  }

// 16 heads per zmm (masked for a ragged head count), 8 rows at a time (then 4, then 1), over
// the non-null rows live[0..nlive): one FMA chain per (row, head), sequential over i: the
// same bits as qk_heads_avx2 and the scalar loop.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f,avx2,fma"))) void qk_heads_avx512(
    const float* qT, const float* const* rows, int64_t n_rows, int64_t d, int64_t nh,
    float scale, float* out, const int64_t* live, int64_t nlive) {
  alignas(64) float tmp[16];
  for (int64_t hb = 0; hb < nh; hb += 16) {
    const int nlane = static_cast<int>(std::min<int64_t>(16, nh - hb));
    const __mmask16 m = static_cast<__mmask16>((1u << nlane) - 1u);
    const float* qb = qT + hb;
    auto emit = [&](int64_t row, __m512 acc) __attribute__((always_inline, target("avx512f"))) {
      _mm512_store_ps(tmp, _mm512_mul_ps(acc, _mm512_set1_ps(scale)));
      for (int l = 0; l < nlane; ++l) out[(hb + l) * n_rows + row] = tmp[l];
    };
    int64_t u = 0;
#define STRATA_QZ(i) _mm512_maskz_loadu_ps(m, qb + (i) * nh)
    STRATA_QK_8ROWS(__m512, _mm512_setzero_ps(), STRATA_QZ, _mm512_fmadd_ps, _mm512_set1_ps)
#undef STRATA_QZ
    for (; u + 4 <= nlive; u += 4) {
      const float* r0 = rows[live[u]];
      const float* r1 = rows[live[u + 1]];
      const float* r2 = rows[live[u + 2]];
      const float* r3 = rows[live[u + 3]];
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t i = 0; i < d; ++i) {
        const __m512 qv = _mm512_maskz_loadu_ps(m, qb + i * nh);
        a0 = _mm512_fmadd_ps(qv, _mm512_set1_ps(r0[i]), a0);
        a1 = _mm512_fmadd_ps(qv, _mm512_set1_ps(r1[i]), a1);
        a2 = _mm512_fmadd_ps(qv, _mm512_set1_ps(r2[i]), a2);
        a3 = _mm512_fmadd_ps(qv, _mm512_set1_ps(r3[i]), a3);
      }
      emit(live[u], a0);
      emit(live[u + 1], a1);
      emit(live[u + 2], a2);
      emit(live[u + 3], a3);
    }
    for (; u < nlive; ++u) {
      const float* r0 = rows[live[u]];
      __m512 a0 = _mm512_setzero_ps();
      for (int64_t i = 0; i < d; ++i)
        a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, qb + i * nh), _mm512_set1_ps(r0[i]), a0);
      emit(live[u], a0);
    }
  }
}
#pragma GCC diagnostic pop

// 8 rows at a time, then single rows, over the non-null rows live[0..nlive); 8 heads per
// ymm. Also the AVX-512 path's kernel for <= 8 heads (a thread's share of the heads in
// pooled decode attention): a masked zmm would leave half its lanes idle, while two ymm FMAs
// per cycle keep the FMA units full.
__attribute__((target("avx2,fma"))) void qk_heads_avx2(const float* qT, const float* const* rows,
                                                        int64_t n_rows, int64_t d, int64_t nh,
                                                        float scale, float* out,
                                                        const int64_t* live, int64_t nlive) {
  alignas(32) float tmp[8];
  for (int64_t hb = 0; hb < nh; hb += 8) {
    std::vector<float> qpad;
    const float* qb = qT + hb;
    int64_t ld = nh;
    if (hb + 8 > nh) {  // ragged last head block: a zero-padded copy
      qpad.assign(d * 8, 0.0f);
      for (int64_t i = 0; i < d; ++i)
        for (int64_t h = hb; h < nh; ++h) qpad[i * 8 + (h - hb)] = qT[i * nh + h];
      qb = qpad.data();
      ld = 8;
    }
    auto emit = [&](int64_t row, __m256 acc) __attribute__((always_inline, target("avx2,fma"))) {
      _mm256_store_ps(tmp, _mm256_mul_ps(acc, _mm256_set1_ps(scale)));
      for (int64_t h = hb; h < std::min(nh, hb + 8); ++h) out[h * n_rows + row] = tmp[h - hb];
    };
    int64_t u = 0;
#define STRATA_QY(i) _mm256_loadu_ps(qb + (i) * ld)
    STRATA_QK_8ROWS(__m256, _mm256_setzero_ps(), STRATA_QY, _mm256_fmadd_ps, _mm256_set1_ps)
#undef STRATA_QY
    for (; u < nlive; ++u) {
      const float* r0 = rows[live[u]];
      __m256 a0 = _mm256_setzero_ps();
      for (int64_t i = 0; i < d; ++i) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qb + i * ld), _mm256_set1_ps(r0[i]), a0);
      emit(live[u], a0);
    }
  }
}
#undef STRATA_QK_8ROWS
}  // namespace

void qk_scores_heads(const float* qT, const float* const* rows, int64_t n_rows, int64_t d,
                     int64_t n_heads, float scale, float* out, int64_t t0, int64_t t1) {
  STRATA_CHECK(d <= (1 << 12));
  const bool v512 = kernels::avx512_active();
  if (v512 || kernels::active_isa() == kernels::Isa::kAvx2) {
    // Null rows (the reference's -1 entries: window slots before position 0, top-k padding)
    // score -inf without any work; the vector kernels run over the others.
    thread_local Scratch<int64_t> s_live;
    int64_t* const live = s_live.get(static_cast<size_t>(std::max<int64_t>(0, t1 - t0)));
    int64_t nlive = 0;
    const float kNegInf = -std::numeric_limits<float>::infinity();
    for (int64_t t = t0; t < t1; ++t) {
      if (rows[t]) {
        live[nlive++] = t;
      } else {
        for (int64_t h = 0; h < n_heads; ++h) out[h * n_rows + t] = kNegInf;
      }
    }
    if (v512 && n_heads > 8) {
      qk_heads_avx512(qT, rows, n_rows, d, n_heads, scale, out, live, nlive);
    } else {
      qk_heads_avx2(qT, rows, n_rows, d, n_heads, scale, out, live, nlive);
    }
    return;
  }
  const float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t h = 0; h < n_heads; ++h) {
      if (!rows[t]) {
        out[h * n_rows + t] = kNegInf;
        continue;
      }
      float acc = 0.0f;
      for (int64_t i = 0; i < d; ++i) acc = std::fma(qT[i * n_heads + h], rows[t][i], acc);
      out[h * n_rows + t] = acc * scale;
    }
}

void sparse_attn_head(const float* q, const float* const* rows, int64_t n_rows, int64_t d,
                      float sink, float scale, float* out, int64_t qh, int64_t SH,
                      const float* scores) {
  // kernel_cpu.py sparse_attn: per block of 64 list entries, fp32 scores (einsum -> BLAS,
  // sequential FMA over d), running max, exp via torch.exp (SLEEF), fp32 denominator summed
  // with torch's reduction order over the block (zeros of invalid entries included), bf16
  // probabilities in the PV einsum (sequential FMA over the block's entries).
  constexpr int64_t kBlock = 64;
  const float kNegInf = -std::numeric_limits<float>::infinity();
  float m = -1e30f;
  float sum_exp = 0.0f;
  std::vector<float> acc(d);
  std::vector<float> acc_o(d, 0.0f);
  float sc[kBlock], p[kBlock], pb[kBlock];
  for (int64_t t0 = 0; t0 < n_rows; t0 += kBlock) {
    const int64_t nb = std::min(kBlock, n_rows - t0);
    if (scores) {
      std::copy_n(scores + t0, nb, sc);
    } else {
      qk_scores(q, rows + t0, nb, d, scale, sc);
    }
    float bmax = kNegInf;
    for (int64_t t = 0; t < nb; ++t)
      if (rows[t0 + t]) bmax = std::max(bmax, sc[t]);
    const float m_new = std::max(m, bmax);
    const float rescale = torch_exp_at(m - m_new, qh, SH);
    for (int64_t t = 0; t < nb; ++t)
      p[t] = std::isinf(sc[t]) ? 0.0f : torch_exp_at(sc[t] - m_new, qh * nb + t, SH * nb);
    sum_exp = sum_exp * rescale + torch_sum(p, nb);
    for (int64_t t = 0; t < nb; ++t) pb[t] = round_to_bf16(p[t]);
    std::fill(acc.begin(), acc.end(), 0.0f);
    pv_accumulate(rows + t0, pb, nb, d, acc.data());
    for (int64_t i = 0; i < d; ++i) acc_o[i] = acc_o[i] * rescale + acc[i];
    m = m_new;
  }
  sum_exp = sum_exp + torch_exp_at(sink - m, qh, SH);
  for (int64_t i = 0; i < d; ++i) out[i] = round_to_bf16(acc_o[i] / sum_exp);
}

namespace {
// acc_h[i] = sequential fma over t of pb[h][t] * rows[t][i] from 0, for 8 heads (pb rows of
// stride 64) and lanes [i0, i0+16): one row load per t feeds the 8 heads. Same order per
// (head, lane) as pv_accumulate (null rows skipped: fma(0, 0, a) == a).
__attribute__((target("avx512f,avx2,fma"))) void pv8_heads_avx512(
    const float* const* rows, const float* pb, int64_t nb, int64_t i0, float* acc, int64_t d) {
  const __m512 z = _mm512_setzero_ps();
  __m512 a0 = z, a1 = z, a2 = z, a3 = z, a4 = z, a5 = z, a6 = z, a7 = z;
  for (int64_t t = 0; t < nb; ++t) {
    const float* kv = rows[t];
    if (!kv) continue;
    const __m512 r = _mm512_loadu_ps(kv + i0);
    const float* p = pb + t;
    a0 = _mm512_fmadd_ps(_mm512_set1_ps(p[0 * 64]), r, a0);
    a1 = _mm512_fmadd_ps(_mm512_set1_ps(p[1 * 64]), r, a1);
    a2 = _mm512_fmadd_ps(_mm512_set1_ps(p[2 * 64]), r, a2);
    a3 = _mm512_fmadd_ps(_mm512_set1_ps(p[3 * 64]), r, a3);
    a4 = _mm512_fmadd_ps(_mm512_set1_ps(p[4 * 64]), r, a4);
    a5 = _mm512_fmadd_ps(_mm512_set1_ps(p[5 * 64]), r, a5);
    a6 = _mm512_fmadd_ps(_mm512_set1_ps(p[6 * 64]), r, a6);
    a7 = _mm512_fmadd_ps(_mm512_set1_ps(p[7 * 64]), r, a7);
  }
  _mm512_storeu_ps(acc + 0 * d + i0, a0);
  _mm512_storeu_ps(acc + 1 * d + i0, a1);
  _mm512_storeu_ps(acc + 2 * d + i0, a2);
  _mm512_storeu_ps(acc + 3 * d + i0, a3);
  _mm512_storeu_ps(acc + 4 * d + i0, a4);
  _mm512_storeu_ps(acc + 5 * d + i0, a5);
  _mm512_storeu_ps(acc + 6 * d + i0, a6);
  _mm512_storeu_ps(acc + 7 * d + i0, a7);
}

// acc_o[h][i] = acc_o[h][i] * rescale[h] + acc[h][i] (one rounding each, as the scalar loop),
// d % 16 == 0.
__attribute__((target("avx512f"))) void rescale_add_heads(float* acc_o, const float* acc,
                                                          const float* rescale, int64_t n_heads,
                                                          int64_t d) {
  for (int64_t h = 0; h < n_heads; ++h) {
    const __m512 r = _mm512_set1_ps(rescale[h]);
    for (int64_t i = h * d; i < (h + 1) * d; i += 16)
      _mm512_storeu_ps(acc_o + i, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(acc_o + i), r),
                                                _mm512_loadu_ps(acc + i)));
  }
}

// out[i] = round_to_bf16(acc_o[i] / se) for i in [0, d), d % 16 == 0.
__attribute__((target("avx512f"))) void normalize_bf16(const float* acc_o, float se, int64_t d,
                                                       float* out) {
  const __m512 s = _mm512_set1_ps(se);
  for (int64_t i = 0; i < d; i += 16)
    _mm512_storeu_ps(out + i, bf16_round16(_mm512_div_ps(_mm512_loadu_ps(acc_o + i), s)));
}
}  // namespace

void sparse_attn_heads(const float* const* rows, int64_t n_rows, int64_t d, int64_t n_heads,
                       const float* sinks, const float* scores, float* out, int64_t qh0,
                       int64_t SH) {
  // Per head exactly sparse_attn_head's steps (see there), block by block; only the PV
  // products are computed for 8 heads at once.
  constexpr int64_t kBlock = 64;
  const float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t H = n_heads;
  // Thread-local scratch: acc, pb and p are written whole for each block before they are
  // read; rescale for every head before use.
  thread_local Scratch<float> s_m, s_sum, s_rescale, s_acc, s_acc_o, s_pb, s_p;
  float* const m = s_m.get(H);
  std::fill_n(m, H, -1e30f);
  float* const sum_exp = s_sum.get_zeroed(H);
  float* const rescale = s_rescale.get(H);
  float* const acc = s_acc.get(H * d);
  float* const acc_o = s_acc_o.get_zeroed(H * d);
  float* const pb = s_pb.get(H * kBlock);
  float* const p = s_p.get(kBlock);
  const bool vec = kernels::avx512_active() && d % 16 == 0;
  const bool exp16 = kernels::avx512_active();
  for (int64_t t0 = 0; t0 < n_rows; t0 += kBlock) {
    const int64_t nb = std::min(kBlock, n_rows - t0);
    for (int64_t h = 0; h < H; ++h) {
      const float* sc = scores + h * n_rows + t0;
      const int64_t qh = qh0 + h;
      float bmax = kNegInf;  // std::max(bmax, sc[t]), kept in a register
      for (int64_t t = 0; t < nb; ++t)
        if (rows[t0 + t] && bmax < sc[t]) bmax = sc[t];
      const float m_new = std::max(m[h], bmax);
      rescale[h] = torch_exp_at(m[h] - m_new, qh, SH);
      int64_t t = 0;
      if (exp16)  // 16 elements at once where none is in torch's scalar tail (same bits)
        for (; t + 16 <= nb && !torch_scalar_tail(qh * nb + t + 15, SH * nb); t += 16)
          softmax_exp16(sc + t, m_new, p + t, &pb[h * kBlock + t]);
      for (; t < nb; ++t) {
        p[t] = std::isinf(sc[t]) ? 0.0f : torch_exp_at(sc[t] - m_new, qh * nb + t, SH * nb);
        pb[h * kBlock + t] = round_to_bf16(p[t]);
      }
      sum_exp[h] = sum_exp[h] * rescale[h] + torch_sum(p, nb);
      m[h] = m_new;
    }
    int64_t h = 0;
    if (vec)
      for (; h + 8 <= H; h += 8)
        for (int64_t i = 0; i < d; i += 16)
          pv8_heads_avx512(rows + t0, &pb[h * kBlock], nb, i, &acc[h * d], d);
    for (; h < H; ++h) {
      std::fill_n(&acc[h * d], d, 0.0f);
      pv_accumulate(rows + t0, &pb[h * kBlock], nb, d, &acc[h * d]);
    }
    if (vec) {
      rescale_add_heads(acc_o, acc, rescale, H, d);
    } else {
      for (int64_t hh = 0; hh < H; ++hh)
        for (int64_t i = 0; i < d; ++i)
          acc_o[hh * d + i] = acc_o[hh * d + i] * rescale[hh] + acc[hh * d + i];
    }
  }
  for (int64_t h = 0; h < H; ++h) {
    const float se = sum_exp[h] + torch_exp_at(sinks[h] - m[h], qh0 + h, SH);
    if (vec) {
      normalize_bf16(&acc_o[h * d], se, d, &out[h * d]);
    } else {
      for (int64_t i = 0; i < d; ++i) out[h * d + i] = round_to_bf16(acc_o[h * d + i] / se);
    }
  }
}

// expf as SLEEF's xexpf (u10) computes it with FMA: the vectorized exp behind torch.exp /
// torch.sigmoid on AVX2 CPUs (ATen Vectorized<float>::exp -> Sleef_expf8_u10).
STRATA_FMA_CLONES float sleef_expf(float d) {
  if (std::isnan(d)) return d;
  if (d < -104.0f) return 0.0f;  // SLEEF's underflow cut (also keeps the int cast defined)
  if (d > 104.0f) return std::numeric_limits<float>::infinity();
  const int32_t q = static_cast<int32_t>(std::nearbyint(d * kExpRLn2));
  const float fq = static_cast<float>(q);
  float s = std::fma(fq, -kExpL2U, d);
  s = std::fma(fq, -kExpL2L, s);
  float u = kExpPoly[0];
  for (int i = 1; i < 6; ++i) u = std::fma(u, s, kExpPoly[i]);
  u = 1.0f + std::fma(s * s, u, s);
  auto pow2i = [](int32_t e) { return std::bit_cast<float>(static_cast<uint32_t>(e + 0x7f) << 23); };
  u = u * pow2i(q >> 1) * pow2i(q - (q >> 1));
  return u;
}

namespace {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) int64_t swiglu_bf16_avx512(const float* g, const float* u,
                                                              int64_t n, float lim, bool clamp,
                                                              const float* route_w, float* h) {
  const __m512 L = _mm512_set1_ps(lim), NL = _mm512_set1_ps(-lim);
  const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    __m512 gv = _mm512_loadu_ps(g + k), uv = _mm512_loadu_ps(u + k);
    if (clamp) {  // std::clamp / std::min: a NaN compares false and stays
      uv = _mm512_mask_mov_ps(uv, _mm512_cmp_ps_mask(uv, NL, _CMP_LT_OQ), NL);
      uv = _mm512_mask_mov_ps(uv, _mm512_cmp_ps_mask(L, uv, _CMP_LT_OQ), L);
      gv = _mm512_mask_mov_ps(gv, _mm512_cmp_ps_mask(L, gv, _CMP_LT_OQ), L);
    }
    const __m512 e = sleef_expf16(_mm512_sub_ps(zero, gv));
    __m512 hv = _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(one, e)), uv);
    if (route_w) hv = _mm512_mul_ps(_mm512_set1_ps(*route_w), hv);
    _mm512_storeu_ps(h + k, bf16_round16(hv));
  }
  return k;
}
#pragma GCC diagnostic pop

// SLEEF double-float helpers (FMA variants) for sleef_powf.
struct F2 {
  float x, y;
};
F2 df_add2_ff(float x, float y) {
  float s = x + y, v = s - x;
  return {s, (x - (s - v)) + (y - v)};
}
F2 df_add2_f2f(F2 x, float y) {
  float s = x.x + y, v = s - x.x;
  return {s, ((x.x - (s - v)) + (y - v)) + x.y};
}
F2 df_add2_f2f2(F2 x, F2 y) {
  float s = x.x + y.x, v = s - x.x;
  float t = (x.x - (s - v)) + (y.x - v);
  return {s, t + (x.y + y.y)};
}
F2 df_add_f2f2(F2 x, F2 y) {
  float s = x.x + y.x;
  return {s, (((x.x - s) + y.x) + x.y) + y.y};
}
F2 df_add_ff2(float x, F2 y) {
  float s = x + y.x;
  return {s, ((x - s) + y.x) + y.y};
}
F2 df_normalize(F2 t) {
  float s = t.x + t.y;
  return {s, (t.x - s) + t.y};
}
F2 df_scale(F2 d, float s) { return {d.x * s, d.y * s}; }
F2 df_mul_f2f(F2 x, float y) {
  float s = x.x * y;
  return {s, std::fma(x.y, y, std::fma(x.x, y, -s))};
}
F2 df_mul_f2f2(F2 x, F2 y) {
  float s = x.x * y.x;
  return {s, std::fma(x.x, y.y, std::fma(x.y, y.x, std::fma(x.x, y.x, -s)))};
}
F2 df_squ(F2 x) {
  float s = x.x * x.x;
  return {s, std::fma(x.x + x.x, x.y, std::fma(x.x, x.x, -s))};
}
F2 df_div(F2 n, F2 d) {
  float t = 1.0f / d.x;
  float s = n.x * t;
  float u = std::fma(t, n.x, -s);
  float v = std::fma(-d.y, t, std::fma(-d.x, t, 1.0f));
  return {s, std::fma(s, v, std::fma(n.y, t, u))};
}
F2 sleef_logkf(float d) {
  const float q = d * (1.0f / 0.75f);
  int ex;
  std::frexp(q, &ex);  // q = m * 2^ex, m in [0.5, 1): ilogb = ex - 1
  const int e = ex - 1;
  const float m = std::ldexp(d, -e);
  F2 x = df_div(df_add2_ff(-1.0f, m), df_add2_ff(1.0f, m));
  F2 x2 = df_squ(x);
  float t = 0.240320354700088500976562f;
  t = std::fma(t, x2.x, 0.285112679004669189453125f);
  t = std::fma(t, x2.x, 0.400007992982864379882812f);
  const F2 c{0.66666662693023681640625f, 3.69183861259614332084311e-09f};
  const F2 ln2{0.69314718246459960938f, -1.904654323148236017e-09f};
  return df_add2_f2f2(df_mul_f2f(ln2, static_cast<float>(e)),
                      df_add2_f2f2(df_scale(x, 2.0f),
                                   df_mul_f2f2(df_mul_f2f2(x2, x), df_add2_f2f2(df_mul_f2f(x2, t), c))));
}
float sleef_expkf(F2 d) {
  if (d.x < -104.0f) return 0.0f;
  const float u0 = (d.x + d.y) * kExpRLn2;
  const int32_t q = static_cast<int32_t>(std::nearbyint(u0));
  const float fq = static_cast<float>(q);
  F2 s = df_add2_f2f(d, fq * -kExpL2U);
  s = df_add2_f2f(s, fq * -kExpL2L);
  s = df_normalize(s);
  float u = 0.00136324646882712841033936f;
  u = std::fma(u, s.x, 0.00836596917361021041870117f);
  u = std::fma(u, s.x, 0.0416710823774337768554688f);
  u = std::fma(u, s.x, 0.166665524244308471679688f);
  u = std::fma(u, s.x, 0.499999850988388061523438f);
  F2 t = df_add_f2f2(s, df_mul_f2f(df_squ(s), u));
  t = df_add_ff2(1.0f, t);
  return std::ldexp(t.x + t.y, q);
}
}  // namespace

float sleef_powf(float x, float y) {
  if (y == 0.0f || x == 1.0f) return 1.0f;
  STRATA_CHECK(x > 0.0f && std::isfinite(x) && std::isfinite(y));
  return sleef_expkf(df_mul_f2f(sleef_logkf(x), y));
}

float torch_exp_at(float x, int64_t e, int64_t n) {
  return torch_scalar_tail(e, n) ? std::exp(x) : sleef_expf(x);
}

float torch_softplus_at(float x, int64_t e, int64_t n) {
  if (x > 20.0f) return x;
  if (torch_scalar_tail(e, n)) return std::log1p(std::exp(x));
  return v4::sleef_log1pf(sleef_expf(x));
}

void hc_split_sinkhorn(const float* mixes, const float* scale, const float* base, int hc,
                       int iters, float eps, float* pre, float* post, float* comb,
                       int64_t tok, int64_t ntok) {
  auto ex = [](float x) { return sleef_expf(x); };
  // Sigmoid over the [ntok, hc] pre / post tensors (scalar tail: libm exp).
  auto sigmoid = [&](float x, int64_t e) {
    return 1.0f / (1.0f + torch_exp_at(0.0f - x, e, ntok * hc));
  };
  for (int c = 0; c < hc; ++c) {
    pre[c] = sigmoid(mixes[c] * scale[0] + base[c], tok * hc + c) + eps;
    post[c] = 2.0f * sigmoid(mixes[hc + c] * scale[1] + base[hc + c], tok * hc + c);
  }
  for (int i = 0; i < hc * hc; ++i) comb[i] = mixes[2 * hc + i] * scale[2] + base[2 * hc + i];
  auto row_norm = [&](bool softmax) {
    for (int i = 0; i < hc; ++i) {
      float* r = comb + i * hc;
      if (softmax) {
        float mx = r[0];
        for (int j = 1; j < hc; ++j) mx = std::max(mx, r[j]);
        for (int j = 0; j < hc; ++j) r[j] = ex(r[j] - mx);
        float s = 0.0f;
        for (int j = 0; j < hc; ++j) s += r[j];
        for (int j = 0; j < hc; ++j) r[j] = r[j] / s + eps;
      } else {
        float s = 0.0f;
        for (int j = 0; j < hc; ++j) s += r[j];
        s += eps;
        for (int j = 0; j < hc; ++j) r[j] = r[j] / s;
      }
    }
  };
  auto col_norm = [&]() {
    for (int j = 0; j < hc; ++j) {
      float s = 0.0f;
      for (int i = 0; i < hc; ++i) s += comb[i * hc + j];
      s += eps;
      for (int i = 0; i < hc; ++i) comb[i * hc + j] = comb[i * hc + j] / s;
    }
  };
  row_norm(true);
  col_norm();
  for (int it = 0; it < iters - 1; ++it) {
    row_norm(false);
    col_norm();
  }
}

void swiglu_bf16(const float* g, const float* u, int64_t n, float lim, bool clamp,
                 const float* route_w, float* h) {
  int64_t k = kernels::avx512_active() ? swiglu_bf16_avx512(g, u, n, lim, clamp, route_w, h) : 0;
  for (; k < n; ++k) {
    float gv = g[k], uv = u[k];
    if (clamp) {
      uv = std::clamp(uv, -lim, lim);
      gv = std::min(gv, lim);
    }
    float hv = (gv / (1.0f + sleef_expf(0.0f - gv))) * uv;
    if (route_w) hv = *route_w * hv;
    h[k] = round_to_bf16(hv);
  }
}

}  // namespace strata::v41
