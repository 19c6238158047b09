// HfTokenizerBase: what Hugging Face tokenizer.json models share (BpeTokenizer,
// WordLevelTokenizer): added/special tokens, normalizer check, pre-tokenizer, decoder, and
// BOS/EOS discovery. Subclasses provide the vocabulary and encode one pre-tokenized piece.
//
// Encoding pipeline (huggingface/tokenizers TokenizerImpl::encode): ill-formed UTF-8 input
// bytes are first replaced by U+FFFD (maximal subpart rule, see tokenizer_util.h; HF takes
// Rust strings, which are always well-formed); then added tokens are matched literally,
// leftmost-longest (only when parse_special); the text between them is pre-tokenized and
// each piece goes through the model. lstrip/rstrip/single_word flags of added tokens are
// not implemented (the DeepSeek file sets them all false).
//
// Decoding: decoder "ByteLevel" maps each token's characters back to bytes (a token with a
// character outside the byte alphabet, e.g. "<｜User｜>", decodes to its own UTF-8, as HF's
// ByteLevel decoder does); no decoder = HF's default, tokens joined by single spaces.
//
// BOS/EOS: bos_token / eos_token of a tokenizer_config.json next to the tokenizer file (a
// string or {"content": ...}); otherwise the first known name present
// ("<｜begin▁of▁sentence｜>", "<s>", "<|begin_of_text|>", ... / "<｜end▁of▁sentence｜>", "</s>", ...).
//
// Thread safety: immutable after loading; all methods are safe concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/hf_pretokenizer.h"
#include "model/tokenizer.h"
#include "model/tokenizer_util.h"

namespace strata {

class HfTokenizerBase : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const override;
  std::string token_bytes(int32_t id, int32_t prev_id = -1) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(tokens_.size()); }
  std::optional<int32_t> bos_id() const override { return bos_; }
  std::optional<int32_t> eos_id() const override { return eos_; }
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::string id_to_token(int32_t id) const override;

  // The pre-tokenizer's pieces for `text` (no added-token matching), as raw UTF-8.
  std::vector<std::string> pre_tokenize(std::string_view text) const { return pre_.split(text); }
  // True if `id` is an added token (matched literally, never produced by the model).
  bool is_added_token(int32_t id) const { return added_ids_.count(id) > 0; }

 protected:
  // Encodes one pre-tokenized piece (well-formed UTF-8) with the model; appends ids.
  virtual void encode_piece(std::string_view piece, std::vector<int32_t>* out) const = 0;

  // Call after filling vocab_ / tokens_ with the model vocabulary. Parses added_tokens,
  // normalizer, pre_tokenizer, decoder; finds BOS/EOS (tokenizer_config.json next to
  // `path`); precomputes each token's decoded bytes.
  Status init_common(const nlohmann::json& root, const std::string& path);
  // The largest token id a tokenizer.json of this size may define: twice its vocab and
  // added-token entries, plus 1024 (ids index a dense table, so a file must not make it
  // larger than the file itself warrants; issue 24 item 2).
  static int64_t max_token_id(const nlohmann::json& root);
  // A vocab / added-token id as int32 in [0, max_token_id(root)]; DataLoss naming the token
  // otherwise.
  static StatusOr<int32_t> checked_token_id(const nlohmann::json& id, const nlohmann::json& root,
                                            const std::string& token, const std::string& path);

  // Model vocabulary plus added tokens: string -> id, and id -> string ("" for holes).
  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> tokens_;
  tok::HfPreTokenizer pre_;

 private:
  std::unordered_map<int32_t, bool> added_ids_;  // id -> special
  tok::AddedTokenTrie added_trie_;
  std::vector<std::string> bytes_;  // decoded bytes per id
  bool join_with_spaces_ = false;   // no decoder: HF joins tokens with " "
  std::optional<int32_t> bos_, eos_;
};

}  // namespace strata
