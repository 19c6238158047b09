#include "serve/deepseek_v4_parsers.h"

#include <algorithm>
#include <cctype>
#include <exception>
#include <random>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace strata {

namespace {

using ordered_json = nlohmann::ordered_json;

constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
constexpr std::string_view kThinkStart = "<think>";
constexpr std::string_view kThinkEnd = "</think>";
constexpr std::string_view kUserToken = "<｜User｜>";
constexpr std::string_view kAssistantToken = "<｜Assistant｜>";
constexpr std::string_view kLatestReminderToken = "<｜latest_reminder｜>";

// A tag longer than this is not a tag (bounds how much a half-written tag can hold back).
constexpr size_t kMaxTagBytes = 1024;

// ---------------------------------------------------------------------------------------
// Small string helpers.

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool starts_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}

bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

std::string_view trim_ws(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && is_ws(s[b])) ++b;
  while (e > b && is_ws(s[e - 1])) --e;
  return s.substr(b, e - b);
}

// Length of the longest suffix of `s` that is a proper prefix of `marker`.
size_t partial_suffix(std::string_view s, std::string_view marker) {
  size_t max_k = std::min(s.size(), marker.size() - 1);
  for (size_t k = max_k; k > 0; --k) {
    if (s.compare(s.size() - k, k, marker, 0, k) == 0) return k;
  }
  return 0;
}

// The largest e' <= e such that s[0, e') does not end inside a multi-byte UTF-8 character
// whose remaining bytes could still arrive. Invalid bytes are let through unchanged.
size_t utf8_safe_end(std::string_view s, size_t e) {
  size_t i = e;
  int cont = 0;
  while (i > 0 && cont < 3 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) {
    --i;
    ++cont;
  }
  if (i == 0) return e;
  unsigned char lead = static_cast<unsigned char>(s[i - 1]);
  size_t need = 0;
  if ((lead & 0xE0) == 0xC0) {
    need = 2;
  } else if ((lead & 0xF0) == 0xE0) {
    need = 3;
  } else if ((lead & 0xF8) == 0xF0) {
    need = 4;
  } else {
    return e;  // ASCII or an invalid byte: nothing pending
  }
  size_t have = static_cast<size_t>(cont) + 1;
  return have < need ? i - 1 : e;
}

// JSON string-body escaping as Python's json.dumps(ensure_ascii=False) writes it: `"` `\`
// and control characters are escaped, everything else (including non-ASCII bytes) is copied.
// Byte-local, so escaping chunk by chunk equals escaping the concatenation.
void append_json_escaped(std::string* out, std::string_view s) {
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          *out += fmt::format("\\u{:04x}", c);
        } else {
          out->push_back(ch);
        }
    }
  }
}

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  append_json_escaped(&out, s);
  out += "\"";
  return out;
}

// Python json.dumps(v, ensure_ascii=False) of a parsed value.
void append_python_json(std::string* out, const ordered_json& v) {
  if (v.is_object()) {
    *out += "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) *out += ", ";
      first = false;
      *out += json_quote(it.key());
      *out += ": ";
      append_python_json(out, it.value());
    }
    *out += "}";
  } else if (v.is_array()) {
    *out += "[";
    bool first = true;
    for (const auto& e : v) {
      if (!first) *out += ", ";
      first = false;
      append_python_json(out, e);
    }
    *out += "]";
  } else if (v.is_string()) {
    *out += json_quote(v.get_ref<const std::string&>());
  } else {
    // Numbers (shortest round-trip form, "1.0" for integral floats, e+XX exponents), true,
    // false, null: nlohmann's text matches Python's repr-based output.
    *out += v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
}

std::string python_json(const ordered_json& v) {
  std::string out;
  append_python_json(&out, v);
  return out;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ull;
  }
  return h;
}

// ---------------------------------------------------------------------------------------
// DSML tag spellings.

struct DsmlTags {
  DsmlDialect dialect;
  std::string block_start;   // <｜DSML｜tool_calls>
  std::string block_end;     // </｜DSML｜tool_calls>
  std::string invoke_open;   // <｜DSML｜invoke            (attributes and '>' follow)
  std::string invoke_close;  // </｜DSML｜invoke>
  std::string param_open;    // <｜DSML｜parameter
  std::string param_close;   // </｜DSML｜parameter>
};

DsmlTags make_tags(DsmlDialect d, std::string_view block, std::string_view invoke,
                   std::string_view param) {
  const std::string dsml = "｜DSML｜";
  DsmlTags t;
  t.dialect = d;
  t.block_start = "<" + dsml + std::string(block) + ">";
  t.block_end = "</" + dsml + std::string(block) + ">";
  t.invoke_open = "<" + dsml + std::string(invoke);
  t.invoke_close = "</" + dsml + std::string(invoke) + ">";
  t.param_open = "<" + dsml + std::string(param);
  t.param_close = "</" + dsml + std::string(param) + ">";
  return t;
}

const DsmlTags& tags_for(DsmlDialect d) {
  static const DsmlTags v4 = make_tags(DsmlDialect::kV4, "tool_calls", "invoke", "parameter");
  static const DsmlTags v41 = make_tags(DsmlDialect::kV41, " calls", " invoke", " parameter");
  static const DsmlTags v32 =
      make_tags(DsmlDialect::kV32, "function_calls", "invoke", "parameter");
  switch (d) {
    case DsmlDialect::kV41: return v41;
    case DsmlDialect::kV32: return v32;
    default: return v4;
  }
}

std::vector<const DsmlTags*> tag_sets_for(DsmlDialect d) {
  if (d == DsmlDialect::kAny) {
    return {&tags_for(DsmlDialect::kV4), &tags_for(DsmlDialect::kV41),
            &tags_for(DsmlDialect::kV32)};
  }
  return {&tags_for(d)};
}

enum class Match { kNo, kPartial, kYes };

Match match_literal(std::string_view buf, std::string_view lit) {
  if (starts_with(buf, lit)) return Match::kYes;
  if (buf.size() < lit.size() && lit.compare(0, buf.size(), buf) == 0) return Match::kPartial;
  return Match::kNo;
}

struct TagMatch {
  Match match = Match::kNo;
  size_t length = 0;  // bytes of the whole tag, '>' included (kYes only)
  std::string name;
  std::string string_attr;
  bool has_string_attr = false;
};

// Matches `prefix (ws+ attr="value")* ws* >` at the start of `buf`; requires a `name`
// attribute. Attribute names are [A-Za-z0-9_:-]+; values are any bytes but '"'.
TagMatch match_tag(std::string_view buf, std::string_view prefix) {
  TagMatch r;
  Match pm = match_literal(buf, prefix);
  if (pm != Match::kYes) {
    r.match = pm;
    return r;
  }
  const size_t limit = std::min(buf.size(), kMaxTagBytes);
  size_t i = prefix.size();
  auto partial = [&]() {
    r.match = buf.size() >= kMaxTagBytes ? Match::kNo : Match::kPartial;
    return r;
  };
  bool have_name = false;
  while (true) {
    size_t ws_start = i;
    while (i < limit && is_ws(buf[i])) ++i;
    if (i >= limit) return partial();
    if (buf[i] == '>') {
      if (!have_name) return r;  // kNo
      r.match = Match::kYes;
      r.length = i + 1;
      return r;
    }
    if (i == ws_start) return r;  // attributes need whitespace before them
    size_t an = i;
    while (i < limit && (std::isalnum(static_cast<unsigned char>(buf[i])) || buf[i] == '_' ||
                         buf[i] == ':' || buf[i] == '-')) {
      ++i;
    }
    if (i >= limit) return partial();
    if (i == an || buf[i] != '=') return r;
    std::string_view attr = buf.substr(an, i - an);
    ++i;
    if (i >= limit) return partial();
    if (buf[i] != '"') return r;
    ++i;
    size_t vs = i;
    while (i < limit && buf[i] != '"') ++i;
    if (i >= limit) return partial();
    std::string_view value = buf.substr(vs, i - vs);
    ++i;
    if (attr == "name") {
      if (value.empty()) return r;
      r.name = std::string(value);
      have_name = true;
    } else if (attr == "string") {
      r.string_attr = std::string(value);
      r.has_string_attr = true;
    }
  }
}

// ---------------------------------------------------------------------------------------
// Delta sink: merges consecutive text events of one kind.

class DeltaSink {
 public:
  explicit DeltaSink(std::vector<ChatDelta>* out) : out_(out) {}

  void text(ChatDelta::Type type, std::string_view t, int tool_index = -1) {
    if (t.empty()) return;
    if (!out_->empty()) {
      ChatDelta& last = out_->back();
      if (last.type == type && last.tool_index == tool_index &&
          type != ChatDelta::Type::kToolCallBegin) {
        last.text.append(t);
        return;
      }
    }
    ChatDelta d;
    d.type = type;
    d.text = std::string(t);
    d.tool_index = tool_index;
    out_->push_back(std::move(d));
  }

  void begin_tool(int index, std::string id, std::string name) {
    ChatDelta d;
    d.type = ChatDelta::Type::kToolCallBegin;
    d.tool_index = index;
    d.tool_call_id = std::move(id);
    d.tool_name = std::move(name);
    out_->push_back(std::move(d));
  }

 private:
  std::vector<ChatDelta>* out_;
};

// ---------------------------------------------------------------------------------------
// Stage 1: removes every end-of-sentence marker.

class EosFilter {
 public:
  void feed(std::string_view in, bool final, std::string* out) {
    buf_.append(in);
    size_t pos = 0;
    while (true) {
      size_t p = buf_.find(kEos, pos);
      if (p == std::string::npos) break;
      out->append(buf_, pos, p - pos);
      pos = p + kEos.size();
    }
    size_t hold = final ? 0 : partial_suffix(std::string_view(buf_).substr(pos), kEos);
    out->append(buf_, pos, buf_.size() - pos - hold);
    buf_.erase(0, buf_.size() - hold);
  }

 private:
  std::string buf_;
};

// Where the earliest of `markers` starts in `s` (npos if none); `*which` gets its index.
size_t find_first_of_markers(std::string_view s, const std::vector<std::string_view>& markers,
                             size_t* which) {
  size_t best = std::string::npos;
  for (size_t m = 0; m < markers.size(); ++m) {
    size_t p = s.find(markers[m]);
    if (p != std::string::npos && (best == std::string::npos || p < best)) {
      best = p;
      *which = m;
    }
  }
  return best;
}

// How many trailing bytes of `s` to hold back because they may start a marker: the longest
// partial marker plus, when `hold_newlines`, up to two '\n' right before it (a possible
// "\n\n" separator in front of a tool-calls block).
size_t holdback(std::string_view s, const std::vector<std::string_view>& markers,
                bool hold_newlines) {
  size_t k = 0;
  for (std::string_view m : markers) k = std::max(k, partial_suffix(s, m));
  if (hold_newlines) {
    int n = 0;
    while (n < 2 && k < s.size() && s[s.size() - k - 1] == '\n') {
      ++k;
      ++n;
    }
  }
  return k;
}

// ---------------------------------------------------------------------------------------
// Stage 2: reasoning / content split.

class ReasoningSplitter {
 public:
  ReasoningSplitter(bool thinking, bool tools_enabled, const std::vector<const DsmlTags*>& tags)
      : state_(thinking ? State::kStart : State::kContent), tools_enabled_(tools_enabled) {
    if (tools_enabled) {
      for (const DsmlTags* t : tags) tool_starts_.push_back(t->block_start);
    }
  }

  // Appends reasoning text (whole UTF-8 characters) to *reasoning and content bytes to
  // *content.
  void feed(std::string_view in, bool final, std::string* reasoning, std::string* content) {
    buf_.append(in);
    while (true) {
      switch (state_) {
        case State::kStart: {
          Match m = match_literal(buf_, kThinkStart);
          if (m == Match::kPartial && !final) return;
          if (m == Match::kYes) buf_.erase(0, kThinkStart.size());
          state_ = State::kReasoning;
          break;
        }
        case State::kReasoning: {
          std::vector<std::string_view> markers = {kThinkEnd};
          markers.insert(markers.end(), tool_starts_.begin(), tool_starts_.end());
          size_t which = 0;
          size_t p = find_first_of_markers(buf_, markers, &which);
          if (p != std::string::npos && which == 0) {
            reasoning->append(buf_, 0, p);
            buf_.erase(0, p + kThinkEnd.size());
            state_ = State::kContent;
            break;
          }
          if (p != std::string::npos) {
            // A tool-calls block ends reasoning (vLLM DeepSeekV4ReasoningParser). Its "\n\n"
            // separator goes with it, for the tool stage to drop.
            size_t q = p;
            if (ends_with(std::string_view(buf_).substr(0, p), "\n\n")) q -= 2;
            reasoning->append(buf_, 0, q);
            size_t after = p + markers[which].size();
            content->append(buf_, q, after - q);
            buf_.erase(0, after);
            state_ = State::kAfterToolStart;
            break;
          }
          if (final) {
            reasoning->append(buf_);
            buf_.clear();
            return;
          }
          size_t keep = holdback(buf_, markers, tools_enabled_);
          size_t e = utf8_safe_end(buf_, buf_.size() - keep);
          reasoning->append(buf_, 0, e);
          buf_.erase(0, e);
          return;
        }
        case State::kAfterToolStart: {
          // vLLM's partition drops the first "</think>" after an implicit end of reasoning.
          size_t p = buf_.find(kThinkEnd);
          if (p != std::string::npos) {
            content->append(buf_, 0, p);
            buf_.erase(0, p + kThinkEnd.size());
            state_ = State::kContent;
            break;
          }
          size_t keep = final ? 0 : partial_suffix(buf_, kThinkEnd);
          content->append(buf_, 0, buf_.size() - keep);
          buf_.erase(0, buf_.size() - keep);
          return;
        }
        case State::kContent:
          content->append(buf_);
          buf_.clear();
          return;
      }
    }
  }

 private:
  enum class State { kStart, kReasoning, kAfterToolStart, kContent };
  State state_;
  bool tools_enabled_;
  std::vector<std::string_view> tool_starts_;
  std::string buf_;
};

// ---------------------------------------------------------------------------------------
// Stage 3: DSML tool calls (or plain content when tools are off).

class ToolCallStage {
 public:
  ToolCallStage(bool tools_enabled, const std::vector<const DsmlTags*>& tags,
                std::string id_seed)
      : id_seed_(std::move(id_seed)) {
    if (tools_enabled) tags_ = tags;
    for (const DsmlTags* t : tags_) block_starts_.push_back(t->block_start);
  }

  void feed(std::string_view in, bool final, DeltaSink* sink) {
    buf_.append(in);
    sink_ = sink;
    while (step(final)) {
    }
    sink_ = nullptr;
  }

  bool markup_error() const { return markup_error_; }
  int tool_call_count() const { return next_index_; }

 private:
  enum class State { kText, kBlock, kInvoke, kParamString, kParamJson, kJsonBody };

  void content(std::string_view t) { sink_->text(ChatDelta::Type::kContent, t); }
  void args(std::string_view t) { sink_->text(ChatDelta::Type::kToolCallArguments, t, index_); }

  void skip_ws(std::string* keep = nullptr) {
    size_t n = 0;
    while (n < buf_.size() && is_ws(buf_[n])) ++n;
    if (keep != nullptr) keep->append(buf_, 0, n);
    buf_.erase(0, n);
  }

  void close_call() {
    args(params_ == 0 ? "{}" : "}");
    state_ = State::kBlock;
  }

  // Leaves the current block after unexpected bytes: the call in progress is closed, and the
  // unexpected bytes (still at the front of buf_) are scanned as content.
  void abandon_block() {
    markup_error_ = true;
    if (state_ != State::kBlock) close_call();
    if (invokes_in_block_ == 0) content(block_raw_);  // nothing committed: restore verbatim
    block_raw_.clear();
    state_ = State::kText;
  }

  // One step of the state machine; false when it needs more input (or is done).
  bool step(bool final) {
    switch (state_) {
      case State::kText: return step_text(final);
      case State::kBlock: return step_block(final);
      case State::kInvoke: return step_invoke(final);
      case State::kParamString: return step_param_string(final);
      case State::kParamJson: return step_param_json(final);
      case State::kJsonBody: return step_json_body(final);
    }
    return false;
  }

  bool step_text(bool final) {
    if (skip_leading_ws_) {
      skip_ws();
      if (buf_.empty()) return false;
      skip_leading_ws_ = false;
    }
    size_t which = 0;
    size_t p = find_first_of_markers(buf_, block_starts_, &which);
    if (p != std::string::npos) {
      std::string_view before = std::string_view(buf_).substr(0, p);
      std::string sep;
      if (ends_with(before, "\n\n")) {
        before.remove_suffix(2);
        sep = "\n\n";
      }
      content(before);
      cur_ = tags_[which];
      block_raw_ = sep + cur_->block_start;
      buf_.erase(0, p + cur_->block_start.size());
      invokes_in_block_ = 0;
      state_ = State::kBlock;
      return true;
    }
    size_t e = buf_.size();
    if (!final) e = utf8_safe_end(buf_, e - holdback(buf_, block_starts_, !tags_.empty()));
    content(std::string_view(buf_).substr(0, e));
    buf_.erase(0, e);
    return false;
  }

  bool step_block(bool final) {
    skip_ws(invokes_in_block_ == 0 ? &block_raw_ : nullptr);
    if (buf_.empty()) {
      if (!final) return false;
      // The stream ended inside a block (no closing tag).
      markup_error_ = true;
      if (invokes_in_block_ == 0) content(block_raw_);
      block_raw_.clear();
      state_ = State::kText;
      return false;
    }
    Match end = match_literal(buf_, cur_->block_end);
    if (end == Match::kYes) {
      buf_.erase(0, cur_->block_end.size());
      block_raw_.clear();
      state_ = State::kText;
      skip_leading_ws_ = true;
      return true;
    }
    TagMatch inv = match_tag(buf_, cur_->invoke_open);
    if (inv.match == Match::kYes) {
      buf_.erase(0, inv.length);
      index_ = next_index_++;
      sink_->begin_tool(index_, make_tool_call_id(id_seed_, index_), inv.name);
      ++invokes_in_block_;
      block_raw_.clear();
      params_ = 0;
      state_ = State::kInvoke;
      return true;
    }
    if (!final && (end == Match::kPartial || inv.match == Match::kPartial)) return false;
    abandon_block();
    return true;
  }

  bool step_invoke(bool final) {
    skip_ws();
    if (buf_.empty()) {
      if (!final) return false;
      markup_error_ = true;  // the stream ended inside an invoke
      close_call();
      return true;
    }
    Match close = match_literal(buf_, cur_->invoke_close);
    if (close == Match::kYes) {
      buf_.erase(0, cur_->invoke_close.size());
      close_call();
      return true;
    }
    TagMatch par = match_tag(buf_, cur_->param_open);
    if (par.match == Match::kYes) {
      buf_.erase(0, par.length);
      std::string prefix = params_ == 0 ? "{" : ", ";
      prefix += json_quote(par.name);
      prefix += ": ";
      ++params_;
      if (par.has_string_attr && par.string_attr == "true") {
        prefix += "\"";
        state_ = State::kParamString;
      } else {
        state_ = State::kParamJson;
      }
      args(prefix);
      return true;
    }
    if (params_ == 0 && buf_[0] == '{') {
      state_ = State::kJsonBody;
      return true;
    }
    if (!final && (close == Match::kPartial || par.match == Match::kPartial)) return false;
    abandon_block();
    return true;
  }

  bool step_param_string(bool final) {
    size_t p = buf_.find(cur_->param_close);
    std::string out;
    if (p != std::string::npos || final) {
      size_t n = p == std::string::npos ? buf_.size() : p;
      append_json_escaped(&out, std::string_view(buf_).substr(0, n));
      out += "\"";
      args(out);
      if (p == std::string::npos) {
        buf_.clear();
        markup_error_ = true;  // unclosed parameter
      } else {
        buf_.erase(0, p + cur_->param_close.size());
      }
      state_ = State::kInvoke;
      return true;
    }
    size_t e = utf8_safe_end(buf_, buf_.size() - partial_suffix(buf_, cur_->param_close));
    append_json_escaped(&out, std::string_view(buf_).substr(0, e));
    args(out);
    buf_.erase(0, e);
    return false;
  }

  // Finds `marker` in buf_, resuming where the previous unsuccessful search left off so a
  // long buffered value costs linear time overall.
  size_t find_resumable(std::string_view marker) {
    size_t p = buf_.find(marker, scanned_);
    if (p == std::string::npos) {
      scanned_ = buf_.size() >= marker.size() ? buf_.size() - marker.size() + 1 : 0;
    } else {
      scanned_ = 0;
    }
    return p;
  }

  bool step_param_json(bool final) {
    size_t p = find_resumable(cur_->param_close);
    if (p == std::string::npos && !final) return false;
    scanned_ = 0;
    size_t n = p == std::string::npos ? buf_.size() : p;
    // A string="false" (or attribute-less) value: the raw JSON text (trimmed) when it parses,
    // else the untrimmed text as a JSON string.
    std::string_view raw = std::string_view(buf_).substr(0, n);
    std::string_view t = trim_ws(raw);
    if (!t.empty() && nlohmann::json::accept(t)) {
      args(t);
    } else {
      markup_error_ = true;
      args(json_quote(raw));
    }
    if (p == std::string::npos) {
      buf_.clear();
      markup_error_ = true;
    } else {
      buf_.erase(0, p + cur_->param_close.size());
    }
    state_ = State::kInvoke;
    return true;
  }

  // SGLang's "direct JSON" invoke body: <invoke name="f">{"k": "v"}</invoke>.
  bool step_json_body(bool final) {
    size_t p = find_resumable(cur_->invoke_close);
    if (p == std::string::npos && !final) return false;
    scanned_ = 0;
    size_t n = p == std::string::npos ? buf_.size() : p;
    std::string_view raw = std::string_view(buf_).substr(0, n);
    std::string_view t = trim_ws(raw);
    bool object = false;
    try {
      object = nlohmann::json::accept(t) && nlohmann::json::parse(t).is_object();
    } catch (const std::exception&) {
      object = false;
    }
    if (object) {
      args(t);
    } else {
      markup_error_ = true;
      args("{\"arguments\": " + json_quote(raw) + "}");
    }
    if (p == std::string::npos) {
      buf_.clear();
      markup_error_ = true;
    } else {
      buf_.erase(0, p + cur_->invoke_close.size());
    }
    state_ = State::kBlock;
    return true;
  }

  std::vector<const DsmlTags*> tags_;
  std::vector<std::string_view> block_starts_;
  std::string id_seed_;
  DeltaSink* sink_ = nullptr;
  std::string buf_;
  State state_ = State::kText;
  bool skip_leading_ws_ = false;
  const DsmlTags* cur_ = nullptr;
  std::string block_raw_;  // bytes of the open block before its first invoke
  size_t scanned_ = 0;     // buf_ prefix known not to hold the closing tag (buffered values)
  int invokes_in_block_ = 0;
  int params_ = 0;
  int index_ = -1;
  int next_index_ = 0;
  bool markup_error_ = false;
};

std::string random_seed() {
  std::random_device rd;
  uint64_t x = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return fmt::format("{:016x}", x);
}

}  // namespace

// -----------------------------------------------------------------------------------------
// Public output-side API.

std::string make_tool_call_id(std::string_view seed, int index) {
  uint64_t a = splitmix64(fnv1a64(seed) ^ (0xD6E8FEB86659FD93ull * static_cast<uint64_t>(index)));
  uint64_t b = splitmix64(a);
  return fmt::format("call_{:016x}{:08x}", a, static_cast<uint32_t>(b >> 32));
}

struct DeepseekV4StreamParser::Impl {
  explicit Impl(const DeepseekV4ParserOptions& o)
      : tags(tag_sets_for(o.dialect)),
        reasoning(o.thinking, o.tools_enabled, tags),
        tools(o.tools_enabled, tags, o.id_seed.empty() ? random_seed() : o.id_seed) {}

  std::vector<ChatDelta> run(std::string_view chunk, bool final) {
    std::vector<ChatDelta> out;
    if (finished) return out;
    finished = final;
    std::string text, r, c;
    eos.feed(chunk, final, &text);
    reasoning.feed(text, final, &r, &c);
    DeltaSink sink(&out);
    sink.text(ChatDelta::Type::kReasoning, r);
    tools.feed(c, final, &sink);
    return out;
  }

  std::vector<const DsmlTags*> tags;
  EosFilter eos;
  ReasoningSplitter reasoning;
  ToolCallStage tools;
  bool finished = false;
};

namespace {
DeepseekV4ParserOptions basic_options(bool thinking, bool tools_enabled) {
  DeepseekV4ParserOptions o;
  o.thinking = thinking;
  o.tools_enabled = tools_enabled;
  return o;
}
}  // namespace

DeepseekV4StreamParser::DeepseekV4StreamParser(bool thinking, bool tools_enabled)
    : DeepseekV4StreamParser(basic_options(thinking, tools_enabled)) {}

DeepseekV4StreamParser::DeepseekV4StreamParser(const DeepseekV4ParserOptions& options)
    : impl_(std::make_unique<Impl>(options)) {}

DeepseekV4StreamParser::~DeepseekV4StreamParser() = default;
DeepseekV4StreamParser::DeepseekV4StreamParser(DeepseekV4StreamParser&&) noexcept = default;
DeepseekV4StreamParser& DeepseekV4StreamParser::operator=(DeepseekV4StreamParser&&) noexcept =
    default;

std::vector<ChatDelta> DeepseekV4StreamParser::feed(std::string_view chunk) {
  return impl_->run(chunk, false);
}

std::vector<ChatDelta> DeepseekV4StreamParser::finish() { return impl_->run({}, true); }

bool DeepseekV4StreamParser::markup_error() const { return impl_->tools.markup_error(); }

int DeepseekV4StreamParser::tool_call_count() const { return impl_->tools.tool_call_count(); }

void accumulate_delta(ParsedChatOutput* out, const ChatDelta& d) {
  switch (d.type) {
    case ChatDelta::Type::kReasoning: out->reasoning_content += d.text; break;
    case ChatDelta::Type::kContent: out->content += d.text; break;
    case ChatDelta::Type::kToolCallBegin:
      if (d.tool_index >= 0 && static_cast<size_t>(d.tool_index) >= out->tool_calls.size()) {
        out->tool_calls.resize(d.tool_index + 1);
      }
      if (d.tool_index >= 0) {
        out->tool_calls[d.tool_index].id = d.tool_call_id;
        out->tool_calls[d.tool_index].name = d.tool_name;
      }
      break;
    case ChatDelta::Type::kToolCallArguments:
      if (d.tool_index >= 0 && static_cast<size_t>(d.tool_index) < out->tool_calls.size()) {
        out->tool_calls[d.tool_index].arguments += d.text;
      }
      break;
  }
}

ParsedChatOutput parse_deepseek_v4_output(std::string_view text,
                                          const DeepseekV4ParserOptions& options) {
  DeepseekV4StreamParser p(options);
  ParsedChatOutput out;
  for (const ChatDelta& d : p.feed(text)) accumulate_delta(&out, d);
  for (const ChatDelta& d : p.finish()) accumulate_delta(&out, d);
  out.markup_error = p.markup_error();
  return out;
}

ParsedChatOutput parse_deepseek_v4_output(std::string_view text, bool thinking,
                                          bool tools_enabled) {
  return parse_deepseek_v4_output(text, basic_options(thinking, tools_enabled));
}

nlohmann::json chat_delta_to_openai(const ChatDelta& d) {
  using nlohmann::json;
  auto text = [](const std::string& s) { return json(s); };
  switch (d.type) {
    case ChatDelta::Type::kReasoning: return json{{"reasoning_content", text(d.text)}};
    case ChatDelta::Type::kContent: return json{{"content", text(d.text)}};
    case ChatDelta::Type::kToolCallBegin:
      return json{{"tool_calls", json::array({json{
                                     {"index", d.tool_index},
                                     {"id", d.tool_call_id},
                                     {"type", "function"},
                                     {"function", json{{"name", d.tool_name}, {"arguments", ""}}},
                                 }})}};
    case ChatDelta::Type::kToolCallArguments:
      return json{{"tool_calls", json::array({json{
                                     {"index", d.tool_index},
                                     {"function", json{{"arguments", text(d.text)}}},
                                 }})}};
  }
  return json::object();
}

nlohmann::json tool_calls_to_openai(const std::vector<ToolCall>& calls) {
  using nlohmann::json;
  json arr = json::array();
  for (const ToolCall& c : calls) {
    arr.push_back(json{{"id", c.id},
                       {"type", "function"},
                       {"function", json{{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return arr;
}

// -----------------------------------------------------------------------------------------
// Prompt side: DeepSeek's encoding_dsv4.py, rewritten.

namespace {

constexpr std::string_view kReasoningEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate "
    "step, considered alternative, and rejected hypothesis to ensure absolutely no assumption "
    "is left unchecked.\n\n";

std::string tools_section(const std::vector<std::string>& schema_lines) {
  const std::string d = "｜DSML｜";
  std::string s;
  s += "## Tools\n\n";
  s += "You have access to a set of tools to help answer the user's question. You can invoke "
       "tools by writing a \"<" + d + "tool_calls>\" block like the following:\n\n";
  s += "<" + d + "tool_calls>\n";
  s += "<" + d + "invoke name=\"$TOOL_NAME\">\n";
  s += "<" + d + "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" +
       d + "parameter>\n";
  s += "...\n";
  s += "</" + d + "invoke>\n";
  s += "<" + d + "invoke name=\"$TOOL_NAME2\">\n";
  s += "...\n";
  s += "</" + d + "invoke>\n";
  s += "</" + d + "tool_calls>\n\n";
  s += "String parameters should be specified as is and set `string=\"true\"`. For all other "
       "types (numbers, booleans, arrays, objects), pass the value in JSON format and set "
       "`string=\"false\"`.\n\n";
  s += "If thinking_mode is enabled (triggered by <think>), you MUST output your complete "
       "reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\n";
  s += "Otherwise, output directly after </think> with tool calls or final response.\n\n";
  s += "### Available Tool Schemas\n\n";
  for (size_t i = 0; i < schema_lines.size(); ++i) {
    if (i > 0) s += "\n";
    s += schema_lines[i];
  }
  s += "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to "
       "invoke tool calls.\n";
  return s;
}

// Parses an OpenAI tools array into one Python-style JSON line per function.
StatusOr<std::vector<std::string>> tool_schema_lines(std::string_view tools_json) {
  std::vector<std::string> lines;
  if (trim_ws(tools_json).empty()) return lines;
  ordered_json tools;
  try {
    tools = ordered_json::parse(tools_json);
  } catch (const std::exception& e) {
    return invalid_argument("tools: invalid JSON: {}", e.what());
  }
  if (!tools.is_array()) return invalid_argument("tools: expected an array");
  for (size_t i = 0; i < tools.size(); ++i) {
    const ordered_json& t = tools[i];
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object()) {
      return invalid_argument(
          "tools[{}]: expected {{\"type\": \"function\", \"function\": {{...}}}}", i);
    }
    if (t.contains("type") && t["type"] != "function") {
      return invalid_argument("tools[{}].type: only \"function\" is supported", i);
    }
    lines.push_back(python_json(t["function"]));
  }
  return lines;
}

void append_invoke(std::string* out, const ToolCall& c) {
  const std::string d = "｜DSML｜";
  *out += "<" + d + "invoke name=\"" + c.name + "\">\n";
  ordered_json args;
  bool ok = false;
  try {
    args = ordered_json::parse(c.arguments);
    ok = args.is_object();
  } catch (const std::exception&) {
    ok = false;
  }
  if (!ok) {
    // encoding_dsv4.py: arguments that json.loads rejects become {"arguments": raw}.
    args = ordered_json::object();
    args["arguments"] = c.arguments;
  }
  bool first = true;
  for (auto it = args.begin(); it != args.end(); ++it) {
    if (!first) *out += "\n";
    first = false;
    const bool is_str = it.value().is_string();
    *out += "<" + d + "parameter name=\"" + it.key() + "\" string=\"" +
            (is_str ? "true" : "false") + "\">";
    *out += is_str ? it.value().get_ref<const std::string&>() : python_json(it.value());
    *out += "</" + d + "parameter>";
  }
  *out += "\n</" + d + "invoke>";
}

// A message after merge_tool_messages(): user turns carry blocks.
struct Block {
  bool tool_result = false;
  std::string text;         // text, or the tool result content
  std::string tool_use_id;  // tool results
};

struct Msg {
  std::string role;
  std::string content;
  std::string reasoning_content;
  std::vector<ToolCall> tool_calls;
  std::vector<Block> blocks;  // user turns
  bool has_blocks = false;
  bool tools = false;         // carries the tools section
  bool wo_eos = false;
};

int last_user_index(const std::vector<Msg>& m) {
  for (int i = static_cast<int>(m.size()) - 1; i >= 0; --i) {
    if (m[i].role == "user" || m[i].role == "developer") return i;
  }
  return -1;
}

}  // namespace

StatusOr<std::string> python_style_json(std::string_view json_text) {
  try {
    return python_json(ordered_json::parse(json_text));
  } catch (const std::exception& e) {
    return invalid_argument("invalid JSON: {}", e.what());
  }
}

StatusOr<std::string> render_deepseek_v4_tools_section(std::string_view tools_json) {
  STRATA_ASSIGN_OR_RETURN(std::vector<std::string> lines, tool_schema_lines(tools_json));
  return tools_section(lines);
}

std::string encode_dsml_tool_calls(const std::vector<ToolCall>& calls) {
  if (calls.empty()) return "";
  const std::string d = "｜DSML｜";
  std::string out = "\n\n<" + d + "tool_calls>\n";
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i > 0) out += "\n";
    append_invoke(&out, calls[i]);
  }
  out += "\n</" + d + "tool_calls>";
  return out;
}

StatusOr<std::string> render_deepseek_v4_prompt(const std::vector<DeepseekV4Message>& messages,
                                                std::string_view tools_json,
                                                const DeepseekV4PromptOptions& options) {
  if (messages.empty()) return invalid_argument("messages must not be empty");
  const std::string& effort = options.reasoning_effort;
  if (!effort.empty() && effort != "high" && effort != "max") {
    return invalid_argument("reasoning_effort '{}': expected \"high\" or \"max\"", effort);
  }
  STRATA_ASSIGN_OR_RETURN(std::vector<std::string> schema_lines, tool_schema_lines(tools_json));
  const bool have_tools = !schema_lines.empty();

  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool" &&
        r != "latest_reminder") {
      return invalid_argument("messages[{}]: unsupported role '{}'", i, r);
    }
    if (r == "developer" && messages[i].content.empty()) {
      return invalid_argument("messages[{}]: a developer message needs content", i);
    }
  }

  // SGLang (serving_chat.py) puts the tools on messages[0], inserting an empty system
  // message when the conversation does not start with one.
  std::vector<DeepseekV4Message> in;
  if (have_tools && messages[0].role != "system") {
    in.emplace_back();
    in.back().role = "system";
  }
  in.insert(in.end(), messages.begin(), messages.end());

  // merge_tool_messages(): tool results (and user text right after them) join one user turn.
  std::vector<Msg> msgs;
  for (size_t i = 0; i < in.size(); ++i) {
    const DeepseekV4Message& m = in[i];
    if (m.role == "tool" || m.role == "user") {
      Block b;
      b.tool_result = m.role == "tool";
      b.text = m.content;
      b.tool_use_id = m.tool_call_id;
      if (!msgs.empty() && msgs.back().role == "user" && msgs.back().has_blocks) {
        msgs.back().blocks.push_back(std::move(b));
      } else {
        Msg u;
        u.role = "user";
        u.content = m.role == "user" ? m.content : "";
        u.has_blocks = true;
        u.blocks.push_back(std::move(b));
        msgs.push_back(std::move(u));
      }
      continue;
    }
    Msg x;
    x.role = m.role;
    x.content = m.content;
    x.reasoning_content = m.reasoning_content;
    x.tool_calls = m.tool_calls;
    x.tools = i == 0 && have_tools;
    msgs.push_back(std::move(x));
  }
  if (options.continue_final_message && msgs.back().role == "assistant") {
    msgs.back().wo_eos = true;
  }

  // sort_tool_results_by_call_order(): within a user turn, tool results follow the order of
  // the latest assistant tool calls (stable; unknown ids rank as 0).
  std::vector<std::pair<std::string, int>> order;
  for (Msg& m : msgs) {
    if (m.role == "assistant" && !m.tool_calls.empty()) {
      order.clear();
      for (size_t i = 0; i < m.tool_calls.size(); ++i) {
        if (!m.tool_calls[i].id.empty()) {
          order.emplace_back(m.tool_calls[i].id, static_cast<int>(i));
        }
      }
    } else if (m.role == "user" && !m.blocks.empty()) {
      std::vector<Block> results;
      for (const Block& b : m.blocks) {
        if (b.tool_result) results.push_back(b);
      }
      if (results.size() > 1 && !order.empty()) {
        auto rank = [&](const Block& b) {
          // Python dict semantics: a repeated id keeps its last position.
          int r = 0;
          for (const auto& [id, idx] : order) {
            if (id == b.tool_use_id) r = idx;
          }
          return r;
        };
        std::stable_sort(results.begin(), results.end(),
                         [&](const Block& a, const Block& b) { return rank(a) < rank(b); });
        size_t k = 0;
        for (Block& b : m.blocks) {
          if (b.tool_result) b = results[k++];
        }
      }
    }
  }

  // Tools anywhere switch drop_thinking off; in thinking mode _drop_thinking_messages() then
  // strips reasoning before the last user turn and drops developer turns before it.
  const bool drop = options.drop_thinking && !have_tools;
  if (options.thinking && drop) {
    const int last = last_user_index(msgs);
    std::vector<Msg> kept;
    for (int i = 0; i < static_cast<int>(msgs.size()); ++i) {
      Msg& m = msgs[i];
      if (m.role == "user" || m.role == "system" || m.role == "latest_reminder" || i >= last) {
        kept.push_back(std::move(m));
      } else if (m.role == "assistant") {
        m.reasoning_content.clear();
        kept.push_back(std::move(m));
      }
    }
    msgs = std::move(kept);
  }

  const int last_user = last_user_index(msgs);
  std::string prompt = options.add_bos ? std::string(kBos) : std::string();
  for (int i = 0; i < static_cast<int>(msgs.size()); ++i) {
    const Msg& m = msgs[i];
    if (i == 0 && options.thinking && effort == "max") prompt += kReasoningEffortMax;
    if (m.role == "system") {
      prompt += m.content;
      if (m.tools) prompt += "\n\n" + tools_section(schema_lines);
    } else if (m.role == "developer") {
      prompt += kUserToken;
      prompt += m.content;
      if (m.tools) prompt += "\n\n" + tools_section(schema_lines);
    } else if (m.role == "user") {
      prompt += kUserToken;
      for (size_t b = 0; b < m.blocks.size(); ++b) {
        if (b > 0) prompt += "\n\n";
        if (m.blocks[b].tool_result) {
          prompt += "<tool_result>" + m.blocks[b].text + "</tool_result>";
        } else {
          prompt += m.blocks[b].text;
        }
      }
    } else if (m.role == "latest_reminder") {
      prompt += kLatestReminderToken;
      prompt += m.content;
    } else {  // assistant
      if (options.thinking && (!drop || i > last_user)) {
        prompt += m.reasoning_content;
        prompt += kThinkEnd;
      }
      prompt += m.content;
      prompt += encode_dsml_tool_calls(m.tool_calls);
      if (!m.wo_eos) prompt += kEos;
    }
    // Transition: a user/developer turn followed by an assistant turn, a reminder, or the end
    // of the conversation opens the assistant turn.
    if (i + 1 < static_cast<int>(msgs.size()) && msgs[i + 1].role != "assistant" &&
        msgs[i + 1].role != "latest_reminder") {
      continue;
    }
    if (m.role == "user" || m.role == "developer") {
      prompt += kAssistantToken;
      prompt += options.thinking && (!drop || i >= last_user) ? kThinkStart : kThinkEnd;
    }
  }
  return prompt;
}

}  // namespace strata
