// DeepseekConfig: the architecture description of DeepSeek-V4.1 and DeepSeek-V4 (Flash, Pro,
// Flash-0731 "DSpark") models, parsed from any of the published config formats, validated, with
// the per-layer schedule (attention role, compression ratio, which layer owns each shared state)
// derived once so every consumer (forward passes, state graph, inspect) agrees on it.
//
// Accepted inputs (auto-detected by parse_deepseek_config_json):
//   * HF config.json of V4.1: top-level {architectures, model_type "deepseek_v41",
//     quantization_config, text_config{...}, vision_config}; text fields use HF names
//     (hidden_size, num_hidden_layers, kv_source_layer_ids, ...).
//   * The reference's flat inference/config.json (ModelArgs field names: dim, n_layers,
//     n_mtp_layers, kv_source_layers, candidate_source_layer, score_func, route_scale, ...).
//     V4.1 vs V4 is told apart by the presence of kv_source_layers / n_hash_layers.
//   * HF config.json of V4 (V4-Flash, V4-Flash-0731, V4-Pro): flat, model_type "deepseek_v4".
//   rope_scaling may spell its kind as "type" or "rope_type". Unknown keys are ignored.
//
// Layer numbering: ids 0..n_layers-1 are the backbone; ids n_layers..n_layers+n_draft_layers-1
// are the draft stages (V4 MTP / V4.1 DSpark "mtp.0..", ratio 0). n_draft_layers is
// compress_ratios.size() - n_layers when compress_ratios lists the drafts (V4-Flash-0731 lists
// 3 although num_nextn_predict_layers says 1: accepted as published, noted in `notes`).
//
// Roles (spec v41-architecture.md §2.4–§2.6; reference model.py Attention/Indexer/Compressor):
//   V4.1: ratio 0 -> kSwaOnly; a kv source (own compressor, and own index keys when it is also
//         an index source) -> kFull; an index source that is not a kv source -> kReindex (own
//         indexer over the latest index-key owner's keys); any other compressed layer -> kReuse
//         (reads the latest kv source's compressed KV and the latest index source's top-k).
//         "Latest" = the most recent layer <= this one of that kind (the reference's module-
//         global `shared_attn`, overwritten in layer order).
//   V4:   ratio 0 -> kSwaOnly; ratio == kV4CsaRatio (4; overlapping compressor + own indexer)
//         -> kCsa; any other ratio > 0 -> kHca (attends all compressed rows, no indexer).
//         Every compressed layer owns its own caches.
//   Draft stages are always kSwaOnly with their own window ring.
//
// Errors: parse/validate return Status kInvalidArgument with the offending field named.
// Thread safety: a DeepseekConfig is an immutable value after parsing; share freely.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace strata {

enum class DeepseekVersion { kV41, kV4 };
const char* deepseek_version_name(DeepseekVersion v);  // "V4.1" / "V4"

enum class AttnRole {
  kSwaOnly,   // sliding window only (ratio 0)
  kFull,      // V4.1: kv source (own compressor) [+ own indexer/keys if also an index source]
  kReindex,   // V4.1: own indexer (wq_b, weights_proj) over a source's keys; no compressor
  kReuse,     // V4.1: reads a source's compressed KV and published top-k
  kCsa,       // V4: ratio-4 overlapping compressor + own indexer (own index compressor)
  kHca,       // V4: heavy compression (ratio e.g. 128), attends every compressed row
};
const char* attn_role_name(AttnRole r);  // "swa", "full", "reindex", "reuse", "csa", "hca"

inline constexpr int kV4CsaRatio = 4;  // V4 reference: overlap = (compress_ratio == 4)

// One logical layer (backbone or draft stage). Owner ids are layer ids, -1 = none.
struct LayerSchedule {
  int layer_id = 0;
  bool is_draft = false;          // MTP / DSpark stage
  int ratio = 0;                  // compress ratio m (0 = none)
  AttnRole role = AttnRole::kSwaOnly;
  bool has_compressor = false;    // writes compressed KV rows (V4.1 kv source; V4 every m>0)
  bool overlap_compressor = false;// V4 CSA: 2*ratio rows of 2*d partial state
  bool has_indexer = false;       // computes its own top-k (V4.1 index source; V4 CSA)
  bool owns_index_keys = false;   // writes index-key rows (V4.1 kv&&index source; V4 CSA)
  bool is_candidate_source = false;  // V4.1: publishes the candidate block mask
  bool uses_candidates = false;      // V4.1: index source after the candidate source
  int kv_owner = -1;              // layer whose compressed KV this layer reads (self if owner)
  int index_key_owner = -1;       // layer whose index keys this layer's indexer scores
  int topk_owner = -1;            // layer whose top-k selection this layer attends with
  int candidate_owner = -1;       // layer whose candidate mask this layer's indexer uses
  bool engram_before = false;     // V4.1: Engram applied to the stream before this block
  int engram_slot = -1;           // index into engram_layer_ids
  bool dspark_tap = false;        // V4.1: input of this layer feeds DSpark main_hidden
  bool hash_routed = false;       // V4: MoE routes by tid2eid (layer < n_hash_layers)
  double rope_theta = 0;          // compress_rope_theta + YaRN if ratio > 0, else rope_theta
  bool yarn = false;
  int n_routed_experts = 0;       // per layer (DSpark stages may differ)
  int n_activated_experts = 0;
};

struct DeepseekConfig {
  DeepseekVersion version = DeepseekVersion::kV41;
  std::string source_format;      // "hf-nested", "hf-flat", "reference-flat"
  std::string model_type;         // as given ("deepseek_v41", "deepseek_v4", or "")
  std::vector<std::string> architectures;

  // --- dims ---
  int64_t vocab_size = 0;
  int64_t dim = 0;                // hidden_size
  int n_layers = 0;               // backbone layers
  int n_draft_layers = 0;         // MTP / DSpark stages (layer ids n_layers..)
  int num_nextn_predict_layers = 0;  // as written in the config (may disagree, see notes)
  int n_heads = 0;
  int n_kv_heads = 1;
  int head_dim = 0;               // d = 512 in the releases
  int rope_head_dim = 0;          // r_d = 64, RoPE on the LAST r_d channels
  int q_lora_rank = 0;
  int o_groups = 0;
  int o_lora_rank = 0;
  double norm_eps = 1e-6;         // rms_norm_eps / norm_eps (V4.1: 1e-20)
  int window_size = 0;            // sliding_window W
  std::vector<int> compress_ratios;  // n_layers + n_draft_layers entries

  // --- rope ---
  double rope_theta = 10000;
  double compress_rope_theta = 0;
  std::string rope_scaling_type;  // "yarn" or "" (none)
  double rope_factor = 1;
  int64_t original_seq_len = 0;   // YaRN original_max_position_embeddings (0 = no YaRN)
  double beta_fast = 32;
  double beta_slow = 1;
  int64_t max_position_embeddings = 0;
  int64_t max_seq_len = 0;        // reference runtime field if present, else 0

  // --- V4.1 CSA2 sharing ---
  std::vector<int> kv_source_layers;
  std::vector<int> index_source_layers;
  int candidate_source_layer = -1;
  int candidate_topk_blocks = 0;
  int candidate_block_size = 0;

  // --- indexer ---
  int index_n_heads = 0;
  int index_head_dim = 0;
  int index_topk = 0;

  // --- MoE ---
  int n_routed_experts = 0;
  int n_activated_experts = 0;
  int n_shared_experts = 0;
  int64_t moe_inter_dim = 0;
  std::string score_func;         // "sqrtsoftplus" | "sigmoid" | "softmax"
  std::string topk_method;        // "noaux_tc" (HF only; "" if absent)
  bool norm_topk_prob = true;
  double route_scale = 1.0;       // routed_scaling_factor
  double swiglu_limit = 0.0;      // 0 = no clamp
  bool shared_expert_clamped = true;  // V4.1 clamps the shared expert; V4 does not (§6.2)
  double gate_temp = 1.0;
  int n_hash_layers = 0;          // V4: layers [0, n_hash_layers) route by tid2eid

  // --- mHC ---
  int hc_mult = 4;
  int hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;

  // --- Engram (V4.1) ---
  std::vector<int> engram_layer_ids;
  std::vector<int64_t> engram_num_embeddings;
  int engram_max_ngram_size = 0;
  int engram_n_heads = 0;
  int engram_head_dim = 0;
  int64_t engram_vocab_size = 0;
  int64_t engram_compressed_vocab_size = 0;
  int64_t engram_pad_id = 2;

  // --- DSpark (V4.1, V4-Flash-0731) ---
  int dspark_block_size = 0;
  int64_t dspark_noise_token_id = 0;
  std::vector<int> dspark_target_layer_ids;
  int dspark_markov_rank = 0;
  int dspark_n_routed_experts = 0;     // 0 = same as backbone
  int dspark_n_activated_experts = 0;

  // --- quantization ---
  std::string weight_dtype = "fp8";    // "fp8" | "bf16"
  std::string expert_dtype = "fp4";    // "fp4" | "" (same as weight_dtype)
  std::string scale_fmt = "ue8m0";
  int weight_block_size = 0;           // FP8 weight tile edge: 32 (V4.1) / 128 (V4)

  // --- misc ---
  int64_t bos_token_id = 0, eos_token_id = 1, pad_token_id = -1, image_token_id = -1;
  bool tie_word_embeddings = false;
  int vision_n_layers = 0;
  std::string hidden_act = "silu";

  // Human-readable remarks from parsing (e.g. draft-count disagreement). Not errors.
  std::vector<std::string> notes;
  // Derived by finalize(): one entry per layer id, backbone then drafts.
  std::vector<LayerSchedule> layers;

  int total_layers() const { return n_layers + n_draft_layers; }
  bool is_v41() const { return version == DeepseekVersion::kV41; }
  // Activation / KV-cache FP8 quant block: V4.1 32 (window KV whole 512 dims), V4 64 (nope
  // part only; GEMM activations use 128 = weight_block_size).
  int kv_fp8_block() const { return is_v41() ? 32 : 64; }

  // Checks every structural rule (ratios, source lists, ids in range, dims divisible) and
  // derives `layers`. parse_* call it; call it again after editing fields by hand.
  Status finalize();
};

// Parses JSON text in any accepted format (see top). Returns a finalized config.
StatusOr<DeepseekConfig> parse_deepseek_config_json(std::string_view json_text);
// Loads from a file, or from a directory: config.json, else inference-config.json.
StatusOr<DeepseekConfig> load_deepseek_config(const std::string& path);
// True if the JSON text looks like a DeepSeek V4/V4.1 config (cheap sniff for `inspect`).
bool looks_like_deepseek_config(std::string_view json_text);

}  // namespace strata
