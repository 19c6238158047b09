// WordLevelTokenizer: Hugging Face tokenizer.json with model.type "WordLevel" (e.g. the
// tiny DeepSeek-V4.1 golden model's stand-in tokenizer, whose vocabulary also defines the
// Engram compressed-token map).
//
// Semantics (huggingface/tokenizers models/wordlevel): every pre-tokenized piece is looked up
// whole; a piece missing from the vocabulary becomes unk_token's id (if the vocabulary has
// it) or is dropped. With pre_tokenizer null the whole text between added tokens is one
// piece. Decoding with no decoder joins tokens with single spaces (HF's default), so
// token_bytes(id, prev_id) prepends " " when prev_id >= 0.
//
// Thread safety: immutable after load; safe concurrently.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "model/hf_tokenizer_base.h"

namespace strata {

class WordLevelTokenizer : public HfTokenizerBase {
 public:
  static StatusOr<std::unique_ptr<WordLevelTokenizer>> load(const nlohmann::json& root,
                                                            const std::string& path);
  std::optional<int32_t> unk_id() const override { return unk_; }

 protected:
  void encode_piece(std::string_view piece, std::vector<int32_t>* out) const override;

 private:
  std::optional<int32_t> unk_;
};

}  // namespace strata
