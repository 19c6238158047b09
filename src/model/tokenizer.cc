#include "model/tokenizer.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "model/bpe_tokenizer.h"
#include "model/llama2c_tokenizer.h"
#include "model/tokenizer_util.h"
#include "model/wordlevel_tokenizer.h"

namespace strata {

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string raw;
  int32_t prev = -1;
  for (int32_t id : ids) {
    raw += token_bytes(id, prev);
    prev = id;
  }
  return tok::utf8_repair(raw);
}

std::string StreamDecoder::push(int32_t id) {
  pending_ += tok_.token_bytes(id, prev_id_);
  prev_id_ = id;
  std::string out;
  const size_t used = tok::utf8_repair_append(pending_, /*final=*/false, &out);
  pending_.erase(0, used);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out;
  tok::utf8_repair_append(pending_, /*final=*/true, &out);
  pending_.clear();
  return out;
}

StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string data, tok::read_file_maybe_gz(path));
  size_t first = data.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return data_loss("{}: empty tokenizer file", path);
  if (data[first] != '{') {
    STRATA_ASSIGN_OR_RETURN(auto t, Llama2cTokenizer::parse(data, path));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  nlohmann::json root = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return data_loss("{}: malformed JSON", path);
  if (!root.contains("model") || !root.at("model").is_object()) {
    return data_loss("{}: tokenizer.json has no \"model\" object", path);
  }
  const auto& model = root.at("model");
  std::string type = model.contains("type") && model.at("type").is_string()
                         ? model.at("type").get<std::string>()
                         : (model.contains("merges") ? "BPE" : "");
  if (type == "BPE") {
    STRATA_ASSIGN_OR_RETURN(auto t, BpeTokenizer::load(root, path));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  if (type == "WordLevel") {
    STRATA_ASSIGN_OR_RETURN(auto t, WordLevelTokenizer::load(root, path));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  return unimplemented("{}: tokenizer model type '{}' is not supported", path, type);
}

StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer_from_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  for (const char* name : {"tokenizer.json", "tokenizer.json.gz", "tokenizer.bin"}) {
    const fs::path p = fs::path(dir) / name;
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return load_tokenizer(p.string());
  }
  return not_found("no tokenizer.json, tokenizer.json.gz or tokenizer.bin in {}", dir);
}

}  // namespace strata
