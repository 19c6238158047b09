// DeepseekV41Model attention sublayer: sliding window + CSA2 compressed KV (Full / Reindex /
// Reuse roles), compressor with resumable partial state, indexer with FP4 keys and two-level
// candidate blocks, attention sink, RoPE/YaRN with output de-rotation, grouped low-rank
// output projection. Reference: model.py Attention / Compressor / Indexer /
// select_candidate_blocks / get_window_topk_idxs; kernel_cpu.py sparse_attn; spec §2.3, §2.6.
//
// Generalisation to a chunk [s0, s0+S) (the reference only has prefill at 0 and decode):
//   * window: query p sees positions max(0, p-W+1)..p, read from this call's fresh KV for
//     positions >= s0 and from the ring for earlier ones; the ring is written after the
//     call's attention (a chunk must not overwrite rows its own earlier queries still read).
//     List layout (the kernel's 64-entry softmax blocks and torch's reduction order over them
//     see where the invalid entries sit): the canonical form (exec/call_shape.h) lays out
//     every query as the reference decode does (W entries, unreachable leading); the
//     reference emulation lays out prompt chunks as its whole-prompt prefill (min(L, W)
//     entries, unreachable trailing, L = V41ForwardOptions::prompt_len or the chunk's end).
//   * compressor: tokens enter their group slot p mod m one by one; a group is pooled when
//     its last token (p+1) mod m == 0 arrives, whichever call that is.
//   * indexer: canonical: row p scores its (p+1)/m visible keys, k = min(index_topk,
//     (p+1)/m) (a decode call at p); reference: score rows of L/m entries (rows >= (p+1)/m
//     masked to -inf, the reference prefill mask), k = min(index_topk, L/m), and decode
//     steps read the published index keys (reference quirk, see
//     V41ForwardOptions::decode_step). Top-k with torch's tie order either way.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <span>

#include "base/check.h"
#include "base/phase_profile.h"
#include "base/scratch.h"
#include "exec/selected_rows.h"
#include "exec/deepseek_v41/v41_forward_ctx.h"
#include "model/dtype.h"

namespace strata {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kPosInf = std::numeric_limits<float>::infinity();

// Top-k of `score` with torch's CPU tie order, returned ascending by index.
std::vector<int32_t> topk_ascending(const float* score, int64_t n, int64_t k, bool sorted) {
  std::vector<int32_t> idx = v41::torch_topk(score, n, k, sorted);
  std::sort(idx.begin(), idx.end());
  return idx;
}
}  // namespace

void DeepseekV41Model::compress(int L, const float* x, Ctx& c, std::vector<float>* latent,
                                std::vector<int64_t>* latent_rows) const {
  const LayerSchedule& ls = config_.layers[L];
  const V41CompressorWeights& cw = weights_->layer(L).attn.compressor;
  const int64_t S = c.S, hd = config_.head_dim, D = config_.dim;
  const int m = ls.ratio;
  latent->clear();
  latent_rows->clear();
  if (m == 1) {
    // Plain projection in bf16, one row per token, no state.
    std::vector<float> t(S * hd);
    v41::linear(x, S, cw.wkv, t.data(), pool_.get());
    latent->resize(S * hd);
    v41::rms_norm(t.data(), S, hd, &cw.norm, config_.norm_eps, latent->data());
    for (int64_t i = 0; i < S; ++i) latent_rows->push_back(c.s0 + i);
    return;
  }
  // ratio > 1: fp32 projections (weights promoted to fp32), channel-wise softmax pooling.
  std::vector<float> a(S * hd), z(S * hd);
  v41::linear_f32(x, S, cw.wkv.weight, hd, D, a.data(), cw.wkv.packed ? &cw.wkv.packed->seq : nullptr, pool_.get());
  v41::linear_f32(x, S, cw.wgate.weight, hd, D, z.data(), cw.wgate.packed ? &cw.wgate.packed->seq : nullptr, pool_.get());
  std::vector<float> pooled(hd), normed(hd);
  // The partial group (state kind compressor_state, f32): loaded once, stored back once.
  STRATA_CHECK_MSG(!ls.overlap_compressor, "layer {}: V4.1 compressor is not overlapping", L);
  std::vector<float> ckv(m * hd), csc(m * hd);
  c.seq->get_compressor_state(L, ckv.data(), csc.data());
  for (int64_t i = 0; i < S; ++i) {
    const int64_t p = c.s0 + i;
    const int slot = static_cast<int>(p % m);
    std::copy_n(&a[i * hd], hd, &ckv[slot * hd]);
    std::copy_n(&z[i * hd], hd, &csc[slot * hd]);
    if ((p + 1) % m != 0) continue;
    for (int64_t j = 0; j < hd; ++j) {
      float mx = kNegInf;
      for (int r = 0; r < m; ++r) mx = std::max(mx, csc[r * hd + j]);
      float e[16];
      float sum = 0.0f;
      for (int r = 0; r < m; ++r) {
        e[r] = v41::sleef_expf(csc[r * hd + j] - mx);
        sum += e[r];
      }
      float v = 0.0f;
      for (int r = 0; r < m; ++r) v += ckv[r * hd + j] * (e[r] / sum);
      pooled[j] = round_to_bf16(v);
    }
    v41::rms_norm(pooled.data(), 1, hd, &cw.norm, config_.norm_eps, normed.data());
    latent->insert(latent->end(), normed.begin(), normed.end());
    latent_rows->push_back(p / m);
  }
  c.seq->set_compressor_state(L, ckv.data(), csc.data());
}

void DeepseekV41Model::indexer(int L, const float* x, float* q, Ctx& c) const {
  const LayerSchedule& ls = config_.layers[L];
  const V41IndexerWeights& iw = weights_->layer(L).attn.indexer;
  const int64_t S = c.S, m = ls.ratio;
  const int64_t ih = config_.index_n_heads, id = config_.index_head_dim;
  // Score rows are stored with a stride of clen entries (the reference call's end /m; the
  // canonical form: this call's end /m). Row i scores `row_len(i)` of them: all clen in the
  // reference (-inf past the visible ones), exactly its visible (p+1)/m in the canonical
  // form (a one-token decode call at p).
  const int64_t clen = c.width_end / m;
  auto row_len = [&](int64_t i) { return c.canonical ? (c.s0 + i + 1) / m : clen; };
  Ctx::TopK& out = c.topk[L];
  out.rows.assign(S, {});
  out.width = 0;
  out.row_width.clear();
  if (clen == 0) return;  // the reference skips the indexer: empty selection

  const v41::RopeTable& rope = rope_[L];
  const int rd = config_.rope_head_dim;
  STRATA_CHECK_MSG(q != nullptr, "layer {}: indexer query projection missing", L);
  for (int64_t i = 0; i < S; ++i) {
    rope.apply_heads(&q[i * ih * id + id - rd], ih, id, c.s0 + i, false);
    v41::qdq_fp4_e8m0(&q[i * ih * id], ih * id, 32);
  }
  std::vector<float> w(S * ih);
  v41::linear(x, S, iw.weights_proj, w.data(), pool_.get());
  const float wscale = static_cast<float>(std::pow(static_cast<double>(id), -0.5) *
                                          std::pow(static_cast<double>(ih), -0.5));
  for (auto& v : w) v = round_to_bf16(v * wscale);

  int kowner = ls.index_key_owner;
  if (c.decode_step && c.seq->published_index_owner() >= 0) kowner = c.seq->published_index_owner();
  // Rows the key owner has written: through this call's end if it ran already (an earlier
  // layer or this one), else through the previous call's end.
  const int64_t kend = kowner <= L ? c.s0 + S : c.s0;
  const int64_t krows = kend / config_.layers[kowner].ratio;
  STRATA_CHECK_MSG(kowner != ls.index_key_owner || krows >= (c.s0 + S) / m,
                   "layer {}: {} index keys < {}", L, krows, (c.s0 + S) / m);
  // Keys any query of the call can see: g < min(krows, (s0+S)/m).
  const int64_t nkeys = std::min<int64_t>(krows, (c.s0 + S) / m);
  const bool cand_src = ls.is_candidate_source;
  const bool use_cand = ls.uses_candidates;
  if (cand_src) c.candidates[L].assign(S * clen, 0);
  const std::vector<uint8_t>* cand = use_cand ? &c.candidates[ls.candidate_owner] : nullptr;
  if (cand) STRATA_CHECK(static_cast<int64_t>(cand->size()) == S * clen);

  const int64_t k = std::min<int64_t>(config_.index_topk, clen);
  out.width = k;
  if (c.canonical) {
    out.row_width.resize(S);
    for (int64_t i = 0; i < S; ++i)
      out.row_width[i] = static_cast<int32_t>(std::min<int64_t>(config_.index_topk, row_len(i)));
  }
  const int64_t bs = config_.candidate_block_size;
  // Per token the query in the index keys' FP4 form: the dots come from the codes of both
  // (v41::index_dots_fp4: exact integer block sums, blocks added in f64).
  std::vector<v41::IndexQueryFp4> qf(S);
  for (int64_t i = 0; i < S; ++i) qf[i].set(&q[i * ih * id], ih, id);
  auto capture_routes = [&] {
    if (!c.routes) return;
    const auto& isl = config_.index_source_layers;
    const int slot = static_cast<int>(std::find(isl.begin(), isl.end(), L) - isl.begin());
    c.routes->index[slot] = out.rows;
  };
  DcpComm* const dcp = dcp_comm_.get();
  if (cand != nullptr && dcp == nullptr) {
    // After the candidate source (without DCP): only the candidate blocks' keys are scored.
    // The reference's mask makes every other score -inf (and a key's score depends on that
    // key alone), so torch_topk_sparse selects from that row without building it.
    profile::PhaseScope phase("indexer: candidates");
    std::vector<int32_t> idx;
    std::vector<float> val;
    std::vector<const uint8_t*> kp;
    std::vector<std::vector<uint8_t>> scratch;  // one per run: kp may point into each
    for (int64_t i = 0; i < S; ++i) {
      const int64_t rl = row_len(i), vis = std::min((c.s0 + i + 1) / m, rl);
      if (rl == 0) continue;  // (canonical) the decode call at p skips the indexer
      const uint8_t* cm = &(*cand)[i * clen];
      idx.clear();
      kp.clear();
      scratch.clear();
      for (int64_t g = 0; g < vis; ++g) {
        uint64_t eight = 1;
        if (g + 8 <= vis) std::memcpy(&eight, cm + g, 8);
        if (eight == 0) {  // 8 non-candidates
          g += 7;
          continue;
        }
        if (!cm[g]) continue;
        int64_t e = g + 1;  // the run of candidates [g, e)
        while (e < vis && cm[e]) ++e;
        const size_t at = kp.size();
        kp.resize(at + (e - g), nullptr);  // keys not written yet score as zeros
        scratch.emplace_back();
        c.seq->index_key_codes(kowner, g, std::clamp<int64_t>(nkeys - g, 0, e - g),
                               &scratch.back(), kp.data() + at);
        for (int64_t t = g; t < e; ++t) idx.push_back(static_cast<int32_t>(t));
        g = e - 1;
      }
      const int64_t nc = static_cast<int64_t>(idx.size());
      val.resize(nc);
      if (nc > 0) v41::index_scores_fp4(qf[i], kp.data(), nc, &w[i * ih], val.data());
      std::vector<int32_t> sel =
          v41::torch_topk_sparse(rl, idx.data(), val.data(), nc, out.width_of(i), false);
      std::sort(sel.begin(), sel.end());
      for (int32_t g : sel)
        if (g < vis) out.rows[i].push_back(g);
    }
    capture_routes();
    return;
  }
  // scores [S][clen]: every (token, key) score is independent of the others, so key ranges
  // run in parallel (reading and decoding their own keys) with the same bits at any split.
  // Every element of scores is written below (a score or -inf) before any is read.
  thread_local Scratch<float> s_scores;
  float* const scores_p = s_scores.get(S * clen);
  auto score_keys = [&](int64_t g0, int64_t g1) {
    const int64_t nk = std::max<int64_t>(0, std::min(g1, nkeys) - g0);
    std::vector<uint8_t> scratch;
    thread_local Scratch<const uint8_t*> s_kp;
    const uint8_t** const kpp = s_kp.get(g1 - g0);
    c.seq->index_key_codes(kowner, g0, nk, &scratch, kpp);
    std::fill(kpp + nk, kpp + (g1 - g0), nullptr);  // keys not written yet score as zeros
    const std::span<const uint8_t*> kp(kpp, g1 - g0);
    // The keys scored here: all of [g0, g1), or under DCP the ones this rank owns (`cols`,
    // ascending, their key pointers moved to the front of kp; the other columns come from
    // their owners, exchange_owned_columns below). A rank reads only keys it wrote.
    std::vector<int64_t> cols;
    if (dcp) {
      dcp::for_owned(g0, g1, dcp->interleave(), dcp->size(), dcp->rank(), [&](int64_t g) {
        kp[cols.size()] = kp[g - g0];
        cols.push_back(g);
      });
      if (cols.empty()) return;
    }
    const int64_t nc = dcp ? static_cast<int64_t>(cols.size()) : g1 - g0;
    std::vector<float> tmp(dcp ? nc : 0);
    for (int64_t i = 0; i < S; ++i) {
      const int64_t vis = (c.s0 + i + 1) / m;
      float* score = scores_p + i * clen;
      if (!dcp) {  // columns g0 + j: the first e are visible, written in place
        const int64_t e = std::clamp<int64_t>(vis - g0, 0, nc);
        if (e > 0) {
          v41::index_scores_fp4(qf[i], kp.data(), e, &w[i * ih], score + g0);
        }
        std::fill(score + g0 + e, score + g1, kNegInf);
        continue;
      }
      // Owned columns (ascending): the first e are visible; scattered to their positions.
      const int64_t e = std::lower_bound(cols.begin(), cols.end(), vis) - cols.begin();
      if (e > 0) {
        v41::index_scores_fp4(qf[i], kp.data(), e, &w[i * ih], tmp.data());
      }
      for (int64_t j = 0; j < nc; ++j) score[cols[j]] = j < e ? tmp[j] : kNegInf;
    }
  };
  // At least 64 keys per range (x S tokens x heads x dims: >= ~130K multiply-adds, a few us):
  // below that a dispatch costs more than it saves.
  // Each range in pieces of at most 2,048 keys: their pointer array stays in L1 (a decode
  // token at 16K context otherwise streams 128 KB of pointers per layer through the cache).
  auto score_range = [&](int64_t g0, int64_t g1) {
    for (int64_t a = g0; a < g1; a += 2048) score_keys(a, std::min(g1, a + 2048));
  };
  if (profile::PhaseScope phase("indexer: scores"); pool_ != nullptr) {
    pool_->parallel_for(clen, score_range, 64);
  } else {
    score_range(0, clen);
  }
  if (dcp) {
    profile::PhaseScope phase("indexer: DCP score exchange");
    exchange_owned_columns(*dcp, scores_p, S, clen, clen);
  }
  profile::PhaseScope topk_phase("indexer: top-k");
  for (int64_t i = 0; i < S; ++i) {
    const int64_t vis = (c.s0 + i + 1) / m;
    const int64_t rl = row_len(i);
    float* score = scores_p + i * clen;
    if (rl == 0) continue;  // (canonical) the decode call at p skips the indexer
    if (cand_src) {
      // Level one: block score = max over the block; the block holding the newest visible
      // position is pinned; keep the top blocks that are not -inf.
      const int64_t nblk = (rl + bs - 1) / bs;
      std::vector<float> bscore(nblk, kNegInf);
      for (int64_t b = 0; b < nblk; ++b) {
        float mx = kNegInf;
        for (int64_t g = b * bs; g < std::min(rl, (b + 1) * bs); ++g) mx = std::max(mx, score[g]);
        bscore[b] = mx;
      }
      const int64_t last = vis > 0 ? (vis - 1) / bs : -1;
      if (last >= 0 && last < nblk) bscore[last] = kPosInf;
      std::vector<int32_t> top = topk_ascending(
          bscore.data(), nblk, std::min<int64_t>(config_.candidate_topk_blocks, nblk), true);
      uint8_t* cm = &c.candidates[L][i * clen];
      for (int32_t b : top) {
        if (!(bscore[b] > kNegInf)) continue;
        for (int64_t g = b * bs; g < std::min(rl, (b + 1) * bs); ++g) cm[g] = 1;
      }
    } else if (cand) {  // (DCP: without it the candidate path above returned)
      const uint8_t* cm = &(*cand)[i * clen];
      for (int64_t g = 0; g < rl; ++g)
        if (!cm[g]) score[g] = kNegInf;
    }
    std::vector<int32_t> sel = topk_ascending(score, rl, out.width_of(i), false);
    std::vector<int32_t>& row = out.rows[i];
    for (int32_t g : sel)
      if (g < vis) row.push_back(g);
  }
  capture_routes();
}

void DeepseekV41Model::attention(int L, const float* x, Ctx& c, float* out) const {
  const LayerSchedule& ls = config_.layers[L];
  const V41AttentionWeights& aw = weights_->layer(L).attn;
  const int64_t S = c.S, s0 = c.s0, D = config_.dim, H = config_.n_heads, hd = config_.head_dim;
  const int64_t ql = config_.q_lora_rank, W = config_.window_size;
  const int rd = config_.rope_head_dim;
  const v41::RopeTable& rope = rope_[L];

  // wq_a and wkv both read x: one dispatch (v41::linear_batch). Likewise wq_b and, on an
  // indexer layer, the indexer's wq_b both read qr.
  // Per-token buffers: thread-local scratch (base/scratch.h), each written whole before it
  // is read.
  thread_local Scratch<float> s_tq, s_tkv, s_qr, s_q, s_kv, s_o, s_u;
  float* const tq = s_tq.get(S * ql);
  float* const tkv = s_tkv.get(S * hd);
  {
    const V41Linear* w[2] = {&aw.wq_a, &aw.wkv};
    float* y[2] = {tq, tkv};
    v41::linear_batch(x, S, w, y, 2, pool_.get());
  }
  float* const qr = s_qr.get(S * ql);
  v41::rms_norm(tq, S, ql, &aw.q_norm, config_.norm_eps, qr);
  float* const q = s_q.get(S * H * hd);
  std::vector<float> iq;
  {
    const bool index_q = ls.ratio > 0 && ls.has_indexer && c.width_end / ls.ratio > 0;
    if (index_q) iq.resize(S * config_.index_n_heads * config_.index_head_dim);
    const V41Linear* w[2] = {&aw.wq_b, &aw.indexer.wq_b};
    float* y[2] = {q, iq.data()};
    v41::linear_batch(qr, S, w, y, index_q ? 2 : 1, pool_.get());
  }
  // Per token, independent rows (split over the pool in prefill): the query heads' RoPE; the
  // window KV row's norm, RoPE and FP8 QDQ.
  float* const kv = s_kv.get(S * hd);
  parallel_rows(pool_.get(), S, 16, [&](int64_t i0, int64_t i1) {
    v41::rms_norm(tkv + i0 * hd, i1 - i0, hd, &aw.kv_norm, config_.norm_eps, kv + i0 * hd);
    for (int64_t i = i0; i < i1; ++i) {
      rope.apply_heads(&q[i * H * hd + hd - rd], H, hd, s0 + i, false);
      rope.apply(&kv[i * hd + hd - rd], s0 + i, false);
      v41::qdq_fp8(&kv[i * hd], hd, config_.kv_fp8_block());
    }
  });

  // Compressed part: compressor (kv sources), index keys, latent RoPE + FP4 QDQ, indexer.
  const Ctx::TopK* topk = nullptr;
  if (ls.ratio > 0) {
    const int64_t m = ls.ratio;
    if (ls.has_compressor) {
      std::vector<float> latent;
      std::vector<int64_t> rows;
      compress(L, x, c, &latent, &rows);
      if (!c.emitted.empty()) c.emitted[L] = rows;
      const int64_t n = static_cast<int64_t>(rows.size());
      if (n > 0 && ls.owns_index_keys) {
        const V41IndexerWeights& iw = aw.indexer;
        const int64_t id = config_.index_head_dim;
        std::vector<float> kt(n * id), kk(n * id);
        v41::linear(latent.data(), n, iw.wk, kt.data(), pool_.get());
        v41::rms_norm(kt.data(), n, id, &iw.k_norm, config_.norm_eps, kk.data());
        for (int64_t r = 0; r < n; ++r) {
          if (dcp_comm_ && !dcp_comm_->owns(rows[r])) continue;  // another rank's key
          rope.apply(&kk[r * id + id - rd], rows[r] * m, false);
          v41::qdq_fp4_e8m0(&kk[r * id], id, 32);
          c.seq->write_index_key(L, rows[r], &kk[r * id]);
        }
        c.seq->set_published_index_owner(L);
      }
      for (int64_t r = 0; r < n; ++r) {
        if (dcp_comm_ && !dcp_comm_->owns(rows[r])) continue;  // another rank's row
        float* lr = &latent[r * hd];
        rope.apply(lr + hd - rd, rows[r] * m, false);
        v41::qdq_fp4_e4m3(lr, hd, 16);
        c.seq->write_compressed_row(L, rows[r], lr);
      }
    }
    if (ls.has_indexer) indexer(L, x, iq.empty() ? nullptr : iq.data(), c);
    STRATA_CHECK_MSG(ls.topk_owner >= 0, "layer {} has no top-k owner", L);
    topk = &c.topk[ls.topk_owner];
  }

  // Sparse attention per query and head.
  const float scale = static_cast<float>(std::pow(static_cast<double>(hd), -0.5));
  const float* sink = aw.attn_sink.f32();
  float* const o = s_o.get(S * H * hd);  // every (query, head) row written below
  // Ring rows of earlier calls this call's queries can see: [max(0, s0-W+1), s0), read once
  // (before this call's rows overwrite their slots).
  const int64_t ring0 = std::max<int64_t>(0, s0 - W + 1);
  const int64_t cavail = ls.ratio > 0 ? (s0 + S) / ls.ratio : 0;
  auto read_ring = [&](float* out, int64_t b, int64_t e) {
    c.seq->read_window_rows(L, ring0 + b, e - b, out + b * hd);
  };
  // Under DCP a collective (every rank's owned rows to every rank): called once per call,
  // on this thread.
  auto read_selected = [&](SelectedRows& into, ThreadPool* pool) {
    into.gather(topk->rows, cavail, hd, [&](int64_t g0, int64_t n, float* out) {
      c.seq->read_compressed_rows(ls.kv_owner, g0, n, out);
    }, pool, dcp_comm_.get());
  };
  // The KV row list of query i: the window (ring rows in `ring_rows`, this call's rows in kv),
  // then the selected compressed rows (in `sel_rows`).
  auto gather_rows = [&](int64_t i, const float* ring_rows, const SelectedRows& sel_rows,
                         std::vector<const float*>& out) {
    const int64_t p = s0 + i;
    out.clear();
    auto window_ptr = [&](int64_t pos) -> const float* {
      return pos >= s0 ? &kv[(pos - s0) * hd] : &ring_rows[(pos - ring0) * hd];
    };
    if (c.prefill_layout()) {
      // Reference prefill layout: min(L, W) entries from max(0, p-W+1), unreachable trailing.
      const int64_t width = std::min(c.width_end, W);
      const int64_t first = std::max<int64_t>(p - W + 1, 0);
      for (int64_t j = 0; j < width; ++j) {
        const int64_t pos = first + j;
        out.push_back(pos <= p ? window_ptr(pos) : nullptr);
      }
    } else {
      for (int64_t j = 0; j < W; ++j) {
        const int64_t pos = p - W + 1 + j;
        out.push_back(pos >= 0 ? window_ptr(pos) : nullptr);
      }
    }
    if (topk) {
      const auto& sel = topk->rows[i];
      for (int32_t g : sel) out.push_back(sel_rows.row(g));
      for (int64_t j = static_cast<int64_t>(sel.size()); j < topk->width_of(i); ++j)
        out.push_back(nullptr);
    }
  };
  // Heads [h0, h1) of query i from their scores ([h1-h0][rows]): softmax and PV
  // (sparse_attn_heads), then the output's rope dims de-rotated.
  auto softmax_pv_heads = [&](int64_t i, const std::vector<const float*>& rows, int64_t h0,
                              int64_t h1, const float* head_scores) {
    v41::sparse_attn_heads(rows.data(), static_cast<int64_t>(rows.size()), hd, h1 - h0,
                           sink + h0, head_scores, &o[(i * H + h0) * hd],
                           c.vrows.tok(i) * H + h0, c.vrows.n * H);
    rope.apply_heads(&o[(i * H + h0) * hd] + hd - rd, h1 - h0, hd, s0 + i, true);
  };
  // Heads [h0, h1) of query i against `rows`: their scores, then softmax_pv_heads. qT /
  // scores: scratch.
  auto attend_heads = [&](int64_t i, const std::vector<const float*>& rows, int64_t h0,
                          int64_t h1, std::vector<float>& qT, std::vector<float>& scores) {
    const int64_t nh = h1 - h0, nr = static_cast<int64_t>(rows.size());
    qT.resize(hd * nh);
    for (int64_t j = 0; j < hd; ++j)
      for (int64_t h = 0; h < nh; ++h) qT[j * nh + h] = q[(i * H + h0 + h) * hd + j];
    scores.resize(nh * nr);
    v41::qk_scores_heads(qT.data(), rows.data(), nr, hd, nh, scale, scores.data(), 0, nr);
    softmax_pv_heads(i, rows, h0, h1, scores.data());
  };
  const int64_t rows_per_query = W + (topk ? topk->width : 0);
  if (S == 1 && pool_ && pool_->num_threads() > 1 &&
      H * rows_per_query * hd >= min_parallel_attention_macs_) {
    // One decode token over the pool: each thread takes a range of heads and reads every KV
    // row it needs itself, into its own scratch. Splitting the row reads, the scores by rows
    // and the heads over the threads (the path below) made each thread read rows another one
    // had decoded: on this VM, when its two vCPUs sit apart (the 60+ GB/s bandwidth
    // readings), that took 4-6 ms per token of the bench model against ~2 ms on one thread
    // (docs/PERFORMANCE.md, session 13). Reading the ~0.3 MB of rows twice costs less.
    profile::PhaseScope phase("attention, heads over threads");
    // Under DCP the selected rows are gathered once here (a collective) and shared.
    thread_local SelectedRows dcp_sel;
    if (topk && dcp_comm_) read_selected(dcp_sel, nullptr);
    const SelectedRows* const shared_sel = &dcp_sel;
    pool_->parallel_for(H, [&](int64_t h0, int64_t h1) {
      thread_local std::vector<float> t_ring, t_qT, t_scores;
      thread_local SelectedRows t_sel;
      thread_local std::vector<const float*> t_rows;
      if (t_ring.size() < static_cast<size_t>((s0 - ring0) * hd)) t_ring.resize((s0 - ring0) * hd);
      read_ring(t_ring.data(), 0, s0 - ring0);
      if (topk && !dcp_comm_) read_selected(t_sel, nullptr);
      gather_rows(0, t_ring.data(), dcp_comm_ ? *shared_sel : t_sel, t_rows);
      attend_heads(0, t_rows, h0, h1, t_qT, t_scores);
      t_sel.trim(size_t{4} << 20);
    });
    dcp_sel.trim(size_t{4} << 20);
  } else {
    // Per-thread scratch kept across calls: rewritten before it is read, so it need not be
    // zeroed (a fresh vector here cleared ~256 KB per layer and token).
    thread_local std::vector<float> ring;
    if (ring.size() < static_cast<size_t>((s0 - ring0) * hd)) ring.resize((s0 - ring0) * hd);
    {
      // Decoded over the pool, at least 16 rows per thread (fewer run inline). `ring` is
      // thread_local: the lambda must use this thread's buffer by pointer.
      float* const ring_rows = ring.data();
      auto read = [&](int64_t b, int64_t e) { read_ring(ring_rows, b, e); };
      if (profile::PhaseScope phase("attention: window rows"); pool_) {
        pool_->parallel_for(s0 - ring0, read, 16);
      } else {
        read(0, s0 - ring0);
      }
    }
    // Compressed rows of the kv owner that some query selected (exec/selected_rows.h).
    thread_local SelectedRows crows;  // scratch kept across calls, as `ring`
    if (profile::PhaseScope phase("attention: selected rows"); topk) read_selected(crows, pool_.get());
    std::vector<const float*> rows;
    std::vector<float> qT(hd * H), scores;
    const bool queries_over_threads = S > 1 && pool_ && pool_->num_threads() > 1;
    if (queries_over_threads) {
      // A prefill: its queries (independent output rows) split over the pool, each thread
      // with its own row list and scratch. `ring` and `crows` are thread_local: the workers
      // must use this thread's by pointer.
      profile::PhaseScope phase("attention: queries over threads");
      const float* const ring_rows = ring.data();
      const SelectedRows* const sel = &crows;
      pool_->parallel_for(S, [&](int64_t i0, int64_t i1) {
        thread_local std::vector<const float*> t_rows;
        thread_local std::vector<float> t_qT, t_scores;
        for (int64_t i = i0; i < i1; ++i) {
          gather_rows(i, ring_rows, *sel, t_rows);
          attend_heads(i, t_rows, 0, H, t_qT, t_scores);
        }
      });
    }
    // Otherwise query by query, each query's rows or heads over the pool when it is large.
    const int64_t serial_queries = queries_over_threads ? 0 : S;
    for (int64_t i = 0; i < serial_queries; ++i) {
      gather_rows(i, ring.data(), crows, rows);
      // One KV row list for all heads (MQA): score every head against it at once, rows split
      // over the pool; then heads (independent output rows) split over the pool.
      const int64_t nr = static_cast<int64_t>(rows.size());
      const bool par =
          pool_ && pool_->num_threads() > 1 && H * nr * hd >= min_parallel_attention_macs_;
      if (!par) {
        profile::PhaseScope phase("attention: scores, softmax, pv");
        attend_heads(i, rows, 0, H, qT, scores);
        continue;
      }
      for (int64_t j = 0; j < hd; ++j)
        for (int64_t h = 0; h < H; ++h) qT[j * H + h] = q[(i * H + h) * hd + j];
      scores.resize(H * nr);
      auto score_rows = [&](int64_t t0, int64_t t1) {
        v41::qk_scores_heads(qT.data(), rows.data(), nr, hd, H, scale, scores.data(), t0, t1);
      };
      auto heads = [&](int64_t h0, int64_t h1) {
        softmax_pv_heads(i, rows, h0, h1, &scores[h0 * nr]);
      };
      {
        profile::PhaseScope phase("attention: scores");
        pool_->parallel_for(nr, score_rows);
      }
      profile::PhaseScope phase("attention: softmax, pv");
      pool_->parallel_for(H, heads);
    }
    crows.trim(size_t{4} << 20);  // keep at most 4 MB of scratch between calls
  }

  // Seed the ring with this call's rows (after attention, see the file comment).
  for (int64_t i = std::max<int64_t>(0, S - W); i < S; ++i)
    c.seq->write_window_row(L, s0 + i, &kv[i * hd]);

  // Grouped low-rank output: u[g] = wo_a[g] · o[g] (bf16 einsum; wo_a dequantized exactly),
  // then wo_b (FP8 GEMM).
  const int64_t G = config_.o_groups, R = config_.o_lora_rank;
  float* const u = s_u.get(S * G * R);
  v41::grouped_wo_a(o, S, H * hd, aw.wo_a, G, R, u, pool_.get());
  v41::linear(u, S, aw.wo_b, out, pool_.get());
  (void)D;
}

}  // namespace strata
