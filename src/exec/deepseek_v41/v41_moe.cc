// DeepseekV41Model::moe / expert: the V4.1 MoE (reference: model.py Gate / Expert / MoE;
// spec §2.8): noaux_tc routing (score function, bias for the choice only, normalised top-k,
// route scale), routed experts on the tokens that picked them, the shared expert on all
// tokens, output bf16(Σ routed + shared).
//
// Execution: when every weight involved is packed for the kernels (the normal case), the
// whole MoE of a call is two GEMM dispatches, not two per expert: the w1|w3 GEMMs of every
// picked expert and of the shared expert together (kernels::gemm_packed_batch), then SwiGLU
// per expert, then all their w2 GEMMs together. Each GEMM row is computed exactly as a
// single GEMM computes it, the activations are quantized per row exactly as
// linear_fp8_packed / linear_fp4_packed quantize them (act_quant is row-wise, so quantizing x
// once and gathering rows gives the same values), and the experts' outputs are summed in the
// same order: bit-identical to running expert() once per expert.
#include <algorithm>
#include <cmath>
#include <vector>

#include "base/check.h"
#include "base/phase_profile.h"
#include "base/scratch.h"
#include "base/thread_pool.h"
#include "exec/deepseek_v41/deepseek_v41_model.h"
#include "exec/deepseek_v41/v41_forward_ctx.h"
#include "exec/ep_moe.h"
#include "kernels/act_quant.h"
#include "kernels/block_gemm.h"

namespace strata {

namespace {

// Row-wise FP8 activation quantization (ue8m0 scales) of x [M, K] in blocks of `block`.
struct QuantRows {
  int block = 0;
  int64_t k = 0;
  std::vector<float> q, s;
  void make(const float* x, int64_t m, int64_t kk, int blk) {
    block = blk;
    k = kk;
    q.resize(static_cast<size_t>(m * kk));
    s.resize(static_cast<size_t>(m * (kk / blk)));
    kernels::act_quant_fp8(x, m, kk, blk, kernels::ScaleFmt::kUe8m0, nullptr, q.data(), s.data());
  }
};

}  // namespace

int DeepseekV41Model::expert_act_block(const V41ExpertWeights& w) {
  kernels::PackedGemmJob job;
  int block = 0;
  return v41::packed_gemm_job(w.w13_packed.get(), w.w1.kind, &job, &block) ? block : 0;
}

void DeepseekV41Model::expert(const V41ExpertWeights& w, const float* x, int64_t M,
                              const float* route_w, float* out) const {
  if (const int block = expert_act_block(w)) {  // w1 and w3 stacked: one GEMM
    QuantRows q;
    q.make(x, M, w.w1.in, block);  // what linear_fp8_packed / linear_fp4_packed do first
    expert_q(w, kernels::QuantActs{q.q.data(), q.s.data(), M, w.w1.in, block}, route_w, out);
    return;
  }
  const int64_t I = w.w1.out;
  std::vector<float> g(M * I), u(M * I);
  v41::linear(x, M, w.w1, g.data(), pool_.get());
  v41::linear(x, M, w.w3, u.data(), pool_.get());
  expert_tail(w, g, u, M, route_w, out);
}

void DeepseekV41Model::expert_q(const V41ExpertWeights& w, const kernels::QuantActs& a,
                                const float* route_w, float* out) const {
  const int block = expert_act_block(w);
  STRATA_CHECK_MSG(block > 0 && a.block == block && a.k == w.w1.in,
                   "expert parallelism needs experts packed as FP8 (32-blocks) or FP4, quantized "
                   "in blocks of {} (got {})", block, a.block);
  const int64_t M = a.m, I = w.w1.out;
  // Rows [0, I) of the stacked output are w1's, [I, 2I) w3's (independent rows).
  std::vector<float> y(M * 2 * I), g(M * I), u(M * I);
  if (w.w1.kind == V41WeightKind::kFp4) {
    kernels::fp4_gemm_packed(a, w.w13_packed->fp4, y.data(), kernels::OutRound::kBf16, pool_.get());
  } else {
    kernels::fp8_gemm_packed(a, w.w13_packed->fp8, y.data(), kernels::OutRound::kBf16, pool_.get());
  }
  for (int64_t r = 0; r < M; ++r) {
    std::copy_n(&y[r * 2 * I], I, &g[r * I]);
    std::copy_n(&y[r * 2 * I + I], I, &u[r * I]);
  }
  expert_tail(w, g, u, M, route_w, out);
}

void DeepseekV41Model::expert_tail(const V41ExpertWeights& w, std::vector<float>& g,
                                   const std::vector<float>& u, int64_t M, const float* route_w,
                                   float* out) const {
  const int64_t I = w.w1.out;
  const float lim = static_cast<float>(config_.swiglu_limit);
  const bool clamp = lim > 0 && (route_w != nullptr || config_.shared_expert_clamped);
  for (int64_t r = 0; r < M; ++r)
    v41::swiglu_bf16(&g[r * I], &u[r * I], I, lim, clamp, route_w ? &route_w[r] : nullptr,
                     &g[r * I]);
  v41::linear(g.data(), M, w.w2, out, pool_.get());
}

bool DeepseekV41Model::experts_batched(const std::vector<ExpertCall>& calls, const float* x,
                                       int64_t S) const {
  const int64_t D = config_.dim;
  const float lim = static_cast<float>(config_.swiglu_limit);
  const size_t n = calls.size();
  std::vector<kernels::PackedGemmJob> up(n), down(n);
  std::vector<int> up_block(n), down_block(n);
  for (size_t i = 0; i < n; ++i) {
    const V41ExpertWeights& w = *calls[i].w;
    if (!v41::packed_gemm_job(w.w13_packed.get(), w.w1.kind, &up[i], &up_block[i]) ||
        !v41::packed_gemm_job(w.w2.packed.get(), w.w2.kind, &down[i], &down_block[i]) ||
        w.w1.in != D || w.w2.out != D)
      return false;
  }
  // x quantized once per activation block size in use; each call gathers its token rows.
  std::vector<QuantRows> xq;
  auto quantized_x = [&](int block) -> const QuantRows& {
    for (const QuantRows& q : xq)
      if (q.block == block) return q;
    xq.emplace_back().make(x, S, D, block);
    return xq.back();
  };
  std::vector<QuantRows> in(n), hq(n);
  // Each call's up-projection output [m, 2I] and SwiGLU output [m, I], at offsets in two
  // thread-local scratch buffers (written whole by the GEMM / the pieces before they are read).
  std::vector<int64_t> y13_off(n + 1, 0), h_off(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    const int64_t m = static_cast<int64_t>(calls[i].toks.size()), I = calls[i].w->w1.out;
    y13_off[i + 1] = y13_off[i] + m * 2 * I;
    h_off[i + 1] = h_off[i] + m * I;
  }
  thread_local Scratch<float> s_y13, s_h;
  float* const y13 = s_y13.get(static_cast<size_t>(y13_off[n]));
  float* const h = s_h.get(static_cast<size_t>(h_off[n]));
  for (size_t i = 0; i < n; ++i) {
    const ExpertCall& c = calls[i];
    const int64_t m = static_cast<int64_t>(c.toks.size());
    const QuantRows& q = quantized_x(up_block[i]);
    const int64_t nkb = D / q.block;
    up[i].y = y13 + y13_off[i];
    bool all_rows = m == S;  // every token, in order (the shared expert; any expert in decode)
    for (int64_t r = 0; r < m && all_rows; ++r) all_rows = c.toks[r] == r;
    if (all_rows) {  // x's rows as they are: the batch prepares them once for all such calls
      up[i].a = kernels::QuantActs{q.q.data(), q.s.data(), m, D, q.block};
      continue;
    }
    in[i].q.resize(static_cast<size_t>(m * D));
    in[i].s.resize(static_cast<size_t>(m * nkb));
    for (int64_t r = 0; r < m; ++r) {
      std::copy_n(&q.q[c.toks[r] * D], D, &in[i].q[r * D]);
      std::copy_n(&q.s[c.toks[r] * nkb], nkb, &in[i].s[r * nkb]);
    }
    up[i].a = kernels::QuantActs{in[i].q.data(), in[i].s.data(), m, D, q.block};
  }
  kernels::gemm_packed_batch(up.data(), static_cast<int64_t>(n), pool_.get());
  // SwiGLU and the FP8 quantization of its output for every call, as one dispatch over
  // pieces of (call, row, column chunk): both act elementwise / per activation block, so any
  // cut into whole blocks gives the bits of the whole-row loops.
  struct Piece {
    int64_t call, row, c0, c1;
  };
  std::vector<Piece> pieces;
  for (size_t i = 0; i < n; ++i) {
    const int64_t m = static_cast<int64_t>(calls[i].toks.size()), I = calls[i].w->w1.out;
    // 256 columns, or one activation block where blocks are wider (I % block == 0: the w2
    // GEMM's shape rule).
    const int64_t blk = down_block[i], chunk = std::max<int64_t>(blk, 256 / blk * blk);
    hq[i].block = down_block[i];
    hq[i].k = I;
    hq[i].q.resize(static_cast<size_t>(m * I));
    hq[i].s.resize(static_cast<size_t>(m * (I / down_block[i])));
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c0 = 0; c0 < I; c0 += chunk)
        pieces.push_back({static_cast<int64_t>(i), r, c0, std::min(I, c0 + chunk)});
  }
  auto run_pieces = [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const Piece& pc = pieces[p];
      const ExpertCall& c = calls[pc.call];
      const int64_t I = c.w->w1.out, r = pc.row, w = pc.c1 - pc.c0, blk = down_block[pc.call];
      const bool clamp = lim > 0 && (c.route_w != nullptr || config_.shared_expert_clamped);
      const float* y = y13 + y13_off[pc.call] + r * 2 * I;
      float* hr = h + h_off[pc.call] + r * I + pc.c0;
      v41::swiglu_bf16(y + pc.c0, y + I + pc.c0, w, lim, clamp,
                       c.route_w ? &c.route_w[r] : nullptr, hr);
      QuantRows& q = hq[pc.call];
      kernels::act_quant_fp8(hr, 1, w, static_cast<int>(blk), kernels::ScaleFmt::kUe8m0, nullptr,
                             &q.q[r * I + pc.c0], &q.s[(r * I + pc.c0) / blk]);
    }
  };
  const int64_t work = static_cast<int64_t>(pieces.size());
  int64_t elems = 0;  // below ~4K elements (a few us) a dispatch costs more than it saves
  for (size_t i = 0; i < n; ++i)
    elems += static_cast<int64_t>(calls[i].toks.size()) * calls[i].w->w1.out;
  if (profile::PhaseScope phase("moe: swiglu, act quant");
      pool_ && pool_->num_threads() > 1 && work > 1 && elems >= 4096) {
    pool_->parallel_for(work, run_pieces);
  } else {
    run_pieces(0, work);
  }
  for (size_t i = 0; i < n; ++i) {
    const int64_t m = static_cast<int64_t>(calls[i].toks.size()), I = calls[i].w->w1.out;
    down[i].a = kernels::QuantActs{hq[i].q.data(), hq[i].s.data(), m, I, down_block[i]};
    down[i].y = calls[i].out;
  }
  kernels::gemm_packed_batch(down.data(), static_cast<int64_t>(n), pool_.get());
  return true;
}

void DeepseekV41Model::moe(int L, const float* x, Ctx& c, float* out) const {
  const LayerSchedule& ls = config_.layers[L];
  const V41MoeWeights& mw = weights_->layer(L).ffn;
  const std::vector<float> logit = moe_gate_logits(config_, L, mw, x, c.S, pool_.get());
  const int64_t S = c.S, D = config_.dim, E = ls.n_routed_experts;
  const int k = ls.n_activated_experts;
  const float temp = static_cast<float>(config_.gate_temp);
  const float* bias = mw.gate_bias.f32();
  std::vector<std::vector<int32_t>> sel(S);
  std::vector<std::vector<float>> wts(S);
  // Tokens route independently (each writes its own sel / wts): split over the pool.
  parallel_rows(pool_.get(), S, 8, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      std::vector<float> sc(E), biased(E);
      for (int64_t e = 0; e < E; ++e) {
        float l = logit[i * E + e];
        if (temp != 1.0f) l = l / temp;
        float s;
        if (config_.score_func == "softmax") {
          s = l;  // normalised below
        } else if (config_.score_func == "sigmoid") {
          s = 1.0f / (1.0f + v41::torch_exp_at(0.0f - l, c.vrows.tok(i) * E + e, c.vrows.n * E));
        } else {
          s = std::sqrt(v41::torch_softplus_at(l, c.vrows.tok(i) * E + e, c.vrows.n * E));
        }
        sc[e] = s;
      }
      if (config_.score_func == "softmax") {
        float mx = *std::max_element(sc.begin(), sc.end());
        float sum = 0;
        for (auto& v : sc) sum += (v = v41::sleef_expf(v - mx));
        for (auto& v : sc) v = v / sum;
      }
      for (int64_t e = 0; e < E; ++e) biased[e] = sc[e] + bias[e];
      std::vector<int32_t> idx = v41::torch_topk(biased.data(), E, k, true);
      std::vector<float> w(k);
      float sum = 0.0f;
      for (int j = 0; j < k; ++j) sum += (w[j] = sc[idx[j]]);
      if (config_.norm_topk_prob && k > 1)
        for (int j = 0; j < k; ++j) w[j] = w[j] / (sum + 1e-20f);
      const float rs = static_cast<float>(config_.route_scale);
      for (int j = 0; j < k; ++j) w[j] = w[j] * rs;
      sel[i] = std::move(idx);
      wts[i] = std::move(w);
    }
  });
  if (c.routes) c.routes->moe[L] = sel;

  if (expert_comm_) {  // expert parallelism: dispatch, experts, combine (exec/ep_moe.h)
    EpMoeExperts ex;
    ex.dim = D;
    // This rank's first expert (only its own are packed; a layer's experts share a format).
    ex.act_block = expert_act_block(
        mw.experts[expert_begin(expert_comm_->rank(), E, expert_comm_->size())]);
    STRATA_CHECK_MSG(ex.act_block > 0, "layer {}: expert parallelism needs the routed experts "
                     "packed as FP8 (32-blocks) or FP4", L);
    ex.routed = [&](int64_t e, const kernels::QuantActs& a, const float* rw, float* o) {
      expert_q(mw.experts[e], a, rw, o);
    };
    ex.shared = [&](const float* xs, int64_t n, float* o) {
      std::vector<ExpertCall> one(1);
      one[0].w = &mw.shared;
      one[0].out = o;
      for (int64_t i = 0; i < n; ++i) one[0].toks.push_back(i);
      if (!experts_batched(one, xs, n)) expert(mw.shared, xs, n, nullptr, o);
    };
    moe_expert_parallel(*expert_comm_, sel, wts, E, x, S, ex, out);
    return;
  }

  // One call per routed expert some token picked (ascending expert id), then the shared one.
  std::vector<ExpertCall> calls;
  for (int64_t e = 0; e < E; ++e) {
    ExpertCall call;
    for (int64_t i = 0; i < S; ++i)
      for (int j = 0; j < k; ++j)
        if (sel[i][j] == e) {
          call.toks.push_back(i);
          call.rw.push_back(wts[i][j]);
        }
    if (call.toks.empty()) continue;
    call.w = &mw.experts[e];
    calls.push_back(std::move(call));
  }
  ExpertCall shared;
  shared.w = &mw.shared;
  for (int64_t i = 0; i < S; ++i) shared.toks.push_back(i);
  calls.push_back(std::move(shared));
  // Each call's output rows [m, D] in one thread-local scratch buffer (written whole by the
  // down-projection before they are read).
  std::vector<int64_t> eo_off(calls.size() + 1, 0);
  for (size_t i = 0; i < calls.size(); ++i)
    eo_off[i + 1] = eo_off[i] + static_cast<int64_t>(calls[i].toks.size()) * D;
  thread_local Scratch<float> s_eo, s_y;
  float* const eo = s_eo.get(static_cast<size_t>(eo_off.back()));
  for (size_t i = 0; i < calls.size(); ++i) {
    calls[i].out = eo + eo_off[i];
    calls[i].route_w = calls[i].rw.empty() ? nullptr : calls[i].rw.data();
  }
  if (!experts_batched(calls, x, S)) {
    std::vector<float> xs;
    for (ExpertCall& call : calls) {
      const int64_t n = static_cast<int64_t>(call.toks.size());
      xs.resize(n * D);
      for (int64_t r = 0; r < n; ++r) std::copy_n(x + call.toks[r] * D, D, &xs[r * D]);
      expert(*call.w, xs.data(), n, call.route_w, call.out);
    }
  }

  // Σ routed (ascending expert id, each token's rows in place), then + shared, bf16.
  float* const y = s_y.get_zeroed(S * D);
  // Element-wise loops over distinct buffers (restrict: vectorized, same per-element order).
  auto add_row = [D](float* __restrict dst, const float* __restrict src) {
    for (int64_t d = 0; d < D; ++d) dst[d] += src[d];
  };
  for (size_t i = 0; i + 1 < calls.size(); ++i) {
    const ExpertCall& call = calls[i];
    for (size_t r = 0; r < call.toks.size(); ++r)
      add_row(y + call.toks[r] * D, eo + eo_off[i] + static_cast<int64_t>(r) * D);
  }
  const float* const se = eo + eo_off[calls.size() - 1];  // the shared expert's rows
  auto finish = [](const float* __restrict a, const float* __restrict b, float* __restrict o,
                   int64_t n) {
    for (int64_t i = 0; i < n; ++i) o[i] = round_to_bf16(a[i] + b[i]);
  };
  finish(y, se, out, S * D);
}

}  // namespace strata
