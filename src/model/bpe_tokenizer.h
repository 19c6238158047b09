// BpeTokenizer: Hugging Face tokenizer.json with model.type "BPE" (e.g. DeepSeek-V3/V4
// byte-level BPE, 128k vocab + 818 added tokens).
//
// Model semantics follow huggingface/tokenizers models/bpe (Word::merge_all): a piece starts
// as one symbol per byte (byte-level: the GPT-2 byte alphabet, see tokenizer_util.h) or per
// UTF-8 character (otherwise; unknown characters become <0xNN> byte tokens with
// byte_fallback, else the unk token, else are dropped); then the adjacent pair with the
// lowest merge rank is merged, leftmost first on ties, until no ranked pair remains.
// Merges are read in both forms: "a b" strings and ["a", "b"] arrays.
// ignore_merges: a piece that is itself in the vocabulary is emitted whole.
// Not supported (load fails with Unimplemented): dropout, continuing_subword_prefix,
// end_of_word_suffix.
//
// Speed: results for short pieces (<= 32 bytes) are memoized in a bounded thread-local cache
// tagged with the tokenizer's serial number, so concurrent encodes share nothing.
//
// Thread safety: immutable after load; safe concurrently.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include <nlohmann/json_fwd.hpp>

#include "model/hf_tokenizer_base.h"

namespace strata {

class BpeTokenizer : public HfTokenizerBase {
 public:
  // `root` is the parsed tokenizer.json; `path` names the file (errors, tokenizer_config).
  static StatusOr<std::unique_ptr<BpeTokenizer>> load(const nlohmann::json& root,
                                                      const std::string& path);
  std::optional<int32_t> unk_id() const override { return unk_; }

 protected:
  void encode_piece(std::string_view piece, std::vector<int32_t>* out) const override;

 private:
  struct Merge {
    int32_t rank;
    int32_t id;  // id of the merged token
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void merge_symbols(std::vector<int32_t>* syms) const;
  void encode_piece_uncached(std::string_view piece, std::vector<int32_t>* out) const;

  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_ids_{};  // byte-level: id of each byte's symbol, or -1
  bool byte_level_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  bool fuse_unk_ = false;
  std::optional<int32_t> unk_;
  uint64_t serial_ = 0;  // unique per loaded instance (keys the thread-local piece cache)
};

}  // namespace strata
