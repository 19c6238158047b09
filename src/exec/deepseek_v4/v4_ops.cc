// V4 primitives; see v4_ops.h for the contract and sources.
#include "exec/deepseek_v4/v4_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "base/check.h"
#include "base/thread_pool.h"
#include "exec/deepseek_v41/v41_mhc.h"
#include "exec/deepseek_v41/v41_ops.h"
#include "kernels/block_gemm.h"
#include "kernels/seq_gemm.h"
#include "model/dtype.h"

namespace strata::v4 {

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
// V4: FP4 activation scales per 128 along K (model.py block_size), capped at K.
int fp4_act_block(int64_t k) {
  int act_block = 128;
  while (act_block > 32 && k % act_block != 0) act_block /= 2;
  return act_block;
}
}  // namespace

namespace {
kernels::Fp8BlockWeight fp8_view(const V41Linear& w) {
  kernels::Fp8BlockWeight fw;
  fw.codes = w.weight.data;
  fw.scales_e8m0 = w.scale.data;
  fw.n = w.out;
  fw.k = w.in;
  fw.block_n = w.block;
  fw.block_k = w.block;
  return fw;
}
kernels::Fp4Weight fp4_view(const V41Linear& w) {
  kernels::Fp4Weight fw;
  fw.packed = w.weight.data;
  fw.scales_e8m0 = w.scale.data;
  fw.n = w.out;
  fw.k = w.in;
  fw.group = 32;
  return fw;
}
}  // namespace

void linear(const float* x, int64_t M, const V41Linear& w, float* y, ThreadPool* pool) {
  if (w.packed) {
    if (w.kind == V41WeightKind::kFp4) {  // V4's activation block, not V4.1's 32
      kernels::linear_fp4_packed(x, M, w.packed->fp4, fp4_act_block(w.in), y, pool);
    } else {  // FP8 (act block = the weight's block) and BF16/F32: as V4.1
      v41::linear(x, M, w, y, pool);
    }
    return;
  }
  switch (w.kind) {
    case V41WeightKind::kFp8:
      kernels::linear_fp8(x, M, fp8_view(w), y, nullptr);
      return;
    case V41WeightKind::kFp4:
      kernels::linear_fp4(x, M, fp4_view(w), fp4_act_block(w.in), y, nullptr);
      return;
    case V41WeightKind::kBf16:
    case V41WeightKind::kF32:
      v41::linear(x, M, w, y);
      return;
  }
}

int act_block(const V41Linear& w) {
  switch (w.kind) {
    case V41WeightKind::kFp8:
      return w.packed ? static_cast<int>(w.packed->fp8.block_k) : w.block;
    case V41WeightKind::kFp4:
      return fp4_act_block(w.in);
    default:
      return 0;
  }
}

void linear_q(const kernels::QuantActs& a, const V41Linear& w, float* y, ThreadPool* pool) {
  STRATA_CHECK_MSG(a.block == act_block(w) && a.k == w.in,
                   "{}: activations quantized in blocks of {} over {}, the weight takes {} over {}",
                   w.weight.name, a.block, a.k, act_block(w), w.in);
  const kernels::OutRound bf16 = kernels::OutRound::kBf16;
  if (w.kind == V41WeightKind::kFp8) {
    if (w.packed) {
      kernels::fp8_gemm_packed(a, w.packed->fp8, y, bf16, pool);
    } else {
      kernels::fp8_gemm(a, fp8_view(w), y, bf16, nullptr);
    }
    return;
  }
  STRATA_CHECK_MSG(w.kind == V41WeightKind::kFp4, "{}: not an FP8 / FP4 weight", w.weight.name);
  if (w.packed) {
    kernels::fp4_gemm_packed(a, w.packed->fp4, y, bf16, pool);
  } else {
    kernels::fp4_gemm(a, fp4_view(w), y, bf16, nullptr);
  }
}

void linear_f32(const float* x, int64_t M, const TensorView& w, int64_t out, int64_t in, float* y,
                const kernels::PackedSeqWeight* packed, ThreadPool* pool) {
  v41::linear_f32(x, M, w, out, in, y, packed, pool);  // the same order in both models
}

void hadamard(float* x, int64_t rows, int64_t n) {
  STRATA_CHECK_MSG(n > 0 && (n & (n - 1)) == 0, "hadamard: n={} not a power of two", n);
  const float scale = static_cast<float>(std::pow(static_cast<double>(n), -0.5));
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * n;
    for (int64_t h = 1; h < n; h *= 2)
      for (int64_t i = 0; i < n; i += 2 * h)
        for (int64_t j = i; j < i + h; ++j) {
          const float a = v[j], b = v[j + h];
          v[j] = a + b;
          v[j + h] = a - b;
        }
    for (int64_t i = 0; i < n; ++i) v[i] = round_to_bf16(v[i] * scale);
  }
}

void head_rms(float* x, int64_t rows, int64_t n, double eps, int64_t row_base, int64_t total_rows) {
  std::vector<float> sq(n);
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * n;
    for (int64_t i = 0; i < n; ++i) sq[i] = round_to_bf16(v[i] * v[i]);
    float ms = round_to_bf16(v41::torch_sum(sq.data(), n) / static_cast<float>(n));
    float t = round_to_bf16(ms + static_cast<float>(eps));
    // torch's bf16 rsqrt: vectorized 1/sqrt in fp32; the scalar tail (see torch_scalar_tail)
    // computes BFloat16(1) / std::sqrt(BFloat16), i.e. rounds the sqrt to bf16 first.
    float rs = torch_scalar_tail(row_base + r, total_rows, 32) ? round_to_bf16(1.0f / round_to_bf16(std::sqrt(t)))
                                          : round_to_bf16(1.0f / std::sqrt(t));
    for (int64_t i = 0; i < n; ++i) v[i] = round_to_bf16(v[i] * rs);
  }
}

namespace {
// rsqrt(mean(x^2) + eps) of one flattened token (fp32).
float token_rsqrt(const float* x, int64_t n, double eps, std::vector<float>& sq) {
  sq.resize(n);
  for (int64_t k = 0; k < n; ++k) sq[k] = x[k] * x[k];
  const float ms = v41::torch_sum(sq.data(), n) / static_cast<float>(n);
  return 1.0f / std::sqrt(ms + static_cast<float>(eps));
}
}  // namespace

float torch_exp_at(float x, int64_t e, int64_t n) {
  if (std::isinf(x) && x < 0) return 0.0f;
  return torch_scalar_tail(e, n) ? std::exp(x) : v41::sleef_expf(x);
}

namespace {
// Double-float helpers (value pairs hi + lo), FMA forms.
struct F2 {
  float x, y;
};
F2 f2_add_ff(float x, float y) {
  const float s = x + y;
  return {s, (x - s) + y};
}
F2 f2_add_f2f(F2 x, float y) {
  const float s = x.x + y;
  return {s, ((x.x - s) + y) + x.y};
}
F2 f2_add_f2f2(F2 x, F2 y) {
  const float s = x.x + y.x;
  return {s, (((x.x - s) + y.x) + x.y) + y.y};
}
F2 f2_mul_f2f(F2 x, float y) {
  const float s = x.x * y;
  return {s, std::fma(x.y, y, std::fma(x.x, y, -s))};
}
F2 f2_div(F2 n, F2 d) {
  const float t = 1.0f / d.x;
  const float s = n.x * t;
  const float u = std::fma(t, n.x, -s);
  const float v = std::fma(-d.y, t, std::fma(-d.x, t, 1.0f));
  return {s, std::fma(s, v, std::fma(n.y, t, u))};
}
float f32_bits_add_exp(float d, int32_t q) {
  uint32_t u;
  std::memcpy(&u, &d, 4);
  u += static_cast<uint32_t>(q) << 23;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}
}  // namespace

float sleef_log1pf(float d) {
  float dp1 = d + 1.0f;
  const bool o = dp1 < std::numeric_limits<float>::min();
  if (o) dp1 = dp1 * (4294967296.0f * 4294967296.0f);
  const float sc = dp1 * (1.0f / 0.75f);
  uint32_t bits;
  std::memcpy(&bits, &sc, 4);
  int32_t e = static_cast<int32_t>((bits >> 23) & 0xff) - 0x7f;
  const float t0 = f32_bits_add_exp(1.0f, -e);
  const float m = std::fma(d, t0, t0 - 1.0f);
  if (o) e -= 64;
  F2 s = f2_mul_f2f(F2{0.69314718246459960938f, -1.904654323148236017e-09f}, static_cast<float>(e));
  const F2 x = f2_div(F2{m, 0.0f}, f2_add_ff(2.0f, m));
  const float x2 = x.x * x.x;
  float t = 0.3027294874e+0f;
  t = std::fma(t, x2, 0.3996108174e+0f);
  t = std::fma(t, x2, 0.6666694880e+0f);
  s = f2_add_f2f2(s, F2{x.x * 2.0f, x.y * 2.0f});
  s = f2_add_f2f(s, (x2 * x.x) * t);
  float r = s.x + s.y;
  if (!(d <= 1.0e38f)) r = std::log1p(d);  // outside the core range (not reached by softplus)
  if (d < -1.0f) r = std::numeric_limits<float>::quiet_NaN();
  if (d == -1.0f) r = -std::numeric_limits<float>::infinity();
  if (d == 0.0f && std::signbit(d)) r = -0.0f;
  return r;
}

float torch_softplus_at(float x, int64_t e, int64_t n) {
  if (x > 20.0f) return x;
  if (torch_scalar_tail(e, n)) return std::log1p(std::exp(x));
  return sleef_log1pf(v41::sleef_expf(x));
}

void hc_split_sinkhorn(const float* mixes, const float* scale, const float* base, int hc, int iters,
                       float eps, int64_t i, int64_t S, float* pre, float* post, float* comb) {
  const int64_t n1 = S * hc, n2 = S * hc * hc;
  auto sigmoid = [&](float x, int64_t e) { return 1.0f / (1.0f + torch_exp_at(0.0f - x, e, n1)); };
  for (int c = 0; c < hc; ++c) {
    pre[c] = sigmoid(mixes[c] * scale[0] + base[c], i * hc + c) + eps;
    post[c] = 2.0f * sigmoid(mixes[hc + c] * scale[1] + base[hc + c], i * hc + c);
  }
  for (int k = 0; k < hc * hc; ++k) comb[k] = mixes[2 * hc + k] * scale[2] + base[2 * hc + k];
  for (int r = 0; r < hc; ++r) {
    float* row = comb + r * hc;
    float mx = row[0];
    for (int j = 1; j < hc; ++j) mx = std::max(mx, row[j]);
    for (int j = 0; j < hc; ++j) row[j] = torch_exp_at(row[j] - mx, (i * hc + r) * hc + j, n2);
    float sm = 0.0f;
    for (int j = 0; j < hc; ++j) sm += row[j];
    for (int j = 0; j < hc; ++j) row[j] = row[j] / sm + eps;
  }
  auto col_norm = [&]() {
    for (int j = 0; j < hc; ++j) {
      float sm = 0.0f;
      for (int r = 0; r < hc; ++r) sm += comb[r * hc + j];
      sm += eps;
      for (int r = 0; r < hc; ++r) comb[r * hc + j] = comb[r * hc + j] / sm;
    }
  };
  col_norm();
  for (int it = 0; it < iters - 1; ++it) {
    for (int r = 0; r < hc; ++r) {
      float sm = 0.0f;
      for (int j = 0; j < hc; ++j) sm += comb[r * hc + j];
      sm += eps;
      for (int j = 0; j < hc; ++j) comb[r * hc + j] = comb[r * hc + j] / sm;
    }
    col_norm();
  }
}

void sparse_attn_head(const float* q, const float* const* rows, int64_t n_rows, int64_t d,
                      float sink, float scale, int64_t qh, int64_t SH, float* out) {
  constexpr int64_t kBlock = 64;
  const float kNegInf = -std::numeric_limits<float>::infinity();
  float m = kNegInf, sum_exp = 0.0f;
  std::vector<float> acc(d), acc_o(d, 0.0f);
  float sc[kBlock], p[kBlock];
  for (int64_t t0 = 0; t0 < n_rows; t0 += kBlock) {
    const int64_t nb = std::min(kBlock, n_rows - t0);
    float bmax = kNegInf;
    for (int64_t t = 0; t < nb; ++t) {
      const float* kv = rows[t0 + t];
      if (!kv) {
        sc[t] = kNegInf;
        continue;
      }
      float dot = 0.0f;
      for (int64_t k = 0; k < d; ++k) dot = std::fma(q[k], kv[k], dot);
      sc[t] = dot * scale;
      bmax = std::max(bmax, sc[t]);
    }
    const float m_new = std::max(m, bmax);
    const float rescale = torch_exp_at(m - m_new, qh, SH);
    for (int64_t t = 0; t < nb; ++t) p[t] = torch_exp_at(sc[t] - m_new, qh * nb + t, SH * nb);
    sum_exp = sum_exp * rescale + v41::torch_sum(p, nb);
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t t = 0; t < nb; ++t) {
      const float* kv = rows[t0 + t];
      if (!kv) continue;
      const float pb = round_to_bf16(p[t]);
      for (int64_t k = 0; k < d; ++k) acc[k] = std::fma(pb, kv[k], acc[k]);
    }
    for (int64_t k = 0; k < d; ++k) acc_o[k] = acc_o[k] * rescale + acc[k];
    m = m_new;
  }
  sum_exp = sum_exp + torch_exp_at(sink - m, qh, SH);
  for (int64_t k = 0; k < d; ++k) out[k] = round_to_bf16(acc_o[k] / sum_exp);
}

void sparse_attn_heads(const float* q, const float* const* rows, int64_t n_rows, int64_t d,
                       int64_t n_heads, const float* sinks, float scale, int64_t qh0, int64_t SH,
                       float* out) {
  const int64_t H = n_heads;
  thread_local std::vector<float> qT, scores;
  qT.resize(d * H);
  for (int64_t j = 0; j < d; ++j)
    for (int64_t h = 0; h < H; ++h) qT[j * H + h] = q[h * d + j];
  scores.resize(H * n_rows);
  v41::qk_scores_heads(qT.data(), rows, n_rows, d, H, scale, scores.data(), 0, n_rows);
  // The shared kernel's steps are this one's when the running max is finite after the first
  // block and no score is +inf (see the header).
  bool same = n_rows > 0;
  const int64_t nb0 = std::min<int64_t>(64, n_rows);
  for (int64_t h = 0; h < H && same; ++h) {
    const float* sc = &scores[h * n_rows];
    bool first_ok = false;
    for (int64_t t = 0; t < nb0; ++t) first_ok |= rows[t] != nullptr && sc[t] > -1e30f;
    for (int64_t t = 0; t < n_rows && first_ok; ++t) first_ok = !(sc[t] == kInf);
    same = first_ok;
  }
  if (same) {
    v41::sparse_attn_heads(rows, n_rows, d, H, sinks, scores.data(), out, qh0, SH);
    return;
  }
  for (int64_t h = 0; h < H; ++h)
    sparse_attn_head(&q[h * d], rows, n_rows, d, sinks[h], scale, qh0 + h, SH, &out[h * d]);
}

void hc_mixes(const float* h, int64_t S, int hc, int64_t D, const V41MhcWeights& w, int iters,
              double norm_eps, double hc_eps, v41::CallRows vrows, float* pre, float* post,
              float* comb, ThreadPool* pool) {
  const int64_t nmix = (2 + hc) * hc, hcD = hc * D;
  std::vector<float> raw(S * nmix);
  linear_f32(h, S, w.fn, nmix, hcD, raw.data(), w.fn_packed.get(), pool);
  parallel_rows(pool, S, 4, [&](int64_t i0, int64_t i1) {
    std::vector<float> sq;
    for (int64_t i = i0; i < i1; ++i) {
      const float rs = token_rsqrt(h + i * hcD, hcD, norm_eps, sq);
      float* mix = &raw[i * nmix];
      for (int64_t k = 0; k < nmix; ++k) mix[k] = mix[k] * rs;
      hc_split_sinkhorn(mix, w.scale.f32(), w.base.f32(), hc, iters, static_cast<float>(hc_eps),
                        vrows.tok(i), vrows.n, pre + i * hc, post + i * hc, comb + i * hc * hc);
    }
  });
}

void hc_pre(const float* h, const float* pre, int64_t S, int hc, int64_t D, float* y,
            ThreadPool* pool) {
  v41::hc_pre(h, pre, S, hc, D, y, pool, v41::SumStart::kFirstTerm);
}

void hc_post(const float* f, const float* post, const float* comb, int64_t S, int hc, int64_t D,
             float* h, ThreadPool* pool) {
  v41::hc_post(f, post, comb, S, hc, D, h, pool, v41::SumStart::kFirstTerm);
}

void hc_head(const float* h, int64_t S, int hc, int64_t D, const float* fn, const float* base,
             const float* scale, double norm_eps, double hc_eps, v41::CallRows vrows,
             float* y, ThreadPool* pool) {
  const int64_t hcD = hc * D;
  parallel_rows(pool, S, 4, [&](int64_t i0, int64_t i1) {
    std::vector<float> mix(hc), pre(hc), sq;
    for (int64_t i = i0; i < i1; ++i) {
      const float* x = h + i * hcD;
      const float rs = token_rsqrt(x, hcD, norm_eps, sq);
      for (int c = 0; c < hc; ++c) {
        float acc = 0.0f;
        const float* wr = fn + c * hcD;
        for (int64_t k = 0; k < hcD; ++k) acc = std::fma(x[k], wr[k], acc);
        mix[c] = acc * rs;
        const float z = mix[c] * scale[0] + base[c];
        pre[c] = 1.0f / (1.0f + torch_exp_at(0.0f - z, vrows.tok(i) * hc + c, vrows.n * hc)) +
                 static_cast<float>(hc_eps);
      }
      hc_pre(x, pre.data(), 1, hc, D, y + i * D);
    }
  });
}

}  // namespace strata::v4
