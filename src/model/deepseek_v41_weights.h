// DeepseekV41Weights: every tensor of a DeepSeek-V4.1 checkpoint, looked up by the
// reference's names (inference/model.py module paths, no "model." prefix) and shape-checked
// against the config, as zero-copy views into the mmapped safetensors files.
//
// Layout (spec v41-architecture.md §4.2, golden v41-tiny README "Checkpoint format"):
//   FP8 dense weights  F8_E4M3 [out, in] + `.scale` F8_E8M0 [ceil(out/b), ceil(in/b)],
//                      b = quantization_config.weight_block_size (32 for V4.1).
//                      wo_a is stored FP8 too; the reference dequantizes it to bf16 at load
//                      (exact), our kernels dequantize it on the fly instead (same values).
//   FP4 experts        I8 [out, in/2] (two E2M1 per byte, even K in the low nibble)
//                      + `.scale` F8_E8M0 [out, in/32].
//   BF16               embed, head, norms, gate.weight, compressor wkv/wgate, indexer
//                      wk/weights_proj/k_norm, engram q_weight/k_weight, DSpark heads.
//   F32                hc_{attn,ffn}_{fn,base,scale}, attn_sink, gate.bias(_vl).
//   Engram table       F8_E4M3 [rows, head_dim] + F8_E8M0 [rows, head_dim/32].
// DSpark stages (`mtp.N.*`) are loaded and checked like backbone layers (run by
// DeepseekV41Model::dspark_draft); `mtp.N.embed/head` are absent in the file and alias the
// main embed/head.
//
// Errors: load() returns FailedPrecondition / NotFound naming the tensor, its file and the
// expected vs actual dtype and shape.
// Lifetime: views point into `checkpoint`, which must outlive this object.
// Thread safety: immutable after load; share freely.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/block_gemm.h"
#include "kernels/seq_gemm.h"
#include "model/deepseek_config.h"
#include "model/safetensors.h"

namespace strata {

class ThreadPool;
class PackedWeightCache;

// A weight repacked for the vector kernels (kernels/block_gemm.h, kernels/seq_gemm.h): the
// same bytes per element (FP8 1, FP4 1/2, BF16 2, F32 4), reordered so a vector lane holds
// one output row. Exactly one member is filled, by the weight's kind.
struct V41PackedLinear {
  kernels::PackedFp8Weight fp8;
  kernels::PackedFp4Weight fp4;
  kernels::PackedSeqWeight seq;  // BF16 / F32 weights (sequential-FMA F.linear order)
  int64_t bytes() const;
};

enum class V41WeightKind : uint8_t { kFp8, kFp4, kBf16, kF32 };

// A linear layer's weight, logically [out, in] (y = x · W^T).
struct V41Linear {
  V41WeightKind kind = V41WeightKind::kBf16;
  TensorView weight;
  TensorView scale;       // FP8/FP4 only (data == nullptr otherwise)
  int64_t out = 0;
  int64_t in = 0;
  int block = 32;         // FP8 weight tile edge (FP4: 32 along K, per row)
  // Set by DeepseekV41Weights::pack_for_kernels (null: the scalar reference path is used).
  std::shared_ptr<const V41PackedLinear> packed;
  bool present() const { return weight.data != nullptr; }
};

struct V41CompressorWeights {
  bool present = false;
  V41Linear wkv;          // BF16 [head_dim, dim]
  V41Linear wgate;        // BF16 [head_dim, dim]; ratio > 1 only
  TensorView norm;        // BF16 [head_dim]
};

struct V41IndexerWeights {
  bool present = false;
  V41Linear wq_b;         // FP8 [index_n_heads*index_head_dim, q_lora_rank]
  V41Linear weights_proj; // BF16 [index_n_heads, dim]
  bool owns_k = false;
  V41Linear wk;           // BF16 [index_head_dim, head_dim]
  TensorView k_norm;      // BF16 [index_head_dim]
};

// The attention projections V4 and V4.1 share (same names, shapes and formats).
struct DeepseekAttentionCore {
  TensorView attn_sink;   // F32 [n_heads]
  V41Linear wq_a;         // FP8 [q_lora, dim]
  TensorView q_norm;      // BF16 [q_lora]
  V41Linear wq_b;         // FP8 [n_heads*head_dim, q_lora]
  V41Linear wkv;          // FP8 [head_dim, dim]
  TensorView kv_norm;     // BF16 [head_dim]
  V41Linear wo_a;         // FP8 (or BF16) [o_groups*o_lora, n_heads*head_dim/o_groups]
  V41Linear wo_b;         // FP8 [dim, o_groups*o_lora]
};

struct V41AttentionWeights : DeepseekAttentionCore {
  V41CompressorWeights compressor;
  V41IndexerWeights indexer;
};

// The routed experts a rank computes under expert parallelism (size > 1): the contiguous id
// range [rank·E/size, (rank+1)·E/size) of a layer's E experts (dist/expert_comm.h's
// expert_begin); the others are never computed on that rank, so they are not packed.
struct ExpertShare {
  int rank = 0, size = 1;
  bool owns(int64_t e, int64_t E) const {
    return e >= rank * E / size && e < (rank + 1) * E / size;
  }
};

struct V41ExpertWeights {
  V41Linear w1, w2, w3;   // w1/w3 [inter, dim], w2 [dim, inter]
  // pack_for_kernels: w1 and w3 stacked into one [2*inter, dim] packed weight (same input,
  // independent rows: one GEMM instead of two); w1/w3 themselves are then not packed.
  std::shared_ptr<const V41PackedLinear> w13_packed;
};

struct V41MoeWeights {
  TensorView gate_weight; // BF16 [E, dim]
  TensorView gate_bias;   // F32 [E]
  TensorView gate_bias_vl;// F32 [E] (vision checkpoints only; may be absent)
  std::shared_ptr<const kernels::PackedSeqWeight> gate_packed;  // pack_for_kernels
  std::vector<V41ExpertWeights> experts;  // FP4
  V41ExpertWeights shared;                // FP8
};

struct V41EngramWeights {
  bool present = false;
  TensorView table;       // F8_E4M3 [rows, engram_head_dim]
  TensorView table_scale; // F8_E8M0 [rows, engram_head_dim/32]
  V41Linear wkv;          // FP8 [dim*(hc+1), n_hash_cols*engram_head_dim]
  TensorView q_weight;    // BF16 [hc, dim]
  TensorView k_weight;    // BF16 [hc, dim]
};

struct V41MhcWeights {
  TensorView fn;          // F32 [(2+hc)*hc, hc*dim]
  TensorView base;        // F32 [(2+hc)*hc]
  TensorView scale;       // F32 [3]
  std::shared_ptr<const kernels::PackedSeqWeight> fn_packed;  // pack_for_kernels
};

// What every V4 / V4.1 block (backbone layer, DSpark stage, MTP layer) has alike.
struct DeepseekBlockCommon {
  int layer_id = 0;
  std::string prefix;     // "layers.N." or "mtp.K."
  TensorView attn_norm, ffn_norm;
  V41MhcWeights hc_attn, hc_ffn;
};

struct V41BlockWeights : DeepseekBlockCommon {
  V41AttentionWeights attn;
  V41MoeWeights ffn;
  V41EngramWeights engram;
  // DSpark-only extras (stage 0: main_proj/main_norm; last stage: norm + heads).
  V41Linear main_proj;
  TensorView main_norm, stage_norm, markov_embed, markov_head, confidence_proj;
};

class DeepseekV41Weights {
 public:
  // Looks up and checks every tensor the config implies. `checkpoint` must outlive the
  // result. Extra tensors in the file (e.g. vision.*) are ignored and counted.
  static StatusOr<std::unique_ptr<DeepseekV41Weights>> load(
      const SafetensorsCheckpoint& checkpoint, const DeepseekConfig& config);

  const DeepseekConfig& config() const { return config_; }
  const TensorView& embed() const { return embed_; }   // BF16 [vocab, dim]
  const TensorView& head() const { return head_; }     // BF16 [vocab, dim]
  const TensorView& norm() const { return norm_; }     // BF16 [dim]
  // Block of layer id i: a backbone layer (i < num_layers()) or DSpark stage
  // i - num_layers() (layer ids n_layers.. as in the config's schedule).
  const V41BlockWeights& layer(int i) const {
    return i < num_layers() ? layers_[i] : drafts_[i - num_layers()];
  }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  const std::vector<V41BlockWeights>& draft_stages() const { return drafts_; }

  // Repacks every backbone linear (FP8, FP4, BF16), the MoE gates, the mHC mixes and the
  // LM head for the vector kernels, spreading the work over `pool` (may be null); the DSpark
  // stages too. Costs one extra copy of the weights in memory; the mmapped checkpoint pages
  // are not read again.
  // layers [layer_begin, layer_end) of the backbone are packed (a pipeline stage's; the
  // others are never computed on this rank and stay unpacked and unread); drafter blocks,
  // head and embeddings always. Of the backbone's routed experts only `experts`' share.
  // `cache` (may be null): the packed slots are restored from its file on a hit, else packed
  // and kept for its finish() (model/packed_weight_cache.h).
  void pack_for_kernels(ThreadPool* pool, int layer_begin = 0, int layer_end = 1 << 30,
                        ExpertShare experts = {}, PackedWeightCache* cache = nullptr);
  const kernels::PackedSeqWeight* head_packed() const { return head_packed_.get(); }
  int64_t packed_bytes() const { return packed_bytes_; }

  // Summary for `inspect`: tensor counts and bytes per group (backbone, experts, engram,
  // DSpark), one line each.
  std::string report() const;
  int64_t num_tensors_used() const { return num_used_; }
  int64_t num_tensors_ignored() const { return num_ignored_; }

 private:
  DeepseekV41Weights() = default;
  DeepseekConfig config_;
  TensorView embed_, head_, norm_;
  std::vector<V41BlockWeights> layers_;
  std::vector<V41BlockWeights> drafts_;
  std::shared_ptr<const kernels::PackedSeqWeight> head_packed_;
  int64_t packed_bytes_ = 0;
  int64_t num_used_ = 0, num_ignored_ = 0;
  int64_t bytes_backbone_ = 0, bytes_experts_ = 0, bytes_engram_ = 0, bytes_draft_ = 0;
  friend class V41WeightLoader;
};

}  // namespace strata
