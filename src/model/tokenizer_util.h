// Helpers shared by the tokenizer implementations (tokenizer.cc, bpe_tokenizer.cc,
// wordlevel_tokenizer.cc, llama2c_tokenizer.cc): UTF-8 validation/repair, the GPT-2
// byte-level byte<->unicode table, whole-file reading with transparent gzip, and a byte trie
// for matching added/special tokens.
//
// UTF-8 repair follows the Unicode "maximal subpart" rule (Unicode Standard ch. 3, U+FFFD
// substitution of maximal subparts; the same rule WHATWG's decoder and Python's
// bytes.decode(errors="replace") use): each maximal prefix of a well-formed sequence that
// cannot be completed becomes one U+FFFD, and any other ill-formed byte becomes one U+FFFD.
//
// Thread safety: free functions are pure; AddedTokenTrie is immutable after building.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace strata::tok {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Appends the well-formed UTF-8 form of `in` to `out`, replacing ill-formed bytes with
// U+FFFD (maximal subpart rule). If `final` is false, a trailing incomplete-but-still-valid
// sequence (up to 3 bytes) is not consumed. Returns the number of input bytes consumed.
size_t utf8_repair_append(std::string_view in, bool final, std::string* out);
// Whole-string convenience: the repaired text.
std::string utf8_repair(std::string_view in);
// True if `in` is well-formed UTF-8.
bool utf8_valid(std::string_view in);
// Length in bytes of the UTF-8 sequence that starts with lead byte `c` (1 for invalid leads).
int utf8_seq_len(unsigned char c);
// Appends the UTF-8 encoding of code point `cp` to `out`.
void utf8_append(uint32_t cp, std::string* out);

// GPT-2 byte-level mapping (openai/gpt-2 encoder.py bytes_to_unicode): printable bytes
// 33..126, 161..172, 174..255 map to themselves; the other 68 bytes map, in order, to
// U+0100.. U+0143.
struct ByteLevelTable {
  std::array<std::string, 256> byte_to_utf8;   // UTF-8 of the mapped code point
  std::array<int16_t, 324> cp_to_byte;         // code point -> byte, or -1
};
const ByteLevelTable& byte_level_table();
// Maps a byte-level token string back to raw bytes. Returns false (and leaves `out`
// partially written) if some character is not in the table.
bool byte_level_decode(std::string_view token, std::string* out);

// Reads a whole file; if it starts with the gzip magic it is inflated (zlib).
// Errors (NotFound / DataLoss) name the file.
StatusOr<std::string> read_file_maybe_gz(const std::string& path);

// Byte trie for leftmost-longest literal matching of added tokens.
class AddedTokenTrie {
 public:
  void add(std::string_view s, int32_t id);
  bool empty() const { return nodes_.size() <= 1; }
  // Length and id of the longest token that is a prefix of `text`; {0, -1} if none.
  std::pair<size_t, int32_t> longest_prefix(std::string_view text) const;
  // True if some token starts with byte `c` (a cheap pre-filter).
  bool may_start(unsigned char c) const { return first_byte_[c]; }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> next;  // sorted by byte
    int32_t id = -1;
  };
  std::vector<Node> nodes_{Node{}};
  std::array<bool, 256> first_byte_{};
};

// A piece of text to tokenize: either ordinary text or an already-matched added token.
struct TextSegment {
  std::string_view text;
  int32_t added_id = -1;  // >= 0: this segment is exactly the added token with this id
};
// Splits `text` at leftmost-longest matches of the trie's tokens.
std::vector<TextSegment> split_added_tokens(std::string_view text, const AddedTokenTrie& trie);

}  // namespace strata::tok
