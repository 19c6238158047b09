// DeepseekV4Weights loader: names and shapes per spec §4.1 and the V4-Flash reference
// model.py module tree (Block / Attention / Compressor / Indexer / Gate / MoE / MTPBlock).
#include "model/deepseek_v4_weights.h"

#include "model/deepseek_weight_loader.h"

#include <cstring>
#include <set>

#include <fmt/format.h>

namespace strata {


class V4WeightLoader : public DeepseekWeightLoader {
 public:
  explicit V4WeightLoader(const SafetensorsCheckpoint& ckpt) : DeepseekWeightLoader(ckpt) {}

  Status compressor(const std::string& base, const DeepseekConfig& c, int ratio, int64_t width,
                    V4CompressorWeights* cw) {
    cw->present = true;
    cw->ratio = ratio;
    cw->overlap = ratio == kV4CsaRatio;
    cw->width = width;
    const int64_t coff = cw->overlap ? 2 : 1;
    STRATA_ASSIGN_OR_RETURN(cw->ape, get(base + "ape", DType::kF32, {ratio, coff * width}));
    STRATA_ASSIGN_OR_RETURN(cw->wkv, get(base + "wkv.weight", DType::kBF16, {coff * width, c.dim}));
    STRATA_ASSIGN_OR_RETURN(cw->wgate, get(base + "wgate.weight", DType::kBF16, {coff * width, c.dim}));
    STRATA_ASSIGN_OR_RETURN(cw->norm, get(base + "norm.weight", DType::kBF16, {width}));
    return ok_status();
  }

  Status load_block(const DeepseekConfig& c, int layer_id, bool mtp, V4BlockWeights* b);
};

Status V4WeightLoader::load_block(const DeepseekConfig& c, int layer_id, bool mtp, V4BlockWeights* b) {
  const LayerSchedule& ls = c.layers[layer_id];
  b->layer_id = layer_id;
  b->prefix = mtp ? fmt::format("mtp.{}.", layer_id - c.n_layers) : fmt::format("layers.{}.", layer_id);
  const std::string& p = b->prefix;
  const int64_t D = c.dim, hc = c.hc_mult;
  const int blk = c.weight_block_size > 0 ? c.weight_block_size : 128;

  STRATA_RETURN_IF_ERROR(load_block_core(c, p, blk, b));
  const int64_t hd = c.head_dim, ql = c.q_lora_rank;
  const std::string a = p + "attn.";
  V4AttentionWeights& at = b->attn;
  if (ls.ratio > 0) {
    STRATA_RETURN_IF_ERROR(compressor(a + "compressor.", c, ls.ratio, hd, &at.compressor));
  }
  if (ls.has_indexer) {
    V4IndexerWeights& ix = at.indexer;
    ix.present = true;
    const int64_t ih = c.index_n_heads, id = c.index_head_dim;
    STRATA_ASSIGN_OR_RETURN(ix.wq_b, fp8_linear(a + "indexer.wq_b", ih * id, ql, blk));
    STRATA_ASSIGN_OR_RETURN(ix.weights_proj, bf16_linear(a + "indexer.weights_proj", ih, D));
    STRATA_RETURN_IF_ERROR(compressor(a + "indexer.compressor.", c, ls.ratio, id, &ix.compressor));
  }

  const std::string f = p + "ffn.";
  const int64_t E = ls.n_routed_experts, K = ls.n_activated_experts;
  V4MoeWeights& mo = b->ffn;
  mo.hash = ls.hash_routed;
  STRATA_ASSIGN_OR_RETURN(mo.gate_weight, get(f + "gate.weight", DType::kBF16, {E, D}));
  if (mo.hash) {
    STRATA_ASSIGN_OR_RETURN(TensorView probe, ckpt_.get(f + "gate.tid2eid"));
    const DType dt = probe.dtype == DType::kI32 ? DType::kI32 : DType::kI64;
    STRATA_ASSIGN_OR_RETURN(TensorView t, get(f + "gate.tid2eid", dt, {c.vocab_size, K}));
    mo.tid2eid.resize(c.vocab_size * K);
    for (int64_t i = 0; i < c.vocab_size * K; ++i) {
      int64_t v;
      if (dt == DType::kI64) {
        std::memcpy(&v, t.data + i * 8, 8);
      } else {
        int32_t v32;
        std::memcpy(&v32, t.data + i * 4, 4);
        v = v32;
      }
      if (v < 0 || v >= E) return failed_precondition("{}gate.tid2eid[{}] = {} out of [0, {})", f, i, v, E);
      mo.tid2eid[i] = static_cast<int32_t>(v);
    }
  } else {
    STRATA_ASSIGN_OR_RETURN(mo.gate_bias, get(f + "gate.bias", DType::kF32, {E}));
  }
  STRATA_RETURN_IF_ERROR(load_routed_experts(c, f, E, blk, &mo.experts));
  STRATA_RETURN_IF_ERROR(load_shared_expert(c, f, blk, "V4", &mo.shared));

  if (mtp) {
    STRATA_ASSIGN_OR_RETURN(b->e_proj, fp8_linear(p + "e_proj", D, D, blk));
    STRATA_ASSIGN_OR_RETURN(b->h_proj, fp8_linear(p + "h_proj", D, D, blk));
    STRATA_ASSIGN_OR_RETURN(b->enorm, get(p + "enorm.weight", DType::kBF16, {D}));
    STRATA_ASSIGN_OR_RETURN(b->hnorm, get(p + "hnorm.weight", DType::kBF16, {D}));
    STRATA_ASSIGN_OR_RETURN(b->norm, get(p + "norm.weight", DType::kBF16, {D}));
    STRATA_ASSIGN_OR_RETURN(b->hc_head_fn, get(p + "hc_head_fn", DType::kF32, {hc, hc * D}));
    STRATA_ASSIGN_OR_RETURN(b->hc_head_base, get(p + "hc_head_base", DType::kF32, {hc}));
    STRATA_ASSIGN_OR_RETURN(b->hc_head_scale, get(p + "hc_head_scale", DType::kF32, {1}));
  }
  return ok_status();
}

StatusOr<std::unique_ptr<DeepseekV4Weights>> DeepseekV4Weights::load(
    const SafetensorsCheckpoint& checkpoint, const DeepseekConfig& config) {
  if (config.is_v41()) return failed_precondition("DeepseekV4Weights: config is V4.1, not V4");
  if (static_cast<int>(config.layers.size()) != config.total_layers())
    return failed_precondition("DeepseekV4Weights: config not finalized (no layer schedule)");
  std::unique_ptr<DeepseekV4Weights> w(new DeepseekV4Weights());
  V4WeightLoader ld(checkpoint);
  const int64_t V = config.vocab_size, D = config.dim, hc = config.hc_mult;
  STRATA_ASSIGN_OR_RETURN(w->embed_, ld.get("embed.weight", DType::kBF16, {V, D}));
  STRATA_ASSIGN_OR_RETURN(w->head_, ld.get("head.weight", DType::kBF16, {V, D}));
  STRATA_ASSIGN_OR_RETURN(w->norm_, ld.get("norm.weight", DType::kBF16, {D}));
  STRATA_ASSIGN_OR_RETURN(w->hc_head_fn_, ld.get("hc_head_fn", DType::kF32, {hc, hc * D}));
  STRATA_ASSIGN_OR_RETURN(w->hc_head_base_, ld.get("hc_head_base", DType::kF32, {hc}));
  STRATA_ASSIGN_OR_RETURN(w->hc_head_scale_, ld.get("hc_head_scale", DType::kF32, {1}));
  w->layers_.resize(config.n_layers);
  for (int i = 0; i < config.n_layers; ++i) {
    Status st = ld.load_block(config, i, false, &w->layers_[i]);
    if (!st.ok()) return st.with_context(fmt::format("layer {}", i));
  }
  // MTP blocks: loaded when present (the tiny golden and the releases ship mtp.0 only).
  for (int k = 0; k < config.n_draft_layers; ++k) {
    if (!checkpoint.has(fmt::format("mtp.{}.attn_norm.weight", k))) break;
    V4BlockWeights b;
    Status st = ld.load_block(config, config.n_layers + k, true, &b);
    if (!st.ok()) return st.with_context(fmt::format("MTP block mtp.{}", k));
    w->mtp_.push_back(std::move(b));
  }
  w->num_used_ = ld.used();
  w->num_ignored_ = static_cast<int64_t>(checkpoint.names().size()) - w->num_used_;
  return w;
}

}  // namespace strata
