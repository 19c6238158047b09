// DeepseekV4Model attention sublayer: per-head-normalised queries, sliding window KV (FP8 nope
// part, bf16 RoPE tail), per-layer compressor (CSA ratio 4 with overlapping windows, HCA with
// the config's ratio), CSA indexer (own overlapping compressor, Hadamard rotation, FP4 keys
// and queries, weighted ReLU scores, top-k), attention sink, output de-rotation, grouped
// low-rank output. Reference: V4-Flash model.py Attention / Compressor / Indexer /
// get_window_topk_idxs / get_compress_topk_idxs; spec §2.3–§2.5.
//
// Generalisation to a chunk [s0, s0+S) (the reference has only prefill at 0 and decode):
//   * compressor: token p enters slot p mod m (overlap: current-group rows m..2m-1), score
//     with ape[p mod m] added; when (p+1) mod m == 0 the group is pooled (overlap: first half
//     of the channels from the previous group's rows, second half from the current group's;
//     softmax over the 2m slots per channel) and the current rows shift to the previous rows.
//     This equals the reference's prefill pooling and its decode path.
//   * numeric form (exec/call_shape.h): canonical (serving) lays out every query as the
//     reference's one-token decode call at its position (window decode layout, indexer
//     scores over the (p+1)/m visible rows, HCA list of the visible rows, scalar-tail
//     positions of a 1-token tensor); the reference emulation as below.
//   * window list (reference): a prefill (s0 == 0, or a chunk of a prompt of known length,
//     see V4ForwardOptions::prompt_len) uses the reference prefill layout of the whole call
//     (min(S, W) entries, unreachable trailing); otherwise the decode layout per query
//     (positions p-W+1..p, or 0..p then -1s).
//     Positions >= s0 are read from this call's fresh KV, earlier ones from the ring, which is
//     written after the call's attention.
//   * compressed list: HCA rows 0..(p+1)/m-1 (prefill: S/m entries of the whole call, -1 past
//     the visible);
//     CSA the indexer's top-k list (score-descending; masked entries -1).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>

#include "base/check.h"
#include "base/phase_profile.h"
#include "base/thread_pool.h"
#include "exec/selected_rows.h"
#include "exec/deepseek_v4/v4_forward_call.h"
#include "exec/deepseek_v4/v4_ops.h"
#include "model/dtype.h"

namespace strata {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

float exp_or_zero(float x) { return std::isinf(x) && x < 0 ? 0.0f : v41::sleef_expf(x); }
}  // namespace

void DeepseekV4Model::compress(const V4CompressorWeights& cw, V4CompressorState& st, bool rotate,
                               int layer, const float* x, int64_t s0, int64_t S) const {
  const int64_t D = config_.dim, w = st.width, C = st.cols();
  const int m = st.ratio;
  const int rd = config_.rope_head_dim;
  const int64_t rowoff = st.overlap ? m : 0;
  std::vector<float> a(S * C), z(S * C);
  v4::linear_f32(x, S, cw.wkv, C, D, a.data(), cw.wkv_packed.get(), pool_.get());
  v4::linear_f32(x, S, cw.wgate, C, D, z.data(), cw.wgate_packed.get(), pool_.get());
  const float* ape = cw.ape.f32();
  const int nslots = st.overlap ? 2 * m : m;
  std::vector<float> pooled(w), normed(w), sk(nslots), ss(nslots), e(nslots);
  for (int64_t i = 0; i < S; ++i) {
    const int64_t p = s0 + i;
    const int r = static_cast<int>(p % m);
    float* kvr = &st.kv[(rowoff + r) * C];
    float* scr = &st.score[(rowoff + r) * C];
    for (int64_t j = 0; j < C; ++j) {
      kvr[j] = a[i * C + j];
      scr[j] = z[i * C + j] + ape[r * C + j];
    }
    if ((p + 1) % m != 0) continue;
    for (int64_t j = 0; j < w; ++j) {
      for (int t = 0; t < nslots; ++t) {
        const int64_t col = (st.overlap && t >= m) ? w + j : j;
        sk[t] = st.kv[t * C + col];
        ss[t] = st.score[t * C + col];
      }
      float mx = kNegInf;
      for (int t = 0; t < nslots; ++t) mx = std::max(mx, ss[t]);
      float sum = 0.0f;
      for (int t = 0; t < nslots; ++t) {
        e[t] = exp_or_zero(ss[t] - mx);
        sum += e[t];
      }
      float v = 0.0f;
      for (int t = 0; t < nslots; ++t) v += sk[t] * (e[t] / sum);
      pooled[j] = round_to_bf16(v);
    }
    if (st.overlap) {
      std::copy_n(&st.kv[m * C], m * C, st.kv.data());
      std::copy_n(&st.score[m * C], m * C, st.score.data());
    }
    v41::rms_norm(pooled.data(), 1, w, &cw.norm, config_.norm_eps, normed.data());
    const int64_t g = p / m;
    rope_[layer].apply(normed.data() + w - rd, g * m, false);
    if (rotate) {
      v4::hadamard(normed.data(), 1, w);
      v41::qdq_fp4_e8m0(normed.data(), w, 32);
    } else {
      v41::qdq_fp8(normed.data(), w - rd, 64);
    }
    STRATA_CHECK(st.base + st.n_rows() == g);
    st.rows.insert(st.rows.end(), normed.begin(), normed.end());
  }
}

void DeepseekV4Model::indexer(int L, const float* x, const float* qr, Call& c,
                              std::vector<std::vector<int32_t>>* lists) const {
  const V4IndexerWeights& iw = weights_->layer(L).attn.indexer;
  const int64_t S = c.S, s0 = c.s0;
  const int64_t m = config_.layers[L].ratio;
  const int64_t ih = config_.index_n_heads, id = config_.index_head_dim;
  const int rd = config_.rope_head_dim;
  const v41::RopeTable& rope = rope_[L];
  std::vector<float> q(S * ih * id);
  v4::linear(qr, S, iw.wq_b, q.data(), pool_.get());
  parallel_rows(pool_.get(), S, 4, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      for (int64_t h = 0; h < ih; ++h) {
        float* qh = &q[(i * ih + h) * id];
        rope.apply(qh + id - rd, s0 + i, false);
        v4::hadamard(qh, 1, id);
      }
      v41::qdq_fp4_e8m0(&q[i * ih * id], ih * id, 32);
    }
  });
  // Indexer compressor: partial state and emitted keys go through the sequence state; the
  // scored keys are read back from it (serving format, == the QDQ'd values).
  V4CompressorState st;
  c.seq->load_compressor(L, /*index=*/true, &st);
  st.base = s0 / m;
  compress(iw.compressor, st, true, L, x, s0, S);
  DcpComm* const dcp = dcp_comm_.get();  // null, or: this rank writes and scores its keys only
  for (int64_t k = 0; k < st.n_rows(); ++k)
    if (!dcp || dcp->owns(st.base + k)) c.seq->write_index_key(L, st.base + k, &st.rows[k * id]);
  c.seq->store_compressor(L, /*index=*/true, st);
  const int64_t nkeys = st.base + st.n_rows();
  std::vector<uint8_t> key_scratch;
  std::vector<const uint8_t*> kp(nkeys);
  c.seq->index_key_codes(L, 0, nkeys, &key_scratch, kp.data());
  std::vector<float> wt(S * ih);
  v41::linear(x, S, iw.weights_proj, wt.data(), pool_.get());
  const float wscale = static_cast<float>(std::pow(static_cast<double>(id), -0.5) *
                                          std::pow(static_cast<double>(ih), -0.5));
  for (auto& v : wt) v = round_to_bf16(v * wscale);

  // Scored list length: the reference scores every compressed row of its call (a prefill of
  // vS tokens: vS/m rows; otherwise the rows existing after this call); rows a query cannot
  // see yet are masked with -inf (and are never read).
  // Canonical form: each row scores exactly its visible (p+1)/m rows, as a decode call at p.
  const int64_t clen_call = c.vprefill ? c.vrows.n / m : (s0 + S) / m;
  STRATA_CHECK(nkeys >= (s0 + S) / m);
  lists->assign(S, {});
  const int slot = static_cast<int>(std::find(index_layers_.begin(), index_layers_.end(), L) -
                                    index_layers_.begin());
  if (c.routes) c.routes->index[slot].assign(S, {});
  // Per key its score from the FP4 codes of query and key (v41::index_scores_fp4: exact
  // integer block sums, blocks added in f64, then relu / weight / sum over heads).
  // Queries are independent (each writes its own list): split over the pool.
  //
  // Under DCP the rows of every query's scores are computed first, each rank its own keys'
  // columns (a compacted key list), then completed by exchange_owned_columns; the top-k then
  // runs on the same scores as on one rank.
  std::vector<float> all_scores;
  if (dcp) {
    all_scores.assign(S * clen_call, kNegInf);
    if (static_cast<int64_t>(kp.size()) < clen_call) kp.resize(clen_call, nullptr);
    std::vector<int64_t> cols;
    dcp::for_owned(0, clen_call, dcp->interleave(), dcp->size(), dcp->rank(), [&](int64_t g) {
      kp[cols.size()] = g < nkeys ? kp[g] : nullptr;
      cols.push_back(g);
    });
    parallel_rows(pool_.get(), S, 2, [&](int64_t i0, int64_t i1) {
      v41::IndexQueryFp4 qf;
      std::vector<float> tmp(cols.size());
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t vis = (s0 + i + 1) / m;
        const int64_t nv = std::lower_bound(cols.begin(), cols.end(), vis) - cols.begin();
        qf.set(&q[i * ih * id], ih, id);
        if (nv > 0) {
          v41::index_scores_fp4(qf, kp.data(), nv, &wt[i * ih], tmp.data());
        }
        for (int64_t j = 0; j < nv; ++j) all_scores[i * clen_call + cols[j]] = tmp[j];
      }
    });
    profile::PhaseScope phase("indexer: DCP score exchange");
    exchange_owned_columns(*dcp, all_scores.data(), S, clen_call, clen_call);
  }
  parallel_rows(pool_.get(), S, 2, [&](int64_t i0, int64_t i1) {
    v41::IndexQueryFp4 qf;
    std::vector<float> score(clen_call);
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t p = s0 + i;
      const int64_t vis = (p + 1) / m;
      const int64_t clen = c.canonical ? vis : clen_call;
      const int64_t k = std::min<int64_t>(config_.index_topk, clen);
      const int64_t nv = std::min(vis, clen);
      if (dcp) {
        std::copy_n(&all_scores[i * clen_call], clen, score.data());
      } else {
        qf.set(&q[i * ih * id], ih, id);
        if (nv > 0) {
          v41::index_scores_fp4(qf, kp.data(), nv, &wt[i * ih], score.data());
        }
      }
      for (int64_t g = std::max<int64_t>(nv, 0); g < clen; ++g) score[g] = kNegInf;
      std::vector<int32_t> sel = v41::torch_topk(score.data(), clen, k, true);
      std::vector<int32_t>& list = (*lists)[i];
      for (int32_t g : sel) {
        list.push_back(g < vis ? g : -1);
        if (c.routes && g < vis) c.routes->index[slot][i].push_back(g);
      }
    }
  });
}

void DeepseekV4Model::attention(int L, const float* x, Call& c, float* out) const {
  const LayerSchedule& ls = config_.layers[L];
  const V4AttentionWeights& aw = weights_->layer(L).attn;
  const int64_t S = c.S, s0 = c.s0, H = config_.n_heads, hd = config_.head_dim;
  const int64_t ql = config_.q_lora_rank, W = config_.window_size;
  const int rd = config_.rope_head_dim;
  const v41::RopeTable& rope = rope_[L];

  std::vector<float> qr(S * ql), q(S * H * hd), kv(S * hd);
  attention_queries(L, x, S, s0, c.vrows, qr.data(), q.data());
  window_kv(L, x, S, s0, kv.data());

  // Compressed part.
  // Compressor partial state and emitted rows go through the sequence state; attention reads
  // the compressed rows back from it.
  std::vector<std::vector<int32_t>> csa_lists;
  std::vector<float> crows;
  SelectedRows csel;  // CSA layers (exec/selected_rows.h)
  const bool comp = ls.ratio > 0;
  if (comp) {
    if (ls.has_indexer) indexer(L, x, qr.data(), c, &csa_lists);
    V4CompressorState st;
    c.seq->load_compressor(L, /*index=*/false, &st);
    st.base = s0 / ls.ratio;
    compress(aw.compressor, st, false, L, x, s0, S);
    DcpComm* const dcp = dcp_comm_.get();  // null, or: this rank holds its rows only
    for (int64_t k = 0; k < st.n_rows(); ++k)
      if (!dcp || dcp->owns(st.base + k)) c.seq->write_compressed_row(L, st.base + k, &st.rows[k * hd]);
    c.seq->store_compressor(L, /*index=*/false, st);
    const int64_t ncomp = st.base + st.n_rows();
    STRATA_CHECK(ncomp >= (s0 + S) / ls.ratio);
    auto read = [&](int64_t g0, int64_t n, float* out) {
      c.seq->read_compressed_rows(L, g0, n, out);
    };
    if (ls.has_indexer) {  // CSA: only the rows the top-k lists select
      csel.gather(csa_lists, ncomp, hd, read, nullptr, dcp);
    } else if (dcp) {  // HCA under DCP: every row, from its owner
      std::vector<std::vector<int32_t>> every(1, std::vector<int32_t>(ncomp));
      std::iota(every[0].begin(), every[0].end(), 0);
      csel.gather(every, ncomp, hd, read, nullptr, dcp);
    } else {  // HCA attends every visible row
      crows.resize(ncomp * hd);
      c.seq->read_compressed_rows(L, 0, ncomp, crows.data());
    }
  }
  auto comp_row = [&](int64_t g) -> const float* {
    return ls.has_indexer || dcp_comm_ ? csel.row(g) : &crows[g * hd];
  };

  // Window rows of earlier calls a query of this call can see: positions [wlo, s0).
  const int64_t wlo = std::max<int64_t>(0, s0 - W + 1);
  std::vector<float> wprev((s0 - wlo) * hd);
  for (int64_t pos = wlo; pos < s0; ++pos) c.seq->read_window_row(L, pos, &wprev[(pos - wlo) * hd]);

  const float scale = static_cast<float>(std::pow(static_cast<double>(hd), -0.5));
  const float* sink = aw.attn_sink.f32();
  std::vector<float> o(S * H * hd);
  // Query i's row list (window, then compressed rows; nullptr = the kernel's -1).
  auto gather_rows = [&](int64_t i, std::vector<const float*>& rows) {
    const int64_t p = s0 + i;
    rows.clear();
    auto window_ptr = [&](int64_t pos) -> const float* {
      STRATA_CHECK(pos >= wlo);
      return pos >= s0 ? &kv[(pos - s0) * hd] : &wprev[(pos - wlo) * hd];
    };
    if (c.vprefill) {
      const int64_t width = std::min(c.vrows.n, W);
      const int64_t first = std::max<int64_t>(p - W + 1, 0);
      for (int64_t j = 0; j < width; ++j) {
        const int64_t pos = first + j;
        rows.push_back(pos <= p ? window_ptr(pos) : nullptr);
      }
    } else if (p >= W - 1) {
      for (int64_t pos = p - W + 1; pos <= p; ++pos) rows.push_back(window_ptr(pos));
    } else {
      for (int64_t pos = 0; pos <= p; ++pos) rows.push_back(window_ptr(pos));
      for (int64_t j = p + 1; j < W; ++j) rows.push_back(nullptr);
    }
    if (comp) {
      const int64_t vis = (p + 1) / ls.ratio;
      if (ls.has_indexer) {
        for (int32_t g : csa_lists[i]) rows.push_back(g >= 0 ? comp_row(g) : nullptr);
      } else {
        const int64_t n = c.vprefill ? c.vrows.n / ls.ratio : vis;
        for (int64_t g = 0; g < n; ++g) rows.push_back(g < vis ? comp_row(g) : nullptr);
      }
    }
  };
  // Heads [h0, h1) of query i: scores, softmax and PV (v4::sparse_attn_heads), then the
  // output's rope dims de-rotated.
  auto attend_heads = [&](int64_t i, const std::vector<const float*>& rows, int64_t h0,
                          int64_t h1) {
    v4::sparse_attn_heads(&q[(i * H + h0) * hd], rows.data(), static_cast<int64_t>(rows.size()),
                          hd, h1 - h0, sink + h0, scale, c.vrows.tok(i) * H + h0,
                          c.vrows.n * H, &o[(i * H + h0) * hd]);
    rope.apply_heads(&o[(i * H + h0) * hd] + hd - rd, h1 - h0, hd, s0 + i, true);
  };
  // Queries and heads are independent output rows: a call of several queries splits them over
  // the pool, a single query its heads (same bits at any split).
  const bool threads = pool_ && pool_->num_threads() > 1;
  if (S > 1 && threads) {
    pool_->parallel_for(S, [&](int64_t i0, int64_t i1) {
      thread_local std::vector<const float*> t_rows;
      for (int64_t i = i0; i < i1; ++i) {
        gather_rows(i, t_rows);
        attend_heads(i, t_rows, 0, H);
      }
    });
  } else {
    std::vector<const float*> rows;
    for (int64_t i = 0; i < S; ++i) {
      gather_rows(i, rows);
      const int64_t nr = static_cast<int64_t>(rows.size());
      if (threads && H * nr * hd >= (int64_t{1} << 16)) {
        pool_->parallel_for(H, [&](int64_t h0, int64_t h1) { attend_heads(i, rows, h0, h1); });
      } else {
        attend_heads(i, rows, 0, H);
      }
    }
  }

  for (int64_t i = std::max<int64_t>(0, S - W); i < S; ++i)
    c.seq->write_window_row(L, s0 + i, &kv[i * hd]);

  attention_output(L, o.data(), S, out);
}

void DeepseekV4Model::attention_queries(int L, const float* x, int64_t S, int64_t s0,
                                        const v41::CallRows& vrows, float* qr, float* q) const {
  const V4AttentionWeights& aw = weights_->layer(L).attn;
  const int64_t H = config_.n_heads, hd = config_.head_dim, ql = config_.q_lora_rank;
  const int rd = config_.rope_head_dim;
  // q_norm(wq_a x) -> wq_b -> per-head rms (no weight) -> RoPE tail.
  std::vector<float> t(S * ql);
  v4::linear(x, S, aw.wq_a, t.data(), pool_.get());
  v41::rms_norm(t.data(), S, ql, &aw.q_norm, config_.norm_eps, qr);
  v4::linear(qr, S, aw.wq_b, q, pool_.get());
  parallel_rows(pool_.get(), S, 4, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {  // token i's heads: rows tok(i)*H.. of the reference's
      v4::head_rms(&q[i * H * hd], H, hd, config_.norm_eps, vrows.tok(i) * H, vrows.n * H);
      rope_[L].apply_heads(&q[i * H * hd + hd - rd], H, hd, s0 + i, false);
    }
  });
}

void DeepseekV4Model::window_kv(int L, const float* x, int64_t S, int64_t s0, float* kv) const {
  const V4AttentionWeights& aw = weights_->layer(L).attn;
  const int64_t hd = config_.head_dim;
  const int rd = config_.rope_head_dim;
  // kv_norm(wkv x) -> RoPE tail -> FP8 QDQ of the nope dims (block 64).
  std::vector<float> t(S * hd);
  v4::linear(x, S, aw.wkv, t.data(), pool_.get());
  v41::rms_norm(t.data(), S, hd, &aw.kv_norm, config_.norm_eps, kv);
  parallel_rows(pool_.get(), S, 8, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      rope_[L].apply(&kv[i * hd + hd - rd], s0 + i, false);
      v41::qdq_fp8(&kv[i * hd], hd - rd, config_.kv_fp8_block());
    }
  });
}

void DeepseekV4Model::attention_output(int L, const float* o, int64_t S, float* out) const {
  const V4AttentionWeights& aw = weights_->layer(L).attn;
  // Grouped low-rank output: u[g] = wo_a[g] · o[g] (bf16 einsum over the bf16-dequantized
  // wo_a, as convert.py prepares it), then wo_b.
  const int64_t G = config_.o_groups, R = config_.o_lora_rank;
  std::vector<float> u(S * G * R);
  v41::grouped_wo_a(o, S, config_.n_heads * config_.head_dim, aw.wo_a, G, R, u.data(),
                    pool_.get());
  v4::linear(u.data(), S, aw.wo_b, out, pool_.get());
}

}  // namespace strata
