#include "model/wordlevel_tokenizer.h"

#include <nlohmann/json.hpp>

namespace strata {

StatusOr<std::unique_ptr<WordLevelTokenizer>> WordLevelTokenizer::load(const nlohmann::json& root,
                                                                       const std::string& path) {
  std::unique_ptr<WordLevelTokenizer> t(new WordLevelTokenizer());
  std::string unk;
  try {
    const auto& model = root.at("model");
    for (const auto& [tok, idj] : model.at("vocab").items()) {
      STRATA_ASSIGN_OR_RETURN(const int32_t id, checked_token_id(idj, root, tok, path));
      if (static_cast<size_t>(id) >= t->tokens_.size()) t->tokens_.resize(static_cast<size_t>(id) + 1);
      t->tokens_[id] = tok;
      t->vocab_.emplace(tok, id);
    }
    if (model.contains("unk_token") && model.at("unk_token").is_string()) {
      unk = model.at("unk_token").get<std::string>();
    }
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument("{}: malformed WordLevel model: {}", path, e.what());
  }
  STRATA_RETURN_IF_ERROR(t->init_common(root, path).with_context(path));
  if (!unk.empty()) t->unk_ = t->token_to_id(unk);
  return t;
}

void WordLevelTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>* out) const {
  auto it = vocab_.find(std::string(piece));
  if (it != vocab_.end()) {
    out->push_back(it->second);
  } else if (unk_) {
    out->push_back(*unk_);
  }
}

}  // namespace strata
