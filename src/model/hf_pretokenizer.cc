#include "model/hf_pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include <nlohmann/json.hpp>

namespace strata::tok {

namespace {

// GPT-2 pattern used by the ByteLevel pre-tokenizer when use_regex is true
// (huggingface/tokenizers pre_tokenizers/byte_level.rs).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

StatusOr<Behavior> parse_behavior(const std::string& s) {
  if (s == "Removed") return Behavior::kRemoved;
  if (s == "Isolated") return Behavior::kIsolated;
  if (s == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return Behavior::kMergedWithNext;
  if (s == "Contiguous") return Behavior::kContiguous;
  return invalid_argument("unknown Split behavior '{}'", s);
}

// One thread-local match-data block (one ovector pair suffices: only the whole match is used).
pcre2_match_data* thread_match_data() {
  struct Holder {
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    ~Holder() { pcre2_match_data_free(md); }
  };
  thread_local Holder holder;
  return holder.md;
}

class Regex {
 public:
  ~Regex() {
    if (code_) pcre2_code_free(code_);
  }
  static StatusOr<std::unique_ptr<Regex>> compile(std::string_view pattern, bool literal) {
    int err = 0;
    PCRE2_SIZE off = 0;
    const uint32_t opts = literal ? (PCRE2_UTF | PCRE2_LITERAL) : (PCRE2_UTF | PCRE2_UCP);
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     opts, &err, &off, nullptr);
    if (!code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      return invalid_argument("bad pre-tokenizer regex at offset {}: {}", off,
                              reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter on failure
    auto r = std::make_unique<Regex>();
    r->code_ = code;
    return r;
  }
  // Finds the next non-empty match in s at or after `start`; false if none.
  bool find(std::string_view s, size_t start, size_t* mb, size_t* me) const {
    pcre2_match_data* md = thread_match_data();
    while (start <= s.size()) {
      const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), start,
                                 PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc < 0) return false;  // PCRE2_ERROR_NOMATCH or a resource error
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      if (ov[1] > ov[0]) {
        *mb = ov[0];
        *me = ov[1];
        return true;
      }
      // Empty match: skip one character and retry.
      start = ov[0] + 1;
      while (start < s.size() && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) ++start;
    }
    return false;
  }

 private:
  pcre2_code* code_ = nullptr;
};

}  // namespace

struct HfPreTokenizer::Stage {
  std::unique_ptr<Regex> regex;  // null for a pure ByteLevel prefix stage
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel only

  void apply(const std::string& piece, std::vector<std::string>* out) const {
    if (!regex) {
      if (add_prefix_space && (piece.empty() || piece[0] != ' ')) {
        out->push_back(" " + piece);
      } else {
        out->push_back(piece);
      }
      return;
    }
    std::string prefixed;
    const std::string* src = &piece;
    if (add_prefix_space && (piece.empty() || piece[0] != ' ')) {
      prefixed = " " + piece;
      src = &prefixed;
    }
    const std::string_view s(*src);
    // Segments (begin, end, is_match) covering s.
    struct Seg {
      size_t b, e;
      bool m;
    };
    std::vector<Seg> segs;
    size_t pos = 0, mb = 0, me = 0;
    while (pos < s.size() && regex->find(s, pos, &mb, &me)) {
      if (mb > pos) segs.push_back({pos, mb, invert});
      segs.push_back({mb, me, !invert});
      pos = me;
    }
    if (pos < s.size()) segs.push_back({pos, s.size(), invert});

    std::vector<Seg> res;
    res.reserve(segs.size());
    switch (behavior) {
      case Behavior::kRemoved:
        for (const Seg& g : segs)
          if (!g.m) res.push_back(g);
        break;
      case Behavior::kIsolated:
        res = segs;
        break;
      case Behavior::kMergedWithPrevious: {
        bool prev_match = false;
        for (const Seg& g : segs) {
          if (g.m && !prev_match && !res.empty()) res.back().e = g.e;
          else res.push_back(g);
          prev_match = g.m;
        }
        break;
      }
      case Behavior::kMergedWithNext: {
        bool prev_match = false;
        for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
          if (it->m && !prev_match && !res.empty()) res.back().b = it->b;
          else res.push_back(*it);
          prev_match = it->m;
        }
        std::reverse(res.begin(), res.end());
        break;
      }
      case Behavior::kContiguous: {
        bool prev_match = false;
        for (const Seg& g : segs) {
          if (g.m == prev_match && !res.empty()) res.back().e = g.e;
          else res.push_back(g);
          prev_match = g.m;
        }
        break;
      }
    }
    for (const Seg& g : res) {
      if (g.e > g.b) out->emplace_back(s.substr(g.b, g.e - g.b));
    }
  }
};

HfPreTokenizer::HfPreTokenizer() = default;
HfPreTokenizer::~HfPreTokenizer() = default;
HfPreTokenizer::HfPreTokenizer(HfPreTokenizer&&) noexcept = default;
HfPreTokenizer& HfPreTokenizer::operator=(HfPreTokenizer&&) noexcept = default;

namespace {

using Stages = std::vector<std::unique_ptr<HfPreTokenizer::Stage>>;

StatusOr<std::unique_ptr<HfPreTokenizer::Stage>> regex_stage(std::string_view pattern, bool literal,
                                                             Behavior behavior, bool invert) {
  auto st = std::make_unique<HfPreTokenizer::Stage>();
  STRATA_ASSIGN_OR_RETURN(st->regex, Regex::compile(pattern, literal));
  st->behavior = behavior;
  st->invert = invert;
  return st;
}

Status parse_into(const nlohmann::json& j, Stages* stages, bool* byte_level) {
  if (j.is_null()) return ok_status();
  if (!j.is_object() || !j.contains("type")) return invalid_argument("pre_tokenizer without type");
  const std::string type = j.at("type").get<std::string>();
  if (type == "Sequence") {
    for (const auto& sub : j.at("pretokenizers")) {
      STRATA_RETURN_IF_ERROR(parse_into(sub, stages, byte_level));
    }
    return ok_status();
  }
  if (type == "Split") {
    const auto& pat = j.at("pattern");
    bool literal = false;
    std::string pattern;
    if (pat.contains("Regex")) {
      pattern = pat.at("Regex").get<std::string>();
    } else if (pat.contains("String")) {
      pattern = pat.at("String").get<std::string>();
      literal = true;
    } else {
      return invalid_argument("Split pattern must be Regex or String");
    }
    STRATA_ASSIGN_OR_RETURN(Behavior b, parse_behavior(j.at("behavior").get<std::string>()));
    const bool invert = j.value("invert", false);
    STRATA_ASSIGN_OR_RETURN(auto st, regex_stage(pattern, literal, b, invert));
    stages->push_back(std::move(st));
    return ok_status();
  }
  if (type == "ByteLevel") {
    *byte_level = true;
    const bool prefix = j.value("add_prefix_space", false);
    const bool use_regex = j.value("use_regex", true);
    if (use_regex) {
      STRATA_ASSIGN_OR_RETURN(auto st, regex_stage(kGpt2Pattern, false, Behavior::kIsolated, false));
      st->add_prefix_space = prefix;
      stages->push_back(std::move(st));
    } else if (prefix) {
      auto st = std::make_unique<HfPreTokenizer::Stage>();
      st->add_prefix_space = true;
      stages->push_back(std::move(st));
    }
    return ok_status();
  }
  if (type == "Whitespace") {
    STRATA_ASSIGN_OR_RETURN(auto st, regex_stage(R"(\w+|[^\w\s]+)", false, Behavior::kRemoved,
                                                 /*invert=*/true));
    stages->push_back(std::move(st));
    return ok_status();
  }
  if (type == "WhitespaceSplit") {
    STRATA_ASSIGN_OR_RETURN(auto st, regex_stage(R"(\s+)", false, Behavior::kRemoved, false));
    stages->push_back(std::move(st));
    return ok_status();
  }
  if (type == "Digits") {
    const bool individual = j.value("individual_digits", false);
    STRATA_ASSIGN_OR_RETURN(
        auto st, regex_stage(R"(\p{N})", false,
                             individual ? Behavior::kIsolated : Behavior::kContiguous, false));
    stages->push_back(std::move(st));
    return ok_status();
  }
  return unimplemented("pre_tokenizer type '{}' is not supported", type);
}

}  // namespace

StatusOr<HfPreTokenizer> HfPreTokenizer::parse(const nlohmann::json& j) {
  HfPreTokenizer p;
  try {
    STRATA_RETURN_IF_ERROR(parse_into(j, &p.stages_, &p.byte_level_));
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument("malformed pre_tokenizer: {}", e.what());
  }
  return p;
}

std::vector<std::string> HfPreTokenizer::split(std::string_view text) const {
  std::vector<std::string> cur;
  if (text.empty()) return cur;
  cur.emplace_back(text);
  std::vector<std::string> next;
  for (const auto& st : stages_) {
    next.clear();
    next.reserve(cur.size() * 2);
    for (const std::string& piece : cur) st->apply(piece, &next);
    cur.swap(next);
  }
  return cur;
}

Status check_normalizer_supported(const nlohmann::json& j) {
  if (j.is_null()) return ok_status();
  try {
    const std::string type = j.at("type").get<std::string>();
    if (type == "Sequence") {
      for (const auto& sub : j.at("normalizers")) STRATA_RETURN_IF_ERROR(check_normalizer_supported(sub));
      return ok_status();
    }
    return unimplemented("normalizer type '{}' is not supported", type);
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument("malformed normalizer: {}", e.what());
  }
}

}  // namespace strata::tok
