// Llama2cTokenizer: the llama2.c `tokenizer.bin` format and encoder (karpathy/llama2.c run.c
// build_tokenizer / encode / decode), used by tiny test models such as stories260K.
//
// File: int32 max_token_length, then per token until EOF: float32 score, int32 byte length,
// that many bytes (little-endian). The vocabulary size is the number of tokens read.
// Ids: <unk>=0, BOS=1, EOS=2; pieces "<0xNN>" stand for raw byte NN (id NN+3 in
// sentencepiece exports).
//
// encode (run.c): if the text is non-empty, push the id of " " (dummy prefix); then for each
// UTF-8 character (a lead byte plus up to 3 continuation bytes) push its id, or, if the
// character is not a piece, one id per byte (byte + 3); then repeatedly merge the adjacent
// pair whose concatenation is a piece with the highest score (leftmost on ties, scores must
// exceed -1e10) until none remains. Done here with a heap, which picks the same pair as
// run.c's quadratic scan. BOS/EOS are not added; parse_special has no effect (llama2.c
// never matches "<s>" etc. literally). Unlike run.c (C strings), a NUL byte in the
// text is an ordinary byte.
// token_bytes (run.c decode): strip one leading space of a piece that follows BOS
// (prev_id == 1); "<0xNN>" pieces become the single byte NN.
//
// Thread safety: immutable after load; safe concurrently.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/tokenizer.h"

namespace strata {

class Llama2cTokenizer : public Tokenizer {
 public:
  static constexpr int32_t kBos = 1;
  static constexpr int32_t kEos = 2;

  // Parses the bytes of a tokenizer.bin; `path` is used in error messages.
  static StatusOr<std::unique_ptr<Llama2cTokenizer>> parse(const std::string& data,
                                                           const std::string& path);

  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const override;
  std::string token_bytes(int32_t id, int32_t prev_id = -1) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  std::optional<int32_t> bos_id() const override { return kBos; }
  std::optional<int32_t> eos_id() const override { return kEos; }
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::string id_to_token(int32_t id) const override;
  float score(int32_t id) const { return scores_.at(id); }
  int32_t max_token_length() const { return max_token_length_; }

 private:
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int32_t> lookup_;  // first id of each piece string
  int32_t max_token_length_ = 0;
};

}  // namespace strata
