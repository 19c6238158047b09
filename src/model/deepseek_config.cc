// DeepseekConfig parsing, validation and schedule derivation. See deepseek_config.h.
#include "model/deepseek_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace strata {
namespace {

using nlohmann::json;

const json* find_key(const json& j, std::initializer_list<const char*> names,
                     const char** found = nullptr) {
  for (const char* n : names) {
    auto it = j.find(n);
    if (it != j.end() && !it->is_null()) {
      if (found) *found = n;
      return &*it;
    }
  }
  return nullptr;
}

// Typed readers: a present key with a wrong type is an error (named); absent keeps default.
class Reader {
 public:
  explicit Reader(const json& j) : j_(j) {}
  template <typename T>
  void get(std::initializer_list<const char*> names, T& out) {
    const char* key = nullptr;
    const json* v = find_key(j_, names, &key);
    if (!v || !err_.ok()) return;
    try {
      if constexpr (std::is_same_v<T, bool>) {
        if (!v->is_boolean()) throw std::runtime_error("expected a boolean");
        out = v->get<bool>();
      } else if constexpr (std::is_integral_v<T>) {
        if (!v->is_number()) throw std::runtime_error("expected a number");
        double d = v->get<double>();
        if (d != static_cast<double>(static_cast<int64_t>(d)))
          throw std::runtime_error("expected an integer");
        out = static_cast<T>(v->get<int64_t>());
      } else if constexpr (std::is_floating_point_v<T>) {
        if (!v->is_number()) throw std::runtime_error("expected a number");
        out = v->get<double>();
      } else if constexpr (std::is_same_v<T, std::string>) {
        if (!v->is_string()) throw std::runtime_error("expected a string");
        out = v->get<std::string>();
      } else {
        if (!v->is_array()) throw std::runtime_error("expected an array");
        out.clear();
        for (const auto& e : *v) {
          if (!e.is_number_integer()) throw std::runtime_error("expected an array of integers");
          out.push_back(static_cast<typename T::value_type>(e.get<int64_t>()));
        }
      }
    } catch (const std::exception& e) {
      err_ = invalid_argument("config field '{}': {}", key, e.what());
    }
  }
  bool has(std::initializer_list<const char*> names) const { return find_key(j_, names); }
  const Status& status() const { return err_; }

 private:
  const json& j_;
  Status err_;
};

std::string join_ints(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

bool contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// Reads the text-model fields shared by all formats. HF and reference names both accepted.
Status read_text_fields(const json& t, DeepseekConfig& c) {
  Reader r(t);
  r.get({"vocab_size"}, c.vocab_size);
  r.get({"hidden_size", "dim"}, c.dim);
  r.get({"num_hidden_layers", "n_layers"}, c.n_layers);
  r.get({"num_nextn_predict_layers", "n_mtp_layers"}, c.num_nextn_predict_layers);
  r.get({"num_attention_heads", "n_heads"}, c.n_heads);
  r.get({"num_key_value_heads"}, c.n_kv_heads);
  r.get({"head_dim"}, c.head_dim);
  r.get({"qk_rope_head_dim", "rope_head_dim"}, c.rope_head_dim);
  r.get({"q_lora_rank"}, c.q_lora_rank);
  r.get({"o_groups"}, c.o_groups);
  r.get({"o_lora_rank"}, c.o_lora_rank);
  r.get({"rms_norm_eps", "norm_eps"}, c.norm_eps);
  r.get({"sliding_window", "window_size"}, c.window_size);
  r.get({"compress_ratios"}, c.compress_ratios);
  r.get({"rope_theta"}, c.rope_theta);
  r.get({"compress_rope_theta"}, c.compress_rope_theta);
  r.get({"max_position_embeddings"}, c.max_position_embeddings);
  r.get({"max_seq_len"}, c.max_seq_len);
  // Reference flat rope fields.
  if (r.has({"original_seq_len"})) {
    r.get({"original_seq_len"}, c.original_seq_len);
    r.get({"rope_factor"}, c.rope_factor);
    r.get({"beta_fast"}, c.beta_fast);
    r.get({"beta_slow"}, c.beta_slow);
    c.rope_scaling_type = c.original_seq_len > 0 ? "yarn" : "";
  }
  r.get({"kv_source_layer_ids", "kv_source_layers"}, c.kv_source_layers);
  r.get({"index_source_layer_ids", "index_source_layers"}, c.index_source_layers);
  r.get({"candidate_source_layer_id", "candidate_source_layer"}, c.candidate_source_layer);
  r.get({"candidate_topk_blocks"}, c.candidate_topk_blocks);
  r.get({"candidate_block_size"}, c.candidate_block_size);
  r.get({"index_n_heads"}, c.index_n_heads);
  r.get({"index_head_dim"}, c.index_head_dim);
  r.get({"index_topk"}, c.index_topk);
  r.get({"n_routed_experts"}, c.n_routed_experts);
  r.get({"num_experts_per_tok", "n_activated_experts"}, c.n_activated_experts);
  r.get({"n_shared_experts"}, c.n_shared_experts);
  r.get({"moe_intermediate_size", "moe_inter_dim"}, c.moe_inter_dim);
  r.get({"scoring_func", "score_func"}, c.score_func);
  r.get({"topk_method"}, c.topk_method);
  r.get({"norm_topk_prob"}, c.norm_topk_prob);
  r.get({"routed_scaling_factor", "route_scale"}, c.route_scale);
  r.get({"swiglu_limit"}, c.swiglu_limit);
  r.get({"gate_temp"}, c.gate_temp);
  r.get({"num_hash_layers", "n_hash_layers"}, c.n_hash_layers);
  r.get({"hc_mult"}, c.hc_mult);
  r.get({"hc_sinkhorn_iters"}, c.hc_sinkhorn_iters);
  r.get({"hc_eps"}, c.hc_eps);
  r.get({"engram_layer_ids"}, c.engram_layer_ids);
  r.get({"engram_num_embeddings"}, c.engram_num_embeddings);
  r.get({"engram_max_ngram_size"}, c.engram_max_ngram_size);
  r.get({"engram_n_heads"}, c.engram_n_heads);
  r.get({"engram_head_dim"}, c.engram_head_dim);
  r.get({"engram_vocab_size"}, c.engram_vocab_size);
  r.get({"engram_compressed_vocab_size"}, c.engram_compressed_vocab_size);
  r.get({"engram_pad_token_id", "engram_pad_id"}, c.engram_pad_id);
  r.get({"dspark_block_size"}, c.dspark_block_size);
  r.get({"dspark_noise_token_id"}, c.dspark_noise_token_id);
  r.get({"dspark_target_layer_ids"}, c.dspark_target_layer_ids);
  r.get({"dspark_markov_rank"}, c.dspark_markov_rank);
  r.get({"dspark_n_routed_experts"}, c.dspark_n_routed_experts);
  r.get({"dspark_num_experts_per_tok", "dspark_n_activated_experts"},
        c.dspark_n_activated_experts);
  r.get({"dtype"}, c.weight_dtype);
  if (c.weight_dtype == "bfloat16") c.weight_dtype = "bf16";
  r.get({"expert_dtype"}, c.expert_dtype);
  r.get({"scale_fmt"}, c.scale_fmt);
  r.get({"bos_token_id"}, c.bos_token_id);
  r.get({"eos_token_id"}, c.eos_token_id);
  r.get({"pad_token_id"}, c.pad_token_id);
  r.get({"image_token_id"}, c.image_token_id);
  r.get({"tie_word_embeddings"}, c.tie_word_embeddings);
  r.get({"vision_n_layers"}, c.vision_n_layers);
  r.get({"hidden_act"}, c.hidden_act);
  STRATA_RETURN_IF_ERROR(r.status());

  // HF rope_scaling {type|rope_type, factor, original_max_position_embeddings, beta_*}.
  if (const json* rs = find_key(t, {"rope_scaling"})) {
    if (!rs->is_object()) return invalid_argument("config field 'rope_scaling': expected an object");
    Reader rr(*rs);
    std::string type;
    rr.get({"rope_type", "type"}, type);
    rr.get({"factor"}, c.rope_factor);
    rr.get({"original_max_position_embeddings"}, c.original_seq_len);
    rr.get({"beta_fast"}, c.beta_fast);
    rr.get({"beta_slow"}, c.beta_slow);
    STRATA_RETURN_IF_ERROR(rr.status().with_context("rope_scaling"));
    if (type.empty()) return invalid_argument("rope_scaling: missing 'type' / 'rope_type'");
    if (type != "yarn" && type != "default")
      return invalid_argument("rope_scaling: unsupported type '{}' (expected 'yarn')", type);
    c.rope_scaling_type = type == "yarn" ? "yarn" : "";
    if (type == "yarn" && c.original_seq_len <= 0)
      return invalid_argument("rope_scaling: yarn needs original_max_position_embeddings > 0");
  }
  return ok_status();
}

Status read_quant(const json& q, DeepseekConfig& c) {
  if (!q.is_object()) return invalid_argument("quantization_config: expected an object");
  Reader r(q);
  std::vector<int> wbs;
  r.get({"weight_block_size"}, wbs);
  r.get({"scale_fmt"}, c.scale_fmt);
  r.get({"expert_dtype"}, c.expert_dtype);
  std::string method;
  r.get({"quant_method"}, method);
  STRATA_RETURN_IF_ERROR(r.status().with_context("quantization_config"));
  if (!wbs.empty()) {
    if (wbs.size() != 2 || wbs[0] != wbs[1] || wbs[0] <= 0)
      return invalid_argument("quantization_config.weight_block_size: expected [b, b], got {}",
                              join_ints(wbs));
    c.weight_block_size = wbs[0];
  }
  if (!method.empty()) c.weight_dtype = method == "fp8" ? "fp8" : method;
  return ok_status();
}

}  // namespace

const char* deepseek_version_name(DeepseekVersion v) {
  switch (v) {
    case DeepseekVersion::kV41: return "V4.1";
    case DeepseekVersion::kV4: return "V4";
  }
  return "?";
}

const char* attn_role_name(AttnRole r) {
  switch (r) {
    case AttnRole::kSwaOnly: return "swa";
    case AttnRole::kFull: return "full";
    case AttnRole::kReindex: return "reindex";
    case AttnRole::kReuse: return "reuse";
    case AttnRole::kCsa: return "csa";
    case AttnRole::kHca: return "hca";
  }
  return "?";
}

// A string field or "" (absent or another type: the typed Reader reports wrong types).
std::string string_or_empty(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool looks_like_deepseek_config(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return false;
  std::string mt = string_or_empty(j, "model_type");
  if (mt.rfind("deepseek_v4", 0) == 0) return true;
  if (j.contains("text_config") && j["text_config"].is_object() &&
      string_or_empty(j["text_config"], "model_type").rfind("deepseek_v4", 0) == 0)
    return true;
  return j.contains("compress_ratios") &&
         (j.contains("dim") || j.contains("hidden_size") || j.contains("text_config"));
}

StatusOr<DeepseekConfig> parse_deepseek_config_json(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument("config: not valid JSON");
  if (!j.is_object()) return invalid_argument("config: top level is not a JSON object");
  DeepseekConfig c;
  if (auto it = j.find("architectures"); it != j.end() && it->is_array())
    for (const auto& a : *it)
      if (a.is_string()) c.architectures.push_back(a.get<std::string>());
  if (auto it = j.find("model_type"); it != j.end() && !it->is_string() && !it->is_null())
    return invalid_argument("config field 'model_type': expected a string, got {}", it->type_name());
  c.model_type = string_or_empty(j, "model_type");

  const json* text_cfg = nullptr;
  if (auto it = j.find("text_config"); it != j.end()) {
    if (!it->is_object()) return invalid_argument("config field 'text_config': expected an object");
    text_cfg = &*it;
    c.source_format = "hf-nested";
  } else if (j.contains("dim")) {
    c.source_format = "reference-flat";
  } else {
    c.source_format = "hf-flat";
  }

  // Version.
  auto arch_has = [&](std::string_view s) {
    return std::any_of(c.architectures.begin(), c.architectures.end(),
                       [&](const std::string& a) { return a == s; });
  };
  if (c.model_type == "deepseek_v41" || arch_has("DeepseekV41ForCausalLM") ||
      (text_cfg && text_cfg->value("model_type", std::string()) == "deepseek_v41_text")) {
    c.version = DeepseekVersion::kV41;
  } else if (c.model_type == "deepseek_v4" || arch_has("DeepseekV4ForCausalLM")) {
    c.version = DeepseekVersion::kV4;
  } else if (!c.model_type.empty()) {
    return invalid_argument("config: model_type '{}' is not a DeepSeek V4 / V4.1 model",
                            c.model_type);
  } else {
    // Reference flat config: V4.1 declares the shared sources; V4 declares hash layers.
    const json& t = text_cfg ? *text_cfg : j;
    if (t.contains("kv_source_layers") || t.contains("kv_source_layer_ids"))
      c.version = DeepseekVersion::kV41;
    else if (t.contains("compress_ratios"))
      c.version = DeepseekVersion::kV4;
    else
      return invalid_argument("config: cannot tell the model version (no model_type, no "
                              "kv_source_layers, no compress_ratios)");
  }
  // Version-dependent defaults (overridden by explicit fields).
  if (c.version == DeepseekVersion::kV41) {
    c.weight_block_size = 32;
    c.shared_expert_clamped = true;
  } else {
    c.weight_block_size = 128;
    c.shared_expert_clamped = false;
  }

  STRATA_RETURN_IF_ERROR(read_text_fields(j, c));  // top level (flat formats; ids for nested)
  if (text_cfg) STRATA_RETURN_IF_ERROR(read_text_fields(*text_cfg, c).with_context("text_config"));
  if (auto it = j.find("quantization_config"); it != j.end() && !it->is_null())
    STRATA_RETURN_IF_ERROR(read_quant(*it, c));
  if (text_cfg) {
    if (auto it = text_cfg->find("quantization_config"); it != text_cfg->end() && !it->is_null())
      STRATA_RETURN_IF_ERROR(read_quant(*it, c));
  }
  if (auto it = j.find("vision_config"); it != j.end() && it->is_object())
    c.vision_n_layers = it->value("num_hidden_layers", 0);

  STRATA_RETURN_IF_ERROR(c.finalize());
  return c;
}

StatusOr<DeepseekConfig> load_deepseek_config(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p(path);
  if (fs::is_directory(p, ec)) {
    if (fs::exists(p / "config.json", ec)) p /= "config.json";
    else if (fs::exists(p / "inference-config.json", ec)) p /= "inference-config.json";
    else return not_found("{}: no config.json or inference-config.json", path);
  }
  std::ifstream in(p, std::ios::binary);
  if (!in) return not_found("{}: cannot open", p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  auto c = parse_deepseek_config_json(ss.str());
  if (!c.ok()) return c.status().with_context(p.string());
  return c;
}

Status DeepseekConfig::finalize() {
  auto need_pos = [](const char* name, int64_t v) -> Status {
    if (v <= 0) return invalid_argument("config field '{}' must be > 0 (got {})", name, v);
    return ok_status();
  };
  STRATA_RETURN_IF_ERROR(need_pos("vocab_size", vocab_size));
  STRATA_RETURN_IF_ERROR(need_pos("dim / hidden_size", dim));
  STRATA_RETURN_IF_ERROR(need_pos("n_layers / num_hidden_layers", n_layers));
  STRATA_RETURN_IF_ERROR(need_pos("n_heads / num_attention_heads", n_heads));
  STRATA_RETURN_IF_ERROR(need_pos("head_dim", head_dim));
  STRATA_RETURN_IF_ERROR(need_pos("rope_head_dim / qk_rope_head_dim", rope_head_dim));
  STRATA_RETURN_IF_ERROR(need_pos("q_lora_rank", q_lora_rank));
  STRATA_RETURN_IF_ERROR(need_pos("o_groups", o_groups));
  STRATA_RETURN_IF_ERROR(need_pos("o_lora_rank", o_lora_rank));
  STRATA_RETURN_IF_ERROR(need_pos("window_size / sliding_window", window_size));
  STRATA_RETURN_IF_ERROR(need_pos("hc_mult", hc_mult));
  STRATA_RETURN_IF_ERROR(need_pos("n_routed_experts", n_routed_experts));
  STRATA_RETURN_IF_ERROR(need_pos("n_activated_experts / num_experts_per_tok", n_activated_experts));
  STRATA_RETURN_IF_ERROR(need_pos("moe_inter_dim / moe_intermediate_size", moe_inter_dim));
  // Floating-point fields: finite and in their range (the fuzz corpus found rope_theta =
  // -2^31 and compress_rope_theta = 1e308 tripping a CHECK in the RoPE tables).
  auto need_range = [](const char* name, double v, double lo, double hi, bool lo_open) -> Status {
    if (!std::isfinite(v) || v > hi || (lo_open ? v <= lo : v < lo))
      return invalid_argument("config field '{}' = {} is outside {}{}, {}]", name, v,
                              lo_open ? "(" : "[", lo, hi);
    return ok_status();
  };
  STRATA_RETURN_IF_ERROR(need_range("rope_theta", rope_theta, 0, 1e30, true));
  if (compress_rope_theta != 0)
    STRATA_RETURN_IF_ERROR(need_range("compress_rope_theta", compress_rope_theta, 0, 1e30, true));
  STRATA_RETURN_IF_ERROR(need_range("rope_scaling.factor", rope_factor, 0, 1e6, true));
  STRATA_RETURN_IF_ERROR(need_range("rope_scaling.beta_fast", beta_fast, -1e6, 1e6, false));
  STRATA_RETURN_IF_ERROR(need_range("rope_scaling.beta_slow", beta_slow, -1e6, 1e6, false));
  STRATA_RETURN_IF_ERROR(need_range("rms_norm_eps / norm_eps", norm_eps, 0, 1, true));
  STRATA_RETURN_IF_ERROR(need_range("routed_scaling_factor", route_scale, -1e6, 1e6, false));
  STRATA_RETURN_IF_ERROR(need_range("swiglu_limit", swiglu_limit, 0, 1e30, false));
  STRATA_RETURN_IF_ERROR(need_range("gate_temp", gate_temp, 0, 1e6, true));
  STRATA_RETURN_IF_ERROR(need_range("hc_eps", hc_eps, 0, 1, false));
  if (rope_head_dim > head_dim || rope_head_dim % 2)
    return invalid_argument("rope_head_dim {} must be even and <= head_dim {}", rope_head_dim,
                            head_dim);
  if (n_heads % o_groups)
    return invalid_argument("n_heads {} is not divisible by o_groups {}", n_heads, o_groups);
  if (n_activated_experts > n_routed_experts)
    return invalid_argument("n_activated_experts {} > n_routed_experts {}", n_activated_experts,
                            n_routed_experts);
  if (!score_func.empty() && score_func != "sqrtsoftplus" && score_func != "sigmoid" &&
      score_func != "softmax")
    return invalid_argument("score_func '{}' is not one of sqrtsoftplus/sigmoid/softmax",
                            score_func);
  if (score_func.empty()) score_func = "sqrtsoftplus";

  // Layer count and drafts.
  if (compress_ratios.empty())
    return invalid_argument("compress_ratios is missing (one entry per layer)");
  const int n_ratios = static_cast<int>(compress_ratios.size());
  if (n_ratios < n_layers)
    return invalid_argument("compress_ratios has {} entries, fewer than n_layers {}", n_ratios,
                            n_layers);
  n_draft_layers = n_ratios - n_layers;
  if (n_draft_layers == 0 && num_nextn_predict_layers > 0) {
    n_draft_layers = num_nextn_predict_layers;
    compress_ratios.resize(n_layers + n_draft_layers, 0);
  } else if (n_draft_layers != num_nextn_predict_layers) {
    notes.push_back(fmt::format(
        "compress_ratios lists {} draft stage(s) after {} layers but num_nextn_predict_layers is "
        "{}; using {} (as published)",
        n_draft_layers, n_layers, num_nextn_predict_layers, n_draft_layers));
  }
  for (int i = 0; i < n_ratios; ++i) {
    int m = compress_ratios[i];
    if (m < 0) return invalid_argument("compress_ratios[{}] = {} is negative", i, m);
    if (i >= n_layers && m != 0)
      return invalid_argument("compress_ratios[{}] = {}: draft stages must have ratio 0", i, m);
    if (is_v41() && m > 2)
      return invalid_argument("compress_ratios[{}] = {}: V4.1 supports ratios 0, 1, 2", i, m);
    if (!is_v41() && m == 1)
      return invalid_argument("compress_ratios[{}] = 1: V4 compressors need ratio >= 2", i);
  }
  const bool any_compressed =
      std::any_of(compress_ratios.begin(), compress_ratios.end(), [](int m) { return m > 0; });
  if (any_compressed) {
    STRATA_RETURN_IF_ERROR(need_pos("index_n_heads", index_n_heads));
    STRATA_RETURN_IF_ERROR(need_pos("index_head_dim", index_head_dim));
    STRATA_RETURN_IF_ERROR(need_pos("index_topk", index_topk));
    if (rope_head_dim > index_head_dim)
      return invalid_argument("rope_head_dim {} > index_head_dim {}", rope_head_dim,
                              index_head_dim);
    if (compress_rope_theta <= 0) compress_rope_theta = rope_theta;
  }
  // Serving-format groups (spec §3): window FP8 block, compressed FP4/16, index FP4/32.
  if (head_dim % kv_fp8_block())
    return invalid_argument("head_dim {} not a multiple of the KV FP8 block {}", head_dim,
                            kv_fp8_block());
  if (is_v41() && head_dim % 16)
    return invalid_argument("head_dim {} not a multiple of 16 (FP4 compressed KV)", head_dim);
  if (any_compressed && index_head_dim % 32)
    return invalid_argument("index_head_dim {} not a multiple of 32 (FP4 index keys)",
                            index_head_dim);
  auto check_ids = [&](const char* name, const std::vector<int>& ids, int limit) -> Status {
    std::set<int> seen;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= limit)
        return invalid_argument("{} = {}: id {} out of range [0, {})", name, join_ints(ids),
                                ids[i], limit);
      if (!seen.insert(ids[i]).second)
        return invalid_argument("{} = {}: duplicate id {}", name, join_ints(ids), ids[i]);
      if (i && ids[i] < ids[i - 1])
        return invalid_argument("{} = {}: not in increasing order", name, join_ints(ids));
    }
    return ok_status();
  };
  STRATA_RETURN_IF_ERROR(check_ids("kv_source_layers", kv_source_layers, n_layers));
  STRATA_RETURN_IF_ERROR(check_ids("index_source_layers", index_source_layers, n_layers));
  STRATA_RETURN_IF_ERROR(check_ids("engram_layer_ids", engram_layer_ids, n_layers));
  STRATA_RETURN_IF_ERROR(check_ids("dspark_target_layer_ids", dspark_target_layer_ids, n_layers));
  if (!is_v41() && (!kv_source_layers.empty() || !index_source_layers.empty()))
    return invalid_argument("kv/index source layer lists are V4.1 fields; this is a V4 config");
  if (n_hash_layers < 0 || n_hash_layers > n_layers)
    return invalid_argument("n_hash_layers {} out of range [0, {}]", n_hash_layers, n_layers);
  if (engram_num_embeddings.size() != engram_layer_ids.size())
    return invalid_argument("engram_num_embeddings has {} entries, engram_layer_ids {}",
                            engram_num_embeddings.size(), engram_layer_ids.size());
  if (!engram_layer_ids.empty()) {
    if (engram_max_ngram_size < 2)
      return invalid_argument("engram_max_ngram_size {} must be >= 2", engram_max_ngram_size);
    STRATA_RETURN_IF_ERROR(need_pos("engram_n_heads", engram_n_heads));
    STRATA_RETURN_IF_ERROR(need_pos("engram_head_dim", engram_head_dim));
  }

  // Schedule.
  layers.assign(total_layers(), LayerSchedule{});
  int last_kv = -1, last_keys = -1, last_topk = -1;
  for (int id = 0; id < total_layers(); ++id) {
    LayerSchedule& L = layers[id];
    L.layer_id = id;
    L.is_draft = id >= n_layers;
    L.ratio = compress_ratios[id];
    L.n_routed_experts = n_routed_experts;
    L.n_activated_experts = n_activated_experts;
    if (L.is_draft) {
      if (dspark_n_routed_experts > 0) L.n_routed_experts = dspark_n_routed_experts;
      if (dspark_n_activated_experts > 0) L.n_activated_experts = dspark_n_activated_experts;
    }
    L.yarn = L.ratio > 0 && rope_scaling_type == "yarn" && original_seq_len > 0;
    L.rope_theta = L.ratio > 0 ? compress_rope_theta : rope_theta;
    if (!L.is_draft) {
      auto eit = std::find(engram_layer_ids.begin(), engram_layer_ids.end(), id);
      if (eit != engram_layer_ids.end()) {
        L.engram_before = true;
        L.engram_slot = static_cast<int>(eit - engram_layer_ids.begin());
      }
      L.dspark_tap = contains(dspark_target_layer_ids, id);
      L.hash_routed = !is_v41() && id < n_hash_layers;
    }
    const bool kv_src = !L.is_draft && contains(kv_source_layers, id);
    const bool idx_src = !L.is_draft && contains(index_source_layers, id);
    if (L.ratio == 0) {
      if (kv_src || idx_src)
        return invalid_argument("layer {} is listed as a {} source but has compress ratio 0", id,
                                kv_src ? "kv" : "index");
      if (id == candidate_source_layer)
        return invalid_argument("candidate_source_layer {} has compress ratio 0", id);
      L.role = AttnRole::kSwaOnly;
      continue;
    }
    if (!is_v41()) {
      L.has_compressor = true;
      L.kv_owner = id;
      if (L.ratio == kV4CsaRatio) {
        L.role = AttnRole::kCsa;
        L.overlap_compressor = true;
        L.has_indexer = L.owns_index_keys = true;
        L.index_key_owner = L.topk_owner = id;
      } else {
        L.role = AttnRole::kHca;
      }
      continue;
    }
    // V4.1 CSA2.
    if (kv_src) last_kv = id;
    if (last_kv < 0)
      return invalid_argument(
          "layer {} (ratio {}) reads compressed KV but no kv source layer precedes it "
          "(kv_source_layers = {})",
          id, L.ratio, join_ints(kv_source_layers));
    if (compress_ratios[last_kv] != L.ratio)
      return invalid_argument(
          "layer {} has ratio {} but its compressed-KV source, layer {}, has ratio {}", id,
          L.ratio, last_kv, compress_ratios[last_kv]);
    L.kv_owner = last_kv;
    L.has_compressor = kv_src;
    if (idx_src) {
      L.has_indexer = true;
      if (kv_src) {
        L.owns_index_keys = true;
        last_keys = id;
      }
      if (last_keys < 0)
        return invalid_argument(
            "index source layer {} needs index keys, but no layer that is both a kv and an "
            "index source precedes it",
            id);
      if (layers[last_keys].kv_owner != L.kv_owner)
        return invalid_argument(
            "index source layer {} reads compressed KV of layer {} but index keys of layer {} "
            "(which indexes layer {}'s KV)",
            id, L.kv_owner, last_keys, layers[last_keys].kv_owner);
      L.index_key_owner = last_keys;
      last_topk = id;
    }
    if (last_topk < 0)
      return invalid_argument(
          "layer {} (ratio {}) needs a top-k selection but no index source precedes it "
          "(index_source_layers = {})",
          id, L.ratio, join_ints(index_source_layers));
    if (layers[last_topk].kv_owner != L.kv_owner)
      return invalid_argument(
          "layer {} reads compressed KV of layer {} but the latest top-k (layer {}) indexes "
          "layer {}'s KV: selection and cache would not match",
          id, L.kv_owner, last_topk, layers[last_topk].kv_owner);
    L.topk_owner = last_topk;
    if (kv_src) L.role = AttnRole::kFull;
    else if (idx_src) L.role = AttnRole::kReindex;
    else L.role = AttnRole::kReuse;
    if (kv_src && !idx_src)
      notes.push_back(fmt::format(
          "layer {} is a kv source but not an index source: it attends with layer {}'s top-k",
          id, last_topk));
  }
  if (is_v41() && candidate_source_layer >= 0) {
    if (candidate_source_layer >= n_layers)
      return invalid_argument("candidate_source_layer {} out of range [0, {})",
                              candidate_source_layer, n_layers);
    if (!contains(index_source_layers, candidate_source_layer))
      return invalid_argument("candidate_source_layer {} is not an index source",
                              candidate_source_layer);
    STRATA_RETURN_IF_ERROR(need_pos("candidate_topk_blocks", candidate_topk_blocks));
    STRATA_RETURN_IF_ERROR(need_pos("candidate_block_size", candidate_block_size));
    layers[candidate_source_layer].is_candidate_source = true;
    layers[candidate_source_layer].candidate_owner = candidate_source_layer;
    for (int id = candidate_source_layer + 1; id < n_layers; ++id) {
      LayerSchedule& L = layers[id];
      if (!L.has_indexer) continue;
      if (L.kv_owner != layers[candidate_source_layer].kv_owner)
        return invalid_argument(
            "index source layer {} would use candidates of layer {} over a different "
            "compressed KV (layer {} vs {})",
            id, candidate_source_layer, L.kv_owner, layers[candidate_source_layer].kv_owner);
      L.uses_candidates = true;
      L.candidate_owner = candidate_source_layer;
    }
  }
  return ok_status();
}

}  // namespace strata
