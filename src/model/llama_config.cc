#include "model/llama_config.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace strata {
namespace {
using json = nlohmann::json;

Status get_int(const json& j, const char* key, int64_t* out, bool required) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return invalid_argument("config.json: missing required field '{}'", key);
    return ok_status();
  }
  if (!it->is_number_integer())
    return invalid_argument("config.json: field '{}' must be an integer, got {}", key, it->dump());
  *out = it->get<int64_t>();
  return ok_status();
}

Status get_double(const json& j, const char* key, double* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return ok_status();
  if (!it->is_number())
    return invalid_argument("config.json: field '{}' must be a number, got {}", key, it->dump());
  *out = it->get<double>();
  return ok_status();
}

Status get_bool(const json& j, const char* key, bool* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return ok_status();
  if (!it->is_boolean())
    return invalid_argument("config.json: field '{}' must be a boolean, got {}", key, it->dump());
  *out = it->get<bool>();
  return ok_status();
}

Status get_token_id(const json& j, const char* key, int32_t* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return ok_status();
  const json* v = &*it;
  if (v->is_array()) {
    if (v->empty()) return ok_status();
    v = &(*v)[0];
  }
  if (!v->is_number_integer())
    return invalid_argument("config.json: field '{}' must be an integer id, got {}", key, it->dump());
  *out = v->get<int32_t>();
  return ok_status();
}

Status parse_into(const json& j, LlamaConfig* c) {
  if (!j.is_object()) return invalid_argument("config.json: top level is not an object");
  STRATA_RETURN_IF_ERROR(get_int(j, "hidden_size", &c->hidden_size, true));
  STRATA_RETURN_IF_ERROR(get_int(j, "intermediate_size", &c->intermediate_size, true));
  STRATA_RETURN_IF_ERROR(get_int(j, "num_hidden_layers", &c->num_hidden_layers, true));
  STRATA_RETURN_IF_ERROR(get_int(j, "num_attention_heads", &c->num_attention_heads, true));
  c->num_key_value_heads = c->num_attention_heads;
  STRATA_RETURN_IF_ERROR(get_int(j, "num_key_value_heads", &c->num_key_value_heads, false));
  STRATA_RETURN_IF_ERROR(get_int(j, "vocab_size", &c->vocab_size, true));
  STRATA_RETURN_IF_ERROR(get_int(j, "max_position_embeddings", &c->max_position_embeddings, true));
  STRATA_RETURN_IF_ERROR(get_double(j, "rms_norm_eps", &c->rms_norm_eps));
  STRATA_RETURN_IF_ERROR(get_double(j, "rope_theta", &c->rope_theta));
  STRATA_RETURN_IF_ERROR(get_bool(j, "tie_word_embeddings", &c->tie_word_embeddings));
  STRATA_RETURN_IF_ERROR(get_bool(j, "rope_interleaved", &c->rope_interleaved));
  STRATA_RETURN_IF_ERROR(get_token_id(j, "bos_token_id", &c->bos_token_id));
  STRATA_RETURN_IF_ERROR(get_token_id(j, "eos_token_id", &c->eos_token_id));
  if (auto it = j.find("torch_dtype"); it != j.end() && it->is_string()) c->torch_dtype = *it;

  struct {
    const char* name;
    int64_t v;
  } positive[] = {{"hidden_size", c->hidden_size},
                  {"intermediate_size", c->intermediate_size},
                  {"num_hidden_layers", c->num_hidden_layers},
                  {"num_attention_heads", c->num_attention_heads},
                  {"num_key_value_heads", c->num_key_value_heads},
                  {"vocab_size", c->vocab_size},
                  {"max_position_embeddings", c->max_position_embeddings}};
  // Upper bounds far past any released model, so a corrupt value is an error naming the
  // field instead of an allocation of terabytes (the fuzz corpus found max_position_embeddings
  // = 2^40 aborting with bad_alloc).
  constexpr int64_t kMaxDim = int64_t{1} << 24;
  for (auto& p : positive) {
    if (p.v <= 0) return invalid_argument("config.json: field '{}' must be > 0, got {}", p.name, p.v);
    if (p.v > kMaxDim)
      return invalid_argument("config.json: field '{}' = {} is past the supported {}", p.name, p.v,
                              kMaxDim);
  }
  if (c->num_attention_heads % c->num_key_value_heads != 0)
    return invalid_argument(
        "config.json: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})",
        c->num_attention_heads, c->num_key_value_heads);
  if (auto it = j.find("head_dim"); it != j.end() && !it->is_null()) {
    STRATA_RETURN_IF_ERROR(get_int(j, "head_dim", &c->head_dim, true));
  } else {
    if (c->hidden_size % c->num_attention_heads != 0)
      return invalid_argument(
          "config.json: hidden_size ({}) is not a multiple of num_attention_heads ({}) and no "
          "head_dim is given",
          c->hidden_size, c->num_attention_heads);
    c->head_dim = c->hidden_size / c->num_attention_heads;
  }
  if (c->head_dim <= 0 || c->head_dim % 2 != 0)
    return invalid_argument("config.json: head_dim must be a positive even number, got {}",
                            c->head_dim);
  if (!(c->rms_norm_eps > 0)) return invalid_argument("config.json: rms_norm_eps must be > 0");
  if (!(c->rope_theta > 0)) return invalid_argument("config.json: rope_theta must be > 0");
  if (auto it = j.find("rope_scaling"); it != j.end() && !it->is_null())
    return unimplemented("config.json: rope_scaling {} is not supported for Llama models yet",
                         it->dump());
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    bool b = false;
    STRATA_RETURN_IF_ERROR(get_bool(j, key, &b));
    if (b) return unimplemented("config.json: '{}': true is not supported", key);
  }
  if (c->bos_token_id >= c->vocab_size || c->eos_token_id >= c->vocab_size)
    return invalid_argument("config.json: bos/eos token id outside vocab_size {}", c->vocab_size);
  return ok_status();
}
}  // namespace

int64_t LlamaConfig::num_parameters() const {
  const int64_t d = hidden_size;
  const int64_t per_layer = d * q_dim() + 2 * d * kv_dim() + q_dim() * d +
                            3 * d * intermediate_size + 2 * d;
  return vocab_size * d * (tie_word_embeddings ? 1 : 2) + num_hidden_layers * per_layer + d;
}

std::string LlamaConfig::to_json() const {
  json j;
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["head_dim"] = head_dim;
  j["vocab_size"] = vocab_size;
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  j["rope_scaling"] = nullptr;
  j["rope_interleaved"] = rope_interleaved;
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  if (bos_token_id >= 0) j["bos_token_id"] = bos_token_id;
  if (eos_token_id >= 0) j["eos_token_id"] = eos_token_id;
  j["torch_dtype"] = torch_dtype.empty() ? "float32" : torch_dtype;
  return j.dump(2) + "\n";
}

StatusOr<LlamaConfig> parse_llama_config_json(std::string_view json_text) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument("config.json: malformed JSON");
  LlamaConfig c;
  STRATA_RETURN_IF_ERROR(parse_into(j, &c));
  return c;
}

StatusOr<LlamaConfig> load_llama_config(const std::string& path) {
  namespace fs = std::filesystem;
  std::string file = path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) file = (fs::path(path) / "config.json").string();
  std::ifstream in(file, std::ios::binary);
  if (!in) return not_found("{}: cannot open config file", file);
  std::stringstream ss;
  ss << in.rdbuf();
  auto c = parse_llama_config_json(ss.str());
  if (!c.ok()) return c.status().with_context(file);
  return c;
}

}  // namespace strata
