// DeepseekV41Weights loader: names and shapes per spec §4.2 and the reference model.py
// module tree (Block / Attention / Compressor / Indexer / MoE / Engram / DSparkBlock).
#include "model/deepseek_v41_weights.h"

#include "model/deepseek_weight_loader.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

namespace strata {


class V41WeightLoader : public DeepseekWeightLoader {
 public:
  V41WeightLoader(const SafetensorsCheckpoint& ckpt, DeepseekV41Weights* w)
      : DeepseekWeightLoader(ckpt), w_(w) {}

  enum Group { kBackbone, kExperts, kEngram, kDraft };
  Group group = kBackbone;

  StatusOr<TensorView> get_optional(const std::string& name, DType dt,
                                    std::vector<int64_t> shape) {
    if (!ckpt_.has(name)) return TensorView{};
    return get(name, dt, shape);
  }
  bool has(const std::string& name) const { return ckpt_.has(name); }

  Status load_block(const DeepseekConfig& c, int layer_id, bool draft, V41BlockWeights* b);

  int64_t used() const { return static_cast<int64_t>(used_.size()); }

 private:
  void on_first_use(const TensorView& v) override {
    const int64_t n = static_cast<int64_t>(v.num_bytes);
    switch (group) {
      case kBackbone: w_->bytes_backbone_ += n; break;
      case kExperts: w_->bytes_experts_ += n; break;
      case kEngram: w_->bytes_engram_ += n; break;
      case kDraft: w_->bytes_draft_ += n; break;
    }
  }
  DeepseekV41Weights* w_;
};

Status V41WeightLoader::load_block(const DeepseekConfig& c, int layer_id, bool draft,
                                   V41BlockWeights* b) {
  const LayerSchedule& ls = c.layers[layer_id];
  const int stage = layer_id - c.n_layers;
  b->layer_id = layer_id;
  b->prefix = draft ? fmt::format("mtp.{}.", stage) : fmt::format("layers.{}.", layer_id);
  const std::string& p = b->prefix;
  const int64_t D = c.dim, hc = c.hc_mult;
  const int blk = c.weight_block_size > 0 ? c.weight_block_size : 32;
  group = draft ? kDraft : kBackbone;

  STRATA_RETURN_IF_ERROR(load_block_core(c, p, blk, b));
  const int64_t hd = c.head_dim, ql = c.q_lora_rank;
  const std::string a = p + "attn.";
  V41AttentionWeights& at = b->attn;
  if (!draft && ls.has_compressor) {
    at.compressor.present = true;
    STRATA_ASSIGN_OR_RETURN(at.compressor.wkv, bf16_linear(a + "compressor.wkv", hd, D));
    if (ls.ratio > 1) {
      STRATA_ASSIGN_OR_RETURN(at.compressor.wgate, bf16_linear(a + "compressor.wgate", hd, D));
    }
    STRATA_ASSIGN_OR_RETURN(at.compressor.norm, get(a + "compressor.norm.weight", DType::kBF16, {hd}));
  }
  if (!draft && ls.has_indexer) {
    V41IndexerWeights& ix = at.indexer;
    ix.present = true;
    const int64_t ih = c.index_n_heads, id = c.index_head_dim;
    STRATA_ASSIGN_OR_RETURN(ix.wq_b, fp8_linear(a + "indexer.wq_b", ih * id, ql, blk));
    STRATA_ASSIGN_OR_RETURN(ix.weights_proj, bf16_linear(a + "indexer.weights_proj", ih, D));
    ix.owns_k = ls.owns_index_keys;
    if (ix.owns_k) {
      STRATA_ASSIGN_OR_RETURN(ix.wk, bf16_linear(a + "indexer.wk", id, hd));
      STRATA_ASSIGN_OR_RETURN(ix.k_norm, get(a + "indexer.k_norm.weight", DType::kBF16, {id}));
    }
  }

  // MoE.
  const std::string f = p + "ffn.";
  const int64_t E = ls.n_routed_experts;
  STRATA_ASSIGN_OR_RETURN(b->ffn.gate_weight, get(f + "gate.weight", DType::kBF16, {E, D}));
  STRATA_ASSIGN_OR_RETURN(b->ffn.gate_bias, get(f + "gate.bias", DType::kF32, {E}));
  STRATA_ASSIGN_OR_RETURN(b->ffn.gate_bias_vl, get_optional(f + "gate.bias_vl", DType::kF32, {E}));
  if (!draft) group = kExperts;
  STRATA_RETURN_IF_ERROR(load_routed_experts(c, f, E, blk, &b->ffn.experts));
  group = draft ? kDraft : kBackbone;
  STRATA_RETURN_IF_ERROR(load_shared_expert(c, f, blk, "V4.1", &b->ffn.shared));

  // Engram.
  if (!draft && ls.engram_before) {
    group = kEngram;
    V41EngramWeights& en = b->engram;
    en.present = true;
    const int64_t rows = c.engram_num_embeddings[ls.engram_slot];
    const int64_t ed = c.engram_head_dim;
    const int64_t cols = int64_t{c.engram_max_ngram_size - 1} * c.engram_n_heads * ed;
    STRATA_ASSIGN_OR_RETURN(en.table, get(p + "engram.embed.weight", DType::kF8_E4M3, {rows, ed}));
    STRATA_ASSIGN_OR_RETURN(en.table_scale,
                            get(p + "engram.embed.scale", DType::kF8_E8M0, {rows, ceil_div(ed, 32)}));
    STRATA_ASSIGN_OR_RETURN(en.wkv, fp8_linear(p + "engram.wkv", D * (hc + 1), cols, blk));
    STRATA_ASSIGN_OR_RETURN(en.q_weight, get(p + "engram.q_weight", DType::kBF16, {hc, D}));
    STRATA_ASSIGN_OR_RETURN(en.k_weight, get(p + "engram.k_weight", DType::kBF16, {hc, D}));
    group = kBackbone;
  }

  // DSpark extras.
  if (draft) {
    if (stage == 0) {
      const int64_t nt = static_cast<int64_t>(c.dspark_target_layer_ids.size());
      STRATA_ASSIGN_OR_RETURN(b->main_proj, fp8_linear(p + "main_proj", D, D * nt, blk));
      STRATA_ASSIGN_OR_RETURN(b->main_norm, get(p + "main_norm.weight", DType::kBF16, {D}));
    }
    if (stage == c.n_draft_layers - 1 && c.dspark_block_size > 0) {
      const int64_t V = c.vocab_size, r = c.dspark_markov_rank;
      STRATA_ASSIGN_OR_RETURN(b->stage_norm, get(p + "norm.weight", DType::kBF16, {D}));
      STRATA_ASSIGN_OR_RETURN(b->markov_embed, get(p + "markov_head.embed.weight", DType::kBF16, {V, r}));
      STRATA_ASSIGN_OR_RETURN(b->markov_head, get(p + "markov_head.head.weight", DType::kBF16, {V, r}));
      STRATA_ASSIGN_OR_RETURN(b->confidence_proj,
                              get(p + "confidence_head.proj.weight", DType::kBF16, {1, D + r}));
    }
  }
  return ok_status();
}

StatusOr<std::unique_ptr<DeepseekV41Weights>> DeepseekV41Weights::load(
    const SafetensorsCheckpoint& checkpoint, const DeepseekConfig& config) {
  if (!config.is_v41()) return failed_precondition("DeepseekV41Weights: config is not V4.1");
  if (static_cast<int>(config.layers.size()) != config.total_layers())
    return failed_precondition("DeepseekV41Weights: config not finalized (no layer schedule)");
  std::unique_ptr<DeepseekV41Weights> w(new DeepseekV41Weights());
  w->config_ = config;
  V41WeightLoader ld(checkpoint, w.get());
  const int64_t V = config.vocab_size, D = config.dim;
  STRATA_ASSIGN_OR_RETURN(w->embed_, ld.get("embed.weight", DType::kBF16, {V, D}));
  STRATA_ASSIGN_OR_RETURN(w->head_, ld.get("head.weight", DType::kBF16, {V, D}));
  STRATA_ASSIGN_OR_RETURN(w->norm_, ld.get("norm.weight", DType::kBF16, {D}));
  w->layers_.resize(config.n_layers);
  for (int i = 0; i < config.n_layers; ++i) {
    Status st = ld.load_block(config, i, false, &w->layers_[i]);
    if (!st.ok()) return st.with_context(fmt::format("layer {}", i));
  }
  // DSpark stages are optional in the file only if the config declares none.
  const bool has_drafts = config.n_draft_layers > 0 && checkpoint.has("mtp.0.attn_norm.weight");
  if (config.n_draft_layers > 0 && !has_drafts)
    return failed_precondition("config declares {} DSpark stages but mtp.0.* is missing in {}",
                               config.n_draft_layers, checkpoint.dir());
  if (has_drafts) {
    w->drafts_.resize(config.n_draft_layers);
    for (int k = 0; k < config.n_draft_layers; ++k) {
      Status st = ld.load_block(config, config.n_layers + k, true, &w->drafts_[k]);
      if (!st.ok()) return st.with_context(fmt::format("DSpark stage mtp.{}", k));
    }
  }
  w->num_used_ = ld.used();
  w->num_ignored_ = static_cast<int64_t>(checkpoint.names().size()) - w->num_used_;
  return w;
}

std::string DeepseekV41Weights::report() const {
  auto gb = [](int64_t b) { return static_cast<double>(b) / 1e6; };
  std::string s;
  s += fmt::format("tensors: {} used, {} ignored\n", num_used_, num_ignored_);
  s += fmt::format("backbone (attention, norms, mHC, gates, shared experts, embed, head): {:.3f} MB\n",
                   gb(bytes_backbone_));
  s += fmt::format("routed experts: {:.3f} MB\n", gb(bytes_experts_));
  s += fmt::format("engram tables + projections: {:.3f} MB\n", gb(bytes_engram_));
  s += fmt::format("DSpark stages (mtp.*, {} loaded): {:.3f} MB\n", drafts_.size(),
                   gb(bytes_draft_));
  return s;
}

}  // namespace strata
