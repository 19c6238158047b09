#include "model/llama_model.h"

#include <algorithm>

#include <fmt/format.h>

#include "model/dtype.h"
#include "model/safetensors.h"

namespace strata {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

Status check_shape(const TensorView& t, const std::vector<int64_t>& want) {
  if (t.shape != want)
    return failed_precondition("{}: tensor '{}' has shape {} but config.json implies {}", t.file,
                               t.name, shape_str(t.shape), shape_str(want));
  return ok_status();
}

StatusOr<kernels::WeightMatrix> get_matrix(const SafetensorsCheckpoint& ck, const std::string& name,
                                           int64_t rows, int64_t cols) {
  STRATA_ASSIGN_OR_RETURN(TensorView t, ck.get(name));
  STRATA_RETURN_IF_ERROR(check_shape(t, {rows, cols}));
  STRATA_RETURN_IF_ERROR(ck.check_finite(t));
  kernels::WeightMatrix w;
  if (t.dtype == DType::kF32) {
    w.type = kernels::WType::kF32;
  } else if (t.dtype == DType::kBF16) {
    w.type = kernels::WType::kBF16;
  } else {
    return unimplemented("{}: tensor '{}' has dtype {}; Llama matrices must be F32 or BF16",
                         t.file, name, dtype_name(t.dtype));
  }
  w.data = t.data;
  w.rows = rows;
  w.cols = cols;
  return w;
}

StatusOr<std::vector<float>> get_vector(const SafetensorsCheckpoint& ck, const std::string& name,
                                        int64_t n) {
  STRATA_ASSIGN_OR_RETURN(TensorView t, ck.get(name));
  STRATA_RETURN_IF_ERROR(check_shape(t, {n}));
  STRATA_RETURN_IF_ERROR(ck.check_finite(t));
  std::vector<float> out(n);
  switch (t.dtype) {
    case DType::kF32:
      std::copy(t.f32(), t.f32() + n, out.begin());
      break;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(t.u16()[i]);
      break;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(t.u16()[i]);
      break;
    default:
      return unimplemented("{}: tensor '{}' has dtype {}; norm weights must be F32/BF16/F16",
                           t.file, name, dtype_name(t.dtype));
  }
  return out;
}

}  // namespace

LlamaModel::~LlamaModel() = default;

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::load(const std::string& dir, bool progress,
                                                       int layer_begin, int layer_end) {
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  m->dir_ = dir;
  STRATA_ASSIGN_OR_RETURN(m->config_, load_llama_config(dir));
  STRATA_ASSIGN_OR_RETURN(m->ckpt_, SafetensorsCheckpoint::open(dir, progress));
  m->ckpt_->skip_scans_outside_layers(layer_begin, layer_end);
  const LlamaConfig& c = m->config_;
  const auto& ck = *m->ckpt_;
  const int64_t d = c.hidden_size;
  STRATA_ASSIGN_OR_RETURN(m->embed_, get_matrix(ck, "model.embed_tokens.weight", c.vocab_size, d));
  if (c.tie_word_embeddings) {
    m->lm_head_ = m->embed_;
  } else {
    STRATA_ASSIGN_OR_RETURN(m->lm_head_, get_matrix(ck, "lm_head.weight", c.vocab_size, d));
  }
  STRATA_ASSIGN_OR_RETURN(m->final_norm_, get_vector(ck, "model.norm.weight", d));
  m->layers_.resize(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    LlamaLayerWeights& L = m->layers_[l];
    STRATA_ASSIGN_OR_RETURN(L.attn_norm, get_vector(ck, p + "input_layernorm.weight", d));
    STRATA_ASSIGN_OR_RETURN(L.ffn_norm, get_vector(ck, p + "post_attention_layernorm.weight", d));
    STRATA_ASSIGN_OR_RETURN(L.wq, get_matrix(ck, p + "self_attn.q_proj.weight", c.q_dim(), d));
    STRATA_ASSIGN_OR_RETURN(L.wk, get_matrix(ck, p + "self_attn.k_proj.weight", c.kv_dim(), d));
    STRATA_ASSIGN_OR_RETURN(L.wv, get_matrix(ck, p + "self_attn.v_proj.weight", c.kv_dim(), d));
    STRATA_ASSIGN_OR_RETURN(L.wo, get_matrix(ck, p + "self_attn.o_proj.weight", d, c.q_dim()));
    STRATA_ASSIGN_OR_RETURN(L.w_gate,
                            get_matrix(ck, p + "mlp.gate_proj.weight", c.intermediate_size, d));
    STRATA_ASSIGN_OR_RETURN(L.w_up, get_matrix(ck, p + "mlp.up_proj.weight", c.intermediate_size, d));
    STRATA_ASSIGN_OR_RETURN(L.w_down,
                            get_matrix(ck, p + "mlp.down_proj.weight", d, c.intermediate_size));
  }
  return m;
}

int64_t LlamaModel::weight_bytes_per_token() const {
  int64_t b = lm_head_.bytes() + embed_.bytes() / std::max<int64_t>(1, embed_.rows);
  for (const auto& L : layers_)
    b += L.wq.bytes() + L.wk.bytes() + L.wv.bytes() + L.wo.bytes() + L.w_gate.bytes() +
         L.w_up.bytes() + L.w_down.bytes() + 2 * 4 * static_cast<int64_t>(L.attn_norm.size());
  return b;
}

}  // namespace strata
