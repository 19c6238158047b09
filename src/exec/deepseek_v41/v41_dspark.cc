// DeepseekV41Model DSpark: the stage rings every forward writes and the draft block
// (reference: model.py DSparkAttention, DSparkBlock.forward_embed / forward_head,
// DSparkMarkovHead, DSparkConfidenceHead, Transformer.forward_spec, get_dspark_topk_idxs;
// spec docs spec-tiers.md §1.1).
//
// Rings: the reference seeds each stage's window ring from the prefill's main_hidden rows and
// writes ring[s0 mod W] from the decode step's row before drafting. Every value is a
// function of one position's main_hidden row, so the forward writes them for its own rows
// (the last W of a call) and the draft only reads: one stored form whatever the call shape.
#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "base/phase_profile.h"
#include "base/scratch.h"
#include "exec/deepseek_v41/deepseek_v41_model.h"
#include "exec/deepseek_v41/v41_forward_ctx.h"
#include "exec/deepseek_v41/v41_mhc.h"
#include "model/dtype.h"

namespace strata {

bool DeepseekV41Model::has_dspark() const {
  return config_.dspark_block_size > 0 && config_.n_draft_layers > 0 &&
         static_cast<int>(weights_->draft_stages().size()) == config_.n_draft_layers &&
         !config_.dspark_target_layer_ids.empty();
}

void DeepseekV41Model::write_dspark_rings(Ctx& c, const float* main_hidden) const {
  const DeepseekConfig& cf = config_;
  const int64_t D = cf.dim, hd = cf.head_dim, W = cf.window_size;
  const int rd = cf.rope_head_dim;
  const int64_t nt = static_cast<int64_t>(cf.dspark_target_layer_ids.size());
  // Only the last W rows of the call stay in a ring.
  const int64_t first = std::max<int64_t>(0, c.S - W), n = c.S - first;
  const V41BlockWeights& s0w = weights_->layer(cf.n_layers);
  std::vector<float> t(n * D), main_x(n * D), kv(n * hd), tk(n * hd);
  // main_x = main_norm(main_proj(main_hidden)) (forward_embed).
  v41::linear(main_hidden + first * nt * D, n, s0w.main_proj, t.data(), pool_.get());
  v41::rms_norm(t.data(), n, D, &s0w.main_norm, cf.norm_eps, main_x.data());
  for (int s = 0; s < cf.n_draft_layers; ++s) {
    const int L = cf.n_layers + s;
    const V41AttentionWeights& aw = weights_->layer(L).attn;
    v41::linear(main_x.data(), n, aw.wkv, tk.data(), pool_.get());
    v41::rms_norm(tk.data(), n, hd, &aw.kv_norm, cf.norm_eps, kv.data());
    for (int64_t i = 0; i < n; ++i) {
      const int64_t pos = c.s0 + first + i;
      rope_[L].apply(&kv[i * hd + hd - rd], pos, false);
      v41::qdq_fp8(&kv[i * hd], hd, cf.kv_fp8_block());
      c.seq->write_window_row(L, pos, &kv[i * hd]);
    }
  }
}

void DeepseekV41Model::dspark_attention(int L, const float* x, const V41SequenceState& seq,
                                        int64_t P, Ctx& c, float* out) const {
  const DeepseekConfig& cf = config_;
  const V41AttentionWeights& aw = weights_->layer(L).attn;
  const int64_t B = c.S, H = cf.n_heads, hd = cf.head_dim, ql = cf.q_lora_rank;
  const int64_t W = cf.window_size;
  const int rd = cf.rope_head_dim;
  const v41::RopeTable& rope = rope_[L];
  // Queries and the block's own KV rows at positions P+1 .. P+B.
  std::vector<float> tq(B * ql), qr(B * ql), q(B * H * hd), tkv(B * hd), kv(B * hd);
  v41::linear(x, B, aw.wq_a, tq.data(), pool_.get());
  v41::rms_norm(tq.data(), B, ql, &aw.q_norm, cf.norm_eps, qr.data());
  v41::linear(qr.data(), B, aw.wq_b, q.data(), pool_.get());
  v41::linear(x, B, aw.wkv, tkv.data(), pool_.get());
  v41::rms_norm(tkv.data(), B, hd, &aw.kv_norm, cf.norm_eps, kv.data());
  for (int64_t i = 0; i < B; ++i) {
    rope.apply_heads(&q[i * H * hd + hd - rd], H, hd, P + 1 + i, false);
    rope.apply(&kv[i * hd + hd - rd], P + 1 + i, false);
    v41::qdq_fp8(&kv[i * hd], hd, cf.kv_fp8_block());
  }
  // The list every query uses: ring slots [0, min(W, P+1)) in slot order (slot j holds the
  // newest position <= P that is j mod W), then the B block rows (bidirectional).
  const int64_t nring = std::min<int64_t>(W, P + 1);
  std::vector<float> ring(nring * hd);
  std::vector<const float*> rows;
  for (int64_t j = 0; j < nring; ++j) {
    const int64_t pos = P - (((P - j) % W) + W) % W;
    seq.read_window_row(L, pos, &ring[j * hd]);
    rows.push_back(&ring[j * hd]);
  }
  for (int64_t i = 0; i < B; ++i) rows.push_back(&kv[i * hd]);
  const int64_t nr = static_cast<int64_t>(rows.size());
  const float scale = static_cast<float>(std::pow(static_cast<double>(hd), -0.5));
  std::vector<float> o(B * H * hd), qT(hd * H), scores(H * nr);
  for (int64_t i = 0; i < B; ++i) {
    for (int64_t j = 0; j < hd; ++j)
      for (int64_t h = 0; h < H; ++h) qT[j * H + h] = q[(i * H + h) * hd + j];
    v41::qk_scores_heads(qT.data(), rows.data(), nr, hd, H, scale, scores.data(), 0, nr);
    v41::sparse_attn_heads(rows.data(), nr, hd, H, aw.attn_sink.f32(), scores.data(),
                           &o[i * H * hd], c.vrows.tok(i) * H, c.vrows.n * H);
    rope.apply_heads(&o[i * H * hd + hd - rd], H, hd, P + 1 + i, true);
  }
  const int64_t G = cf.o_groups, R = cf.o_lora_rank;
  std::vector<float> u(B * G * R);
  v41::grouped_wo_a(o.data(), B, H * hd, aw.wo_a, G, R, u.data(), pool_.get());
  v41::linear(u.data(), B, aw.wo_b, out, pool_.get());
}

Status DeepseekV41Model::dspark_draft(const V41SequenceState& seq, int32_t token,
                                      V41DsparkDraft* out) const {
  const DeepseekConfig& cf = config_;
  if (!has_dspark()) return failed_precondition("this checkpoint has no DSpark stages");
  const int64_t P = seq.length() - 1;
  if (P < 1)
    return failed_precondition("a DSpark draft needs at least 2 positions in state (have {})",
                               P + 1);
  if (token < 0 || token >= cf.vocab_size)
    return invalid_argument("token id {} outside the vocabulary [0, {})", token, cf.vocab_size);
  profile::PhaseScope phase("dspark: draft");
  const int64_t B = cf.dspark_block_size, D = cf.dim, V = cf.vocab_size;
  const int hc = cf.hc_mult;
  Ctx c;
  c.S = B;
  c.s0 = P + 1;
  c.width_end = c.s0 + B;
  c.canonical = false;
  c.vrows = v41::CallRows::reference(0, B);  // the reference's one block-sized call
  V41Routes routes;
  routes.moe.assign(cf.total_layers(), {});
  c.routes = &routes;
  // forward_embed: [token, noise...] embedded, repeated to the hc streams; one-hot pre.
  std::vector<int32_t> in(B, static_cast<int32_t>(cf.dspark_noise_token_id));
  in[0] = token;
  c.h.resize(B * hc * D);
  const uint16_t* emb = weights_->embed().u16();
  for (int64_t i = 0; i < B; ++i)
    for (int ch = 0; ch < hc; ++ch)
      for (int64_t d = 0; d < D; ++d) c.h[(i * hc + ch) * D + d] = bf16_to_f32(emb[in[i] * D + d]);
  std::vector<float> pre_prev(B * hc, 0.0f);
  for (int64_t i = 0; i < B; ++i) pre_prev[i * hc] = 1.0f;
  std::vector<float> preA(B * hc), postA(B * hc), combA(B * hc * hc);
  std::vector<float> preF(B * hc), postF(B * hc), combF(B * hc * hc);
  std::vector<float> x(B * D), xn(B * D), f(B * D);
  auto mixes = [&](const V41MhcWeights& w, float* pre, float* post, float* comb) {
    v41::hc_mixes(c.h.data(), B, hc * D, w, hc, cf.hc_sinkhorn_iters, cf.norm_eps, cf.hc_eps, pre,
                  post, comb, c.vrows, pool_.get());
  };
  for (int s = 0; s < cf.n_draft_layers; ++s) {  // Block.forward with DSparkAttention
    const int L = cf.n_layers + s;
    const V41BlockWeights& bw = weights_->layer(L);
    mixes(bw.hc_attn, preA.data(), postA.data(), combA.data());
    v41::hc_pre(c.h.data(), pre_prev.data(), B, hc, D, x.data());
    v41::rms_norm(x.data(), B, D, &bw.attn_norm, cf.norm_eps, xn.data());
    dspark_attention(L, xn.data(), seq, P, c, f.data());
    v41::hc_post(f.data(), postA.data(), combA.data(), B, hc, D, c.h.data());
    mixes(bw.hc_ffn, preF.data(), postF.data(), combF.data());
    v41::hc_pre(c.h.data(), preA.data(), B, hc, D, x.data());
    v41::rms_norm(x.data(), B, D, &bw.ffn_norm, cf.norm_eps, xn.data());
    moe(L, xn.data(), c, f.data());
    v41::hc_post(f.data(), postF.data(), combF.data(), B, hc, D, c.h.data());
    pre_prev = preF;
  }
  // forward_head: y = hc_pre, logits = head(norm(y)) for every row; Markov refinement.
  const V41BlockWeights& last = weights_->layer(cf.n_layers + cf.n_draft_layers - 1);
  v41::hc_pre(c.h.data(), pre_prev.data(), B, hc, D, x.data());  // y
  v41::rms_norm(x.data(), B, D, &last.stage_norm, cf.norm_eps, xn.data());
  out->logits.resize(B * V);
  v41::linear_f32(xn.data(), B, weights_->head(), V, D, out->logits.data(),
                  weights_->head_packed(), pool_.get());
  const int64_t r = cf.dspark_markov_rank;
  out->ids.assign(B + 1, 0);
  out->ids[0] = token;
  std::vector<float> cat(B * (D + r)), bias(V);
  const uint16_t* memb = last.markov_embed.u16();
  for (int64_t i = 0; i < B; ++i) {
    float* m = &cat[i * (D + r) + D];  // markov embed of ids[i], beside y_i
    for (int64_t k = 0; k < r; ++k) m[k] = bf16_to_f32(memb[out->ids[i] * r + k]);
    std::copy_n(&x[i * D], D, &cat[i * (D + r)]);
    v41::linear_f32(m, 1, last.markov_head, V, r, bias.data(), nullptr, pool_.get());
    float* row = &out->logits[i * V];
    for (int64_t v = 0; v < V; ++v) row[v] = row[v] + bias[v];
    out->ids[i + 1] = static_cast<int32_t>(std::max_element(row, row + V) - row);  // first max
  }
  out->moe.assign(routes.moe.begin() + cf.n_layers, routes.moe.end());
  out->confidence.resize(B);
  v41::linear_f32(cat.data(), B, last.confidence_proj, 1, D + r, out->confidence.data(), nullptr,
                  pool_.get());
  return ok_status();
}

}  // namespace strata
