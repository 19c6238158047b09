// llama2.c checkpoints (Karpathy's llama2.c, run.c "legacy v0" export format).
//
// Layout: a header of 7 little-endian int32 — dim, hidden_dim, n_layers, n_heads,
// n_kv_heads, vocab_size, seq_len; vocab_size < 0 means the classifier is not shared with
// the embedding (a separate wcls follows). Then f32 tensors in this order (run.c
// memory_map_weights): token_embedding [vocab, dim]; rms_att [L, dim]; wq [L, n_heads*hs,
// dim]; wk [L, kv_dim, dim]; wv [L, kv_dim, dim]; wo [L, dim, n_heads*hs]; rms_ffn [L, dim];
// w1 [L, hidden, dim]; w2 [L, dim, hidden]; w3 [L, hidden, dim]; rms_final [dim];
// freq_cis_real, freq_cis_imag [seq_len, hs/2] (unused); wcls [vocab, dim] if unshared.
// hs = dim / n_heads, kv_dim = n_kv_heads * hs. RoPE is interleaved (pairs 2i, 2i+1).
//
// convert_llama2c writes a Hugging Face Llama directory: config.json (LlamaForCausalLM,
// rope_interleaved false), model.safetensors (F32 or BF16) with q_proj/k_proj rows permuted
// per head from interleaved to the HF half-split RoPE pairing (row 2i -> i, row 2i+1 ->
// i + hs/2; the permutation of HF's convert_llama_weights_to_hf.py), and a copy of the
// tokenizer. rms_norm_eps = 1e-5 and rope_theta = 10000 (run.c's constants); bos = 1,
// eos = 2 (llama2.c's SentencePiece ids). See docs/models.md.
//
// Errors: NotFound / DataLoss (bad header, size mismatch) naming the file; InvalidArgument
// for an inconsistent header. Thread safety: free functions.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace strata {

struct Llama2cHeader {
  int32_t dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0;
  int32_t vocab_size = 0;  // always positive here
  int32_t seq_len = 0;
  bool shared_classifier = true;

  int64_t head_size() const { return dim / n_heads; }
  int64_t kv_dim() const { return int64_t{n_kv_heads} * head_size(); }
  // Number of f32 values after the header (including freq_cis and wcls if unshared).
  int64_t num_floats() const;
};

StatusOr<Llama2cHeader> read_llama2c_header(const std::string& path);

struct Llama2cConvertOptions {
  std::string checkpoint;  // llama2.c .bin
  std::string tokenizer;   // tokenizer.bin to copy (optional: empty = none)
  std::string out_dir;
  bool bf16 = false;       // write BF16 matrices instead of F32
};
Status convert_llama2c(const Llama2cConvertOptions& options);

// Writes a llama2.c legacy-v0 checkpoint with seeded random weights (uniform in ±scale
// for matrices, 1 + uniform ±0.1 for norm weights). For benchmarks and tests.
struct Llama2cRandomOptions {
  Llama2cHeader header;
  uint64_t seed = 1;
  float scale = 0.05f;
};
Status write_llama2c_random(const std::string& path, const Llama2cRandomOptions& options);

}  // namespace strata
