#include "model/hf_tokenizer_base.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace strata {

namespace {

constexpr std::string_view kBosNames[] = {"<｜begin▁of▁sentence｜>", "<|begin_of_text|>", "<s>",
                                          "<bos>", "<|startoftext|>"};
constexpr std::string_view kEosNames[] = {"<｜end▁of▁sentence｜>", "<|end_of_text|>", "</s>",
                                          "<eos>", "<|endoftext|>"};

// bos_token / eos_token from a tokenizer_config.json value (string or AddedToken object).
std::optional<std::string> config_token(const nlohmann::json& cfg, const char* key) {
  if (!cfg.contains(key)) return std::nullopt;
  const auto& v = cfg.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v.at("content").is_string()) {
    return v.at("content").get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

int64_t HfTokenizerBase::max_token_id(const nlohmann::json& root) {
  int64_t n = 0;
  if (root.contains("model") && root["model"].is_object() && root["model"].contains("vocab") &&
      root["model"]["vocab"].is_object())
    n += static_cast<int64_t>(root["model"]["vocab"].size());
  if (root.contains("added_tokens") && root["added_tokens"].is_array())
    n += static_cast<int64_t>(root["added_tokens"].size());
  return 2 * n + 1024;
}

StatusOr<int32_t> HfTokenizerBase::checked_token_id(const nlohmann::json& id,
                                                    const nlohmann::json& root,
                                                    const std::string& token,
                                                    const std::string& path) {
  if (!id.is_number_integer())
    return data_loss("{}: the id of token '{}' is not an integer", path, token);
  const int64_t v = id.get<int64_t>();
  const int64_t hi = max_token_id(root);
  if (v < 0 || v > hi)
    return data_loss("{}: token '{}' has id {}, outside [0, {}] (the ids a file of this size "
                     "can define)", path, token, v, hi);
  return static_cast<int32_t>(v);
}

Status HfTokenizerBase::init_common(const nlohmann::json& root, const std::string& path) {
  try {
    // Added tokens.
    if (root.contains("added_tokens") && root.at("added_tokens").is_array()) {
      for (const auto& t : root.at("added_tokens")) {
        const auto content = t.at("content").get<std::string>();
        STRATA_ASSIGN_OR_RETURN(const int32_t id, checked_token_id(t.at("id"), root, content, path));
        if (static_cast<size_t>(id) >= tokens_.size()) tokens_.resize(static_cast<size_t>(id) + 1);
        tokens_[id] = content;
        vocab_[content] = id;
        added_ids_[id] = t.value("special", false);
        added_trie_.add(content, id);
      }
    }
    STRATA_RETURN_IF_ERROR(
        tok::check_normalizer_supported(root.contains("normalizer") ? root.at("normalizer") : nullptr));
    STRATA_ASSIGN_OR_RETURN(
        pre_, tok::HfPreTokenizer::parse(root.contains("pre_tokenizer") ? root.at("pre_tokenizer")
                                                                          : nlohmann::json()));
    const nlohmann::json dec = root.contains("decoder") ? root.at("decoder") : nlohmann::json();
    bool byte_level_decoder = false;
    if (dec.is_null()) {
      join_with_spaces_ = true;
    } else {
      const std::string type = dec.at("type").get<std::string>();
      if (type == "ByteLevel") {
        byte_level_decoder = true;
      } else {
        return unimplemented("decoder type '{}' is not supported", type);
      }
    }
    bytes_.resize(tokens_.size());
    for (size_t id = 0; id < tokens_.size(); ++id) {
      const std::string& t = tokens_[id];
      if (byte_level_decoder) {
        std::string b;
        b.reserve(t.size());
        if (!tok::byte_level_decode(t, &b)) b = t;
        bytes_[id] = std::move(b);
      } else {
        bytes_[id] = t;
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument("malformed tokenizer JSON: {}", e.what());
  }

  // BOS / EOS.
  namespace fs = std::filesystem;
  const fs::path cfg_path = fs::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (fs::exists(cfg_path, ec)) {
    std::ifstream in(cfg_path);
    nlohmann::json cfg = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (cfg.is_discarded()) return invalid_argument("malformed JSON in {}", cfg_path.string());
    if (auto b = config_token(cfg, "bos_token")) bos_ = token_to_id(*b);
    if (auto e = config_token(cfg, "eos_token")) eos_ = token_to_id(*e);
  }
  if (!bos_) {
    for (auto n : kBosNames)
      if ((bos_ = token_to_id(n))) break;
  }
  if (!eos_) {
    for (auto n : kEosNames)
      if ((eos_ = token_to_id(n))) break;
  }
  return ok_status();
}

std::vector<int32_t> HfTokenizerBase::encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> ids;
  std::string repaired;
  if (!tok::utf8_valid(text)) {
    repaired = tok::utf8_repair(text);
    text = repaired;
  }
  ids.reserve(text.size() / 3 + 4);
  std::vector<tok::TextSegment> segs;
  if (parse_special) {
    segs = tok::split_added_tokens(text, added_trie_);
  } else if (!text.empty()) {
    segs.push_back({text, -1});
  }
  for (const auto& seg : segs) {
    if (seg.added_id >= 0) {
      ids.push_back(seg.added_id);
      continue;
    }
    for (const std::string& piece : pre_.split(seg.text)) encode_piece(piece, &ids);
  }
  return ids;
}

std::string HfTokenizerBase::token_bytes(int32_t id, int32_t prev_id) const {
  if (id < 0 || static_cast<size_t>(id) >= bytes_.size()) return {};
  if (join_with_spaces_ && prev_id >= 0) return " " + bytes_[id];
  return bytes_[id];
}

std::optional<int32_t> HfTokenizerBase::token_to_id(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

std::string HfTokenizerBase::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size()) return {};
  return tokens_[id];
}

}  // namespace strata
