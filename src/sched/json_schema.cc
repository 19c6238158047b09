// JsonSchemaState: the byte-by-byte checker (see json_schema.h). The compiler is in
// json_schema_compile.cc.
#include "sched/json_schema.h"

#include <algorithm>
#include <utility>

namespace strata {
namespace {

using Path = JsonSchemaState::Path;
using Frame = JsonSchemaState::Frame;
using Want = JsonSchemaState::Want;
using Lex = JsonSchemaState::Lex;
using Node = JsonSchema::Node;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
bool is_escape(char c) {
  return c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't';
}
bool seen(const Frame& f, size_t i) { return (f.seen[i / 64] >> (i % 64)) & 1; }

// The JSON Schema walk of one Path: JsonPrefix's grammar, with each value checked against
// the node it must fit.
class Walk {
 public:
  Walk(const JsonSchema& s, Path& p) : s_(s), p_(p) {}

  bool feed(char c) {
    switch (p_.lex) {
      case Lex::kString: return string_byte(c);
      case Lex::kEscape: return escape_byte(c);
      case Lex::kUnicode: return unicode_byte(c);
      case Lex::kLiteral: return literal_byte(c);
      case Lex::kNumber: return number_byte(c);
      case Lex::kNone: break;
    }
    if (is_space(c)) return p_.started && ++p_.spaces <= JsonSchemaState::kMaxSpaces;
    p_.spaces = 0;
    if (p_.done) return false;  // only whitespace after the value
    p_.started = true;
    switch (p_.want) {
      case Want::kKeyOrClose:
        if (c == '}') return close_object();
        [[fallthrough]];
      case Want::kKey:
        if (c != '"') return false;
        p_.lex = Lex::kString;
        p_.key = true;
        p_.text = "\"";
        return key_viable();
      case Want::kColon:
        if (c != ':') return false;
        p_.want = Want::kValue;
        return true;
      case Want::kCommaOrClose: {
        const Frame& f = p_.stack.back();
        if (f.object) {
          if (c == '}') return close_object();
          if (c != ',') return false;
          p_.want = Want::kKey;
          p_.text = "\"";
          const bool ok = key_viable();  // some key may still come
          p_.text.clear();
          return ok;
        }
        if (c == ']') return close_array();
        if (c != ',' || f.count >= node(f.node).max_items) return false;
        p_.want = Want::kValue;
        p_.pending = node(f.node).items;
        return true;
      }
      case Want::kValueOrClose:
        if (c == ']') return close_array();
        if (p_.stack.back().count >= node(p_.stack.back().node).max_items) return false;
        [[fallthrough]];
      case Want::kValue:
        return start_value(c);
    }
    return false;
  }

 private:
  const Node& node(int32_t i) const { return s_.node(i); }

  bool end_value() {
    p_.lex = Lex::kNone;
    p_.pending = p_.lex_node = -1;
    p_.length = 0;
    p_.num_state = p_.num_digits = 0;
    p_.hex = 0;
    p_.text.clear();
    if (p_.stack.empty()) {
      p_.done = true;
      return true;
    }
    p_.want = Want::kCommaOrClose;
    if (!p_.stack.back().object) ++p_.stack.back().count;
    return true;
  }

  bool close_object() {
    const Frame& f = p_.stack.back();
    for (int32_t r : node(f.node).required)
      if (!seen(f, static_cast<size_t>(r))) return false;
    p_.stack.pop_back();
    return end_value();
  }

  bool close_array() {
    const Frame& f = p_.stack.back();
    if (f.count < node(f.node).min_items) return false;
    p_.stack.pop_back();
    return end_value();
  }

  bool start_value(char c) {
    const Node& n = node(p_.pending);
    // A top-level number could never be seen to end: the top level takes the other kinds.
    if (p_.stack.empty() && (c == '-' || is_digit(c))) return false;
    p_.lex_node = p_.pending;
    if (n.is_enum || c == 't' || c == 'f' || c == 'n') {
      p_.lex = Lex::kLiteral;
      p_.text.clear();
      return literal_byte(c);
    }
    if (c == '{' || c == '[') {
      const bool object = c == '{';
      if (!(n.types & (object ? JsonSchema::kObject : JsonSchema::kArray))) return false;
      if (static_cast<int>(p_.stack.size()) >= JsonSchemaState::kMaxDepth) return false;
      Frame f;
      f.node = p_.pending;
      f.object = object;
      if (object) f.seen.assign((n.keys.size() + 63) / 64, 0);
      p_.stack.push_back(std::move(f));
      p_.want = object ? Want::kKeyOrClose : Want::kValueOrClose;
      p_.pending = object ? -1 : n.items;
      p_.lex_node = -1;
      return true;
    }
    if (c == '"') {
      if (!(n.types & JsonSchema::kString)) return false;
      p_.lex = Lex::kString;
      p_.key = false;
      p_.length = 0;
      return true;
    }
    if (c == '-' || is_digit(c)) {
      if (!(n.types & (JsonSchema::kNumber | JsonSchema::kInteger))) return false;
      p_.lex = Lex::kNumber;
      p_.num_state = p_.num_digits = 0;
      return number_byte(c);
    }
    return false;
  }

  // Literals (enum/const values, true/false/null) are matched against the node's candidate
  // texts. Only a number can be the prefix of another candidate; such a match ends at the
  // first byte that extends no candidate (which the container then takes).
  bool literal_byte(char c) {
    const std::vector<std::string>& cands = node(p_.lex_node).literals;
    p_.text.push_back(c);
    bool extends = false, exact = false;
    for (const std::string& x : cands) {
      if (x.size() > p_.text.size() && x.compare(0, p_.text.size(), p_.text) == 0) extends = true;
      if (x == p_.text) exact = true;
    }
    if (extends) return true;
    if (exact) return end_value();
    p_.text.pop_back();
    if (p_.text.empty() || std::find(cands.begin(), cands.end(), p_.text) == cands.end()) return false;
    end_value();
    return feed(c);
  }

  bool number_byte(char c) {
    const bool integer_only = !(node(p_.lex_node).types & JsonSchema::kNumber);
    switch (json_number_step(p_.num_state, p_.num_digits, c, integer_only,
                             JsonSchemaState::kMaxIntDigits, JsonSchemaState::kMaxExpDigits)) {
      case NumberStep::kTake: return true;
      case NumberStep::kReject: return false;
      case NumberStep::kEnd: break;
    }
    end_value();
    return feed(c);
  }

  // A byte of a key also extends p_.text, which must stay the prefix of an allowed key.
  bool key_byte(char c) {
    if (!p_.key) return true;
    p_.text.push_back(c);
    return key_viable();
  }

  bool key_viable() const {
    const Frame& f = p_.stack.back();
    const Node& n = node(f.node);
    if (n.additional != JsonSchema::kForbidden && p_.text.find('\\') == std::string::npos) return true;
    for (size_t i = 0; i < n.keys.size(); ++i)
      if (!seen(f, i) && n.keys[i].compare(0, p_.text.size(), p_.text) == 0) return true;
    return false;
  }

  bool close_key() {
    Frame& f = p_.stack.back();
    const Node& n = node(f.node);
    p_.key = false;
    p_.lex = Lex::kNone;
    p_.want = Want::kColon;
    const auto k = std::find(n.keys.begin(), n.keys.end(), p_.text);
    if (k != n.keys.end()) {
      const size_t i = static_cast<size_t>(k - n.keys.begin());
      if (seen(f, i)) return false;
      f.seen[i / 64] |= uint64_t{1} << (i % 64);
      p_.pending = n.key_nodes[i];
    } else {
      if (n.additional == JsonSchema::kForbidden || p_.text.find('\\') != std::string::npos ||
          std::find(f.extra.begin(), f.extra.end(), p_.text) != f.extra.end())
        return false;
      f.extra.push_back(p_.text);
      p_.pending = n.additional;
    }
    p_.text.clear();
    return true;
  }

  bool string_byte(char c) {
    const auto u = static_cast<unsigned char>(c);
    if (p_.utf8_left > 0) {
      if (u < p_.utf8_lo || u > p_.utf8_hi) return false;
      --p_.utf8_left;
      p_.utf8_lo = 0x80;
      p_.utf8_hi = 0xBF;
      return key_byte(c);
    }
    if (p_.need_low && c != '\\') return false;
    if (c == '"') {
      if (p_.key) {
        p_.text.push_back(c);
        return close_key();
      }
      if (p_.length < node(p_.lex_node).min_length) return false;
      return end_value();
    }
    if (u < 0x20) return false;  // control bytes must be escaped
    if (!p_.need_low) {          // a new code point (a surrogate pair's low half is not)
      if (!p_.key && p_.length >= node(p_.lex_node).max_length) return false;
      ++p_.length;
    }
    if (c == '\\') {
      p_.lex = Lex::kEscape;
    } else if (u >= 0x80) {  // a UTF-8 lead byte (RFC 3629: no overlongs, no surrogates)
      if (u >= 0xC2 && u <= 0xDF) {
        p_.utf8_left = 1;
      } else if (u >= 0xE0 && u <= 0xEF) {
        p_.utf8_left = 2;
        if (u == 0xE0) p_.utf8_lo = 0xA0;
        if (u == 0xED) p_.utf8_hi = 0x9F;
      } else if (u >= 0xF0 && u <= 0xF4) {
        p_.utf8_left = 3;
        if (u == 0xF0) p_.utf8_lo = 0x90;
        if (u == 0xF4) p_.utf8_hi = 0x8F;
      } else {
        return false;
      }
    }
    return key_byte(c);
  }

  bool escape_byte(char c) {
    if (p_.need_low && c != 'u') return false;
    if (c == 'u') {
      p_.lex = Lex::kUnicode;
      p_.hex_left = 4;
      p_.hex = 0;
      return key_byte(c);
    }
    p_.lex = Lex::kString;
    return is_escape(c) && key_byte(c);
  }

  // \uXXXX: a high surrogate (D800-DBFF) must be followed by a \u low one (DC00-DFFF), and a
  // low one may come only there.
  bool unicode_byte(char c) {
    const int v = hex_value(c);
    if (v < 0) return false;
    p_.hex = static_cast<uint16_t>(p_.hex * 16 + v);
    --p_.hex_left;
    if (p_.hex_left == 3 && p_.need_low && p_.hex != 0xD) return false;
    if (p_.hex_left == 2) {
      const bool low = p_.hex >= 0xDC && p_.hex <= 0xDF;
      if (low != p_.need_low) return false;
    }
    if (p_.hex_left == 0) {
      p_.lex = Lex::kString;
      const int top = p_.hex >> 8;
      p_.need_low = !p_.need_low && top >= 0xD8 && top <= 0xDB;
    }
    return key_byte(c);
  }

  const JsonSchema& s_;
  Path& p_;
};

bool wants_value(const Path& p) {
  return p.lex == Lex::kNone && !p.done && (p.want == Want::kValue || p.want == Want::kValueOrClose);
}

// Appends p to out, once per anyOf branch its pending value may take (nested anyOf
// followed to a bounded depth), skipping paths already there.
void split(const JsonSchema& s, const Path& p, std::vector<Path>& out, int depth) {
  if (wants_value(p) && !s.node(p.pending).any_of.empty()) {
    if (depth >= JsonSchemaState::kMaxDepth) return;
    for (int32_t b : s.node(p.pending).any_of) {
      Path q = p;
      q.pending = b;
      split(s, q, out, depth + 1);
    }
    return;
  }
  if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
}

}  // namespace

JsonSchemaState::JsonSchemaState(std::shared_ptr<const JsonSchema> schema) : schema_(std::move(schema)) {
  Path p;
  p.pending = schema_->root();
  paths_.push_back(std::move(p));
  expand();
}

void JsonSchemaState::expand() {
  bool any_of = paths_.size() > 1;
  for (const Path& p : paths_) any_of = any_of || (wants_value(p) && !schema_->node(p.pending).any_of.empty());
  if (!any_of) return;
  std::vector<Path> out;
  for (const Path& p : paths_) split(*schema_, p, out, 0);
  paths_ = std::move(out);
}

bool JsonSchemaState::feed(char c) {
  size_t kept = 0;
  for (size_t i = 0; i < paths_.size(); ++i) {
    if (!Walk(*schema_, paths_[i]).feed(c)) continue;
    if (kept != i) paths_[kept] = std::move(paths_[i]);
    ++kept;
  }
  paths_.erase(paths_.begin() + static_cast<std::ptrdiff_t>(kept), paths_.end());
  if (kept == 0) return false;
  expand();
  return true;
}

bool JsonSchemaState::feed(std::string_view s) {
  for (char c : s)
    if (!feed(c)) return false;
  return true;
}

bool JsonSchemaState::complete() const {
  return std::any_of(paths_.begin(), paths_.end(), [](const Path& p) { return p.done; });
}

}  // namespace strata
