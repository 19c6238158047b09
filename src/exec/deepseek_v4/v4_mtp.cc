// DeepseekV4Model MTP: the MTP layer's ring rows and carry every forward writes, and the
// chained one-token draft (reference: V4-Flash model.py MTPBlock.forward -- e_proj(enorm(
// embed(t))) + h_proj(hnorm(h)) into Block.forward, then ParallelHead with the block's own
// hc_head_fn / hc_head_scale / hc_head_base and norm; the reference ships no MTP decode loop,
// so the pairing follows vLLM / SGLang's DeepSeek MTP: row j = (streams at j, token j+1) at
// RoPE position j). Every value is computed in the canonical one-token form, whatever the
// call, so chunking, prefix hits and rollback leave the rows bit-identical.
#include <algorithm>
#include <cmath>

#include "base/phase_profile.h"
#include "exec/deepseek_v4/deepseek_v4_model.h"
#include "exec/deepseek_v4/v4_forward_call.h"
#include "exec/deepseek_v4/v4_ops.h"
#include "model/dtype.h"

namespace strata {

bool DeepseekV4Model::has_mtp() const {
  return config_.n_draft_layers > 0 && !weights_->mtp().empty();
}

void DeepseekV4Model::mtp_attn_in(const int32_t* toks, const float* hidden, int64_t n, float* x,
                                  float* post, float* comb, float* xn) const {
  const DeepseekConfig& cf = config_;
  const V4BlockWeights& bw = weights_->layer(cf.n_layers);
  const int64_t D = cf.dim;
  const int hc = cf.hc_mult;
  std::vector<float> e(n * D), en(n * D), ep(n * D), hs(n * hc * D), hn(n * hc * D),
      hp(n * hc * D);
  const uint16_t* emb = weights_->embed().u16();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < D; ++d) e[i * D + d] = bf16_to_f32(emb[toks[i] * D + d]);
  for (int64_t k = 0; k < n * hc * D; ++k) hs[k] = round_to_bf16(hidden[k]);
  v41::rms_norm(e.data(), n, D, &bw.enorm, cf.norm_eps, en.data());
  v41::rms_norm(hs.data(), n * hc, D, &bw.hnorm, cf.norm_eps, hn.data());
  v4::linear(en.data(), n, bw.e_proj, ep.data(), pool_.get());
  v4::linear(hn.data(), n * hc, bw.h_proj, hp.data(), pool_.get());
  for (int64_t i = 0; i < n; ++i)  // e_proj(e).unsqueeze(2) + h_proj(h): bf16 + bf16
    for (int ch = 0; ch < hc; ++ch)
      for (int64_t d = 0; d < D; ++d)
        x[(i * hc + ch) * D + d] = round_to_bf16(ep[i * D + d] + hp[(i * hc + ch) * D + d]);
  std::vector<float> pre(n * hc), xa(n * D);
  v4::hc_mixes(x, n, hc, D, bw.hc_attn, cf.hc_sinkhorn_iters, cf.norm_eps, cf.hc_eps,
               v41::CallRows::canonical(), pre.data(), post, comb, pool_.get());
  v4::hc_pre(x, pre.data(), n, hc, D, xa.data());
  v41::rms_norm(xa.data(), n, D, &bw.attn_norm, cf.norm_eps, xn);
}

void DeepseekV4Model::write_mtp_rows(Call& c, const float* h) const {
  if (!has_mtp() || !c.seq->has_mtp_carry()) return;
  profile::PhaseScope phase("mtp: ring rows");
  const DeepseekConfig& cf = config_;
  const int L = cf.n_layers;
  const int hc = cf.hc_mult;
  const int64_t D = cf.dim, HD = hc * D, hd = cf.head_dim, W = cf.window_size;
  const int64_t S = c.S, s0 = c.s0;
  // Rows j in [j0, j1): row j pairs the streams at j (the carry for j = s0-1) with token j+1
  // of this call; only the last W stay in the ring.
  const int64_t j1 = s0 + S - 1;
  const int64_t j0 = std::max({s0 - 1, int64_t{0}, j1 - W});
  const int64_t n = j1 - j0;
  if (n > 0) {
    std::vector<float> hid(n * HD), x(n * HD), post(n * hc), comb(n * hc * hc), xn(n * D),
        kv(n * hd);
    std::vector<int32_t> toks(n);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t j = j0 + r;
      if (j < s0) {
        c.seq->read_mtp_carry(&hid[r * HD]);
      } else {
        std::copy_n(h + (j - s0) * HD, HD, &hid[r * HD]);
      }
      toks[r] = c.tokens[j + 1 - s0];
    }
    mtp_attn_in(toks.data(), hid.data(), n, x.data(), post.data(), comb.data(), xn.data());
    window_kv(L, xn.data(), n, j0, kv.data());
    for (int64_t r = 0; r < n; ++r) c.seq->write_window_row(L, j0 + r, &kv[r * hd]);
  }
  std::vector<float> last(h + (S - 1) * HD, h + S * HD);
  for (float& v : last) v = round_to_bf16(v);
  c.seq->write_mtp_carry(last.data());
}

void DeepseekV4Model::mtp_head(const float* h, int64_t S, const v41::CallRows& vrows,
                               float* logits) const {
  const DeepseekConfig& cf = config_;
  const V4BlockWeights& bw = weights_->layer(cf.n_layers);
  const int64_t D = cf.dim;
  std::vector<float> y(S * D), yn(S * D);
  v4::hc_head(h, S, cf.hc_mult, D, bw.hc_head_fn.f32(), bw.hc_head_base.f32(),
              bw.hc_head_scale.f32(), cf.norm_eps, cf.hc_eps, vrows, y.data());
  v41::rms_norm(y.data(), S, D, &bw.norm, cf.norm_eps, yn.data());
  v4::linear_f32(yn.data(), S, weights_->head(), cf.vocab_size, D, logits,
                 weights_->head_packed(), pool_.get());
}

Status DeepseekV4Model::mtp_draft(const V4SequenceState& seq, int32_t token, int k,
                                  std::vector<int32_t>* ids, std::vector<float>* logits) const {
  const DeepseekConfig& cf = config_;
  if (!has_mtp()) return failed_precondition("this checkpoint has no MTP block (mtp.0.*)");
  if (!seq.has_mtp_carry())
    return failed_precondition("MTP drafts need the state module's draft_state owner");
  const int64_t P = seq.length() - 1;
  if (P < 0) return failed_precondition("an MTP draft needs at least 1 position in state");
  if (token < 0 || token >= cf.vocab_size)
    return invalid_argument("token id {} outside the vocabulary [0, {})", token, cf.vocab_size);
  if (k < 1 || k > kMtpMaxDrafts)
    return invalid_argument("MTP drafts per call {} outside [1, {}]", k, kMtpMaxDrafts);
  profile::PhaseScope phase("mtp: draft");
  const int L = cf.n_layers;
  const V4BlockWeights& bw = weights_->layer(L);
  const int hc = cf.hc_mult;
  const int64_t D = cf.dim, HD = hc * D, hd = cf.head_dim, W = cf.window_size;
  const int64_t H = cf.n_heads, V = cf.vocab_size;
  const int rd = cf.rope_head_dim;
  // Ring rows a window can reach: positions [rlo, P); the draft's own rows from P on.
  const int64_t rlo = std::max<int64_t>(0, P - W + 1);
  std::vector<float> ring((P - rlo) * hd), own;
  for (int64_t pos = rlo; pos < P; ++pos) seq.read_window_row(L, pos, &ring[(pos - rlo) * hd]);
  std::vector<float> h(HD);
  seq.read_mtp_carry(h.data());
  int32_t tok = token;

  const v41::CallRows one = v41::CallRows::canonical();
  Call c;
  c.S = 1;
  c.vrows = one;
  std::vector<float> x(HD), post(hc), comb(hc * hc), xn(D), qr(cf.q_lora_rank), q(H * hd),
      kv(hd), o(H * hd), f(D), lg(V);
  const float scale = static_cast<float>(std::pow(static_cast<double>(hd), -0.5));
  const float* sink = bw.attn.attn_sink.f32();
  std::vector<const float*> rows;
  ids->clear();
  if (logits) logits->clear();
  for (int step = 0; step < k; ++step) {
    const int64_t p = P + step;
    // Attention sublayer (window only: the MTP layer's ratio is 0).
    mtp_attn_in(&tok, h.data(), 1, x.data(), post.data(), comb.data(), xn.data());
    attention_queries(L, xn.data(), 1, p, one, qr.data(), q.data());
    window_kv(L, xn.data(), 1, p, kv.data());
    own.insert(own.end(), kv.begin(), kv.end());
    auto row = [&](int64_t pos) { return pos < P ? &ring[(pos - rlo) * hd] : &own[(pos - P) * hd]; };
    rows.clear();  // the one-token decode layout: p-W+1..p, or 0..p then unreachable entries
    for (int64_t pos = std::max<int64_t>(0, p - W + 1); pos <= p; ++pos) rows.push_back(row(pos));
    while (static_cast<int64_t>(rows.size()) < W) rows.push_back(nullptr);
    for (int64_t hh = 0; hh < H; ++hh) {
      v4::sparse_attn_head(&q[hh * hd], rows.data(), W, hd, sink[hh], scale, hh, H, &o[hh * hd]);
      rope_[L].apply(&o[hh * hd + hd - rd], p, true);
    }
    attention_output(L, o.data(), 1, f.data());
    v4::hc_post(f.data(), post.data(), comb.data(), 1, hc, D, x.data());
    c.s0 = p;
    c.tokens = std::span<const int32_t>(&tok, 1);
    ffn_sublayer(L, c, x.data(), f.data());
    mtp_head(x.data(), 1, one, lg.data());
    tok = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());  // first max
    ids->push_back(tok);
    if (logits) logits->insert(logits->end(), lg.begin(), lg.end());
    h = x;
  }
  return ok_status();
}

Status DeepseekV4Model::mtp_forward(V4SequenceState* scratch, std::span<const int32_t> tokens,
                                    const float* hidden, std::vector<float>* logits,
                                    std::vector<float>* streams) const {
  const DeepseekConfig& cf = config_;
  if (!has_mtp()) return failed_precondition("this checkpoint has no MTP block (mtp.0.*)");
  const int L = cf.n_layers;
  Call c;
  STRATA_RETURN_IF_ERROR(c.begin(scratch, tokens, cf.vocab_size, max_context_,
                                 CallShape::kCanonical, nullptr, cf.n_layers, 0));
  c.tokens = tokens;
  const int64_t S = c.S, D = cf.dim;
  const int hc = cf.hc_mult;
  std::vector<float> x(S * hc * D), post(S * hc), comb(S * hc * hc), xn(S * D), f(S * D);
  mtp_attn_in(tokens.data(), hidden, S, x.data(), post.data(), comb.data(), xn.data());
  attention(L, xn.data(), c, f.data());
  v4::hc_post(f.data(), post.data(), comb.data(), S, hc, D, x.data());
  ffn_sublayer(L, c, x.data(), f.data());
  logits->resize(S * cf.vocab_size);
  mtp_head(x.data(), S, c.vrows, logits->data());
  *streams = std::move(x);
  scratch->end_call(S);
  return ok_status();
}

}  // namespace strata
