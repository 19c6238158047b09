// Hugging Face `tokenizers` pre-tokenizer pipeline, as read from tokenizer.json
// ("pre_tokenizer" object), used by the BPE and WordLevel tokenizers.
//
// Supported types: Sequence, Split (Regex or String pattern; behaviors Removed, Isolated,
// MergedWithPrevious, MergedWithNext, Contiguous; invert), ByteLevel (add_prefix_space,
// use_regex with the GPT-2 pattern), Whitespace (\w+|[^\w\s]+), WhitespaceSplit, Digits.
// Semantics follow huggingface/tokenizers (tokenizers/src/pre_tokenizers/*): each stage
// splits every piece from the previous stage independently, so a regex sees one piece as
// its whole subject (look-aheads stop at the piece end). Empty pieces are dropped.
// Regexes are PCRE2 with PCRE2_UTF|PCRE2_UCP, JIT-compiled when available (HF uses
// Oniguruma; both follow Unicode general categories for \p{..} and \s).
//
// Input must be well-formed UTF-8 (callers repair it first). Pieces are raw UTF-8 bytes;
// the ByteLevel stage does not rewrite them but sets byte_level() so the model maps bytes
// to the GPT-2 byte alphabet itself.
//
// Thread safety: immutable after parse(); split() is safe to call concurrently.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace strata::tok {

class HfPreTokenizer {
 public:
  HfPreTokenizer();
  ~HfPreTokenizer();
  HfPreTokenizer(HfPreTokenizer&&) noexcept;
  HfPreTokenizer& operator=(HfPreTokenizer&&) noexcept;

  // Parses a "pre_tokenizer" JSON value (null = no pre-tokenization: one piece).
  static StatusOr<HfPreTokenizer> parse(const nlohmann::json& j);

  // Splits well-formed UTF-8 `text` into pieces.
  std::vector<std::string> split(std::string_view text) const;
  // True if the pipeline contains a ByteLevel stage (bytes map to the GPT-2 alphabet).
  bool byte_level() const { return byte_level_; }

  struct Stage;  // defined in the .cc

 private:
  std::vector<std::unique_ptr<Stage>> stages_;
  bool byte_level_ = false;
};

// Checks a "normalizer" JSON value. Only no-op normalizers are supported (null, or a
// Sequence of no-op normalizers); others return Unimplemented naming the type.
Status check_normalizer_supported(const nlohmann::json& j);

}  // namespace strata::tok
