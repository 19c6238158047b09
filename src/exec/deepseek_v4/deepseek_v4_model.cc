// DeepseekV4Model: load, top-level forward, mHC per sublayer, hc_head, MoE with hash routing.
// Attention lives in v4_attention.cc. Reference: V4-Flash model.py Transformer / Block /
// ParallelHead / Gate / Expert / MoE; spec §2.0, §2.7, §2.8.
#include "exec/deepseek_v4/deepseek_v4_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "base/check.h"
#include "base/thread_pool.h"
#include "exec/deepseek_v4/v4_forward_call.h"
#include "exec/deepseek_v4/v4_ops.h"
#include "exec/ep_moe.h"
#include "exec/stage_carry.h"
#include "model/dtype.h"
#include "model/packed_weight_cache.h"

namespace strata {

StatusOr<std::unique_ptr<DeepseekV4Model>> DeepseekV4Model::load(const std::string& dir,
                                                                 int64_t max_context,
                                                                 bool legacy_state,
                                                                 int64_t state_max_tokens,
                                                                 int threads,
                                                                 bool scalar_reference,
                                                                 std::shared_ptr<PipeComm> pipe_comm) {
  std::unique_ptr<DeepseekV4Model> m(new DeepseekV4Model());
  STRATA_ASSIGN_OR_RETURN(m->config_, load_deepseek_config(dir));
  const DeepseekConfig& c = m->config_;
  if (c.is_v41()) return failed_precondition("{}: not a DeepSeek-V4 config", dir);
  if (c.hc_mult < 1 || c.hc_mult > 16) return failed_precondition("hc_mult {} unsupported", c.hc_mult);
  if (c.head_dim <= c.rope_head_dim || (c.head_dim - c.rope_head_dim) % 64 != 0)
    return failed_precondition("head_dim {} - rope_head_dim {} must be a positive multiple of 64",
                               c.head_dim, c.rope_head_dim);
  if (c.index_head_dim > 0 && (c.index_head_dim & (c.index_head_dim - 1)) != 0)
    return failed_precondition("index_head_dim {} must be a power of two (Hadamard)", c.index_head_dim);
  if (c.dim % 32 != 0) return failed_precondition("dim {} must be a multiple of 32", c.dim);
  // A pipeline stage checks and packs (and so keeps resident) only its own layers.
  const PipeStage own = pipe_stage(pipe_comm ? pipe_comm.get() : process_pipe_comm().get(),
                                   c.n_layers);
  if (threads != 1) m->pool_ = std::make_unique<ThreadPool>(threads);
  // Expert parallelism: this rank packs (and computes) only its share of the routed experts.
  m->expert_comm_ = process_expert_comm();
  if (m->expert_comm_ && m->expert_comm_->size() <= 1) m->expert_comm_.reset();
  const ExpertShare share = m->expert_comm_
                                ? ExpertShare{m->expert_comm_->rank(), m->expert_comm_->size()}
                                : ExpertShare{};
  std::unique_ptr<PackedWeightCache> cache;
  if (!scalar_reference)
    cache = PackedWeightCache::open(dir, pack_layout("v4", own.begin, own.end, share),
                                    process_weight_cache_settings(), m->pool_.get());
  STRATA_ASSIGN_OR_RETURN(m->checkpoint_, SafetensorsCheckpoint::open(dir, false));
  if (cache && cache->hit()) m->checkpoint_->mark_scanned(cache->scanned_tensors());
  m->checkpoint_->skip_scans_outside_layers(own.begin, own.end);
  STRATA_ASSIGN_OR_RETURN(m->weights_, DeepseekV4Weights::load(*m->checkpoint_, c));
  if (!scalar_reference) {
    m->weights_->pack_for_kernels(m->pool_.get(), own.begin, own.end, share, cache.get());
    // The packed copies are what the kernels read: the file's pages (faulted in by the
    // checks and the packing) need not stay resident too (issue 29 goal 4).
    m->checkpoint_->release_resident_pages();
  }
  // RoPE tables for the backbone and the loaded MTP blocks (layer ids n_layers..).
  const int n_rope = c.n_layers + static_cast<int>(m->weights_->mtp().size());
  for (int l = 0; l < n_rope; ++l) {
    const LayerSchedule& ls = c.layers[l];
    m->rope_.emplace_back(c.rope_head_dim, ls.rope_theta, ls.yarn ? c.original_seq_len : 0,
                          c.rope_factor, c.beta_fast, c.beta_slow);
    if (ls.has_indexer && l < c.n_layers) m->index_layers_.push_back(l);
  }
  m->max_context_ = max_context > 0 ? max_context : c.max_position_embeddings;
  if (m->max_context_ <= 0) m->max_context_ = 1 << 20;
  STRATA_ASSIGN_OR_RETURN(StateGraph g, StateGraph::from_deepseek(c));
  m->state_graph_.emplace(std::move(g));
  m->state_max_tokens_ = state_max_tokens > 0 ? state_max_tokens
                                              : std::min<int64_t>(m->max_context_, 32768);
  m->state_max_tokens_ = std::min(m->state_max_tokens_, m->max_context_);
  m->legacy_state_ = legacy_state;
  if (m->expert_comm_)  // the dispatch sends what the expert GEMM consumes
    for (int L = 0; L < c.n_layers; ++L) {
      const std::vector<V41ExpertWeights>& ex = m->weights_->layer(L).ffn.experts;
      STRATA_RETURN_IF_ERROR(check_expert_parallel_layer(L, static_cast<int64_t>(ex.size()),
                                                         share.size));
      for (const V41ExpertWeights& e : ex)
        if (e.w1.present() && v4::act_block(e.w1) == 0)
          return failed_precondition("--enable-expert-parallel: layer {}'s routed experts are "
                                     "not FP8 / FP4", L);
    }
  m->dcp_comm_ = process_dcp_comm();
  if (m->dcp_comm_ && m->dcp_comm_->size() <= 1) m->dcp_comm_.reset();
  m->pipe_comm_ = pipe_comm ? pipe_comm : process_pipe_comm();
  if (m->pipe_comm_ && m->pipe_comm_->size() <= 1) m->pipe_comm_.reset();
  if (m->pipe_comm_ && m->pipe_comm_->size() > c.n_layers)
    return failed_precondition("--pipeline-parallel-size {} exceeds the model's {} layers",
                               m->pipe_comm_->size(), c.n_layers);
  // The load succeeded: persist what was packed (with the tensors found finite).
  if (cache) cache->finish(m->checkpoint_->scanned_tensors());
  return m;
}

std::unique_ptr<V4SequenceState> DeepseekV4Model::new_sequence() const {
  if (legacy_state_) return new_legacy_sequence();
  auto s = V4SequenceState::create(config_, *state_graph_, state_max_tokens_, dcp_shard(dcp_comm_.get()),
                                      stage_layers());
  STRATA_CHECK_MSG(s.ok(), "V4 sequence state: {}", s.status().to_string());
  return std::move(s).value();
}

void DeepseekV4Model::expert(const V41ExpertWeights& w, const float* x, int64_t M,
                             const float* route_w, bool clamp, float* out) const {
  const int64_t I = w.w1.out;
  std::vector<float> g(M * I), u(M * I);
  v4::linear(x, M, w.w1, g.data(), pool_.get());
  v4::linear(x, M, w.w3, u.data(), pool_.get());
  expert_tail(w, g, u, M, route_w, clamp, out);
}

void DeepseekV4Model::expert_q(const V41ExpertWeights& w, const kernels::QuantActs& a,
                               const float* route_w, bool clamp, float* out) const {
  const int64_t M = a.m, I = w.w1.out;
  std::vector<float> g(M * I), u(M * I);
  v4::linear_q(a, w.w1, g.data(), pool_.get());
  v4::linear_q(a, w.w3, u.data(), pool_.get());
  expert_tail(w, g, u, M, route_w, clamp, out);
}

void DeepseekV4Model::expert_tail(const V41ExpertWeights& w, std::vector<float>& g,
                                  const std::vector<float>& u, int64_t M, const float* route_w,
                                  bool clamp, float* out) const {
  const int64_t I = w.w1.out;
  const float lim = static_cast<float>(config_.swiglu_limit);
  parallel_rows(pool_.get(), M, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      v41::swiglu_bf16(&g[r * I], &u[r * I], I, lim, clamp && lim > 0,
                       route_w ? &route_w[r] : nullptr, &g[r * I]);
  });
  v4::linear(g.data(), M, w.w2, out, pool_.get());
}

void DeepseekV4Model::moe(int L, const float* x, Call& c, float* out) const {
  const LayerSchedule& ls = config_.layers[L];
  const V4MoeWeights& mw = weights_->layer(L).ffn;
  const int k = ls.n_activated_experts;
  const int64_t S = c.S, D = config_.dim, E = ls.n_routed_experts;
  const std::vector<float> logit = moe_gate_logits(config_, L, mw, x, S, pool_.get());
  std::vector<std::vector<int32_t>> sel(S);
  std::vector<std::vector<float>> wts(S);
  // Tokens route independently (each writes its own sel/wts): split over the pool.
  parallel_rows(pool_.get(), S, 8, [&](int64_t i0, int64_t i1) {
    std::vector<float> sc(E), biased(E);
    for (int64_t i = i0; i < i1; ++i) {
      for (int64_t e = 0; e < E; ++e) {
        const float l = logit[i * E + e];
        float s;
        if (config_.score_func == "softmax") {
          s = l;
        } else if (config_.score_func == "sigmoid") {
          s = 1.0f / (1.0f + v41::sleef_expf(0.0f - l));
        } else {
          s = std::sqrt(v4::torch_softplus_at(l, c.vrows.tok(i) * E + e, c.vrows.n * E));
        }
        sc[e] = s;
      }
      if (config_.score_func == "softmax") {
        const float mx = *std::max_element(sc.begin(), sc.end());
        float sum = 0;
        for (auto& v : sc) sum += (v = v41::sleef_expf(v - mx));
        for (auto& v : sc) v = v / sum;
      }
      std::vector<int32_t> idx;
      if (mw.hash) {
        const int32_t tok = c.tokens[i];
        idx.assign(mw.tid2eid.begin() + static_cast<int64_t>(tok) * k,
                   mw.tid2eid.begin() + static_cast<int64_t>(tok + 1) * k);
      } else {
        const float* bias = mw.gate_bias.f32();
        for (int64_t e = 0; e < E; ++e) biased[e] = sc[e] + bias[e];
        idx = v41::torch_topk(biased.data(), E, k, true);
      }
      std::vector<float> w(k);
      float sum = 0.0f;
      for (int j = 0; j < k; ++j) sum += (w[j] = sc[idx[j]]);
      if (config_.score_func != "softmax")
        for (int j = 0; j < k; ++j) w[j] = w[j] / sum;
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
    ex.act_block =
        v4::act_block(mw.experts[expert_begin(expert_comm_->rank(), E, expert_comm_->size())].w1);
    ex.routed = [&](int64_t e, const kernels::QuantActs& a, const float* rw, float* o) {
      expert_q(mw.experts[e], a, rw, /*clamp=*/true, o);
    };
    ex.shared = [&](const float* xs, int64_t n, float* o) {
      expert(mw.shared, xs, n, nullptr, /*clamp=*/false, o);
    };
    moe_expert_parallel(*expert_comm_, sel, wts, E, x, S, ex, out);
    return;
  }
  // One call per routed expert some token picked, ascending id; their output rows laid out
  // in that order.
  struct Call1 {
    int64_t e = 0, off = 0;
    std::vector<int64_t> toks;
    std::vector<float> rw;
  };
  std::vector<Call1> calls;
  int64_t rows = 0;
  for (int64_t e = 0; e < E; ++e) {
    Call1 call;
    call.e = e;
    for (int64_t i = 0; i < S; ++i)
      for (int j = 0; j < k; ++j)
        if (sel[i][j] == e) {
          call.toks.push_back(i);
          call.rw.push_back(wts[i][j]);
        }
    if (call.toks.empty()) continue;
    call.off = rows;
    rows += static_cast<int64_t>(call.toks.size());
    calls.push_back(std::move(call));
  }
  std::vector<float> y(S * D, 0.0f), xs, eo(rows * D);
  auto run_call = [&](const Call1& call, std::vector<float>& xbuf) {
    const int64_t n = static_cast<int64_t>(call.toks.size());
    xbuf.resize(n * D);
    for (int64_t r = 0; r < n; ++r) std::copy_n(x + call.toks[r] * D, D, &xbuf[r * D]);
    expert(mw.experts[call.e], xbuf.data(), n, call.rw.data(), /*clamp=*/true, &eo[call.off * D]);
  };
  if (S > 1 && pool_ && pool_->num_threads() > 1 && calls.size() > 1) {
    // A prefill: whole experts over the threads (each expert's GEMMs then run inline on its
    // thread; their output rows are disjoint), rather than every small GEMM split in turn.
    pool_->parallel_for_stealing(static_cast<int64_t>(calls.size()), [&](int64_t b, int64_t e) {
      std::vector<float> xbuf;
      for (int64_t i = b; i < e; ++i) run_call(calls[i], xbuf);
    }, 1);
  } else {
    for (const Call1& call : calls) run_call(call, xs);
  }
  for (const Call1& call : calls)
    for (size_t r = 0; r < call.toks.size(); ++r)
      for (int64_t d = 0; d < D; ++d)
        y[call.toks[r] * D + d] += eo[(call.off + static_cast<int64_t>(r)) * D + d];
  eo.resize(S * D);
  expert(mw.shared, x, S, nullptr, /*clamp=*/false, eo.data());  // V4: "no swiglu_limit"
  for (int64_t i = 0; i < S * D; ++i) out[i] = round_to_bf16(y[i] + eo[i]);
}

void DeepseekV4Model::ffn_sublayer(int L, Call& c, float* h, float* f) const {
  const DeepseekConfig& cf = config_;
  const V4BlockWeights& bw = weights_->layer(L);
  const int64_t S = c.S, D = cf.dim;
  const int hc = cf.hc_mult;
  std::vector<float> pre(S * hc), post(S * hc), comb(S * hc * hc), x(S * D), xn(S * D);
  v4::hc_mixes(h, S, hc, D, bw.hc_ffn, cf.hc_sinkhorn_iters, cf.norm_eps, cf.hc_eps, c.vrows,
               pre.data(), post.data(), comb.data(), pool_.get());
  v4::hc_pre(h, pre.data(), S, hc, D, x.data(), pool_.get());
  v41::rms_norm(x.data(), S, D, &bw.ffn_norm, cf.norm_eps, xn.data());
  moe(L, xn.data(), c, f);
  v4::hc_post(f, post.data(), comb.data(), S, hc, D, h, pool_.get());
}

Status DeepseekV4Model::forward(V4SequenceState* seq, std::span<const int32_t> tokens,
                                const V4ForwardOptions& opt, std::vector<float>* logits) const {
  const DeepseekConfig& cf = config_;
  Call c;
  STRATA_RETURN_IF_ERROR(c.begin(seq, tokens, cf.vocab_size, max_context_, opt.call_shape,
                                 opt.routes, cf.n_layers, index_layers_.size()));
  const int64_t S = c.S;
  c.tokens = tokens;
  if (c.canonical) {
    c.vprefill = false;
  } else if (opt.prompt_len > 0 && c.s0 + S <= opt.prompt_len) {
    c.vrows = v41::CallRows::reference(c.s0, opt.prompt_len);
    c.vprefill = true;
  } else {
    c.vrows = v41::CallRows::reference(0, S);
    c.vprefill = c.s0 == 0;
  }
  const int64_t D = cf.dim;
  const int hc = cf.hc_mult;
  auto dump = [&](const std::string& name, const float* data, std::vector<int64_t> shape) {
    if (opt.dump) opt.dump(name, data, shape);
  };

  // Pipeline parallelism: this rank runs layers [stage.begin, stage.end) (all without it);
  // V4's boundary is the streams (and the routes in validation): its top-k lists do not
  // cross layers.
  const PipeStage stage = pipe_stage(pipe_comm_.get(), cf.n_layers);
  auto carry = [&](const Call& cc, std::vector<float> h, int next_layer) {
    StageCarry k;
    k.s0 = cc.s0;
    k.S = cc.S;
    k.next_layer = next_layer;
    k.h = std::move(h);
    if (cc.routes) {
      k.has_routes = true;
      k.routes = *cc.routes;
    }
    ByteMsg m;
    k.encode(&m);
    return m.b;
  };
  auto take = [&](StageCarry k, const Call& cc, std::vector<float>* h, int next_layer) {
    STRATA_CHECK_MSG(k.s0 == cc.s0 && k.S == cc.S && k.next_layer == next_layer &&
                         static_cast<int64_t>(k.h.size()) == cc.S * hc * D &&
                         k.has_routes == (cc.routes != nullptr),
                     "pipeline stage boundary does not match this call (positions {}+{} vs "
                     "{}+{}, layer {} vs {}): the stages diverged", k.s0, k.S, cc.s0, cc.S,
                     k.next_layer, next_layer);
    *h = std::move(k.h);
    if (cc.routes) *cc.routes = std::move(k.routes);
  };
  auto decode = [](std::vector<uint8_t> bytes) {
    ByteMsg m;
    m.b = std::move(bytes);
    return StageCarry::decode(&m);
  };
  std::vector<float> h(S * hc * D);
  const uint16_t* emb = weights_->embed().u16();
  for (int64_t i = 0; stage.first && i < S; ++i)
    for (int ch = 0; ch < hc; ++ch)
      for (int64_t d = 0; d < D; ++d) h[(i * hc + ch) * D + d] = bf16_to_f32(emb[tokens[i] * D + d]);
  if (opt.dump && stage.first) {
    std::vector<float> e0(S * D);
    for (int64_t i = 0; i < S; ++i) std::copy_n(&h[i * hc * D], D, &e0[i * D]);
    dump("embed", e0.data(), {S, D});
  }

  // Layers [stage.begin, stage.end) over the rows of `cc` (the call, or a microbatch of it).
  auto run_layers = [&](Call& cc, std::vector<float>& hh) {
    const int64_t n = cc.S;
    std::vector<float> pre(n * hc), post(n * hc), comb(n * hc * hc);
    std::vector<float> x(n * D), xn(n * D), f(n * D);
    for (int L = stage.begin; L < stage.end; ++L) {
      const V4BlockWeights& bw = weights_->layer(L);
      const std::string ln = fmt::format("layer{:02d}.", L);
      v4::hc_mixes(hh.data(), n, hc, D, bw.hc_attn, cf.hc_sinkhorn_iters, cf.norm_eps, cf.hc_eps,
                   cc.vrows, pre.data(), post.data(), comb.data(), pool_.get());
      v4::hc_pre(hh.data(), pre.data(), n, hc, D, x.data(), pool_.get());
      v41::rms_norm(x.data(), n, D, &bw.attn_norm, cf.norm_eps, xn.data());
      attention(L, xn.data(), cc, f.data());
      dump(ln + "attn_out", f.data(), {n, D});
      v4::hc_post(f.data(), post.data(), comb.data(), n, hc, D, hh.data(), pool_.get());

      ffn_sublayer(L, cc, hh.data(), f.data());
      dump(ln + "ffn_out", f.data(), {n, D});
      dump(ln + "block_out", hh.data(), {n, hc, D});
    }
  };
  const int64_t microbatches = stage.split() && c.canonical ? pp_microbatches(S, pipe_comm_->size()) : 1;
  if (!stage.split()) {
    run_layers(c, h);
  } else if (microbatches > 1) {
    // The call as microbatches of rows through the stages (each stage runs microbatch k + 1
    // while the next runs k: pp_microbatches); then the last stage's results, in order, to
    // every rank.
    struct Micro {
      Call c;
      V41Routes routes;
      std::vector<float> h;
      int64_t a = 0;
    };
    std::vector<Micro> mb(static_cast<size_t>(microbatches));
    const int64_t row = hc * D;
    for (int64_t k = 0; k < microbatches; ++k) {
      Micro& u = mb[k];
      const int64_t a = k * S / microbatches, b = (k + 1) * S / microbatches;
      u.a = a;
      Call& x = u.c;
      x.microbatch_of(c, a, b, &u.routes, cf.n_layers, index_layers_.size());
      x.tokens = tokens.subspan(a, b - a);
      u.h.assign(h.begin() + a * row, h.begin() + b * row);
      if (!stage.first) take(pipe_receive(*pipe_comm_), x, &u.h, stage.begin);
      run_layers(x, u.h);
      if (!stage.last) pipe_comm_->send_next(carry(x, u.h, stage.end));
    }
    for (Micro& u : mb) {
      std::vector<uint8_t> bytes = stage.last ? carry(u.c, u.h, cf.n_layers) : std::vector<uint8_t>{};
      pipe_comm_->bcast_from_last(&bytes);
      if (!stage.last) take(decode(std::move(bytes)), u.c, &u.h, cf.n_layers);
      std::copy(u.h.begin(), u.h.end(), h.begin() + u.a * row);
      if (c.routes) merge_routes(u.routes, u.a, c.routes);
    }
  } else {
    if (!stage.first) take(pipe_receive(*pipe_comm_), c, &h, stage.begin);
    run_layers(c, h);
    // The last stage's boundary reaches every rank, which runs the epilogue on it.
    if (!stage.last) pipe_comm_->send_next(carry(c, h, stage.end));
    std::vector<uint8_t> bytes = stage.last ? carry(c, h, cf.n_layers) : std::vector<uint8_t>{};
    pipe_comm_->bcast_from_last(&bytes);
    if (!stage.last) take(decode(std::move(bytes)), c, &h, cf.n_layers);
  }
  std::vector<float> x(S * D), xn(S * D);
  write_mtp_rows(c, h.data());
  v4::hc_head(h.data(), S, hc, D, weights_->hc_head_fn().f32(), weights_->hc_head_base().f32(),
              weights_->hc_head_scale().f32(), cf.norm_eps, cf.hc_eps, c.vrows, x.data(),
              pool_.get());
  v41::rms_norm(x.data(), S, D, &weights_->norm(), cf.norm_eps, xn.data());
  dump("final_norm_out", xn.data(), {S, D});
  const int64_t V = cf.vocab_size;
  if (opt.all_logits) {
    logits->resize(S * V);
    v4::linear_f32(xn.data(), S, weights_->head(), V, D, logits->data(), weights_->head_packed(),
                   pool_.get());
  } else {
    logits->resize(V);
    v4::linear_f32(&xn[(S - 1) * D], 1, weights_->head(), V, D, logits->data(),
                   weights_->head_packed(), pool_.get());
  }
  seq->end_call(S);
  return ok_status();
}

}  // namespace strata
