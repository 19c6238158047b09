// Tokenizer: text <-> token ids.
//
// Implementations: Hugging Face tokenizer.json (byte-level BPE with its pre-tokenizer
// regex via PCRE2, added/special tokens; WordLevel), and llama2.c tokenizer.bin
// (SentencePiece-style BPE with scores, <0xNN> byte pieces).
//
// Decoding is streaming: StreamDecoder buffers bytes until they form complete UTF-8, so a
// multi-byte character split across tokens is emitted once, whole. Invalid UTF-8 that can
// never complete is emitted as U+FFFD (Unicode maximal-subpart rule, see tokenizer_util.h).
// Ill-formed UTF-8 given to encode(): the HF tokenizers replace it by U+FFFD first; the
// llama2.c tokenizer byte-falls-back the raw bytes. Either way decode() yields the
// U+FFFD-repaired text.
//
// Thread safety: a loaded Tokenizer is immutable; encode/decode are safe concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace strata {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Encodes text. Special/added tokens written literally in `text` are matched as tokens
  // when `parse_special` is true. Does not add BOS (callers add bos_id() when needed).
  virtual std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const = 0;
  // The raw bytes of one token (after byte-level / <0xNN> mapping); may be partial UTF-8.
  // `prev_id` lets SentencePiece-style tokenizers strip the leading space after BOS.
  virtual std::string token_bytes(int32_t id, int32_t prev_id = -1) const = 0;
  // Decodes a whole sequence to text (invalid UTF-8 -> U+FFFD).
  std::string decode(const std::vector<int32_t>& ids) const;

  virtual int32_t vocab_size() const = 0;
  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
  // The id text outside the vocabulary maps to (HF model.unk_token), if the tokenizer has one.
  virtual std::optional<int32_t> unk_id() const { return std::nullopt; }
  // Token id for an exact token string (vocab or added token), if any.
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  // The token's string form as stored in the vocabulary (e.g. "Ġthe"), for debugging.
  virtual std::string id_to_token(int32_t id) const = 0;
};

// Loads a tokenizer from a file: `tokenizer.json` (optionally gzipped, `.json.gz`) or a
// llama2.c `tokenizer.bin`. Errors name the file.
StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path);
// Finds and loads the tokenizer in a model directory (tokenizer.json, tokenizer.json.gz,
// tokenizer.bin). NotFound if there is none.
StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer_from_dir(const std::string& dir);

// Streaming detokenizer: feed ids one at a time, get the text that became complete.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok) : tok_(tok) {}
  // Continues after `prev_id` (e.g. the last prompt token), so context-dependent pieces
  // (SentencePiece's space after BOS, WordLevel's joining space) decode as in the sequence.
  StreamDecoder(const Tokenizer& tok, int32_t prev_id) : tok_(tok), prev_id_(prev_id) {}
  // Returns the newly completed UTF-8 text (possibly empty).
  std::string push(int32_t id);
  // Flushes any incomplete trailing bytes (as U+FFFD).
  std::string finish();

 private:
  const Tokenizer& tok_;
  std::string pending_;
  int32_t prev_id_ = -1;
};

}  // namespace strata
