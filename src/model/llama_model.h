// LlamaModel: the weights of a Llama/GQA model (LlamaForCausalLM), loaded zero-copy from a
// Hugging Face-style directory (config.json + model.safetensors or a sharded index).
//
// Tensor names (HF): model.embed_tokens.weight [vocab, d];
//   model.layers.N.input_layernorm.weight [d]; model.layers.N.post_attention_layernorm.weight
//   [d]; model.layers.N.self_attn.{q,k,v,o}_proj.weight [q_dim,d],[kv_dim,d],[kv_dim,d],
//   [d,q_dim]; model.layers.N.mlp.{gate,up}_proj.weight [ffn,d], down_proj [d,ffn];
//   model.norm.weight [d]; lm_head.weight [vocab, d] (absent when tie_word_embeddings:
//   the embedding matrix is used).
// Dtypes: matrices F32 or BF16 (used in place from the mmap); norm vectors F32/BF16/F16 are
// copied to f32. Any other dtype, a missing tensor or a shape that disagrees with the
// config is an error naming the tensor and file.
//
// The forward pass lives in exec/llama/llama_runner (it needs the KV cache); this type only owns
// the weights. Thread safety: immutable after load; share freely between threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/matmul.h"
#include "model/llama_config.h"

namespace strata {

class SafetensorsCheckpoint;

struct LlamaLayerWeights {
  std::vector<float> attn_norm;  // [d]
  std::vector<float> ffn_norm;   // [d]
  kernels::WeightMatrix wq, wk, wv, wo;
  kernels::WeightMatrix w_gate, w_up, w_down;
};

class LlamaModel {
 public:
  // Loads `dir`/config.json and the checkpoint. `progress` prints loading progress. A
  // pipeline stage passes its layers [layer_begin, layer_end): the other layers' tensors are
  // still shape-checked but not scanned for NaN/Inf (SafetensorsCheckpoint::
  // skip_scans_outside_layers), so their pages are never read here.
  static StatusOr<std::unique_ptr<LlamaModel>> load(const std::string& dir, bool progress = false,
                                                    int layer_begin = 0, int layer_end = 1 << 30);
  ~LlamaModel();

  const LlamaConfig& config() const { return config_; }
  const std::vector<LlamaLayerWeights>& layers() const { return layers_; }
  const kernels::WeightMatrix& embedding() const { return embed_; }
  const kernels::WeightMatrix& lm_head() const { return lm_head_; }
  const std::vector<float>& final_norm() const { return final_norm_; }
  // Bytes of weights read by one decode step (all layers + lm_head; one embedding row).
  int64_t weight_bytes_per_token() const;
  const std::string& dir() const { return dir_; }

 private:
  LlamaModel() = default;
  std::string dir_;
  LlamaConfig config_;
  std::unique_ptr<SafetensorsCheckpoint> ckpt_;
  kernels::WeightMatrix embed_, lm_head_;
  std::vector<float> final_norm_;
  std::vector<LlamaLayerWeights> layers_;
};

}  // namespace strata
