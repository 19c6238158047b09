// DeepseekV41Runner::decode_bytes_read (see deepseek_v41_runner.h): the numerator of the
// decode roofline in `strata bench model` (docs/PERFORMANCE.md "V4.1-shaped random model").
//
// Bytes one decode step reads from memory, for a sequence that already holds `len` tokens
// (the step runs the token at position p = len), every term in its stored format:
//
// Weights (tensor byte sizes from the checkpoint, weights + scales; backbone layers only:
// DSpark stages are not run; gate.bias_vl is not read without vision):
//   one embedding row (embed bytes / vocab) + final norm + the whole LM head
//   + per backbone layer:
//       attn_norm, ffn_norm, hc_attn_{fn,base,scale}, hc_ffn_{fn,base,scale}
//       attention: attn_sink, wq_a, q_norm, wq_b, wkv, kv_norm, wo_a, wo_b
//       compressor (kv sources): wkv, wgate (ratio 2), norm
//       indexer (index sources): wq_b, weights_proj, and wk, k_norm where it owns the keys
//         (wk / k_norm run only at steps that emit a compressed row, every m-th token; they
//          are counted every step: an upper bound, < 0.1% of the total for Flash shapes)
//       MoE: gate.weight, gate.bias, shared expert w1/w2/w3,
//            n_activated x (mean bytes of one routed expert's w1/w2/w3)
//       Engram (layers with Engram before them): (max_ngram-1)*n_heads table rows (row bytes
//            + row scale bytes), wkv, q_weight, k_weight
// State read (row sizes from the model's StateGraph, i.e. the serving format the
// CacheManager stores; V4.1 head_dim 512: window 528 B, compressed 288 B, index key 68 B):
//   window ring:   min(len, W - 1) cached rows per backbone layer (plus this step's own
//                  fresh row, computed in registers, not read)
//   compressed KV: per layer with ratio m > 0, the rows its top-k selects:
//                  min(index_topk, floor((len + 1) / m))
//   index keys:    per index-source layer, every visible key: floor((len + 1) / m) rows;
//                  after the candidate source only its candidate blocks' keys, at most
//                  candidate_topk_blocks x candidate_block_size rows (the reference scores
//                  the whole row, then masks it; Strata scores the candidates only)
//   fixed state:   compressor tails (ratio-2 kv sources) and the Engram history, whole
// Not counted: activations, per-step scratch, the top-k / candidate transients, state writes.
#include <algorithm>

#include "exec/deepseek_v41/deepseek_v41_runner.h"

namespace strata {

namespace {
int64_t tensor_bytes(const TensorView& t) {
  return t.data ? static_cast<int64_t>(t.num_bytes) : 0;
}
int64_t linear_bytes(const V41Linear& l) { return tensor_bytes(l.weight) + tensor_bytes(l.scale); }
int64_t mhc_bytes(const V41MhcWeights& m) {
  return tensor_bytes(m.fn) + tensor_bytes(m.base) + tensor_bytes(m.scale);
}
int64_t expert_bytes(const V41ExpertWeights& e) {
  return linear_bytes(e.w1) + linear_bytes(e.w2) + linear_bytes(e.w3);
}
int64_t linear_elems(const V41Linear& l) { return l.present() ? l.out * l.in : 0; }
int64_t expert_elems(const V41ExpertWeights& e) {
  return linear_elems(e.w1) + linear_elems(e.w2) + linear_elems(e.w3);
}
int64_t view_elems(const TensorView& t) { return t.data ? t.numel() : 0; }
}  // namespace

int64_t DeepseekV41Runner::decode_bytes_read(int64_t len) const {
  const DeepseekConfig& c = model_->config();
  const DeepseekV41Weights& w = model_->weights();
  const StateGraph& g = model_->state_graph();
  len = std::max<int64_t>(len, 0);

  int64_t b = tensor_bytes(w.embed()) / c.vocab_size + tensor_bytes(w.norm()) +
              tensor_bytes(w.head());
  for (int l = 0; l < c.n_layers; ++l) {
    const V41BlockWeights& lw = w.layer(l);
    const LayerSchedule& ls = c.layers[l];
    b += tensor_bytes(lw.attn_norm) + tensor_bytes(lw.ffn_norm);
    b += mhc_bytes(lw.hc_attn) + mhc_bytes(lw.hc_ffn);
    const V41AttentionWeights& a = lw.attn;
    b += tensor_bytes(a.attn_sink) + linear_bytes(a.wq_a) + tensor_bytes(a.q_norm) +
         linear_bytes(a.wq_b) + linear_bytes(a.wkv) + tensor_bytes(a.kv_norm) +
         linear_bytes(a.wo_a) + linear_bytes(a.wo_b);
    if (a.compressor.present)
      b += linear_bytes(a.compressor.wkv) + linear_bytes(a.compressor.wgate) +
           tensor_bytes(a.compressor.norm);
    if (a.indexer.present)
      b += linear_bytes(a.indexer.wq_b) + linear_bytes(a.indexer.weights_proj) +
           linear_bytes(a.indexer.wk) + tensor_bytes(a.indexer.k_norm);
    const V41MoeWeights& f = lw.ffn;
    b += tensor_bytes(f.gate_weight) + tensor_bytes(f.gate_bias) + expert_bytes(f.shared);
    if (!f.experts.empty()) {
      int64_t all = 0;
      for (const V41ExpertWeights& e : f.experts) all += expert_bytes(e);
      b += all * ls.n_activated_experts / static_cast<int64_t>(f.experts.size());
    }
    if (lw.engram.present) {
      const V41EngramWeights& e = lw.engram;
      const int64_t rows = e.table.shape.empty() ? 1 : std::max<int64_t>(e.table.shape[0], 1);
      const int64_t n_rows = int64_t{c.engram_max_ngram_size - 1} * c.engram_n_heads;
      b += n_rows * (tensor_bytes(e.table) + tensor_bytes(e.table_scale)) / rows;
      b += linear_bytes(e.wkv) + tensor_bytes(e.q_weight) + tensor_bytes(e.k_weight);
    }

    // State.
    auto row_bytes = [&](OwnerId id) -> int64_t { return id >= 0 ? g.owner(id).spec.row_bytes : 0; };
    b += std::min<int64_t>(len, c.window_size - 1) *
         row_bytes(g.find_owner(StateKind::kWindowKv, l));
    if (ls.ratio > 0) {
      const int64_t visible = (len + 1) / ls.ratio;
      b += std::min<int64_t>(c.index_topk, visible) *
           row_bytes(g.owner_read_by(l, StateKind::kCompressedKv));
      const int64_t keys =
          ls.uses_candidates
              ? std::min<int64_t>(visible, int64_t{c.candidate_topk_blocks} * c.candidate_block_size)
              : visible;
      if (ls.has_indexer) b += keys * row_bytes(g.owner_read_by(l, StateKind::kIndexKeys));
    }
  }
  for (const StateOwnerInfo& o : g.owners()) {
    if (o.stage != Stage::kBackbone) continue;
    if (o.kind == StateKind::kCompressorState || o.kind == StateKind::kEngramHistory)
      b += o.spec.bytes_per_request();
  }
  return b;
}

// Prefill GEMM FLOPs per prompt token (see ModelRunner::prefill_flops_per_token): the weight
// matrices of the same per-layer terms as above, counted in elements (backbone layers only).
int64_t DeepseekV41Runner::prefill_flops_per_token() const {
  const DeepseekConfig& c = model_->config();
  const DeepseekV41Weights& w = model_->weights();
  int64_t n = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const V41BlockWeights& lw = w.layer(l);
    n += view_elems(lw.hc_attn.fn) + view_elems(lw.hc_ffn.fn);
    const V41AttentionWeights& a = lw.attn;
    n += linear_elems(a.wq_a) + linear_elems(a.wq_b) + linear_elems(a.wkv) +
         linear_elems(a.wo_a) + linear_elems(a.wo_b);
    if (a.compressor.present) n += linear_elems(a.compressor.wkv) + linear_elems(a.compressor.wgate);
    if (a.indexer.present)
      n += linear_elems(a.indexer.wq_b) + linear_elems(a.indexer.weights_proj) +
           linear_elems(a.indexer.wk);
    const V41MoeWeights& f = lw.ffn;
    n += view_elems(f.gate_weight) + expert_elems(f.shared);
    if (!f.experts.empty()) {
      int64_t all = 0;
      for (const V41ExpertWeights& e : f.experts) all += expert_elems(e);
      n += all * c.layers[l].n_activated_experts / static_cast<int64_t>(f.experts.size());
    }
    if (lw.engram.present) n += linear_elems(lw.engram.wkv);
  }
  return 2 * n;
}

}  // namespace strata
