// LlamaConfig: the architecture of a Hugging Face LlamaForCausalLM model, parsed from its
// config.json.
//
// Fields used (HF names): hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads, num_key_value_heads (default: num_attention_heads), head_dim
// (default: hidden_size / num_attention_heads), vocab_size, max_position_embeddings,
// rms_norm_eps (default 1e-6), rope_theta (default 10000), tie_word_embeddings (default
// false), bos_token_id, eos_token_id (an int or a list: the first is used).
// Strata extension: "rope_interleaved" (default false). false = the HF half-split RoPE
// pairing (i, i + head_dim/2); true = the interleaved pairing (2i, 2i+1) of llama2.c / Meta
// checkpoints whose q/k weights were not permuted (docs/models.md). `strata convert` writes
// HF-permuted weights with rope_interleaved false.
// Unsupported: rope_scaling other than null (Unimplemented), attention/mlp bias.
//
// Errors: InvalidArgument naming the field (missing, wrong type, non-positive, heads not
// dividing), NotFound / DataLoss for the file.
// Thread safety: an immutable value after parsing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace strata {

struct LlamaConfig {
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;
  bool rope_interleaved = false;
  int32_t bos_token_id = -1;  // -1: none given
  int32_t eos_token_id = -1;
  std::string torch_dtype;    // informational ("float32", "bfloat16", ...)

  int64_t q_dim() const { return num_attention_heads * head_dim; }
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }
  // Total parameter count (embeddings + layers + norm + lm_head unless tied).
  int64_t num_parameters() const;
  // HF config.json text for this config (architectures = ["LlamaForCausalLM"]).
  std::string to_json() const;
};

StatusOr<LlamaConfig> parse_llama_config_json(std::string_view json_text);
// Reads `path` (a config.json file, or a directory containing one).
StatusOr<LlamaConfig> load_llama_config(const std::string& path);

}  // namespace strata
