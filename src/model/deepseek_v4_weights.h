// DeepseekV4Weights: every tensor of a DeepSeek-V4 (V4-Flash / V4-Pro / V4-Flash-0731)
// checkpoint, looked up by the reference's names (inference/model.py module paths, no
// "model." prefix) and shape-checked against the config, as zero-copy views into the mmapped
// safetensors files. Reuses the V4.1 weight value types (V41Linear, V41MhcWeights,
// V41ExpertWeights) so both forwards share the kernels.
//
// Layout (spec v41-architecture.md §4.1, golden v4flash-tiny README "Checkpoint format"):
//   FP8 dense weights  F8_E4M3 [out, in] + `.scale` F8_E8M0 [ceil(out/b), ceil(in/b)],
//                      b = quantization_config.weight_block_size (128 in the releases).
//                      wo_a is FP8 in the file; the reference's convert.py dequantizes it to
//                      bf16 (exact); the forward dequantizes on the fly (same values).
//   FP4 experts        I8 [out, in/2] + `.scale` F8_E8M0 [out, in/32].
//   BF16               embed, head, norms, gate.weight, compressor wkv/wgate (promoted to
//                      fp32 by the reference), indexer weights_proj.
//   F32                hc_{attn,ffn}_*, hc_head_*, attn_sink, compressor ape, gate.bias.
//   I64                gate.tid2eid [vocab, n_activated] (hash layers; the reference
//                      declares int32: values are cast at load).
// Per layer: a compressor for every ratio > 0 (CSA ratio 4: [2*hd, D] + ape [4, 2*hd]; HCA:
// [hd, D] + ape [m, hd]); an indexer (wq_b, weights_proj, own overlapping compressor of width
// index_head_dim) for CSA layers. MTP blocks (`mtp.N.*`) are loaded and packed; mtp.0 drafts (DeepseekV4Model::mtp_draft).
//
// Errors: load() returns FailedPrecondition / NotFound naming the tensor.
// Lifetime: views point into `checkpoint`, which must outlive this object.
// Thread safety: immutable after load; share freely.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/deepseek_config.h"
#include "model/deepseek_v41_weights.h"
#include "model/safetensors.h"

namespace strata {

struct V4CompressorWeights {
  bool present = false;
  int ratio = 0;
  bool overlap = false;   // ratio == 4: [2*width] projections
  int64_t width = 0;      // d_c: head_dim (main) or index_head_dim (indexer)
  TensorView ape;         // F32 [ratio, coff*width]
  TensorView wkv;         // BF16 [coff*width, dim]
  TensorView wgate;       // BF16 [coff*width, dim]
  TensorView norm;        // BF16 [width]
  // DeepseekV4Weights::pack_for_kernels (null: the scalar loops run).
  std::shared_ptr<const kernels::PackedSeqWeight> wkv_packed, wgate_packed;
};

struct V4IndexerWeights {
  bool present = false;
  V41Linear wq_b;           // FP8 [index_n_heads*index_head_dim, q_lora_rank]
  V41Linear weights_proj;   // BF16 [index_n_heads, dim]
  V4CompressorWeights compressor;  // width index_head_dim, rotate (Hadamard + FP4)
};

struct V4AttentionWeights : DeepseekAttentionCore {
  V4CompressorWeights compressor;
  V4IndexerWeights indexer;
};

struct V4MoeWeights {
  bool hash = false;
  TensorView gate_weight;        // BF16 [E, dim]
  TensorView gate_bias;          // F32 [E] (score-routed layers only)
  std::vector<int32_t> tid2eid;  // [vocab * n_activated] (hash layers only)
  std::shared_ptr<const kernels::PackedSeqWeight> gate_packed;  // pack_for_kernels
  std::vector<V41ExpertWeights> experts;  // FP4 (or FP8)
  V41ExpertWeights shared;                // FP8, no SwiGLU clamp in V4
};

struct V4BlockWeights : DeepseekBlockCommon {
  V4AttentionWeights attn;
  V4MoeWeights ffn;
  // MTP extras (MTP blocks only; DeepseekV4Model::mtp_draft).
  V41Linear e_proj, h_proj;
  TensorView enorm, hnorm, norm, hc_head_fn, hc_head_base, hc_head_scale;
};

class DeepseekV4Weights {
 public:
  static StatusOr<std::unique_ptr<DeepseekV4Weights>> load(const SafetensorsCheckpoint& checkpoint,
                                                           const DeepseekConfig& config);

  const TensorView& embed() const { return embed_; }   // BF16 [vocab, dim]
  const TensorView& head() const { return head_; }     // BF16 [vocab, dim]
  const TensorView& norm() const { return norm_; }     // BF16 [dim]
  const TensorView& hc_head_fn() const { return hc_head_fn_; }        // F32 [hc, hc*dim]
  const TensorView& hc_head_base() const { return hc_head_base_; }    // F32 [hc]
  const TensorView& hc_head_scale() const { return hc_head_scale_; }  // F32 [1]
  // Backbone layer i < num_layers(); i >= num_layers() is MTP block i - num_layers().
  const V4BlockWeights& layer(int i) const {
    return i < num_layers() ? layers_[i] : mtp_[static_cast<size_t>(i - num_layers())];
  }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  const std::vector<V4BlockWeights>& mtp() const { return mtp_; }
  int64_t num_tensors_used() const { return num_used_; }
  int64_t num_tensors_ignored() const { return num_ignored_; }

  // Repacks the backbone's weights once for the vector kernels (kernels/block_gemm.h,
  // kernels/seq_gemm.h): every FP8 linear whose K is a multiple of its block, every FP4
  // expert, the BF16 linears, the MoE gates, the compressors, the mHC mixes and the LM head
  // (V41Linear::packed and the *_packed members). The forward then uses the multi-threaded
  // packed kernels, bit-identical to the scalar loops. Not thread-safe (call once, at load);
  // `pool` (may be null) splits the work.
  // layers [layer_begin, layer_end) of the backbone are packed (a pipeline stage's; the
  // others are never computed on this rank and stay unpacked and unread); drafter blocks,
  // head and embeddings always. Of the backbone's routed experts only `experts`' share.
  // `cache` (may be null): the packed slots are restored from its file on a hit, else packed
  // and kept for its finish() (model/packed_weight_cache.h).
  void pack_for_kernels(ThreadPool* pool, int layer_begin = 0, int layer_end = 1 << 30,
                        ExpertShare experts = {}, PackedWeightCache* cache = nullptr);
  const kernels::PackedSeqWeight* head_packed() const { return head_packed_.get(); }
  int64_t packed_bytes() const { return packed_bytes_; }

 private:
  DeepseekV4Weights() = default;
  TensorView embed_, head_, norm_, hc_head_fn_, hc_head_base_, hc_head_scale_;
  std::vector<V4BlockWeights> layers_;
  std::vector<V4BlockWeights> mtp_;
  int64_t num_used_ = 0, num_ignored_ = 0;
  std::shared_ptr<const kernels::PackedSeqWeight> head_packed_;
  int64_t packed_bytes_ = 0;
  friend class V4WeightLoader;
};

}  // namespace strata
