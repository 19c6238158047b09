// V4.1-shaped random checkpoint generator (`strata bench make-v41`): writes a model directory
// that DeepseekV41Model::load / make_model_runner accept, with the released file format and
// the layer-role structure of DeepSeek-V4.1-Flash scaled down, for benchmarking decode
// against the memory-bandwidth roofline (docs/PERFORMANCE.md "V4.1-shaped random model").
//
// Output directory:
//   config.json        HF nested format (top level + text_config), same keys as
//                      models/deepseek-v41-tiny/config.json; no DSpark stages
//                      (num_nextn_predict_layers 0, compress_ratios lists only the backbone).
//   model.safetensors  names / dtypes / shapes of model/deepseek_v41_weights.h (spec
//                      v41-architecture.md §4.2): FP8 E4M3 dense weights + F8_E8M0 32x32 block
//                      scales; routed experts FP4 E2M1 packed I8 [out, in/2] + F8_E8M0
//                      [out, in/32]; BF16 embed / head / norms / gate / compressor / indexer
//                      wk, weights_proj / Engram q,k weights; F32 hc_* / attn_sink / gate.bias;
//                      Engram tables F8_E4M3 [rows, head_dim] + F8_E8M0 [rows, head_dim/32].
//   tokenizer.json     WordLevel stand-in: ids 0..2 = bos/eos/pad, then triples
//                      "tokN" / "TokN" / " TOKN" that normalize alike, so the Engram
//                      compressed-token map has 3 + ceil((vocab-3)/3) ids
//                      (= engram_compressed_vocab_size in config.json).
//
// Layer roles for n layers (scaled from V4.1-Flash's 40: 2 SWA, 18 ratio-2, 20 ratio-1):
//   layers 0, 1 ratio 0 (SWA); n2 = clamp((n-2)*9/19, 1, n-3) layers of ratio 2 from layer 2;
//   the rest ratio 1. KV sources: 2 + k*ceil(n2/3) (k < 3, inside the ratio-2 block) and the
//   first ratio-1 layer f; index sources: the kv sources plus f + k*max(2, round(n1/5)),
//   k >= 1 (Reindex layers); candidate source f; Engram before layer 1 and the last ratio-2
//   kv source. n = 12 gives exactly models/deepseek-v41-tiny's layout; n = 40 gives
//   kv sources 2, 8, 14, 20 (+ index sources every 4 after 20) like Flash.
//
// Values (fixed-seed, the golden tiny model's recipe, so activations stay O(1)): linear
// weights N(0, 1/fan_in); wo_b 3/sqrt(fan_in); expert and shared w1/w3 4/sqrt(fan_in), w2
// 0.08/sqrt(fan_in); head 2/sqrt(dim); embed and Engram tables N(0,1); norm weights and
// Engram q/k weights 1 + 0.1 N; hc_fn 1/sqrt(hc*dim); hc_base 0.5 N; hc_scale U[0.5, 0.75];
// attn_sink N(0,1); gate.bias 0.1 N. Gaussians are drawn as quantiles of N(0,1) (256 levels
// for FP4 codes, 65536 for FP8 codes and BF16/F32) indexed by random bytes; FP8/FP4 tensors
// use one power-of-two scale per tensor (stored per block / per row as the format requires),
// codes within +-448 (FP8, the top quantiles saturate) / +-6 (FP4). With 65536 levels ~1.5e-4
// of the FP8 codes are E4M3 subnormals, close to the golden tiny checkpoint (1.1e-4), so the
// FP8 decode's subnormal-free fast path sees a real checkpoint's share of blocks.
// Determinism: the bytes depend only on (options, seed): every tensor is generated in chunks
// of 2^20 elements, each from its own stream seeded by (seed, tensor name, chunk), so the
// thread count does not matter. Same options + seed => identical files.
//
// Memory: the safetensors data is built in one buffer (file size) and written once.
// Errors: InvalidArgument naming the offending option (unknown preset, dims out of range or
//   not multiples of 32, activated > experts, too few layers, ...); Internal for I/O errors.
// Thread safety: write_v41_random_checkpoint is reentrant.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace strata {

struct V41RandomOptions {
  std::string preset = "bench";  // "tiny" (golden tiny dims, 17 MB) | "bench" (~2 GB)
  uint64_t seed = 1;
  // Overrides of the preset (0 = keep the preset's value).
  int64_t dim = 0;         // hidden size: multiple of 32, >= 64
  int layers = 0;          // backbone layers: >= 4
  int experts = 0;         // routed experts per layer
  int activated = 0;       // routed experts per token (<= experts)
  int64_t vocab = 0;       // >= 64
  int64_t moe_inter = 0;   // expert hidden size: multiple of 32
  int64_t max_position = 0;  // max_position_embeddings
  int threads = 0;         // generation threads (0 = the CPUs this process may use); does not change the bytes
};

struct V41RandomSummary {
  int64_t n_tensors = 0;
  int64_t file_bytes = 0;        // model.safetensors size
  int64_t expert_bytes = 0;      // all routed experts (weights + scales)
  int64_t engram_table_bytes = 0;
  std::string layout;            // one line per role group, for the CLI
};

// Writes config.json, model.safetensors and tokenizer.json into `dir` (created if absent;
// existing files of those names are replaced).
Status write_v41_random_checkpoint(const std::string& dir, const V41RandomOptions& options,
                                   V41RandomSummary* summary = nullptr);

}  // namespace strata
