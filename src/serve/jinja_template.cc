// JinjaTemplate implementation: lexer -> parser (AST) -> tree-walking interpreter.
//
// The lexer follows Jinja2's (trim_blocks/lstrip_blocks, '-'/'+' markers, raw blocks, one
// trailing newline dropped); the parser follows Jinja2's grammar and operator precedence;
// the interpreter evaluates Python semantics over a small Value model (None, bool, int64,
// double, str, list/tuple, dict, namespace, callables, Jinja's Undefined).
//
// Errors inside the engine are thrown as JinjaError and turned into a Status at the two
// public entry points (parse, render); no exception leaves this file. Every render has its
// own Interp; the parsed Program is never mutated, so renders may run concurrently.
#include "serve/jinja_template.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace strata {
namespace jinja_detail {
namespace {

// ----------------------------------------------------------------------------------------
// Errors
// ----------------------------------------------------------------------------------------

struct JinjaError {
  StatusCode code = StatusCode::kInvalidArgument;
  std::string message;
  bool raw = false;  // raise_exception(): the message is reported as is
};

[[noreturn]] void fail(std::string message) {
  throw JinjaError{StatusCode::kInvalidArgument, std::move(message), false};
}

template <typename... Args>
[[noreturn]] void failf(fmt::format_string<Args...> f, Args&&... args) {
  fail(fmt::format(f, std::forward<Args>(args)...));
}

[[noreturn]] void fail_limit(std::string message) {
  throw JinjaError{StatusCode::kResourceExhausted, std::move(message), false};
}

// Deepest list/dict nesting a value may have (context JSON or built by the template).
constexpr int kMaxValueDepth = 256;

// ----------------------------------------------------------------------------------------
// UTF-8 and Python string helpers
// ----------------------------------------------------------------------------------------

constexpr uint32_t kBadByte = 0xFFFFFFFF;  // an invalid UTF-8 byte

// Decodes the code point at s[i] and advances i; an invalid byte is one kBadByte unit.
uint32_t utf8_next(std::string_view s, size_t& i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    ++i;
    return c;
  }
  int n = c >= 0xF8 ? -1 : c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : -1;
  if (n < 0 || i + static_cast<size_t>(n) >= s.size()) {
    ++i;
    return kBadByte;
  }
  uint32_t cp = c & (0x3F >> n);
  for (int k = 1; k <= n; ++k) {
    unsigned char d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xC0) != 0x80) {
      ++i;
      return kBadByte;
    }
    cp = (cp << 6) | (d & 0x3F);
  }
  i += n + 1;
  return cp;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_cont_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// Python len() of a str: the number of code points.
size_t cp_length(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += !is_cont_byte(c);
  return n;
}

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

// Byte offset of every code point start, plus s.size() at the end.
std::vector<size_t> cp_offsets(std::string_view s) {
  std::vector<size_t> offs;
  offs.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size(); ++i) {
    if (!is_cont_byte(s[i])) offs.push_back(i);
  }
  offs.push_back(s.size());
  return offs;
}

// Start of the code point that ends at byte i (i > 0).
size_t utf8_prev(std::string_view s, size_t i) {
  size_t j = i - 1;
  while (j > 0 && is_cont_byte(s[j]) && i - j < 4) --j;
  return j;
}

// str.isspace() / the `\s` of Python's re for one code point.
bool py_isspace(uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// Python's str.isprintable() for one code point (approximation: the common non-printable
// ranges; unassigned code points count as printable).
bool py_isprintable(uint32_t cp) {
  if (cp < 0x20 || cp == 0x7F) return false;
  if (cp < 0x80) return true;
  if (cp <= 0xA0 || cp == 0xAD) return false;
  if (cp == 0x1680 || cp == 0x180E) return false;
  if ((cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F)) return false;
  if ((cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF) return false;
  if ((cp >= 0xD800 && cp <= 0xF8FF) || (cp >= 0xFFF9 && cp <= 0xFFFB)) return false;
  if (cp >= 0xF0000) return false;
  return true;
}

// Which characters a strip removes: whitespace (chars == nullptr) or the code points of
// *chars.
class StripSet {
 public:
  explicit StripSet(const std::string* chars) {
    if (chars == nullptr) return;
    whitespace_ = false;
    for (size_t i = 0; i < chars->size();) cps_.push_back(utf8_next(*chars, i));
  }
  bool contains(uint32_t cp) const {
    if (whitespace_) return py_isspace(cp);
    return cp != kBadByte && std::find(cps_.begin(), cps_.end(), cp) != cps_.end();
  }

 private:
  bool whitespace_ = true;
  std::vector<uint32_t> cps_;
};

std::string_view py_strip(std::string_view s, const StripSet& set, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      size_t j = b;
      uint32_t cp = utf8_next(s, j);
      if (!set.contains(cp)) break;
      b = j;
    }
  }
  if (right) {
    while (e > b) {
      size_t j = utf8_prev(s, e);
      size_t k = j;
      uint32_t cp = utf8_next(s, k);
      if (k != e) {  // invalid sequence: a single byte
        j = e - 1;
        cp = kBadByte;
      }
      if (!set.contains(cp)) break;
      e = j;
    }
  }
  return s.substr(b, e - b);
}

std::string_view py_rstrip_ws(std::string_view s) {
  return py_strip(s, StripSet(nullptr), false, true);
}

char ascii_upper(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 32) : c; }
bool is_hex_digit(char c) {
  return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
}
bool is_oct_digit(char c) { return c >= '0' && c <= '7'; }
bool is_bin_digit(char c) { return c == '0' || c == '1'; }
char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }
bool ascii_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool ascii_digit(char c) { return c >= '0' && c <= '9'; }

std::string str_upper(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = ascii_upper(c);
  return r;
}

std::string str_lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = ascii_lower(c);
  return r;
}

// str.capitalize(): first character upper case, the rest lower case.
std::string str_capitalize(std::string_view s) {
  std::string r = str_lower(s);
  if (!r.empty()) r[0] = ascii_upper(r[0]);
  return r;
}

// str.title(): upper case after a non-letter, lower case after a letter.
std::string str_title(std::string_view s) {
  std::string r(s);
  bool prev_cased = false;
  for (char& c : r) {
    if (ascii_alpha(c)) {
      c = prev_cased ? ascii_lower(c) : ascii_upper(c);
      prev_cased = true;
    } else {
      // Non-ASCII bytes are letters in most scripts; keep them as "cased" so the next
      // ASCII letter is not capitalized.
      prev_cased = static_cast<unsigned char>(c) >= 0x80;
    }
  }
  return r;
}

std::string hex_escape(const char* prefix, uint32_t cp, int digits) {
  return fmt::format("{}{:0{}x}", prefix, cp, digits);
}

// repr() of a Python str.
std::string py_repr_str(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char q = (has_single && !has_double) ? '"' : '\'';
  std::string out;
  out.reserve(s.size() + 2);
  out += q;
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    uint32_t cp = utf8_next(s, i);
    if (cp == kBadByte) {
      out += hex_escape("\\x", static_cast<unsigned char>(s[start]), 2);
    } else if (cp == static_cast<uint32_t>(q) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!py_isprintable(cp)) {
      if (cp <= 0xFF) {
        out += hex_escape("\\x", cp, 2);
      } else if (cp <= 0xFFFF) {
        out += hex_escape("\\u", cp, 4);
      } else {
        out += hex_escape("\\U", cp, 8);
      }
    } else {
      out.append(s.substr(start, i - start));
    }
  }
  out += q;
  return out;
}

// repr() of a Python float (also what json.dumps writes for a finite float).
std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view sci(buf, res.ptr - buf);  // e.g. "-1.2345e+06"
  std::string out;
  if (sci[0] == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  size_t epos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, epos)) {
    if (c != '.') digits += c;
  }
  int exp10 = std::atoi(std::string(sci.substr(epos + 1)).c_str());
  int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  int nd = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-decpt), '0');
      out += digits;
    } else if (decpt >= nd) {
      out += digits;
      out.append(static_cast<size_t>(decpt - nd), '0');
      out += ".0";
    } else {
      out += digits.substr(0, decpt);
      out += '.';
      out += digits.substr(decpt);
    }
  } else {
    out += digits[0];
    if (nd > 1) {
      out += '.';
      out += digits.substr(1);
    }
    out += fmt::format("e{}{:02d}", exp10 < 0 ? '-' : '+', std::abs(exp10));
  }
  return out;
}

// A JSON string literal as Python's json.dumps writes it.
void json_escape_to(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20 || (c == 0x7F && ensure_ascii)) {
            out += hex_escape("\\u", c, 4);
          } else {
            out += static_cast<char>(c);
          }
      }
      continue;
    }
    size_t start = i;
    uint32_t cp = utf8_next(s, i);
    if (!ensure_ascii || cp == kBadByte) {
      out.append(s.substr(start, i - start));
    } else if (cp < 0x10000) {
      out += hex_escape("\\u", cp, 4);
    } else {
      uint32_t v = cp - 0x10000;
      out += hex_escape("\\u", 0xD800 + (v >> 10), 4);
      out += hex_escape("\\u", 0xDC00 + (v & 0x3FF), 4);
    }
  }
  out += '"';
}

// markupsafe.escape()
std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// ----------------------------------------------------------------------------------------
// Values
// ----------------------------------------------------------------------------------------

class Value;
class Interp;
struct CallArgs;

struct Object {
  virtual ~Object() = default;
};

struct StrObj final : Object {
  explicit StrObj(std::string v) : s(std::move(v)) {}
  std::string s;
};

struct ListObj;
struct DictObj;
struct NsObj;
struct FuncObj;

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,  // list or tuple
    kDict,
    kNamespace,
    kFunction,
  };

  Value() : i_(0) {}

  static Value undefined(std::string hint) {
    Value v;
    v.obj_ = std::make_shared<StrObj>(std::move(hint));
    return v;
  }
  static Value none() {
    Value v;
    v.kind_ = Kind::kNone;
    return v;
  }
  static Value boolean(bool b) {
    Value v;
    v.kind_ = Kind::kBool;
    v.i_ = 0;
    v.b_ = b;
    return v;
  }
  static Value integer(int64_t i) {
    Value v;
    v.kind_ = Kind::kInt;
    v.i_ = i;
    return v;
  }
  static Value number(double d) {
    Value v;
    v.kind_ = Kind::kFloat;
    v.f_ = d;
    return v;
  }
  static Value string(std::string s, bool markup = false) {
    Value v;
    v.kind_ = Kind::kString;
    v.markup_ = markup;
    v.obj_ = std::make_shared<StrObj>(std::move(s));
    return v;
  }
  static Value list(std::vector<Value> items, bool tuple = false);
  // A single-use iterator (a Python generator): always true, no len(), consumed by iteration.
  static Value iterator(std::vector<Value> items, const char* type_name);
  static Value dict(std::shared_ptr<const DictObj> d);
  static Value ns(std::shared_ptr<NsObj> n);
  static Value function(std::shared_ptr<const FuncObj> f);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  // bool, int or float (Python: a bool is an int).
  bool is_number() const {
    return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat;
  }
  bool is_integral() const { return kind_ == Kind::kBool || kind_ == Kind::kInt; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  inline bool is_iterator() const;
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_ns() const { return kind_ == Kind::kNamespace; }
  bool is_function() const { return kind_ == Kind::kFunction; }
  bool markup() const { return markup_; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double as_double() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(as_int()); }
  // The text of a string (or the hint of an undefined); "" for any other value.
  const std::string& str() const {
    static const std::string kEmpty;
    if ((kind_ != Kind::kString && kind_ != Kind::kUndefined) || !obj_) return kEmpty;
    return static_cast<const StrObj&>(*obj_).s;
  }
  // Why an undefined value is undefined ("'x' is undefined").
  std::string undefined_hint() const {
    return obj_ ? static_cast<const StrObj&>(*obj_).s : std::string("value is undefined");
  }
  inline const ListObj& list() const;
  inline const std::vector<Value>& items() const;
  inline const DictObj& dict() const;
  inline NsObj& ns() const;
  inline const FuncObj& func() const;
  const Object* identity() const { return obj_.get(); }
  inline int depth() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool markup_ = false;
  union {
    bool b_;
    int64_t i_;
    double f_;
  };
  std::shared_ptr<const Object> obj_;
};

struct ListObj final : Object {
  std::vector<Value> items;
  bool tuple = false;
  int depth = 1;
  const char* iterator = nullptr;  // set: a generator/iterator of this Python type name
  mutable size_t consumed = 0;     // iterators: items already taken
};

struct StrHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// A Python dict: insertion ordered; keys compare like Python (1 == 1.0 == True).
struct DictObj final : Object {
  std::vector<std::pair<Value, Value>> entries;
  std::unordered_map<std::string, size_t, StrHash, std::equal_to<>> str_index;
  std::unordered_map<std::string, size_t> other_index;  // canonical non-string keys
  int depth = 1;

  const Value* find(std::string_view key) const {
    auto it = str_index.find(key);
    return it == str_index.end() ? nullptr : &entries[it->second].second;
  }
  const Value* find(const Value& key) const;
  void set(Value key, Value value);
  size_t size() const { return entries.size(); }
};

// namespace(): the one mutable object a template can build.
struct NsObj final : Object {
  mutable std::vector<std::pair<std::string, Value>> attrs;
  Value* find(std::string_view name) const {
    for (auto& [k, v] : attrs) {
      if (k == name) return &v;
    }
    return nullptr;
  }
  void set(const std::string& name, Value v) const {
    if (Value* p = find(name)) {
      *p = std::move(v);
    } else {
      attrs.emplace_back(name, std::move(v));
    }
  }
};

// Anything callable: builtins, bound methods, macros, loop.cycle.
struct FuncObj : Object {
  virtual ~FuncObj() = default;
  virtual Value call(Interp& in, CallArgs& args) const = 0;
  virtual std::string repr() const = 0;
};

Value Value::function(std::shared_ptr<const FuncObj> f) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.obj_ = std::move(f);
  return v;
}

const ListObj& Value::list() const { return static_cast<const ListObj&>(*obj_); }
const std::vector<Value>& Value::items() const { return list().items; }
bool Value::is_iterator() const { return kind_ == Kind::kList && list().iterator != nullptr; }
const DictObj& Value::dict() const { return static_cast<const DictObj&>(*obj_); }
NsObj& Value::ns() const { return const_cast<NsObj&>(static_cast<const NsObj&>(*obj_)); }
const FuncObj& Value::func() const { return static_cast<const FuncObj&>(*obj_); }
int Value::depth() const {
  if (kind_ == Kind::kList) return list().depth;
  if (kind_ == Kind::kDict) return dict().depth;
  return 0;
}

Value Value::list(std::vector<Value> items, bool tuple) {
  auto l = std::make_shared<ListObj>();
  int depth = 0;
  for (const Value& it : items) depth = std::max(depth, it.depth());
  if (depth + 1 > kMaxValueDepth) failf("value nested deeper than {} levels", kMaxValueDepth);
  l->depth = depth + 1;
  l->items = std::move(items);
  l->tuple = tuple;
  Value v;
  v.kind_ = Kind::kList;
  v.obj_ = std::move(l);
  return v;
}

Value Value::iterator(std::vector<Value> items, const char* type_name) {
  Value v = list(std::move(items));
  const_cast<ListObj&>(v.list()).iterator = type_name;
  return v;
}

Value Value::dict(std::shared_ptr<const DictObj> d) {
  Value v;
  v.kind_ = Kind::kDict;
  v.obj_ = std::move(d);
  return v;
}

Value Value::ns(std::shared_ptr<NsObj> n) {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.obj_ = std::move(n);
  return v;
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kList:
      if (v.list().iterator != nullptr) return v.list().iterator;
      return v.list().tuple ? "tuple" : "list";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kNamespace: return "Namespace";
    case Value::Kind::kFunction: return "function";
  }
  return "object";
}

// The canonical form of a hashable non-string key; fails for unhashable values.
std::string canonical_key(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kBool:
    case Value::Kind::kInt: return "i" + std::to_string(v.as_int());
    case Value::Kind::kFloat: {
      double d = v.as_double();
      if (std::floor(d) == d && std::fabs(d) < 9.2e18) {
        return "i" + std::to_string(static_cast<int64_t>(d));
      }
      return "f" + py_float_repr(d);
    }
    case Value::Kind::kNone: return "n";
    case Value::Kind::kString: return "s" + std::to_string(v.str().size()) + ":" + v.str();
    case Value::Kind::kList:
      if (v.list().tuple) {
        std::string k = "t(";
        for (const Value& it : v.items()) k += canonical_key(it) + ",";
        return k + ")";
      }
      break;
    default: break;
  }
  failf("unhashable type: '{}'", type_name(v));
}

const Value* DictObj::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.str()));
  if (key.is_undefined() || key.is_list() || key.is_dict() || key.is_ns() || key.is_function()) {
    if (!(key.is_list() && key.list().tuple)) return nullptr;
  }
  auto it = other_index.find(canonical_key(key));
  return it == other_index.end() ? nullptr : &entries[it->second].second;
}

void DictObj::set(Value key, Value value) {
  depth = std::max(depth, value.depth() + 1);
  if (depth > kMaxValueDepth) failf("value nested deeper than {} levels", kMaxValueDepth);
  if (key.is_string()) {
    auto it = str_index.find(std::string_view(key.str()));
    if (it != str_index.end()) {
      entries[it->second].second = std::move(value);
      return;
    }
    str_index.emplace(key.str(), entries.size());
  } else {
    std::string ck = canonical_key(key);
    auto it = other_index.find(ck);
    if (it != other_index.end()) {
      entries[it->second].second = std::move(value);
      return;
    }
    other_index.emplace(std::move(ck), entries.size());
  }
  entries.emplace_back(std::move(key), std::move(value));
}

// Arguments of a call: positional then keyword.
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;

  const Value* find(size_t i, std::string_view name) const {
    if (i < pos.size()) return &pos[i];
    for (const auto& [k, v] : kw) {
      if (k == name) return &v;
    }
    return nullptr;
  }
  Value get(size_t i, std::string_view name, Value def = Value()) const {
    const Value* v = find(i, name);
    return v ? *v : def;
  }
  // Fails on more positional arguments than `names` or an unknown keyword.
  void check(std::string_view fn, std::initializer_list<std::string_view> names) const {
    if (pos.size() > names.size()) {
      failf("{}() takes at most {} argument(s) ({} given)", fn, names.size(), pos.size());
    }
    for (const auto& [k, v] : kw) {
      if (std::find(names.begin(), names.end(), k) == names.end()) {
        failf("{}() got an unexpected keyword argument '{}'", fn, k);
      }
    }
  }
};

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return false;
    case Value::Kind::kBool: return v.as_bool();
    case Value::Kind::kInt: return v.as_int() != 0;
    case Value::Kind::kFloat: return v.as_double() != 0.0;
    case Value::Kind::kString: return !v.str().empty();
    case Value::Kind::kList: return v.is_iterator() || !v.items().empty();
    case Value::Kind::kDict: return v.dict().size() != 0;
    case Value::Kind::kNamespace:
    case Value::Kind::kFunction: return true;
  }
  return false;
}

void check_depth(int depth) {
  if (depth > kMaxValueDepth * 2) failf("value nested deeper than {} levels", kMaxValueDepth);
}

// Python ==.
bool py_equal(const Value& a, const Value& b, int depth = 0) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.str() == b.str();
    case Value::Kind::kList: {
      if (a.is_iterator() || b.is_iterator()) return a.identity() == b.identity();
      if (a.list().tuple != b.list().tuple) return false;
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!py_equal(x[i], y[i], depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const DictObj& x = a.dict();
      const DictObj& y = b.dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* w = y.find(k);
        if (w == nullptr || !py_equal(v, *w, depth + 1)) return false;
      }
      return true;
    }
    default: return a.identity() == b.identity();
  }
}

// Collects text up to a size limit (a rendered value must not outgrow the output limit).
class Sink {
 public:
  explicit Sink(size_t limit) : limit_(limit) {}
  void put(std::string_view s) {
    if (out_.size() + s.size() > limit_) {
      fail_limit(fmt::format("a rendered value exceeds the limit of {} bytes", limit_));
    }
    out_.append(s);
  }
  void put(char c) { put(std::string_view(&c, 1)); }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
  size_t limit_;
};

// Limit for repr()/str() outside a render (error messages, dict keys).
constexpr size_t kSmallLimit = size_t{1} << 20;

void repr_to(Sink& sink, const Value& v, int depth);

// Python str().
void str_to(Sink& sink, const Value& v, int depth) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return;
    case Value::Kind::kString: sink.put(v.str()); return;
    default: repr_to(sink, v, depth);
  }
}

// Python repr().
void repr_to(Sink& sink, const Value& v, int depth) {
  check_depth(depth);
  switch (v.kind()) {
    case Value::Kind::kUndefined: sink.put("Undefined"); return;
    case Value::Kind::kNone: sink.put("None"); return;
    case Value::Kind::kBool: sink.put(v.as_bool() ? "True" : "False"); return;
    case Value::Kind::kInt: sink.put(std::to_string(v.as_int())); return;
    case Value::Kind::kFloat: sink.put(py_float_repr(v.as_double())); return;
    case Value::Kind::kString: sink.put(py_repr_str(v.str())); return;
    case Value::Kind::kList: {
      if (v.is_iterator()) {
        sink.put(fmt::format("<{} object>", v.list().iterator));
        return;
      }
      bool tuple = v.list().tuple;
      sink.put(tuple ? '(' : '[');
      const auto& items = v.items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) sink.put(", ");
        repr_to(sink, items[i], depth + 1);
      }
      if (tuple && items.size() == 1) sink.put(',');
      sink.put(tuple ? ')' : ']');
      return;
    }
    case Value::Kind::kDict: {
      sink.put('{');
      bool first = true;
      for (const auto& [k, val] : v.dict().entries) {
        if (!first) sink.put(", ");
        first = false;
        repr_to(sink, k, depth + 1);
        sink.put(": ");
        repr_to(sink, val, depth + 1);
      }
      sink.put('}');
      return;
    }
    case Value::Kind::kNamespace: {
      sink.put("<Namespace {");
      bool first = true;
      for (const auto& [k, val] : v.ns().attrs) {
        if (!first) sink.put(", ");
        first = false;
        sink.put(py_repr_str(k));
        sink.put(": ");
        repr_to(sink, val, depth + 1);
      }
      sink.put("}>");
      return;
    }
    case Value::Kind::kFunction: sink.put(v.func().repr()); return;
  }
}

std::string py_repr(const Value& v, size_t limit = kSmallLimit) {
  Sink sink(limit);
  repr_to(sink, v, 0);
  return sink.take();
}

struct JsonStyle {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // unset: single line
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};

void json_string_to(Sink& sink, std::string_view s, bool ensure_ascii) {
  std::string tmp;
  json_escape_to(tmp, s, ensure_ascii);
  sink.put(tmp);
}

// Python's json.dumps().
void json_to(Sink& sink, const Value& v, const JsonStyle& st, int depth) {
  check_depth(depth);
  auto newline = [&](int level) {
    sink.put('\n');
    for (int i = 0; i < level; ++i) sink.put(*st.indent);
  };
  switch (v.kind()) {
    case Value::Kind::kNone: sink.put("null"); return;
    case Value::Kind::kBool: sink.put(v.as_bool() ? "true" : "false"); return;
    case Value::Kind::kInt: sink.put(std::to_string(v.as_int())); return;
    case Value::Kind::kFloat: {
      double d = v.as_double();
      if (std::isnan(d)) {
        sink.put("NaN");
      } else if (std::isinf(d)) {
        sink.put(d > 0 ? "Infinity" : "-Infinity");
      } else {
        sink.put(py_float_repr(d));
      }
      return;
    }
    case Value::Kind::kString: json_string_to(sink, v.str(), st.ensure_ascii); return;
    case Value::Kind::kList: {
      if (v.is_iterator()) failf("Object of type {} is not JSON serializable", type_name(v));
      const auto& items = v.items();
      if (items.empty()) {
        sink.put("[]");
        return;
      }
      sink.put('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) sink.put(st.item_sep);
        if (st.indent) newline(depth + 1);
        json_to(sink, items[i], st, depth + 1);
      }
      if (st.indent) newline(depth);
      sink.put(']');
      return;
    }
    case Value::Kind::kDict: {
      const auto& entries = v.dict().entries;
      if (entries.empty()) {
        sink.put("{}");
        return;
      }
      std::vector<std::pair<std::string, const Value*>> kvs;
      kvs.reserve(entries.size());
      for (const auto& [k, val] : entries) {
        std::string key;
        switch (k.kind()) {
          case Value::Kind::kString: key = k.str(); break;
          case Value::Kind::kBool: key = k.as_bool() ? "true" : "false"; break;
          case Value::Kind::kNone: key = "null"; break;
          case Value::Kind::kInt: key = std::to_string(k.as_int()); break;
          case Value::Kind::kFloat: key = py_float_repr(k.as_double()); break;
          default: failf("keys must be str, int, float, bool or None, not {}", type_name(k));
        }
        kvs.emplace_back(std::move(key), &val);
      }
      if (st.sort_keys) {
        std::stable_sort(kvs.begin(), kvs.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      sink.put('{');
      for (size_t i = 0; i < kvs.size(); ++i) {
        if (i) sink.put(st.item_sep);
        if (st.indent) newline(depth + 1);
        json_string_to(sink, kvs[i].first, st.ensure_ascii);
        sink.put(st.key_sep);
        json_to(sink, *kvs[i].second, st, depth + 1);
      }
      if (st.indent) newline(depth);
      sink.put('}');
      return;
    }
    default: failf("Object of type {} is not JSON serializable", type_name(v));
  }
}

template <typename Json>
Value from_json(const Json& j, int depth) {
  if (depth > kMaxValueDepth) failf("context JSON nested deeper than {} levels", kMaxValueDepth);
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Value::integer(static_cast<int64_t>(u));
      }
      return Value::number(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float: return Value::number(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value::string(j.template get_ref<const std::string&>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      auto d = std::make_shared<DictObj>();
      d->entries.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        d->set(Value::string(it.key()), from_json(it.value(), depth + 1));
      }
      return Value::dict(std::move(d));
    }
    default: return Value::undefined("unsupported JSON value");
  }
}

// ----------------------------------------------------------------------------------------
// Source positions
// ----------------------------------------------------------------------------------------

class SourceMap {
 public:
  explicit SourceMap(std::string_view src) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src.size(); ++i) {
      if (src[i] == '\n') line_starts_.push_back(i + 1);
    }
  }
  // 1-based line and column of a byte offset.
  std::pair<int, int> locate(size_t off) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), off);
    size_t line = static_cast<size_t>(it - line_starts_.begin());
    return {static_cast<int>(line), static_cast<int>(off - line_starts_[line - 1] + 1)};
  }

 private:
  std::vector<size_t> line_starts_;
};

[[noreturn]] void fail_at(const SourceMap& map, size_t off, std::string_view msg) {
  auto [line, col] = map.locate(off);
  failf("line {}, column {}: {}", line, col, msg);
}

// ----------------------------------------------------------------------------------------
// Lexer (Jinja2's, with trim_blocks=True and lstrip_blocks=True)
// ----------------------------------------------------------------------------------------

struct Token {
  enum class Kind : uint8_t {
    kText,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEof,
  };
  Kind kind = Kind::kEof;
  std::string text;  // template data, name, decoded string literal or operator
  int64_t ival = 0;
  double fval = 0;
  size_t offset = 0;
};

// Decodes the escapes of a string literal the way Jinja does (Python's "unicode-escape").
std::string decode_string_literal(std::string_view raw, const SourceMap& map, size_t off) {
  std::string out;
  out.reserve(raw.size());
  auto hex = [&](size_t i, int n) -> uint32_t {
    if (i + n > raw.size()) fail_at(map, off, "truncated escape sequence in string literal");
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      char c = raw[i + k];
      int d = ascii_digit(c)           ? c - '0'
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                       : -1;
      if (d < 0) fail_at(map, off, "truncated escape sequence in string literal");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  };
  uint32_t pending_high = 0;  // a \uD800-\uDBFF waiting for its low surrogate
  auto put = [&](uint32_t cp) {
    if (pending_high != 0) {
      uint32_t hi = pending_high;
      pending_high = 0;
      if (cp >= 0xDC00 && cp <= 0xDFFF) {
        utf8_append(out, 0x10000 + ((hi - 0xD800) << 10) + (cp - 0xDC00));
        return;
      }
      utf8_append(out, 0xFFFD);
    }
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      pending_high = cp;
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
      utf8_append(out, 0xFFFD);
    } else {
      utf8_append(out, cp);
    }
  };
  auto flush_high = [&] {  // a high surrogate not followed by a low one
    if (pending_high != 0) utf8_append(out, 0xFFFD);
    pending_high = 0;
  };
  for (size_t i = 0; i < raw.size();) {
    char c = raw[i];
    if (c != '\\' || i + 1 >= raw.size()) {
      flush_high();
      out += c;
      ++i;
      continue;
    }
    char e = raw[i + 1];
    i += 2;
    switch (e) {
      case '\n': break;
      case '\\': put('\\'); break;
      case '\'': put('\''); break;
      case '"': put('"'); break;
      case 'a': put(7); break;
      case 'b': put(8); break;
      case 'f': put(12); break;
      case 'n': put('\n'); break;
      case 'r': put('\r'); break;
      case 't': put('\t'); break;
      case 'v': put(11); break;
      case 'x':
        put(hex(i, 2));
        i += 2;
        break;
      case 'u':
        put(hex(i, 4));
        i += 4;
        break;
      case 'U': {
        uint32_t cp = hex(i, 8);
        if (cp > 0x10FFFF) fail_at(map, off, "illegal Unicode character in string literal");
        put(cp);
        i += 8;
        break;
      }
      case 'N': fail_at(map, off, "\\N{...} escapes are not supported");
      default:
        if (e >= '0' && e <= '7') {
          uint32_t v = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i < raw.size() && raw[i] >= '0' && raw[i] <= '7'; ++k, ++i) {
            v = v * 8 + static_cast<uint32_t>(raw[i] - '0');
          }
          put(v);
        } else {
          flush_high();
          out += '\\';
          out += e;
        }
    }
  }
  flush_high();
  return out;
}

class Lexer {
 public:
  Lexer(const std::string& src, const SourceMap& map) : src_(src), map_(map) {}

  std::vector<Token> run() {
    const size_t n = src_.size();
    size_t pos = 0;
    while (pos < n) {
      size_t start = find_tag(pos);
      if (start == std::string::npos) {
        emit_text(std::string_view(src_).substr(pos), pos);
        break;
      }
      char kind = src_[start + 1];
      size_t after = start + 2;
      char sign = 0;
      if (after < n && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
      std::string_view text = std::string_view(src_).substr(pos, start - pos);
      size_t raw_end = kind == '%' ? match_raw_begin(after) : std::string::npos;
      if (sign == '-') {
        text = py_rstrip_ws(text);
      } else if (sign != '+' && kind != '{') {
        text = lstrip_block(text, line_starting_);
      }
      emit_text(text, pos);
      line_starting_ = false;
      if (raw_end != std::string::npos) {
        line_starting_ = src_[raw_end - 1] == '\n';
        pos = lex_raw(raw_end, start);
      } else if (kind == '#') {
        pos = lex_comment(after, start);
      } else {
        push(kind == '%' ? Token::Kind::kBlockBegin : Token::Kind::kVarBegin, start);
        pos = lex_tag(after, kind == '%', start);
      }
    }
    push(Token::Kind::kEof, n);
    return std::move(toks_);
  }

 private:
  [[noreturn]] void error(size_t off, std::string_view msg) { fail_at(map_, off, msg); }

  bool starts(size_t p, std::string_view s) const {
    return p <= src_.size() && std::string_view(src_).substr(p, s.size()) == s;
  }

  size_t skip_ws(size_t p) const {
    while (p < src_.size()) {
      size_t q = p;
      if (!py_isspace(utf8_next(src_, q))) break;
      p = q;
    }
    return p;
  }

  size_t find_tag(size_t pos) const {
    for (size_t p = src_.find('{', pos); p != std::string::npos; p = src_.find('{', p + 1)) {
      if (p + 1 < src_.size()) {
        char c = src_[p + 1];
        if (c == '%' || c == '{' || c == '#') return p;
      }
    }
    return std::string::npos;
  }

  // lstrip_blocks: drop the spaces between the start of the line and a block/comment tag.
  static std::string_view lstrip_block(std::string_view text, bool line_starting) {
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting) return text;
    std::string_view rest = text.substr(l_pos);
    if (rest.empty() || !py_strip(rest, StripSet(nullptr), true, false).empty()) return text;
    return text.substr(0, l_pos);
  }

  void push(Token::Kind kind, size_t off) {
    Token t;
    t.kind = kind;
    t.offset = off;
    toks_.push_back(std::move(t));
  }

  void emit_text(std::string_view text, size_t off) {
    if (text.empty()) return;
    Token t;
    t.kind = Token::Kind::kText;
    t.text = std::string(text);
    t.offset = off;
    toks_.push_back(std::move(t));
  }

  // `{%[-+]? raw %}`: returns the end of the tag, or npos.
  size_t match_raw_begin(size_t p) const {
    size_t q = skip_ws(p);
    if (!starts(q, "raw")) return std::string::npos;
    q = skip_ws(q + 3);
    if (starts(q, "-%}")) return skip_ws(q + 3);
    if (starts(q, "%}")) return q + 2;
    return std::string::npos;
  }

  size_t lex_raw(size_t p, size_t tag_start) {
    for (size_t q = src_.find("{%", p); q != std::string::npos; q = src_.find("{%", q + 1)) {
      size_t r = q + 2;
      char sign = 0;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) sign = src_[r++];
      r = skip_ws(r);
      if (!starts(r, "endraw")) continue;
      r = skip_ws(r + 6);
      size_t end;
      if (starts(r, "+%}")) {
        end = r + 3;
      } else if (starts(r, "-%}")) {
        end = skip_ws(r + 3);
      } else if (starts(r, "%}")) {
        end = r + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      } else {
        continue;
      }
      std::string_view data = std::string_view(src_).substr(p, q - p);
      if (sign == '-') {
        data = py_rstrip_ws(data);
      } else if (sign != '+') {
        data = lstrip_block(data, line_starting_);
      }
      emit_text(data, p);
      line_starting_ = src_[end - 1] == '\n';
      return end;
    }
    error(tag_start, "Missing end of raw directive");
  }

  size_t lex_comment(size_t p, size_t tag_start) {
    size_t e = src_.find("#}", p);
    if (e == std::string::npos) error(tag_start, "Missing end of comment tag");
    size_t end;
    if (e > p && src_[e - 1] == '-') {
      end = skip_ws(e + 2);
    } else if (e > p && src_[e - 1] == '+') {
      end = e + 2;
    } else {
      end = e + 2;
      if (end < src_.size() && src_[end] == '\n') ++end;
    }
    line_starting_ = src_[end - 1] == '\n';
    return end;
  }

  size_t lex_tag(size_t p, bool block, size_t tag_start) {
    std::vector<char> stack;  // closing brackets expected
    const size_t n = src_.size();
    while (true) {
      p = skip_ws(p);
      if (p >= n) {
        error(tag_start, block ? "unexpected end of template, expected '%}'"
                               : "unexpected end of template, expected '}}'");
      }
      if (stack.empty()) {
        size_t end = std::string::npos;
        if (block) {
          if (starts(p, "+%}")) {
            end = p + 3;
          } else if (starts(p, "-%}")) {
            end = skip_ws(p + 3);
          } else if (starts(p, "%}")) {
            end = p + 2;
            if (end < n && src_[end] == '\n') ++end;
          }
        } else {
          if (starts(p, "-}}")) {
            end = skip_ws(p + 3);
          } else if (starts(p, "}}")) {
            end = p + 2;
          }
        }
        if (end != std::string::npos) {
          push(block ? Token::Kind::kBlockEnd : Token::Kind::kVarEnd, p);
          line_starting_ = src_[end - 1] == '\n';
          return end;
        }
      }
      char c = src_[p];
      if (ascii_digit(c)) {
        p = lex_number(p);
      } else if (ascii_alpha(c) || c == '_' || is_name_cp(p)) {
        size_t q = p;
        while (q < n &&
               (ascii_alpha(src_[q]) || ascii_digit(src_[q]) || src_[q] == '_' || is_name_cp(q))) {
          q += static_cast<unsigned char>(src_[q]) < 0x80 ? 1 : utf8_len_at(q);
        }
        Token t;
        t.kind = Token::Kind::kName;
        t.text = src_.substr(p, q - p);
        t.offset = p;
        toks_.push_back(std::move(t));
        p = q;
      } else if (c == '\'' || c == '"') {
        size_t q = p + 1;
        while (q < n && src_[q] != c) q += (src_[q] == '\\') ? 2 : 1;
        if (q >= n) error(p, "unexpected end of string literal");
        Token t;
        t.kind = Token::Kind::kString;
        t.text = decode_string_literal(std::string_view(src_).substr(p + 1, q - p - 1), map_, p);
        t.offset = p;
        toks_.push_back(std::move(t));
        p = q + 1;
      } else {
        static constexpr std::string_view kOps[] = {
            "//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
            "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";"};
        std::string_view op;
        for (std::string_view o : kOps) {
          if (starts(p, o)) {
            op = o;
            break;
          }
        }
        if (op.empty()) error(p, fmt::format("unexpected char '{}'", c));
        if (op == "(" || op == "[" || op == "{") {
          stack.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        } else if (op == ")" || op == "]" || op == "}") {
          if (stack.empty()) error(p, fmt::format("unexpected '{}'", op));
          if (stack.back() != op[0]) {
            error(p, fmt::format("unexpected '{}', expected '{}'", op, stack.back()));
          }
          stack.pop_back();
        }
        Token t;
        t.kind = Token::Kind::kOp;
        t.text = std::string(op);
        t.offset = p;
        toks_.push_back(std::move(t));
        p += op.size();
      }
    }
  }

  // A non-ASCII code point that can be part of an identifier (approximates Python's
  // XID_Start/XID_Continue: letters and marks, not punctuation, symbols or spaces).
  bool is_name_cp(size_t p) const {
    if (static_cast<unsigned char>(src_[p]) < 0x80) return false;
    size_t q = p;
    uint32_t cp = utf8_next(src_, q);
    if (cp == kBadByte || cp < 0xAA || py_isspace(cp)) return false;
    if (cp == 0xD7 || cp == 0xF7 || (cp >= 0xAB && cp <= 0xB4 && cp != 0xB5) ||
        (cp >= 0xB6 && cp <= 0xBF)) {
      return cp == 0xBA;
    }
    if ((cp >= 0x2000 && cp <= 0x206F) || (cp >= 0x2190 && cp <= 0x2BFF) ||
        (cp >= 0x3000 && cp <= 0x303F) || (cp >= 0xFE30 && cp <= 0xFE4F) ||
        (cp >= 0xFF00 && cp <= 0xFF0F) || (cp >= 0xFF1A && cp <= 0xFF20) ||
        (cp >= 0xFF3B && cp <= 0xFF40) || (cp >= 0xFF5B && cp <= 0xFF65) ||
        (cp >= 0x1F000 && cp <= 0x1FAFF)) {
      return false;
    }
    return true;
  }
  size_t utf8_len_at(size_t p) const {
    size_t q = p;
    utf8_next(src_, q);
    return q - p;
  }

  // Digits with single underscores between them ("1_000").
  size_t scan_digits(size_t p, bool (*is_digit)(char)) const {
    size_t q = p;
    if (q >= src_.size() || !is_digit(src_[q])) return p;
    while (q < src_.size()) {
      if (is_digit(src_[q])) {
        ++q;
      } else if (src_[q] == '_' && q + 1 < src_.size() && is_digit(src_[q + 1])) {
        q += 2;
      } else {
        break;
      }
    }
    return q;
  }

  size_t lex_number(size_t p) {
    auto dec = [](char c) { return ascii_digit(c); };
    Token t;
    t.offset = p;
    size_t q = scan_digits(p, dec);
    bool is_float = false;
    size_t end = q;
    if (p == 0 || src_[p - 1] != '.') {
      size_t f = q;
      bool frac = false;
      if (f < src_.size() && src_[f] == '.' && f + 1 < src_.size() && ascii_digit(src_[f + 1])) {
        f = scan_digits(f + 1, dec);
        frac = true;
      }
      size_t e = f;
      if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
        size_t x = e + 1;
        if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
        size_t y = scan_digits(x, dec);
        if (y != x) {
          e = y;
          frac = true;
        }
      }
      if (frac) {
        is_float = true;
        end = e;
      }
    }
    std::string digits;
    for (size_t i = p; i < end; ++i) {
      if (src_[i] != '_') digits += src_[i];
    }
    if (is_float) {
      t.kind = Token::Kind::kFloat;
      auto r = std::from_chars(digits.data(), digits.data() + digits.size(), t.fval);
      if (r.ec == std::errc::result_out_of_range) t.fval = HUGE_VAL;
      toks_.push_back(std::move(t));
      return end;
    }
    int base = 10;
    if (digits == "0" && end < src_.size()) {
      char b = ascii_lower(src_[end]);
      base = b == 'x' ? 16 : b == 'o' ? 8 : b == 'b' ? 2 : 10;
      if (base != 10) {
        size_t d = end + 1;
        if (d < src_.size() && src_[d] == '_') ++d;
        bool (*is_base)(char) = is_bin_digit;
        if (base == 16) is_base = is_hex_digit;
        if (base == 8) is_base = is_oct_digit;
        size_t e = scan_digits(d, is_base);
        if (e == d) {
          base = 10;
        } else {
          digits.clear();
          for (size_t i = d; i < e; ++i) {
            if (src_[i] != '_') digits += src_[i];
          }
          end = e;
        }
      }
    }
    t.kind = Token::Kind::kInt;
    auto r = std::from_chars(digits.data(), digits.data() + digits.size(), t.ival, base);
    if (r.ec != std::errc()) error(p, "integer literal too large");
    toks_.push_back(std::move(t));
    return end;
  }

  const std::string& src_;
  const SourceMap& map_;
  std::vector<Token> toks_;
  bool line_starting_ = true;
};

// ----------------------------------------------------------------------------------------
// AST
// ----------------------------------------------------------------------------------------

constexpr int kMaxExprHeight = 200;  // nodes on the longest path of one expression
constexpr int kMaxParseDepth = 200;  // nested statements + nested sub-expressions

struct Expr {
  explicit Expr(size_t off) : offset(off) {}
  virtual ~Expr() = default;
  inline Value eval(Interp& in) const;
  virtual Value do_eval(Interp& in) const = 0;
  size_t offset;
  int height = 1;
};
using ExprPtr = std::unique_ptr<Expr>;

int height_of(const ExprPtr& e) { return e ? e->height : 0; }

struct Stmt {
  explicit Stmt(size_t off) : offset(off) {}
  virtual ~Stmt() = default;
  inline void exec(Interp& in) const;
  virtual void do_exec(Interp& in) const = 0;
  size_t offset;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

using FilterFn = Value (*)(Interp& in, const Value& v, CallArgs& args);
using TestFn = bool (*)(Interp& in, const Value& v, CallArgs& args);
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);

struct ArgExprs {
  std::vector<ExprPtr> pos;
  std::vector<std::pair<std::string, ExprPtr>> kw;
  int height() const {
    int h = 0;
    for (const auto& e : pos) h = std::max(h, height_of(e));
    for (const auto& [k, e] : kw) h = std::max(h, height_of(e));
    return h;
  }
};

struct FilterCall {
  std::string name;
  FilterFn fn = nullptr;
  ArgExprs args;
  size_t offset = 0;
};

struct ConstExpr final : Expr {
  ConstExpr(size_t off, Value v) : Expr(off), value(std::move(v)) {}
  Value do_eval(Interp&) const override { return value; }
  Value value;
};

struct NameExpr final : Expr {
  NameExpr(size_t off, std::string n) : Expr(off), name(std::move(n)) {}
  Value do_eval(Interp& in) const override;
  std::string name;
};

struct ListExpr final : Expr {
  ListExpr(size_t off, std::vector<ExprPtr> it, bool tup) : Expr(off), items(std::move(it)) {
    tuple = tup;
    for (const auto& e : items) height = std::max(height, height_of(e) + 1);
  }
  Value do_eval(Interp& in) const override;
  std::vector<ExprPtr> items;
  bool tuple = false;
};

struct DictExpr final : Expr {
  DictExpr(size_t off, std::vector<std::pair<ExprPtr, ExprPtr>> it)
      : Expr(off), items(std::move(it)) {
    for (const auto& [k, v] : items) {
      height = std::max({height, height_of(k) + 1, height_of(v) + 1});
    }
  }
  Value do_eval(Interp& in) const override;
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

struct UnaryExpr final : Expr {
  UnaryExpr(size_t off, char o, ExprPtr e) : Expr(off), op(o), operand(std::move(e)) {
    height = height_of(operand) + 1;
  }
  Value do_eval(Interp& in) const override;
  char op;  // '-', '+' or '!' (not)
  ExprPtr operand;
};

enum class BinOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };

struct BinaryExpr final : Expr {
  BinaryExpr(size_t off, BinOp o, ExprPtr l, ExprPtr r)
      : Expr(off), op(o), lhs(std::move(l)), rhs(std::move(r)) {
    height = std::max(height_of(lhs), height_of(rhs)) + 1;
  }
  Value do_eval(Interp& in) const override;
  BinOp op;
  ExprPtr lhs, rhs;
};

struct ConcatExpr final : Expr {
  ConcatExpr(size_t off, std::vector<ExprPtr> p) : Expr(off), parts(std::move(p)) {
    for (const auto& e : parts) height = std::max(height, height_of(e) + 1);
  }
  Value do_eval(Interp& in) const override;
  std::vector<ExprPtr> parts;
};

struct LogicExpr final : Expr {
  LogicExpr(size_t off, bool a, ExprPtr l, ExprPtr r)
      : Expr(off), is_and(a), lhs(std::move(l)), rhs(std::move(r)) {
    height = std::max(height_of(lhs), height_of(rhs)) + 1;
  }
  Value do_eval(Interp& in) const override;
  bool is_and;
  ExprPtr lhs, rhs;
};

enum class CmpOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct CompareExpr final : Expr {
  CompareExpr(size_t off, ExprPtr f, std::vector<std::pair<CmpOp, ExprPtr>> r)
      : Expr(off), first(std::move(f)), rest(std::move(r)) {
    height = height_of(first) + 1;
    for (const auto& [op, e] : rest) height = std::max(height, height_of(e) + 1);
  }
  Value do_eval(Interp& in) const override;
  ExprPtr first;
  std::vector<std::pair<CmpOp, ExprPtr>> rest;
};

struct CondExpr final : Expr {
  CondExpr(size_t off, ExprPtr c, ExprPtr t, ExprPtr e)
      : Expr(off), cond(std::move(c)), then(std::move(t)), otherwise(std::move(e)) {
    height = std::max({height_of(cond), height_of(then), height_of(otherwise)}) + 1;
  }
  Value do_eval(Interp& in) const override;
  ExprPtr cond, then, otherwise;  // otherwise may be null
};

struct GetAttrExpr final : Expr {
  GetAttrExpr(size_t off, ExprPtr o, std::string n)
      : Expr(off), obj(std::move(o)), name(std::move(n)) {
    height = height_of(obj) + 1;
  }
  Value do_eval(Interp& in) const override;
  ExprPtr obj;
  std::string name;
};

struct GetItemExpr final : Expr {
  GetItemExpr(size_t off, ExprPtr o, ExprPtr k) : Expr(off), obj(std::move(o)), key(std::move(k)) {
    height = std::max(height_of(obj), height_of(key)) + 1;
  }
  Value do_eval(Interp& in) const override;
  ExprPtr obj, key;
};

struct SliceExpr final : Expr {
  SliceExpr(size_t off, ExprPtr o, ExprPtr a, ExprPtr b, ExprPtr c)
      : Expr(off), obj(std::move(o)), start(std::move(a)), stop(std::move(b)), step(std::move(c)) {
    height = std::max({height_of(obj), height_of(start), height_of(stop), height_of(step)}) + 1;
  }
  Value do_eval(Interp& in) const override;
  ExprPtr obj, start, stop, step;  // start/stop/step may be null
};

struct CallExpr final : Expr {
  CallExpr(size_t off, ExprPtr c, ArgExprs a)
      : Expr(off), callee(std::move(c)), args(std::move(a)) {
    height = std::max(height_of(callee), args.height()) + 1;
  }
  Value do_eval(Interp& in) const override;
  ExprPtr callee;
  ArgExprs args;
};

struct FilterExpr final : Expr {
  FilterExpr(size_t off, ExprPtr i, FilterCall c)
      : Expr(off), input(std::move(i)), call(std::move(c)) {
    height = std::max(height_of(input), call.args.height()) + 1;
  }
  Value do_eval(Interp& in) const override;
  ExprPtr input;
  FilterCall call;
};

struct TestExpr final : Expr {
  TestExpr(size_t off, ExprPtr i, std::string n, TestFn f, ArgExprs a, bool neg)
      : Expr(off),
        input(std::move(i)),
        name(std::move(n)),
        fn(f),
        args(std::move(a)),
        negated(neg) {
    height = std::max(height_of(input), args.height()) + 1;
  }
  Value do_eval(Interp& in) const override;
  ExprPtr input;
  std::string name;
  TestFn fn;
  ArgExprs args;
  bool negated;
};

// Statements.

struct TextStmt final : Stmt {
  TextStmt(size_t off, std::string t) : Stmt(off), text(std::move(t)) {}
  void do_exec(Interp& in) const override;
  std::string text;
};

struct OutputStmt final : Stmt {
  OutputStmt(size_t off, ExprPtr e) : Stmt(off), expr(std::move(e)) {}
  void do_exec(Interp& in) const override;
  ExprPtr expr;
};

struct IfStmt final : Stmt {
  explicit IfStmt(size_t off) : Stmt(off) {}
  void do_exec(Interp& in) const override;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body else_body;
};

// Assignment target: one name, several names (tuple unpacking) or namespace.attr.
struct Target {
  std::vector<std::string> names;
  bool unpack = false;
  std::string ns_attr;  // set: names[0] is a namespace, assign its attribute
};

struct ForStmt final : Stmt {
  explicit ForStmt(size_t off) : Stmt(off) {}
  void do_exec(Interp& in) const override;
  Target target;
  ExprPtr iter;
  ExprPtr cond;  // may be null
  Body body;
  Body else_body;
  bool uses_loop = false;  // the body mentions `loop` (else no loop object is built)
};

struct SetStmt final : Stmt {
  explicit SetStmt(size_t off) : Stmt(off) {}
  void do_exec(Interp& in) const override;
  Target target;
  ExprPtr value;
};

struct SetBlockStmt final : Stmt {
  explicit SetBlockStmt(size_t off) : Stmt(off) {}
  void do_exec(Interp& in) const override;
  Target target;
  std::vector<FilterCall> filters;
  Body body;
};

struct MacroStmt final : Stmt {
  explicit MacroStmt(size_t off) : Stmt(off) {}
  void do_exec(Interp& in) const override;
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default may be null
  Body body;
  bool uses_varargs = false;
  bool uses_kwargs = false;
};

struct FilterBlockStmt final : Stmt {
  explicit FilterBlockStmt(size_t off) : Stmt(off) {}
  void do_exec(Interp& in) const override;
  std::vector<FilterCall> filters;
  Body body;
};

struct WithStmt final : Stmt {
  explicit WithStmt(size_t off) : Stmt(off) {}
  void do_exec(Interp& in) const override;
  std::vector<std::pair<Target, ExprPtr>> assigns;
  Body body;
};

struct LoopControlStmt final : Stmt {
  LoopControlStmt(size_t off, bool b) : Stmt(off), is_break(b) {}
  void do_exec(Interp& in) const override;
  bool is_break;
};

// {% generation %}...{% endgeneration %} (transformers' AssistantTracker): renders its body.
struct BlockStmt final : Stmt {
  explicit BlockStmt(size_t off) : Stmt(off) {}
  void do_exec(Interp& in) const override;
  Body body;
};

}  // namespace

// The parsed template (outside the anonymous namespace: the header names it).
struct Program {
  explicit Program(std::string src) : source(std::move(src)), map(source) {}
  std::string source;  // newline-normalized
  SourceMap map;
  Body body;
};

namespace {

// ----------------------------------------------------------------------------------------
// Parser (Jinja2's grammar)
// ----------------------------------------------------------------------------------------

class Parser {
 public:
  Parser(std::vector<Token> toks, const SourceMap& map) : toks_(std::move(toks)), map_(map) {}

  Body parse_template() {
    Body body = parse_body({});
    if (cur().kind != Token::Kind::kEof) error(cur(), "unexpected " + describe(cur()));
    if (!unknown_.empty()) fail_at(map_, unknown_.front().first, unknown_.front().second);
    return body;
  }

 private:
  class DepthGuard {
   public:
    explicit DepthGuard(Parser* p) : p_(p) {
      if (++p_->depth_ > kMaxParseDepth) {
        p_->error(p_->cur(), fmt::format("template nested deeper than {} levels", kMaxParseDepth));
      }
    }
    ~DepthGuard() { --p_->depth_; }

   private:
    Parser* p_;
  };

  const Token& cur() const { return toks_[i_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  bool at(Token::Kind k) const { return cur().kind == k; }
  bool at_op(std::string_view op) const { return at(Token::Kind::kOp) && cur().text == op; }
  bool at_name(std::string_view n) const { return at(Token::Kind::kName) && cur().text == n; }
  static bool is_op(const Token& t, std::string_view op) {
    return t.kind == Token::Kind::kOp && t.text == op;
  }

  [[noreturn]] void error(const Token& t, std::string_view msg) const {
    fail_at(map_, t.offset, msg);
  }

  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Token::Kind::kText: return "template data";
      case Token::Kind::kVarBegin: return "'{{'";
      case Token::Kind::kVarEnd: return "end of print statement";
      case Token::Kind::kBlockBegin: return "'{%'";
      case Token::Kind::kBlockEnd: return "end of statement block";
      case Token::Kind::kName: return "'" + t.text + "'";
      case Token::Kind::kString: return "string literal";
      case Token::Kind::kInt:
      case Token::Kind::kFloat: return "number";
      case Token::Kind::kOp: return "'" + t.text + "'";
      case Token::Kind::kEof: return "end of template";
    }
    return "token";
  }

  void expect_op(std::string_view op) {
    if (!at_op(op)) error(cur(), fmt::format("expected '{}', got {}", op, describe(cur())));
    advance();
  }
  void expect_block_end() {
    if (!at(Token::Kind::kBlockEnd)) {
      error(cur(), "expected end of statement block, got " + describe(cur()));
    }
    advance();
  }
  std::string expect_name() {
    if (!at(Token::Kind::kName)) error(cur(), "expected a name, got " + describe(cur()));
    std::string n = cur().text;
    advance();
    return n;
  }
  void expect_name(std::string_view n) {
    if (!at_name(n)) error(cur(), fmt::format("expected '{}', got {}", n, describe(cur())));
    advance();
  }

  ExprPtr checked(ExprPtr e) {
    if (e->height > kMaxExprHeight) {
      fail_at(map_, e->offset,
              fmt::format("expression nested deeper than {} levels", kMaxExprHeight));
    }
    return e;
  }

  // Statements until `{% <one of end_names>`; leaves cur() at that name.
  Body parse_body(std::initializer_list<std::string_view> end_names) {
    Body body;
    while (true) {
      const Token& t = cur();
      switch (t.kind) {
        case Token::Kind::kText:
          body.push_back(std::make_unique<TextStmt>(t.offset, t.text));
          advance();
          break;
        case Token::Kind::kVarBegin: {
          size_t off = t.offset;
          advance();
          ExprPtr e = parse_tuple(true, false, {});
          if (!at(Token::Kind::kVarEnd)) {
            error(cur(), "expected end of print statement, got " + describe(cur()));
          }
          advance();
          body.push_back(std::make_unique<OutputStmt>(off, std::move(e)));
          break;
        }
        case Token::Kind::kBlockBegin: {
          advance();
          if (at(Token::Kind::kName) &&
              std::find(end_names.begin(), end_names.end(), cur().text) != end_names.end()) {
            return body;
          }
          body.push_back(parse_statement());
          break;
        }
        case Token::Kind::kEof: {
          if (end_names.size() == 0) return body;
          std::string want;
          for (std::string_view n : end_names) {
            want += want.empty() ? "" : " or ";
            want += "'" + std::string(n) + "'";
          }
          error(t, "unexpected end of template; looking for " + want);
        }
        default: error(t, "unexpected " + describe(t));
      }
    }
  }

  StmtPtr parse_statement() {
    DepthGuard guard(this);
    const Token& t = cur();
    if (!at(Token::Kind::kName)) error(t, "tag name expected");
    const std::string& n = t.text;
    if (n == "if") return parse_if();
    if (n == "for") return parse_for();
    if (n == "set") return parse_set();
    if (n == "macro") return parse_macro();
    if (n == "filter") return parse_filter_block();
    if (n == "with") return parse_with();
    if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) error(t, fmt::format("'{}' outside of a loop", n));
      auto s = std::make_unique<LoopControlStmt>(t.offset, n == "break");
      advance();
      expect_block_end();
      return s;
    }
    if (n == "generation") {
      auto s = std::make_unique<BlockStmt>(t.offset);
      advance();
      expect_block_end();
      s->body = parse_body({"endgeneration"});
      advance();
      expect_block_end();
      return s;
    }
    static constexpr std::string_view kUnsupported[] = {"call",    "include",    "import", "from",
                                                        "extends", "block",      "do",     "print",
                                                        "trans",   "autoescape", "raw"};
    for (std::string_view u : kUnsupported) {
      if (n == u) error(t, fmt::format("the '{}' tag is not supported", n));
    }
    error(t, fmt::format("unknown tag '{}'", n));
  }

  // Jinja 3.1 reports an unknown filter or test inside an if statement or a conditional
  // expression only when it runs ("soft" frames); elsewhere it is a parse error.
  class SoftScope {
   public:
    SoftScope(Parser* p, bool soft) : p_(p), saved_(p->soft_) { p_->soft_ = soft; }
    ~SoftScope() { p_->soft_ = saved_; }

   private:
    Parser* p_;
    bool saved_;
  };

  void unknown_name(const Token& t, std::string msg) {
    if (!soft_) unknown_.emplace_back(t.offset, std::move(msg));
  }

  StmtPtr parse_if() {
    SoftScope soft(this, true);
    auto s = std::make_unique<IfStmt>(cur().offset);
    advance();
    while (true) {
      ExprPtr cond = parse_tuple(false, false, {});
      expect_block_end();
      Body body = parse_body({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (at_name("elif")) {
        advance();
        continue;
      }
      if (at_name("else")) {
        advance();
        expect_block_end();
        s->else_body = parse_body({"endif"});
      }
      advance();  // endif
      expect_block_end();
      return s;
    }
  }

  // Names separated by commas, optionally in parentheses; stops before `stop`.
  Target parse_target(std::string_view stop) {
    Target tg;
    bool parens = at_op("(");
    if (parens) advance();
    while (true) {
      if (!at(Token::Kind::kName)) error(cur(), "expected a name, got " + describe(cur()));
      tg.names.push_back(cur().text);
      advance();
      if (!at_op(",")) break;
      tg.unpack = true;
      advance();
      if ((parens && at_op(")")) || (!parens && (at_name(stop) || at_op("=")))) break;
    }
    if (parens) {
      expect_op(")");
      tg.unpack = true;
    }
    for (const std::string& name : tg.names) {
      if (name == "true" || name == "false" || name == "none" || name == "True" ||
          name == "False" || name == "None") {
        error(cur(), fmt::format("cannot assign to '{}'", name));
      }
    }
    return tg;
  }

  StmtPtr parse_for() {
    auto s = std::make_unique<ForStmt>(cur().offset);
    advance();
    s->target = parse_target("in");
    expect_name("in");
    s->iter = parse_tuple(false, false, {"recursive"});
    if (at_name("if")) {
      advance();
      s->cond = parse_expression(true);
    }
    if (at_name("recursive")) error(cur(), "recursive loops are not supported");
    expect_block_end();
    SoftScope hard(this, false);
    ++loop_depth_;
    for_stack_.push_back(s.get());
    s->body = parse_body({"endfor", "else"});
    for_stack_.pop_back();
    --loop_depth_;
    if (at_name("else")) {
      advance();
      expect_block_end();
      s->else_body = parse_body({"endfor"});
    }
    advance();  // endfor
    expect_block_end();
    return s;
  }

  StmtPtr parse_set() {
    size_t off = cur().offset;
    advance();
    Target tg;
    if (at(Token::Kind::kName) && is_op(peek(), ".") && peek(2).kind == Token::Kind::kName) {
      tg.names.push_back(cur().text);
      tg.ns_attr = peek(2).text;
      advance();
      advance();
      advance();
    } else {
      tg = parse_target("=");
    }
    if (at_op("=")) {
      advance();
      auto s = std::make_unique<SetStmt>(off);
      s->target = std::move(tg);
      s->value = parse_tuple(true, false, {});
      expect_block_end();
      return s;
    }
    if (tg.unpack) error(cur(), "expected '='");
    auto s = std::make_unique<SetBlockStmt>(off);
    s->target = std::move(tg);
    if (at_op("|")) {
      advance();
      s->filters = parse_filter_calls();
    }
    expect_block_end();
    SoftScope hard(this, false);
    s->body = parse_body({"endset"});
    advance();
    expect_block_end();
    return s;
  }

  StmtPtr parse_macro() {
    SoftScope hard(this, false);
    auto s = std::make_unique<MacroStmt>(cur().offset);
    advance();
    s->name = expect_name();
    expect_op("(");
    bool seen_default = false;
    while (!at_op(")")) {
      if (!s->params.empty()) {
        expect_op(",");
        if (at_op(")")) break;
      }
      const Token& pt = cur();
      std::string pname = expect_name();
      ExprPtr def;
      if (at_op("=")) {
        advance();
        def = parse_expression(true);
        seen_default = true;
      } else if (seen_default) {
        error(pt, "non-default argument follows default argument");
      }
      s->params.emplace_back(std::move(pname), std::move(def));
    }
    expect_op(")");
    expect_block_end();
    macro_stack_.push_back(s.get());
    int saved_loops = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endmacro"});
    loop_depth_ = saved_loops;
    macro_stack_.pop_back();
    advance();
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = std::make_unique<FilterBlockStmt>(cur().offset);
    advance();
    s->filters = parse_filter_calls();
    expect_block_end();
    SoftScope hard(this, false);
    s->body = parse_body({"endfilter"});
    advance();
    expect_block_end();
    return s;
  }

  StmtPtr parse_with() {
    auto s = std::make_unique<WithStmt>(cur().offset);
    advance();
    while (!at(Token::Kind::kBlockEnd)) {
      if (!s->assigns.empty()) expect_op(",");
      Target tg = parse_target("=");
      expect_op("=");
      ExprPtr e = parse_expression(true);
      s->assigns.emplace_back(std::move(tg), std::move(e));
    }
    expect_block_end();
    SoftScope hard(this, false);
    s->body = parse_body({"endwith"});
    advance();
    expect_block_end();
    return s;
  }

  // ---- expressions ----

  bool is_tuple_end(std::initializer_list<std::string_view> extra_end) const {
    if (at(Token::Kind::kVarEnd) || at(Token::Kind::kBlockEnd) || at_op(")")) return true;
    for (std::string_view n : extra_end) {
      if (at_name(n)) return true;
    }
    return false;
  }

  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parens,
                      std::initializer_list<std::string_view> extra_end) {
    size_t off = cur().offset;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      args.push_back(parse_expression(with_condexpr));
      if (at_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) error(cur(), "expected an expression, got " + describe(cur()));
    }
    return checked(std::make_unique<ListExpr>(off, std::move(args), true));
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    size_t mark = unknown_.size();
    ExprPtr e = parse_or();
    while (at_name("if")) {
      unknown_.resize(std::min(unknown_.size(), mark));  // the first operand is soft too
      SoftScope soft(this, true);
      size_t off = cur().offset;
      advance();
      ExprPtr cond = parse_or();
      ExprPtr other;
      if (at_name("else")) {
        advance();
        DepthGuard guard(this);
        other = parse_condexpr();
      }
      e = checked(std::make_unique<CondExpr>(off, std::move(cond), std::move(e), std::move(other)));
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (at_name("or")) {
      size_t off = cur().offset;
      advance();
      ExprPtr r = parse_and();
      l = checked(std::make_unique<LogicExpr>(off, false, std::move(l), std::move(r)));
    }
    return l;
  }

  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (at_name("and")) {
      size_t off = cur().offset;
      advance();
      ExprPtr r = parse_not();
      l = checked(std::make_unique<LogicExpr>(off, true, std::move(l), std::move(r)));
    }
    return l;
  }

  ExprPtr parse_not() {
    if (at_name("not")) {
      DepthGuard guard(this);
      size_t off = cur().offset;
      advance();
      return checked(std::make_unique<UnaryExpr>(off, '!', parse_not()));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    size_t off = cur().offset;
    ExprPtr first = parse_math1();
    std::vector<std::pair<CmpOp, ExprPtr>> ops;
    while (true) {
      CmpOp op;
      if (at_op("==")) {
        op = CmpOp::kEq;
      } else if (at_op("!=")) {
        op = CmpOp::kNe;
      } else if (at_op("<")) {
        op = CmpOp::kLt;
      } else if (at_op("<=")) {
        op = CmpOp::kLe;
      } else if (at_op(">")) {
        op = CmpOp::kGt;
      } else if (at_op(">=")) {
        op = CmpOp::kGe;
      } else if (at_name("in")) {
        op = CmpOp::kIn;
      } else if (at_name("not") && peek().kind == Token::Kind::kName && peek().text == "in") {
        op = CmpOp::kNotIn;
        advance();
      } else {
        break;
      }
      advance();
      ops.emplace_back(op, parse_math1());
    }
    if (ops.empty()) return first;
    return checked(std::make_unique<CompareExpr>(off, std::move(first), std::move(ops)));
  }

  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (at_op("+") || at_op("-")) {
      size_t off = cur().offset;
      BinOp op = at_op("+") ? BinOp::kAdd : BinOp::kSub;
      advance();
      ExprPtr r = parse_concat();
      l = checked(std::make_unique<BinaryExpr>(off, op, std::move(l), std::move(r)));
    }
    return l;
  }

  ExprPtr parse_concat() {
    size_t off = cur().offset;
    ExprPtr first = parse_math2();
    if (!at_op("~")) return first;
    std::vector<ExprPtr> parts;
    parts.push_back(std::move(first));
    while (at_op("~")) {
      advance();
      parts.push_back(parse_math2());
    }
    if (parts.size() > static_cast<size_t>(kMaxExprHeight)) error(cur(), "expression too long");
    return checked(std::make_unique<ConcatExpr>(off, std::move(parts)));
  }

  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      size_t off = cur().offset;
      BinOp op = at_op("*")    ? BinOp::kMul
                 : at_op("/")  ? BinOp::kDiv
                 : at_op("//") ? BinOp::kFloorDiv
                               : BinOp::kMod;
      advance();
      ExprPtr r = parse_pow();
      l = checked(std::make_unique<BinaryExpr>(off, op, std::move(l), std::move(r)));
    }
    return l;
  }

  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (at_op("**")) {
      size_t off = cur().offset;
      advance();
      ExprPtr r = parse_unary(true);
      l = checked(std::make_unique<BinaryExpr>(off, BinOp::kPow, std::move(l), std::move(r)));
    }
    return l;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(this);
    ExprPtr node;
    if (at_op("-") || at_op("+")) {
      size_t off = cur().offset;
      char op = cur().text[0];
      advance();
      node = checked(std::make_unique<UnaryExpr>(off, op, parse_unary(false)));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    size_t off = t.offset;
    switch (t.kind) {
      case Token::Kind::kName: {
        std::string n = t.text;
        advance();
        if (n == "true" || n == "True")
          return std::make_unique<ConstExpr>(off, Value::boolean(true));
        if (n == "false" || n == "False") {
          return std::make_unique<ConstExpr>(off, Value::boolean(false));
        }
        if (n == "none" || n == "None") return std::make_unique<ConstExpr>(off, Value::none());
        if (!macro_stack_.empty()) {
          if (n == "varargs") macro_stack_.back()->uses_varargs = true;
          if (n == "kwargs") macro_stack_.back()->uses_kwargs = true;
        }
        if (n == "loop" && !for_stack_.empty()) for_stack_.back()->uses_loop = true;
        return std::make_unique<NameExpr>(off, std::move(n));
      }
      case Token::Kind::kString: {
        std::string s = t.text;
        advance();
        while (at(Token::Kind::kString)) {
          s += cur().text;
          advance();
        }
        return std::make_unique<ConstExpr>(off, Value::string(std::move(s)));
      }
      case Token::Kind::kInt: {
        int64_t v = t.ival;
        advance();
        return std::make_unique<ConstExpr>(off, Value::integer(v));
      }
      case Token::Kind::kFloat: {
        double v = t.fval;
        advance();
        return std::make_unique<ConstExpr>(off, Value::number(v));
      }
      case Token::Kind::kOp:
        if (t.text == "(") {
          advance();
          ExprPtr e = parse_tuple(true, true, {});
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          advance();
          std::vector<ExprPtr> items;
          while (!at_op("]")) {
            if (!items.empty()) expect_op(",");
            if (at_op("]")) break;
            items.push_back(parse_expression(true));
          }
          expect_op("]");
          return checked(std::make_unique<ListExpr>(off, std::move(items), false));
        }
        if (t.text == "{") {
          advance();
          std::vector<std::pair<ExprPtr, ExprPtr>> items;
          while (!at_op("}")) {
            if (!items.empty()) expect_op(",");
            if (at_op("}")) break;
            ExprPtr k = parse_expression(true);
            expect_op(":");
            ExprPtr v = parse_expression(true);
            items.emplace_back(std::move(k), std::move(v));
          }
          expect_op("}");
          return checked(std::make_unique<DictExpr>(off, std::move(items)));
        }
        break;
      default: break;
    }
    error(t, "unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (at_op(".") || at_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (at_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (at_op("|")) {
        advance();
        for (FilterCall& fc : parse_filter_calls()) {
          size_t off = fc.offset;
          node = checked(std::make_unique<FilterExpr>(off, std::move(node), std::move(fc)));
        }
      } else if (at_name("is")) {
        node = parse_test(std::move(node));
      } else if (at_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    size_t off = cur().offset;
    if (at_op(".")) {
      advance();
      const Token& t = cur();
      if (t.kind == Token::Kind::kName) {
        std::string n = t.text;
        advance();
        return checked(std::make_unique<GetAttrExpr>(off, std::move(node), std::move(n)));
      }
      if (t.kind == Token::Kind::kInt) {
        Value k = Value::integer(t.ival);
        advance();
        return checked(std::make_unique<GetItemExpr>(off, std::move(node),
                                                     std::make_unique<ConstExpr>(off, k)));
      }
      error(t, "expected name or number after '.'");
    }
    advance();  // [
    struct Sub {
      bool slice = false;
      ExprPtr a, b, c;
    };
    std::vector<Sub> subs;
    while (!at_op("]")) {
      if (!subs.empty()) expect_op(",");
      Sub s;
      if (at_op(":")) {
        advance();
        s.slice = true;
      } else {
        s.a = parse_expression(true);
        if (at_op(":")) {
          advance();
          s.slice = true;
        }
      }
      if (s.slice) {
        if (!at_op(":") && !at_op("]") && !at_op(",")) s.b = parse_expression(true);
        if (at_op(":")) {
          advance();
          if (!at_op("]") && !at_op(",")) s.c = parse_expression(true);
        }
      }
      subs.push_back(std::move(s));
    }
    expect_op("]");
    if (subs.empty()) error(cur(), "expected a subscript");
    if (subs.size() == 1) {
      Sub& s = subs[0];
      if (s.slice) {
        return checked(std::make_unique<SliceExpr>(off, std::move(node), std::move(s.a),
                                                   std::move(s.b), std::move(s.c)));
      }
      return checked(std::make_unique<GetItemExpr>(off, std::move(node), std::move(s.a)));
    }
    std::vector<ExprPtr> keys;
    for (Sub& s : subs) {
      if (s.slice) fail_at(map_, off, "slices inside a tuple subscript are not supported");
      keys.push_back(std::move(s.a));
    }
    return checked(std::make_unique<GetItemExpr>(
        off, std::move(node), std::make_unique<ListExpr>(off, std::move(keys), true)));
  }

  ArgExprs parse_call_args() {
    expect_op("(");
    ArgExprs args;
    bool need_comma = false;
    while (!at_op(")")) {
      if (need_comma) {
        expect_op(",");
        if (at_op(")")) break;
      }
      if (at_op("*") || at_op("**")) error(cur(), "*args / **kwargs in calls are not supported");
      if (at(Token::Kind::kName) && is_op(peek(), "=")) {
        std::string key = cur().text;
        advance();
        advance();
        args.kw.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!args.kw.empty()) error(cur(), "positional argument follows keyword argument");
        args.pos.push_back(parse_expression(true));
      }
      need_comma = true;
    }
    expect_op(")");
    return args;
  }

  ExprPtr parse_call(ExprPtr node) {
    size_t off = cur().offset;
    ArgExprs args = parse_call_args();
    return checked(std::make_unique<CallExpr>(off, std::move(node), std::move(args)));
  }

  // `name(args) | name2 ...` (the leading '|' already consumed).
  std::vector<FilterCall> parse_filter_calls() {
    std::vector<FilterCall> calls;
    while (true) {
      FilterCall fc;
      fc.offset = cur().offset;
      const Token& nt = cur();
      fc.name = expect_name();
      while (at_op(".")) {
        advance();
        fc.name += "." + expect_name();
      }
      fc.fn = find_filter(fc.name);
      if (fc.fn == nullptr) unknown_name(nt, fmt::format("no filter named '{}'", fc.name));
      if (at_op("(")) fc.args = parse_call_args();
      calls.push_back(std::move(fc));
      if (!at_op("|")) return calls;
      advance();
    }
  }

  ExprPtr parse_test(ExprPtr node) {
    size_t off = cur().offset;
    advance();  // is
    bool negated = false;
    if (at_name("not")) {
      advance();
      negated = true;
    }
    const Token& nt = cur();
    std::string name = expect_name();
    while (at_op(".")) {
      advance();
      name += "." + expect_name();
    }
    TestFn fn = find_test(name);
    if (fn == nullptr) unknown_name(nt, fmt::format("no test named '{}'", name));
    ArgExprs args;
    if (at_op("(")) {
      args = parse_call_args();
    } else if ((at(Token::Kind::kName) || at(Token::Kind::kString) || at(Token::Kind::kInt) ||
                at(Token::Kind::kFloat) || at_op("[") || at_op("{")) &&
               !at_name("else") && !at_name("or") && !at_name("and")) {
      if (at_name("is")) error(cur(), "you cannot chain multiple tests with is");
      DepthGuard guard(this);
      ExprPtr arg = parse_primary();
      args.pos.push_back(parse_postfix(std::move(arg)));
    }
    return checked(std::make_unique<TestExpr>(off, std::move(node), std::move(name), fn,
                                              std::move(args), negated));
  }

  std::vector<Token> toks_;
  const SourceMap& map_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<MacroStmt*> macro_stack_;
  std::vector<ForStmt*> for_stack_;
  bool soft_ = false;
  std::vector<std::pair<size_t, std::string>> unknown_;  // unknown filters/tests, not soft
};

// ----------------------------------------------------------------------------------------
// Interpreter state
// ----------------------------------------------------------------------------------------

struct Scope {
  explicit Scope(std::shared_ptr<Scope> p) : parent(std::move(p)) {}
  const Value* find(std::string_view name) const {
    for (const auto& [k, v] : vars) {
      if (k == name) return &v;
    }
    return nullptr;
  }
  void set(std::string_view name, Value v) {
    for (auto& [k, old] : vars) {
      if (k == name) {
        old = std::move(v);
        return;
      }
    }
    vars.emplace_back(std::string(name), std::move(v));
  }
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;
};

const Value* find_global(std::string_view name);

class Interp {
 public:
  enum class Flow : uint8_t { kNormal, kBreak, kContinue };

  Interp(const Program& p, const JinjaRenderOptions& o)
      : prog(p), opts(o), root(std::make_shared<Scope>(nullptr)), scope(root) {}
  ~Interp() {
    // Break reference cycles a template may have built through namespaces.
    for (const auto& n : namespaces) n->attrs.clear();
  }
  Interp(const Interp&) = delete;
  Interp& operator=(const Interp&) = delete;

  Value lookup(std::string_view name) const {
    for (const Scope* s = scope.get(); s != nullptr; s = s->parent.get()) {
      if (const Value* v = s->find(name)) return *v;
    }
    if (const Value* v = ctx.dict().find(name)) return *v;
    if (const Value* v = find_global(name)) return *v;
    return Value::undefined(fmt::format("'{}' is undefined", name));
  }

  void write(std::string_view s) {
    if (out->size() + s.size() > opts.max_output_bytes) {
      fail_limit(fmt::format("rendered text exceeds the limit of {} bytes", opts.max_output_bytes));
    }
    add_work(s.size());
    out->append(s);
  }

  // Accounts for a string or list of `bytes` about to be built.
  void charge(size_t bytes) {
    if (bytes > opts.max_output_bytes) {
      fail_limit(fmt::format("a value exceeds the limit of {} bytes", opts.max_output_bytes));
    }
    add_work(bytes);
  }
  // Accounts for a list of `n` items about to be built.
  void charge_items(size_t n) {
    size_t max_items = std::max<size_t>(opts.max_output_bytes / 8, size_t{1} << 16);
    if (n > max_items) fail_limit(fmt::format("a list exceeds the limit of {} items", max_items));
    add_work(n * sizeof(Value));
  }

  void step() {
    if (++steps > opts.max_steps) {
      fail_limit(
          fmt::format("template exceeded {} loop iterations and macro calls", opts.max_steps));
    }
  }

  Sink sink() const { return Sink(opts.max_output_bytes); }
  std::string str(const Value& v) {
    if (v.is_string()) return v.str();
    Sink s = sink();
    str_to(s, v, 0);
    std::string r = s.take();
    add_work(r.size());
    return r;
  }
  std::string repr(const Value& v) {
    Sink s = sink();
    repr_to(s, v, 0);
    std::string r = s.take();
    add_work(r.size());
    return r;
  }

  void exec_body(const Body& body) {
    for (const StmtPtr& s : body) {
      s->exec(*this);
      if (flow != Flow::kNormal) return;
    }
  }

  // Runs `body` with its output collected into a string.
  std::string capture(const Body& body) {
    std::string buf;
    std::string* saved = out;
    out = &buf;
    struct Restore {
      Interp* in;
      std::string* saved;
      ~Restore() { in->out = saved; }
    } restore{this, saved};
    exec_body(body);
    return buf;
  }

  const Program& prog;
  const JinjaRenderOptions& opts;
  Value ctx;  // the context dict
  std::shared_ptr<Scope> root;
  std::shared_ptr<Scope> scope;
  std::string* out = nullptr;
  size_t stmt_offset = 0;  // source offset of the statement being run (for errors)
  uint64_t steps = 0;
  size_t work = 0;
  int eval_depth = 0;
  int call_depth = 0;
  Flow flow = Flow::kNormal;
  std::vector<std::shared_ptr<NsObj>> namespaces;

 private:
  void add_work(size_t bytes) {
    work += bytes;
    if (work > opts.max_work_bytes) {
      fail_limit(fmt::format("template exceeded its work budget of {} bytes", opts.max_work_bytes));
    }
  }
};

class EvalGuard {
 public:
  explicit EvalGuard(Interp& in) : in_(in) {
    if (++in_.eval_depth > in_.opts.max_eval_depth) {
      --in_.eval_depth;
      fail_limit(
          fmt::format("template evaluation nested deeper than {} levels", in_.opts.max_eval_depth));
    }
  }
  ~EvalGuard() { --in_.eval_depth; }

 private:
  Interp& in_;
};

inline Value Expr::eval(Interp& in) const {
  EvalGuard guard(in);
  return do_eval(in);
}

inline void Stmt::exec(Interp& in) const {
  EvalGuard guard(in);
  do_exec(in);
}

// Sets in.scope for the lifetime of the object.
class ScopeSwap {
 public:
  ScopeSwap(Interp& in, std::shared_ptr<Scope> s) : in_(in), saved_(std::move(in.scope)) {
    in_.scope = std::move(s);
  }
  ~ScopeSwap() { in_.scope = std::move(saved_); }

 private:
  Interp& in_;
  std::shared_ptr<Scope> saved_;
};

[[noreturn]] void fail_undefined(const Value& v) { fail(v.undefined_hint()); }

// ----------------------------------------------------------------------------------------
// Python semantics of operators
// ----------------------------------------------------------------------------------------

int64_t add_or_fail(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) fail("integer overflow");
  return r;
}
int64_t sub_or_fail(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) fail("integer overflow");
  return r;
}
int64_t mul_or_fail(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) fail("integer overflow");
  return r;
}

const char* binop_symbol(BinOp op) {
  switch (op) {
    case BinOp::kAdd: return "+";
    case BinOp::kSub: return "-";
    case BinOp::kMul: return "*";
    case BinOp::kDiv: return "/";
    case BinOp::kFloorDiv: return "//";
    case BinOp::kMod: return "%";
    case BinOp::kPow: return "**";
  }
  return "?";
}

[[noreturn]] void fail_operands(BinOp op, const Value& a, const Value& b) {
  failf("unsupported operand type(s) for {}: '{}' and '{}'", binop_symbol(op), type_name(a),
        type_name(b));
}

std::string repeat_string(Interp& in, const std::string& s, int64_t n) {
  if (n <= 0 || s.empty()) return "";
  if (static_cast<uint64_t>(n) > in.opts.max_output_bytes / s.size() + 1) {
    in.charge(in.opts.max_output_bytes + 1);
  }
  in.charge(s.size() * static_cast<size_t>(n));
  std::string r;
  r.reserve(s.size() * static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) r += s;
  return r;
}

Value repeat_list(Interp& in, const Value& l, int64_t n) {
  const auto& items = l.items();
  if (n <= 0 || items.empty()) return Value::list({}, l.list().tuple);
  if (static_cast<uint64_t>(n) > (size_t{1} << 40) / items.size()) {
    in.charge_items(size_t{1} << 40);
  }
  in.charge_items(items.size() * static_cast<size_t>(n));
  std::vector<Value> r;
  r.reserve(items.size() * static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) r.insert(r.end(), items.begin(), items.end());
  return Value::list(std::move(r), l.list().tuple);
}

void python_divmod(double x, double y, double* div_out, double* mod_out) {
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  double floordiv;
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, x / y);
  }
  *div_out = floordiv;
  *mod_out = mod;
}

std::string percent_format(Interp& in, const std::string& fmt_str, const Value& args);

Value op_binary(Interp& in, BinOp op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  bool nums = a.is_number() && b.is_number();
  bool ints = a.is_integral() && b.is_integral();
  switch (op) {
    case BinOp::kAdd: {
      if (ints) return Value::integer(add_or_fail(a.as_int(), b.as_int()));
      if (nums) return Value::number(a.as_double() + b.as_double());
      if (a.is_string() && b.is_string()) {
        in.charge(a.str().size() + b.str().size());
        if (a.markup() == b.markup()) return Value::string(a.str() + b.str(), a.markup());
        // Markup + str escapes the plain side (markupsafe semantics of `|e` / `|safe`).
        std::string l = a.markup() ? a.str() : html_escape(a.str());
        std::string r = b.markup() ? b.str() : html_escape(b.str());
        return Value::string(l + r, true);
      }
      if (a.is_list() && b.is_list() && a.list().tuple == b.list().tuple && !a.is_iterator() &&
          !b.is_iterator()) {
        in.charge_items(a.items().size() + b.items().size());
        std::vector<Value> r = a.items();
        r.insert(r.end(), b.items().begin(), b.items().end());
        return Value::list(std::move(r), a.list().tuple);
      }
      if (a.is_string()) failf("can only concatenate str (not \"{}\") to str", type_name(b));
      if (a.is_list() && !a.list().tuple) {
        failf("can only concatenate list (not \"{}\") to list", type_name(b));
      }
      fail_operands(op, a, b);
    }
    case BinOp::kSub: {
      if (ints) return Value::integer(sub_or_fail(a.as_int(), b.as_int()));
      if (nums) return Value::number(a.as_double() - b.as_double());
      fail_operands(op, a, b);
    }
    case BinOp::kMul: {
      if (ints) return Value::integer(mul_or_fail(a.as_int(), b.as_int()));
      if (nums) return Value::number(a.as_double() * b.as_double());
      if (a.is_string() && b.is_integral())
        return Value::string(repeat_string(in, a.str(), b.as_int()));
      if (b.is_string() && a.is_integral())
        return Value::string(repeat_string(in, b.str(), a.as_int()));
      if (a.is_list() && !a.is_iterator() && b.is_integral()) return repeat_list(in, a, b.as_int());
      if (b.is_list() && !b.is_iterator() && a.is_integral()) return repeat_list(in, b, a.as_int());
      fail_operands(op, a, b);
    }
    case BinOp::kDiv: {
      if (!nums) fail_operands(op, a, b);
      if (b.as_double() == 0) fail("division by zero");
      return Value::number(a.as_double() / b.as_double());
    }
    case BinOp::kFloorDiv:
    case BinOp::kMod: {
      if (a.is_string() && op == BinOp::kMod) {
        return Value::string(percent_format(in, a.str(), b));
      }
      if (!nums) fail_operands(op, a, b);
      if (ints) {
        int64_t x = a.as_int(), y = b.as_int();
        if (y == 0) fail(op == BinOp::kMod ? "integer modulo by zero" : "integer division by zero");
        if (x == std::numeric_limits<int64_t>::min() && y == -1) {
          if (op == BinOp::kMod) return Value::integer(0);
          fail("integer overflow");
        }
        int64_t q = x / y, r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) {
          --q;
          r += y;
        }
        return Value::integer(op == BinOp::kMod ? r : q);
      }
      double y = b.as_double();
      if (y == 0) fail(op == BinOp::kMod ? "float modulo" : "float floor division by zero");
      double div, mod;
      python_divmod(a.as_double(), y, &div, &mod);
      return Value::number(op == BinOp::kMod ? mod : div);
    }
    case BinOp::kPow: {
      if (!nums) fail_operands(op, a, b);
      if (ints && b.as_int() >= 0) {
        int64_t base = a.as_int(), e = b.as_int(), r = 1;
        while (e > 0) {
          if (e & 1) r = mul_or_fail(r, base);
          e >>= 1;
          if (e > 0) base = mul_or_fail(base, base);
        }
        return Value::integer(r);
      }
      double x = a.as_double(), y = b.as_double();
      if (x == 0 && y < 0) fail("0.0 cannot be raised to a negative power");
      if (x < 0 && std::floor(y) != y) fail("complex results are not supported");
      return Value::number(std::pow(x, y));
    }
  }
  fail_operands(op, a, b);
}

// Three-way comparison for <, <=, >, >=; fails where Python raises TypeError.
int py_compare(const Value& a, const Value& b, const char* op, int depth = 0) {
  check_depth(depth);
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) {
      return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    }
    double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.str().compare(b.str());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.list().tuple == b.list().tuple && !a.is_iterator() &&
      !b.is_iterator()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!py_equal(x[i], y[i], depth + 1)) return py_compare(x[i], y[i], op, depth + 1);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  failf("'{}' not supported between instances of '{}' and '{}'", op, type_name(a), type_name(b));
}

bool py_contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        failf("'in <string>' requires string as left operand, not {}", type_name(item));
      }
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kList: {
      const ListObj& l = container.list();
      size_t start = l.iterator != nullptr ? l.consumed : 0;
      for (size_t i = start; i < l.items.size(); ++i) {
        if (py_equal(l.items[i], item)) {
          if (l.iterator != nullptr) l.consumed = i + 1;
          return true;
        }
      }
      if (l.iterator != nullptr) l.consumed = l.items.size();
      return false;
    }
    case Value::Kind::kDict:
      if (item.is_list() && !item.list().tuple) failf("unhashable type: 'list'");
      if (item.is_dict()) failf("unhashable type: 'dict'");
      return container.dict().find(item) != nullptr;
    default: failf("argument of type '{}' is not iterable", type_name(container));
  }
}

bool compare_op(CmpOp op, const Value& a, const Value& b) {
  switch (op) {
    case CmpOp::kEq: return py_equal(a, b);
    case CmpOp::kNe: return !py_equal(a, b);
    case CmpOp::kLt: return py_compare(a, b, "<") < 0;
    case CmpOp::kLe: return py_compare(a, b, "<=") <= 0;
    case CmpOp::kGt: return py_compare(a, b, ">") > 0;
    case CmpOp::kGe: return py_compare(a, b, ">=") >= 0;
    case CmpOp::kIn: return py_contains(b, a);
    case CmpOp::kNotIn: return !py_contains(b, a);
  }
  return false;
}

// The code points of a string, one string value each.
std::vector<Value> string_chars(Interp& in, const std::string& s) {
  std::vector<size_t> offs = cp_offsets(s);
  in.charge_items(offs.size());
  std::vector<Value> r;
  r.reserve(offs.size());
  for (size_t i = 0; i + 1 < offs.size(); ++i) {
    r.push_back(Value::string(s.substr(offs[i], offs[i + 1] - offs[i])));
  }
  return r;
}

// list(v)
std::vector<Value> iterate(Interp& in, const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: {
      const ListObj& l = v.list();
      if (l.iterator == nullptr) return l.items;
      std::vector<Value> rest(l.items.begin() + static_cast<ptrdiff_t>(l.consumed), l.items.end());
      l.consumed = l.items.size();
      return rest;
    }
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      keys.reserve(v.dict().size());
      for (const auto& [k, val] : v.dict().entries) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: return string_chars(in, v.str());
    default: failf("'{}' object is not iterable", type_name(v));
  }
}

// Python len().
int64_t py_len(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(cp_length(v.str()));
    case Value::Kind::kList:
      if (v.is_iterator()) failf("object of type '{}' has no len()", type_name(v));
      return static_cast<int64_t>(v.items().size());
    case Value::Kind::kDict: return static_cast<int64_t>(v.dict().size());
    default: failf("object of type '{}' has no len()", type_name(v));
  }
}

// ----------------------------------------------------------------------------------------
// Attributes, items, slices
// ----------------------------------------------------------------------------------------

struct BoundMethod final : FuncObj {
  BoundMethod(Value s, std::string n) : self(std::move(s)), name(std::move(n)) {}
  Value call(Interp& in, CallArgs& args) const override;
  std::string repr() const override {
    return fmt::format("<built-in method {} of {} object>", name, type_name(self));
  }
  Value self;
  std::string name;
};

template <size_t N>
bool in_list(const std::string_view (&names)[N], std::string_view n) {
  return std::find(std::begin(names), std::end(names), n) != std::end(names);
}

constexpr std::string_view kStrMethods[] = {
    "capitalize",   "casefold",    "center",    "count",      "encode",       "endswith",
    "expandtabs",   "find",        "format",    "format_map", "index",        "isalnum",
    "isalpha",      "isascii",     "isdecimal", "isdigit",    "isidentifier", "islower",
    "isnumeric",    "isprintable", "isspace",   "istitle",    "isupper",      "join",
    "ljust",        "lower",       "lstrip",    "maketrans",  "partition",    "removeprefix",
    "removesuffix", "replace",     "rfind",     "rindex",     "rjust",        "rpartition",
    "rsplit",       "rstrip",      "split",     "splitlines", "startswith",   "strip",
    "swapcase",     "title",       "translate", "upper",      "zfill"};
constexpr std::string_view kDictMethods[] = {"clear",      "copy",   "fromkeys", "get",
                                             "items",      "keys",   "pop",      "popitem",
                                             "setdefault", "update", "values"};
constexpr std::string_view kListMethods[] = {"append", "clear",   "copy",   "count",
                                             "extend", "index",   "insert", "pop",
                                             "remove", "reverse", "sort"};

constexpr std::string_view kMutatingMethods[] = {"append",     "clear",   "extend", "insert",
                                                 "pop",        "popitem", "remove", "reverse",
                                                 "setdefault", "sort",    "update"};

Value method(const Value& self, std::string_view name) {
  if (!self.is_string() && in_list(kMutatingMethods, name)) {
    // ImmutableSandboxedEnvironment: the attribute reads as undefined; calling it fails.
    return Value::undefined(
        fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type_name(self)));
  }
  return Value::function(std::make_shared<BoundMethod>(self, std::string(name)));
}

// obj.name (Jinja's sandboxed getattr: attribute first, then item).
Value get_attr(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined: fail_undefined(obj);
    case Value::Kind::kDict:
      if (in_list(kDictMethods, name)) return method(obj, name);
      if (const Value* v = obj.dict().find(name)) return *v;
      return Value::undefined(fmt::format("'dict object' has no attribute '{}'", name));
    case Value::Kind::kString:
      if (in_list(kStrMethods, name)) return method(obj, name);
      break;
    case Value::Kind::kList:
      if (in_list(kListMethods, name) && !obj.is_iterator()) return method(obj, name);
      break;
    case Value::Kind::kNamespace:
      if (const Value* v = obj.ns().find(name)) return *v;
      return Value::undefined(fmt::format("'Namespace object' has no attribute '{}'", name));
    default: break;
  }
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(obj), name));
}

// obj[key] (Jinja's getitem: item first, then attribute for string keys).
Value get_item(Interp&, const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined: fail_undefined(obj);
    case Value::Kind::kDict:
      if (const Value* v = obj.dict().find(key)) return *v;
      break;
    case Value::Kind::kList:
    case Value::Kind::kString: {
      if (!key.is_integral() || obj.is_iterator()) break;
      int64_t i = key.as_int();
      if (obj.is_list()) {
        int64_t n = static_cast<int64_t>(obj.items().size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return obj.items()[static_cast<size_t>(i)];
      } else {
        const std::string& s = obj.str();
        if (is_ascii(s)) {
          int64_t n = static_cast<int64_t>(s.size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) return Value::string(std::string(1, s[static_cast<size_t>(i)]));
        } else {
          std::vector<size_t> offs = cp_offsets(s);
          int64_t n = static_cast<int64_t>(offs.size()) - 1;
          if (i < 0) i += n;
          if (i >= 0 && i < n) {
            size_t b = offs[static_cast<size_t>(i)], e = offs[static_cast<size_t>(i) + 1];
            return Value::string(s.substr(b, e - b));
          }
        }
      }
      return Value::undefined(
          fmt::format("{} object has no element {}", type_name(obj), key.as_int()));
    }
    default: break;
  }
  if (key.is_string()) {
    Value v = get_attr(obj, key.str());
    if (!v.is_undefined() || obj.is_ns()) return v;
  }
  return Value::undefined(
      fmt::format("'{} object' has no attribute {}", type_name(obj), py_repr(key)));
}

// Python slice index normalization; returns the selected indices.
std::vector<int64_t> slice_indices(int64_t len, const Value& start, const Value& stop,
                                   const Value& step) {
  auto as_index = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (!v.is_integral()) {
      failf("slice {} must be an integer or None, not '{}'", what, type_name(v));
    }
    return v.as_int();
  };
  int64_t st = as_index(step, "step").value_or(1);
  if (st == 0) fail("slice step cannot be zero");
  auto norm = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0) {
      x += len;
      if (x < 0) x = st < 0 ? -1 : 0;
    } else if (x >= len) {
      x = st < 0 ? len - 1 : len;
    }
    return x;
  };
  int64_t b = norm(as_index(start, "start"), st < 0 ? len - 1 : 0);
  int64_t e = norm(as_index(stop, "stop"), st < 0 ? -1 : len);
  std::vector<int64_t> idx;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) idx.push_back(i);
  return idx;
}

Value slice_value(Interp& in, const Value& obj, const Value& start, const Value& stop,
                  const Value& step) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_list() && !obj.is_iterator()) {
    const auto& items = obj.items();
    std::vector<int64_t> idx = slice_indices(static_cast<int64_t>(items.size()), start, stop, step);
    in.charge_items(idx.size());
    std::vector<Value> r;
    r.reserve(idx.size());
    for (int64_t i : idx) r.push_back(items[static_cast<size_t>(i)]);
    return Value::list(std::move(r), obj.list().tuple);
  }
  if (obj.is_string()) {
    const std::string& s = obj.str();
    std::string r;
    if (is_ascii(s)) {
      std::vector<int64_t> idx = slice_indices(static_cast<int64_t>(s.size()), start, stop, step);
      in.charge(idx.size());
      r.reserve(idx.size());
      for (int64_t i : idx) r += s[static_cast<size_t>(i)];
    } else {
      std::vector<size_t> offs = cp_offsets(s);
      std::vector<int64_t> idx =
          slice_indices(static_cast<int64_t>(offs.size()) - 1, start, stop, step);
      in.charge(s.size());
      for (int64_t i : idx) {
        size_t b = offs[static_cast<size_t>(i)], e = offs[static_cast<size_t>(i) + 1];
        r.append(s, b, e - b);
      }
    }
    return Value::string(std::move(r));
  }
  if (obj.is_dict()) fail("unhashable type: 'slice'");
  failf("'{}' object is not subscriptable", type_name(obj));
}

// ----------------------------------------------------------------------------------------
// String methods
// ----------------------------------------------------------------------------------------

const std::string* opt_str_arg(const Value* v, const char* fn) {
  if (v == nullptr || v->is_none()) return nullptr;
  if (!v->is_string()) failf("{}() argument must be str or None, not {}", fn, type_name(*v));
  return &v->str();
}

const std::string& str_arg(const Value& v, const char* fn) {
  if (!v.is_string()) failf("{}() argument must be str, not {}", fn, type_name(v));
  return v.str();
}

int64_t int_arg(const Value& v, const char* fn) {
  if (!v.is_integral()) failf("{}() argument must be an integer, not {}", fn, type_name(v));
  return v.as_int();
}

// str.split / str.rsplit
Value py_split(Interp& in, const std::string& s, const std::string* sep, int64_t maxsplit,
               bool from_right) {
  std::vector<std::string> parts;
  if (sep == nullptr) {
    // Runs of whitespace; leading/trailing whitespace never gives empty strings.
    std::vector<std::pair<size_t, size_t>> words;  // [begin, end) of each word
    size_t i = 0;
    while (i < s.size()) {
      size_t j = i;
      uint32_t cp = utf8_next(s, j);
      if (py_isspace(cp)) {
        i = j;
        continue;
      }
      size_t b = i;
      while (i < s.size()) {
        size_t k = i;
        if (py_isspace(utf8_next(s, k))) break;
        i = k;
      }
      words.emplace_back(b, i);
    }
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) >= words.size()) {
      for (auto [b, e] : words) parts.push_back(s.substr(b, e - b));
    } else if (!from_right) {
      for (size_t w = 0; w < static_cast<size_t>(maxsplit); ++w) {
        parts.push_back(s.substr(words[w].first, words[w].second - words[w].first));
      }
      parts.push_back(s.substr(words[static_cast<size_t>(maxsplit)].first));
    } else {
      size_t keep = words.size() - static_cast<size_t>(maxsplit);
      parts.push_back(s.substr(0, words[keep - 1].second));
      for (size_t w = keep; w < words.size(); ++w) {
        parts.push_back(s.substr(words[w].first, words[w].second - words[w].first));
      }
    }
  } else {
    if (sep->empty()) fail("empty separator");
    if (!from_right) {
      size_t pos = 0;
      int64_t n = 0;
      while (maxsplit < 0 || n < maxsplit) {
        size_t f = s.find(*sep, pos);
        if (f == std::string::npos) break;
        parts.push_back(s.substr(pos, f - pos));
        pos = f + sep->size();
        ++n;
      }
      parts.push_back(s.substr(pos));
    } else {
      size_t end = s.size();
      int64_t n = 0;
      std::vector<std::string> rev;
      while (maxsplit < 0 || n < maxsplit) {
        if (end < sep->size()) break;
        size_t f = s.rfind(*sep, end - sep->size());
        if (f == std::string::npos) break;
        rev.push_back(s.substr(f + sep->size(), end - f - sep->size()));
        end = f;
        ++n;
      }
      rev.push_back(s.substr(0, end));
      parts.assign(rev.rbegin(), rev.rend());
    }
  }
  in.charge_items(parts.size());
  in.charge(s.size());
  std::vector<Value> r;
  r.reserve(parts.size());
  for (std::string& p : parts) r.push_back(Value::string(std::move(p)));
  return Value::list(std::move(r));
}

bool is_line_break(uint32_t cp) {
  return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D ||
         cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

// str.splitlines()
std::vector<std::string> py_splitlines(const std::string& s, bool keepends) {
  std::vector<std::string> lines;
  size_t b = 0, i = 0;
  while (i < s.size()) {
    size_t j = i;
    uint32_t cp = utf8_next(s, j);
    if (!is_line_break(cp)) {
      i = j;
      continue;
    }
    size_t e = j;
    if (cp == '\r' && e < s.size() && s[e] == '\n') ++e;
    lines.push_back(s.substr(b, (keepends ? e : i) - b));
    b = i = e;
  }
  if (b < s.size()) lines.push_back(s.substr(b));
  return lines;
}

std::string py_replace(Interp& in, const std::string& s, const std::string& old,
                       const std::string& repl, int64_t count) {
  if (count < 0) count = std::numeric_limits<int64_t>::max();
  if (old.empty()) {
    // Python inserts `repl` before every code point and at the end.
    std::vector<size_t> offs = cp_offsets(s);
    size_t n =
        std::min<size_t>(offs.size(), static_cast<size_t>(std::min<int64_t>(count, 1 << 30)));
    if (repl.size() && n > in.opts.max_output_bytes / repl.size())
      in.charge(in.opts.max_output_bytes + 1);
    in.charge(s.size() + repl.size() * n);
    std::string r;
    for (size_t i = 0; i + 1 < offs.size(); ++i) {
      if (i < n) r += repl;
      r.append(s, offs[i], offs[i + 1] - offs[i]);
    }
    if (offs.size() <= n) r += repl;
    return r;
  }
  size_t hits = 0;
  for (size_t p = s.find(old); p != std::string::npos && static_cast<int64_t>(hits) < count;
       p = s.find(old, p + old.size())) {
    ++hits;
  }
  if (repl.size() > old.size() && hits > 0 &&
      hits > in.opts.max_output_bytes / (repl.size() - old.size())) {
    in.charge(in.opts.max_output_bytes + 1);
  }
  in.charge(s.size() + hits * repl.size());
  std::string r;
  size_t pos = 0, done = 0;
  while (done < hits) {
    size_t f = s.find(old, pos);
    r.append(s, pos, f - pos);
    r += repl;
    pos = f + old.size();
    ++done;
  }
  r.append(s, pos, std::string::npos);
  return r;
}

int64_t cp_index_of(const std::string& s, size_t byte_off) {
  return static_cast<int64_t>(cp_length(std::string_view(s).substr(0, byte_off)));
}

bool starts_or_ends(const std::string& s, const Value& arg, bool starts, const char* fn) {
  auto test = [&](const Value& p) {
    const std::string& x = str_arg(p, fn);
    if (x.size() > s.size()) return false;
    return starts ? s.compare(0, x.size(), x) == 0
                  : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (arg.is_list() && arg.list().tuple) {
    for (const Value& p : arg.items()) {
      if (test(p)) return true;
    }
    return false;
  }
  return test(arg);
}

std::string pad_to(const std::string& s, int64_t width, char align, const std::string& fill) {
  int64_t len = static_cast<int64_t>(cp_length(s));
  if (width <= len) return s;
  int64_t marg = width - len;
  int64_t left = align == '<' ? 0 : align == '>' ? marg : marg / 2 + (marg & width & 1);
  std::string r;
  for (int64_t i = 0; i < left; ++i) r += fill;
  r += s;
  for (int64_t i = 0; i < marg - left; ++i) r += fill;
  return r;
}

Value str_method(Interp& in, const std::string& s, const std::string& name, CallArgs& a) {
  const char* fn = name.c_str();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    a.check(fn, {"chars"});
    const std::string* chars = opt_str_arg(a.find(0, "chars"), fn);
    return Value::string(
        std::string(py_strip(s, StripSet(chars), name != "rstrip", name != "lstrip")));
  }
  if (name == "split" || name == "rsplit") {
    a.check(fn, {"sep", "maxsplit"});
    const std::string* sep = opt_str_arg(a.find(0, "sep"), fn);
    int64_t maxsplit = int_arg(a.get(1, "maxsplit", Value::integer(-1)), fn);
    return py_split(in, s, sep, maxsplit, name == "rsplit");
  }
  if (name == "startswith" || name == "endswith") {
    a.check(fn, {"prefix"});
    const Value* p = a.find(0, "prefix");
    if (p == nullptr) failf("{}() takes at least 1 argument (0 given)", fn);
    return Value::boolean(starts_or_ends(s, *p, name == "startswith", fn));
  }
  if (name == "upper" || name == "lower" || name == "casefold") {
    a.check(fn, {});
    return Value::string(name == "upper" ? str_upper(s) : str_lower(s));
  }
  if (name == "title") {
    a.check(fn, {});
    return Value::string(str_title(s));
  }
  if (name == "capitalize") {
    a.check(fn, {});
    return Value::string(str_capitalize(s));
  }
  if (name == "swapcase") {
    a.check(fn, {});
    std::string r = s;
    for (char& c : r) c = (c >= 'a' && c <= 'z') ? ascii_upper(c) : ascii_lower(c);
    return Value::string(std::move(r));
  }
  if (name == "replace") {
    a.check(fn, {"old", "new", "count"});
    const std::string& old = str_arg(a.get(0, "old"), fn);
    const std::string& repl = str_arg(a.get(1, "new"), fn);
    int64_t count = int_arg(a.get(2, "count", Value::integer(-1)), fn);
    return Value::string(py_replace(in, s, old, repl, count));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    a.check(fn, {"sub"});
    const std::string& sub = str_arg(a.get(0, "sub"), fn);
    if (name == "count") {
      if (sub.empty()) return Value::integer(static_cast<int64_t>(cp_length(s)) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::integer(n);
    }
    size_t p = (name[0] == 'r') ? s.rfind(sub) : s.find(sub);
    if (p == std::string::npos) {
      if (name == "index" || name == "rindex") fail("substring not found");
      return Value::integer(-1);
    }
    return Value::integer(cp_index_of(s, p));
  }
  if (name == "join") {
    a.check(fn, {"iterable"});
    std::vector<Value> items = iterate(in, a.get(0, "iterable"));
    size_t total = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        failf("sequence item {}: expected str instance, {} found", i, type_name(items[i]));
      }
      total += items[i].str().size() + (i ? s.size() : 0);
      if (total > in.opts.max_output_bytes) in.charge(total);
    }
    in.charge(total);
    std::string r;
    r.reserve(total);
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) r += s;
      r += items[i].str();
    }
    return Value::string(std::move(r));
  }
  if (name == "splitlines") {
    a.check(fn, {"keepends"});
    std::vector<std::string> lines = py_splitlines(s, truthy(a.get(0, "keepends")));
    in.charge_items(lines.size());
    std::vector<Value> r;
    for (std::string& l : lines) r.push_back(Value::string(std::move(l)));
    return Value::list(std::move(r));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    a.check(fn, {"affix"});
    const std::string& x = str_arg(a.get(0, "affix"), fn);
    if (name == "removeprefix") {
      if (s.compare(0, x.size(), x) == 0 && x.size() <= s.size()) {
        return Value::string(s.substr(x.size()));
      }
    } else if (x.size() <= s.size() && s.compare(s.size() - x.size(), x.size(), x) == 0) {
      return Value::string(s.substr(0, s.size() - x.size()));
    }
    return Value::string(s);
  }
  if (name == "partition" || name == "rpartition") {
    a.check(fn, {"sep"});
    const std::string& sep = str_arg(a.get(0, "sep"), fn);
    if (sep.empty()) fail("empty separator");
    size_t p = name == "partition" ? s.find(sep) : s.rfind(sep);
    std::vector<Value> r;
    if (p == std::string::npos) {
      if (name == "partition") {
        r = {Value::string(s), Value::string(""), Value::string("")};
      } else {
        r = {Value::string(""), Value::string(""), Value::string(s)};
      }
    } else {
      r = {Value::string(s.substr(0, p)), Value::string(sep),
           Value::string(s.substr(p + sep.size()))};
    }
    return Value::list(std::move(r), true);
  }
  if (name == "center" || name == "ljust" || name == "rjust" || name == "zfill") {
    a.check(fn, {"width", "fillchar"});
    int64_t width = int_arg(a.get(0, "width"), fn);
    if (width > static_cast<int64_t>(in.opts.max_output_bytes))
      in.charge(in.opts.max_output_bytes + 1);
    if (name == "zfill") {
      int64_t len = static_cast<int64_t>(cp_length(s));
      if (width <= len) return Value::string(s);
      size_t sign = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
      return Value::string(s.substr(0, sign) + std::string(static_cast<size_t>(width - len), '0') +
                           s.substr(sign));
    }
    Value fillv = a.get(1, "fillchar", Value::string(" "));
    if (!fillv.is_string() || cp_length(fillv.str()) != 1) {
      fail("The fill character must be exactly one character long");
    }
    const std::string& fill = fillv.str();
    char align = name == "center" ? '^' : name == "ljust" ? '<' : '>';
    return Value::string(pad_to(s, width, align, fill));
  }
  if (name.rfind("is", 0) == 0) {
    a.check(fn, {});
    if (name == "isascii") return Value::boolean(is_ascii(s));
    if (s.empty()) return Value::boolean(false);
    bool any_cased = false, ok = true;
    for (char c : s) {
      unsigned char u = static_cast<unsigned char>(c);
      if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") {
        ok = ok && ascii_digit(c);
      } else if (name == "isalpha") {
        ok = ok && (ascii_alpha(c) || u >= 0x80);
      } else if (name == "isalnum") {
        ok = ok && (ascii_alpha(c) || ascii_digit(c) || u >= 0x80);
      } else if (name == "isspace") {
        ok = ok && (c == ' ' || (c >= 9 && c <= 13));
      } else if (name == "islower") {
        if (c >= 'A' && c <= 'Z') ok = false;
        if (c >= 'a' && c <= 'z') any_cased = true;
      } else if (name == "isupper") {
        if (c >= 'a' && c <= 'z') ok = false;
        if (c >= 'A' && c <= 'Z') any_cased = true;
      } else {
        failf("str.{}() is not supported", name);
      }
    }
    if (name == "islower" || name == "isupper") ok = ok && any_cased;
    return Value::boolean(ok);
  }
  failf("str.{}() is not supported", name);
}

Value BoundMethod::call(Interp& in, CallArgs& a) const {
  const char* fn = name.c_str();
  if (self.is_string()) return str_method(in, self.str(), name, a);
  if (self.is_dict()) {
    const DictObj& d = self.dict();
    if (name == "get") {
      a.check(fn, {"key", "default"});
      const Value* k = a.find(0, "key");
      if (k == nullptr) fail("get expected at least 1 argument, got 0");
      const Value* v = d.find(*k);
      return v ? *v : a.get(1, "default", Value::none());
    }
    if (name == "items" || name == "keys" || name == "values") {
      a.check(fn, {});
      in.charge_items(d.size());
      std::vector<Value> r;
      r.reserve(d.size());
      for (const auto& [k, v] : d.entries) {
        if (name == "items") {
          r.push_back(Value::list({k, v}, true));
        } else {
          r.push_back(name == "keys" ? k : v);
        }
      }
      return Value::list(std::move(r));
    }
    if (name == "copy") return self;
    failf("access to attribute '{}' of 'dict' object is unsafe", name);
  }
  if (self.is_list() && !self.is_iterator()) {
    const auto& items = self.items();
    if (name == "index" || name == "count") {
      a.check(fn, {"value"});
      const Value* x = a.find(0, "value");
      if (x == nullptr) failf("{}() takes exactly one argument (0 given)", fn);
      int64_t n = 0;
      for (size_t i = 0; i < items.size(); ++i) {
        if (py_equal(items[i], *x)) {
          if (name == "index") return Value::integer(static_cast<int64_t>(i));
          ++n;
        }
      }
      if (name == "index") fail("value is not in list");
      return Value::integer(n);
    }
    if (name == "copy") return self;
    failf("access to attribute '{}' of '{}' object is unsafe", name, type_name(self));
  }
  failf("'{}' object has no method '{}'", type_name(self), name);
}

// ----------------------------------------------------------------------------------------
// printf-style formatting (str % args, |format)
// ----------------------------------------------------------------------------------------

std::string percent_format(Interp& in, const std::string& f, const Value& args) {
  std::vector<Value> pos;
  const DictObj* mapping = nullptr;
  if (args.is_list() && args.list().tuple) {
    pos = args.items();
  } else if (args.is_dict()) {
    mapping = &args.dict();
    pos.push_back(args);
  } else {
    pos.push_back(args);
  }
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c != '%') {
      out += c;
      continue;
    }
    if (++i >= f.size()) fail("incomplete format");
    if (f[i] == '%') {
      out += '%';
      continue;
    }
    const Value* arg = nullptr;
    if (f[i] == '(') {
      size_t close = f.find(')', i);
      if (close == std::string::npos) fail("incomplete format key");
      if (mapping == nullptr) fail("format requires a mapping");
      arg = mapping->find(std::string_view(f).substr(i + 1, close - i - 1));
      if (arg == nullptr) failf("KeyError: '{}'", f.substr(i + 1, close - i - 1));
      i = close + 1;
    }
    std::string flags;
    while (i < f.size() && std::strchr("-+ #0", f[i]) != nullptr) flags += f[i++];
    auto read_num = [&]() -> int {
      if (i < f.size() && f[i] == '*') {
        ++i;
        if (next >= pos.size()) fail("not enough arguments for format string");
        return static_cast<int>(int_arg(pos[next++], "format"));
      }
      int v = 0;
      while (i < f.size() && ascii_digit(f[i])) v = std::min(v * 10 + (f[i++] - '0'), 100000);
      return v;
    };
    int width = read_num();
    int prec = -1;
    if (i < f.size() && f[i] == '.') {
      ++i;
      prec = read_num();
    }
    while (i < f.size() && (f[i] == 'h' || f[i] == 'l' || f[i] == 'L')) ++i;
    if (i >= f.size()) fail("incomplete format");
    char conv = f[i];
    if (arg == nullptr) {
      if (next >= pos.size()) fail("not enough arguments for format string");
      arg = &pos[next++];
    }
    std::string piece;
    bool numeric = false;
    switch (conv) {
      case 's':
      case 'r':
      case 'a': {
        piece = conv == 's' ? in.str(*arg) : in.repr(*arg);
        if (prec >= 0) {
          std::vector<size_t> offs = cp_offsets(piece);
          if (static_cast<size_t>(prec) + 1 < offs.size()) piece.resize(offs[prec]);
        }
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        if (!arg->is_number()) {
          failf("%{} format: a real number is required, not {}", conv, type_name(*arg));
        }
        long long v = arg->is_float() ? static_cast<long long>(arg->as_double())
                                      : static_cast<long long>(arg->as_int());
        std::string spec = "%" + flags + (width ? std::to_string(width) : "") +
                           (prec >= 0 ? "." + std::to_string(prec) : "") + "ll" +
                           (conv == 'i' || conv == 'u' ? 'd' : conv);
        char buf[256];
        std::snprintf(buf, sizeof(buf), spec.c_str(), v);
        piece = buf;
        numeric = true;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!arg->is_number()) {
          failf("must be real number, not {}", type_name(*arg));
        }
        std::string spec = "%" + flags + (width ? std::to_string(std::min(width, 200)) : "") + "." +
                           std::to_string(prec >= 0 ? std::min(prec, 100) : 6) + conv;
        char buf[512];
        std::snprintf(buf, sizeof(buf), spec.c_str(), arg->as_double());
        piece = buf;
        numeric = true;
        break;
      }
      case 'c':
        if (arg->is_integral()) {
          utf8_append(piece, static_cast<uint32_t>(arg->as_int()));
        } else if (arg->is_string() && cp_length(arg->str()) == 1) {
          piece = arg->str();
        } else {
          fail("%c requires int or char");
        }
        break;
      default: failf("unsupported format character '{}'", conv);
    }
    if (!numeric && width > 0) {
      piece = pad_to(piece, width, flags.find('-') != std::string::npos ? '<' : '>', " ");
    }
    in.charge(piece.size());
    out += piece;
    if (out.size() > in.opts.max_output_bytes) in.charge(out.size());
  }
  if (mapping == nullptr && next < pos.size()) {
    fail("not all arguments converted during string formatting");
  }
  return out;
}

// ----------------------------------------------------------------------------------------
// Filters
// ----------------------------------------------------------------------------------------

// Jinja's make_attrgetter: "a.b.0" looks up a, then b, then index 0 (item first).
Value attr_path(Interp& in, const Value& v, const Value& attribute) {
  if (attribute.is_integral()) return get_item(in, v, attribute);
  std::string path = in.str(attribute);
  Value cur = v;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ascii_digit);
    Value key = digits ? Value::integer(std::stoll(part.substr(0, 18))) : Value::string(part);
    cur = get_item(in, cur, key);
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Value sort_key(Interp& in, const Value& item, const Value* attribute, bool case_sensitive) {
  Value k = attribute != nullptr && !attribute->is_none() ? attr_path(in, item, *attribute) : item;
  if (!case_sensitive && k.is_string()) return Value::string(str_lower(k.str()));
  return k;
}

Value string_result(Interp& in, std::string s, bool markup = false) {
  in.charge(s.size());
  return Value::string(std::move(s), markup);
}

Value f_abs(Interp&, const Value& v, CallArgs& a) {
  a.check("abs", {});
  if (v.is_integral()) {
    int64_t x = v.as_int();
    if (x == std::numeric_limits<int64_t>::min()) fail("integer overflow");
    return Value::integer(x < 0 ? -x : x);
  }
  if (v.is_float()) return Value::number(std::fabs(v.as_double()));
  failf("bad operand type for abs(): '{}'", type_name(v));
}

Value f_attr(Interp&, const Value& v, CallArgs& a) {
  a.check("attr", {"name"});
  Value name = a.get(0, "name");
  if (!name.is_string()) fail("attribute name must be a string");
  if (v.is_dict() && !in_list(kDictMethods, name.str())) {
    return Value::undefined(fmt::format("'dict object' has no attribute '{}'", name.str()));
  }
  return get_attr(v, name.str());
}

Value f_batch(Interp& in, const Value& v, CallArgs& a) {
  a.check("batch", {"linecount", "fill_with"});
  int64_t n = int_arg(a.get(0, "linecount"), "batch");
  if (n <= 0) fail("batch() linecount must be positive");
  const Value* fill = a.find(1, "fill_with");
  std::vector<Value> items = iterate(in, v);
  std::vector<Value> out, cur;
  for (Value& it : items) {
    cur.push_back(std::move(it));
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(Value::list(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (fill != nullptr && !fill->is_none()) {
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(*fill);
    }
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::iterator(std::move(out), "generator");
}

Value f_capitalize(Interp& in, const Value& v, CallArgs& a) {
  a.check("capitalize", {});
  return string_result(in, str_capitalize(in.str(v)));
}

Value f_center(Interp& in, const Value& v, CallArgs& a) {
  a.check("center", {"width"});
  int64_t width = int_arg(a.get(0, "width", Value::integer(80)), "center");
  if (width > static_cast<int64_t>(in.opts.max_output_bytes))
    in.charge(in.opts.max_output_bytes + 1);
  return string_result(in, pad_to(in.str(v), width, '^', " "));
}

Value f_default(Interp&, const Value& v, CallArgs& a) {
  a.check("default", {"default_value", "boolean"});
  Value def = a.get(0, "default_value", Value::string(""));
  bool boolean = truthy(a.get(1, "boolean", Value::boolean(false)));
  if (v.is_undefined() || (boolean && !truthy(v))) return def;
  return v;
}

// Sorts by keys; like Jinja (whose sort keys are lists) equal keys never reach `<`.
void sort_values(std::vector<Value>& items, std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> idx(items.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  auto less = [&](const Value& a, const Value& b) {
    return !py_equal(a, b) && py_compare(a, b, "<") < 0;
  };
  std::stable_sort(idx.begin(), idx.end(), [&](size_t x, size_t y) {
    return reverse ? less(keys[y], keys[x]) : less(keys[x], keys[y]);
  });
  std::vector<Value> sorted;
  sorted.reserve(items.size());
  for (size_t i : idx) sorted.push_back(std::move(items[i]));
  items.swap(sorted);
}

Value f_dictsort(Interp& in, const Value& v, CallArgs& a) {
  a.check("dictsort", {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) fail("dictsort: can only sort a mapping");
  bool cs = truthy(a.get(0, "case_sensitive", Value::boolean(false)));
  std::string by = in.str(a.get(1, "by", Value::string("key")));
  if (by != "key" && by != "value") fail("You can only sort by either \"key\" or \"value\"");
  bool reverse = truthy(a.get(2, "reverse", Value::boolean(false)));
  std::vector<Value> items, keys;
  for (const auto& [k, val] : v.dict().entries) {
    items.push_back(Value::list({k, val}, true));
    keys.push_back(sort_key(in, by == "key" ? k : val, nullptr, cs));
  }
  sort_values(items, keys, reverse);
  return Value::list(std::move(items));
}

Value f_escape(Interp& in, const Value& v, CallArgs& a) {
  a.check("escape", {});
  if (v.is_string() && v.markup()) return v;
  return string_result(in, html_escape(in.str(v)), true);
}

Value f_forceescape(Interp& in, const Value& v, CallArgs& a) {
  a.check("forceescape", {});
  return string_result(in, html_escape(in.str(v)), true);
}

Value f_first(Interp&, const Value& v, CallArgs& a) {
  a.check("first", {});
  if (v.is_iterator()) {
    const ListObj& l = v.list();
    if (l.consumed < l.items.size()) return l.items[l.consumed++];
    return Value::undefined("No first item, sequence was empty.");
  }
  if (v.is_list() && !v.items().empty()) return v.items().front();
  if (v.is_dict() && v.dict().size() > 0) return v.dict().entries.front().first;
  if (v.is_string() && !v.str().empty()) {
    size_t i = 0;
    utf8_next(v.str(), i);
    return Value::string(v.str().substr(0, i));
  }
  if (!v.is_list() && !v.is_dict() && !v.is_string() && !v.is_undefined()) {
    failf("'{}' object is not iterable", type_name(v));
  }
  return Value::undefined("No first item, sequence was empty.");
}

Value f_last(Interp&, const Value& v, CallArgs& a) {
  a.check("last", {});
  if (v.is_iterator()) failf("'{}' object is not reversible", type_name(v));
  if (v.is_list() && !v.items().empty()) return v.items().back();
  if (v.is_dict() && v.dict().size() > 0) return v.dict().entries.back().first;
  if (v.is_string() && !v.str().empty()) {
    size_t b = utf8_prev(v.str(), v.str().size());
    return Value::string(v.str().substr(b));
  }
  if (!v.is_list() && !v.is_dict() && !v.is_string() && !v.is_undefined()) {
    failf("'{}' object is not reversible", type_name(v));
  }
  return Value::undefined("No last item, sequence was empty.");
}

// Python int(str, base); nullopt where Python raises ValueError.
std::optional<int64_t> parse_py_int(std::string_view s, int base) {
  s = py_strip(s, StripSet(nullptr), true, true);
  bool neg = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    neg = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.size() > 2 && s[0] == '0') {
    char p = ascii_lower(s[1]);
    if ((p == 'x' && base == 16) || (p == 'o' && base == 8) || (p == 'b' && base == 2)) {
      s.remove_prefix(2);
      if (!s.empty() && s[0] == '_') s.remove_prefix(1);
    }
  }
  if (s.empty() || s.front() == '_' || s.back() == '_') return std::nullopt;
  std::string digits;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (s[i - 1] == '_') return std::nullopt;
      continue;
    }
    digits += s[i];
  }
  int64_t v = 0;
  auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v, base);
  if (r.ec != std::errc() || r.ptr != digits.data() + digits.size()) return std::nullopt;
  return neg ? -v : v;
}

// Python float(str); nullopt where Python raises ValueError.
std::optional<double> parse_py_float(std::string_view s) {
  s = py_strip(s, StripSet(nullptr), true, true);
  std::string t;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 == s.size() || !ascii_digit(s[i - 1]) || !ascii_digit(s[i + 1])) {
        return std::nullopt;
      }
      continue;
    }
    t += s[i];
  }
  std::string low = str_lower(t);
  std::string_view body = low;
  bool neg = false;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    neg = body[0] == '-';
    body.remove_prefix(1);
  }
  if (body == "inf" || body == "infinity") return neg ? -HUGE_VAL : HUGE_VAL;
  if (body == "nan") return std::nan("");
  if (body.empty() || !(ascii_digit(body[0]) || body[0] == '.')) return std::nullopt;
  double d = 0;
  auto r = std::from_chars(body.data(), body.data() + body.size(), d);
  if (r.ptr != body.data() + body.size()) return std::nullopt;
  if (r.ec == std::errc::result_out_of_range) d = HUGE_VAL;
  return neg ? -d : d;
}

Value f_float(Interp&, const Value& v, CallArgs& a) {
  a.check("float", {"default"});
  Value def = a.get(0, "default", Value::number(0.0));
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_number()) return Value::number(v.as_double());
  if (v.is_string()) {
    if (auto d = parse_py_float(v.str())) return Value::number(*d);
  }
  return def;
}

Value f_int(Interp&, const Value& v, CallArgs& a) {
  a.check("int", {"default", "base"});
  Value def = a.get(0, "default", Value::integer(0));
  int64_t base = int_arg(a.get(1, "base", Value::integer(10)), "int");
  auto from_double = [](double d) -> std::optional<int64_t> {
    if (!std::isfinite(d)) fail("cannot convert float infinity or NaN to integer");
    double t = std::trunc(d);
    if (std::fabs(t) >= 9.2e18) fail("integer overflow");
    return static_cast<int64_t>(t);
  };
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_integral()) return Value::integer(v.as_int());
  if (v.is_float()) return Value::integer(*from_double(v.as_double()));
  if (v.is_string()) {
    if (base == 10 || base == 16 || base == 8 || base == 2) {
      if (auto i = parse_py_int(v.str(), static_cast<int>(base))) return Value::integer(*i);
    }
    if (auto d = parse_py_float(v.str())) return Value::integer(*from_double(*d));
  }
  return def;
}

Value f_format(Interp& in, const Value& v, CallArgs& a) {
  if (!a.pos.empty() && !a.kw.empty())
    fail("can't handle positional and keyword arguments at the same time");
  if (!a.kw.empty()) {
    auto d = std::make_shared<DictObj>();
    for (auto& [k, val] : a.kw) d->set(Value::string(k), val);
    return string_result(in, percent_format(in, in.str(v), Value::dict(std::move(d))));
  }
  return string_result(in, percent_format(in, in.str(v), Value::list(a.pos, true)));
}

Value f_indent(Interp& in, const Value& v, CallArgs& a) {
  a.check("indent", {"width", "first", "blank"});
  Value width = a.get(0, "width", Value::integer(4));
  std::string ind;
  if (width.is_string()) {
    ind = width.str();
  } else {
    int64_t w = int_arg(width, "indent");
    if (w > 100000) fail("indent width too large");
    ind = std::string(static_cast<size_t>(std::max<int64_t>(w, 0)), ' ');
  }
  bool first = truthy(a.get(1, "first", Value::boolean(false)));
  bool blank = truthy(a.get(2, "blank", Value::boolean(false)));
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_string()) failf("indent: expected a string, got {}", type_name(v));
  std::string s = v.str() + "\n";
  std::vector<std::string> lines = py_splitlines(s, false);
  size_t est = s.size() + lines.size() * (ind.size() + 1);
  in.charge(est);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + ind;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += ind;
      rv += lines[i];
    }
  }
  if (first) rv = ind + rv;
  return Value::string(std::move(rv));
}

Value f_items(Interp& in, const Value& v, CallArgs& a) {
  a.check("items", {});
  if (v.is_undefined()) return Value::iterator({}, "generator");
  if (!v.is_dict()) fail("Can only get item pairs from a mapping.");
  in.charge_items(v.dict().size());
  std::vector<Value> r;
  for (const auto& [k, val] : v.dict().entries) r.push_back(Value::list({k, val}, true));
  return Value::iterator(std::move(r), "generator");
}

Value f_join(Interp& in, const Value& v, CallArgs& a) {
  a.check("join", {"d", "attribute"});
  std::string sep = in.str(a.get(0, "d", Value::string("")));
  const Value* attribute = a.find(1, "attribute");
  std::vector<Value> items = iterate(in, v);
  std::vector<std::string> parts;
  parts.reserve(items.size());
  size_t total = 0;
  for (const Value& it : items) {
    Value x = attribute != nullptr && !attribute->is_none() ? attr_path(in, it, *attribute) : it;
    parts.push_back(in.str(x));
    total += parts.back().size() + sep.size();
    if (total > in.opts.max_output_bytes) in.charge(total);
  }
  in.charge(total);
  std::string r;
  r.reserve(total);
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) r += sep;
    r += parts[i];
  }
  return Value::string(std::move(r));
}

Value f_length(Interp&, const Value& v, CallArgs& a) {
  a.check("length", {});
  return Value::integer(py_len(v));
}

Value f_list(Interp& in, const Value& v, CallArgs& a) {
  a.check("list", {});
  if (v.is_list() && !v.list().tuple && !v.is_iterator()) return v;
  return Value::list(iterate(in, v));
}

Value f_lower(Interp& in, const Value& v, CallArgs& a) {
  a.check("lower", {});
  return string_result(in, str_lower(in.str(v)));
}

Value f_upper(Interp& in, const Value& v, CallArgs& a) {
  a.check("upper", {});
  return string_result(in, str_upper(in.str(v)));
}

Value f_map(Interp& in, const Value& v, CallArgs& a) {
  if (!truthy(v)) return Value::iterator({}, "generator");  // Jinja: `if value:` guard
  std::vector<Value> items = iterate(in, v);
  std::vector<Value> out;
  out.reserve(items.size());
  if (a.pos.empty()) {
    const Value* attribute = a.find(99, "attribute");
    if (attribute == nullptr) fail("map() requires a filter name or attribute=");
    const Value* def = a.find(99, "default");
    for (const Value& it : items) {
      Value x = attr_path(in, it, *attribute);
      if (x.is_undefined() && def != nullptr) x = *def;
      out.push_back(std::move(x));
    }
    return Value::iterator(std::move(out), "generator");
  }
  std::string name = in.str(a.pos[0]);
  FilterFn fn = find_filter(name);
  if (fn == nullptr) failf("no filter named '{}'", name);
  CallArgs rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  for (const Value& it : items) {
    CallArgs args = rest;
    out.push_back(fn(in, it, args));
  }
  return Value::iterator(std::move(out), "generator");
}

Value min_or_max(Interp& in, const Value& v, CallArgs& a, bool want_max, const char* fn) {
  a.check(fn, {"case_sensitive", "attribute"});
  bool cs = truthy(a.get(0, "case_sensitive", Value::boolean(false)));
  const Value* attribute = a.find(1, "attribute");
  std::vector<Value> items = iterate(in, v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = sort_key(in, items[0], attribute, cs);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = sort_key(in, items[i], attribute, cs);
    int c = py_compare(k, best_key, want_max ? ">" : "<");
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}

Value f_max(Interp& in, const Value& v, CallArgs& a) { return min_or_max(in, v, a, true, "max"); }
Value f_min(Interp& in, const Value& v, CallArgs& a) { return min_or_max(in, v, a, false, "min"); }

Value select_impl(Interp& in, const Value& v, CallArgs& a, bool lookup_attr, bool want) {
  if (!truthy(v)) return Value::iterator({}, "generator");  // Jinja: `if value:` guard
  size_t off = 0;
  Value attribute;
  if (lookup_attr) {
    if (a.pos.empty()) fail("Missing parameter for attribute name");
    attribute = a.pos[0];
    off = 1;
  }
  TestFn test = nullptr;
  CallArgs targs;
  if (a.pos.size() > off) {
    std::string name = in.str(a.pos[off]);
    test = find_test(name);
    if (test == nullptr) failf("no test named '{}'", name);
    targs.pos.assign(a.pos.begin() + static_cast<ptrdiff_t>(off) + 1, a.pos.end());
    targs.kw = a.kw;
  }
  std::vector<Value> items = iterate(in, v);
  std::vector<Value> out;
  for (Value& it : items) {
    Value x = lookup_attr ? attr_path(in, it, attribute) : it;
    bool ok;
    if (test != nullptr) {
      CallArgs args = targs;
      ok = test(in, x, args);
    } else {
      ok = truthy(x);
    }
    if (ok == want) out.push_back(std::move(it));
  }
  return Value::iterator(std::move(out), "generator");
}

Value f_select(Interp& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, false, true);
}
Value f_reject(Interp& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, false, false);
}
Value f_selectattr(Interp& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, true, true);
}
Value f_rejectattr(Interp& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, true, false);
}

Value f_replace(Interp& in, const Value& v, CallArgs& a) {
  a.check("replace", {"old", "new", "count"});
  std::string old = in.str(a.get(0, "old"));
  std::string repl = in.str(a.get(1, "new"));
  Value count = a.get(2, "count", Value::none());
  int64_t n = count.is_none() ? -1 : int_arg(count, "replace");
  return Value::string(py_replace(in, in.str(v), old, repl, n));
}

Value f_reverse(Interp& in, const Value& v, CallArgs& a) {
  a.check("reverse", {});
  if (v.is_string()) {
    std::vector<size_t> offs = cp_offsets(v.str());
    std::string r;
    r.reserve(v.str().size());
    for (size_t i = offs.size() - 1; i > 0; --i)
      r.append(v.str(), offs[i - 1], offs[i] - offs[i - 1]);
    return string_result(in, std::move(r));
  }
  bool was_iterator = v.is_iterator();
  std::vector<Value> items = iterate(in, v);
  std::reverse(items.begin(), items.end());
  if (was_iterator) return Value::list(std::move(items));  // reversed() fails; list() fallback
  return Value::iterator(std::move(items),
                         v.is_dict() ? "dict_reversekeyiterator" : "list_reverseiterator");
}

Value f_round(Interp&, const Value& v, CallArgs& a) {
  a.check("round", {"precision", "method"});
  int64_t prec = int_arg(a.get(0, "precision", Value::integer(0)), "round");
  Value method = a.get(1, "method", Value::string("common"));
  std::string m = method.is_string() ? method.str() : "";
  if (m != "common" && m != "ceil" && m != "floor") fail("method must be common, ceil or floor");
  if (!v.is_number()) failf("type {} doesn't define __round__ method", type_name(v));
  prec = std::clamp<int64_t>(prec, -308, 308);
  double x = v.as_double();
  if (m != "common") {
    double scale = std::pow(10.0, static_cast<double>(prec));
    return Value::number((m == "ceil" ? std::ceil(x * scale) : std::floor(x * scale)) / scale);
  }
  if (v.is_integral()) {
    if (prec >= 0) return Value::integer(v.as_int());
    double scale = std::pow(10.0, static_cast<double>(-prec));
    return Value::integer(static_cast<int64_t>(std::nearbyint(x / scale) * scale));
  }
  if (!std::isfinite(x)) return v;
  if (prec == 0) return Value::number(std::nearbyint(x));
  if (prec < 0) {
    double scale = std::pow(10.0, static_cast<double>(-prec));
    return Value::number(std::nearbyint(x / scale) * scale);
  }
  std::string s = fmt::format("{:.{}f}", x, static_cast<int>(std::min<int64_t>(prec, 30)));
  double r = 0;
  std::from_chars(s.data(), s.data() + s.size(), r);
  return Value::number(r);
}

Value f_safe(Interp& in, const Value& v, CallArgs& a) {
  a.check("safe", {});
  if (v.is_string()) return Value::string(v.str(), true);
  return string_result(in, in.str(v), true);
}

Value f_sort(Interp& in, const Value& v, CallArgs& a) {
  a.check("sort", {"reverse", "case_sensitive", "attribute"});
  bool reverse = truthy(a.get(0, "reverse", Value::boolean(false)));
  bool cs = truthy(a.get(1, "case_sensitive", Value::boolean(false)));
  const Value* attribute = a.find(2, "attribute");
  std::vector<Value> items = iterate(in, v);
  std::vector<Value> keys;
  keys.reserve(items.size());
  for (const Value& it : items) keys.push_back(sort_key(in, it, attribute, cs));
  sort_values(items, keys, reverse);
  return Value::list(std::move(items));
}

Value f_string(Interp& in, const Value& v, CallArgs& a) {
  a.check("string", {});
  if (v.is_string()) return v;
  return string_result(in, in.str(v));
}

Value f_sum(Interp& in, const Value& v, CallArgs& a) {
  a.check("sum", {"attribute", "start"});
  const Value* attribute = a.find(0, "attribute");
  Value total = a.get(1, "start", Value::integer(0));
  for (const Value& it : iterate(in, v)) {
    Value x = attribute != nullptr && !attribute->is_none() ? attr_path(in, it, *attribute) : it;
    total = op_binary(in, BinOp::kAdd, total, x);
  }
  return total;
}

// Jinja's title filter: capitalize each run between [-\s({[<] delimiters.
Value f_title(Interp& in, const Value& v, CallArgs& a) {
  a.check("title", {});
  std::string s = in.str(v);
  std::string r;
  r.reserve(s.size());
  bool word_start = true;
  for (size_t i = 0; i < s.size();) {
    size_t b = i;
    uint32_t cp = utf8_next(s, i);
    bool delim = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || py_isspace(cp);
    if (delim) {
      word_start = true;
      r.append(s, b, i - b);
    } else if (i - b == 1) {
      r += word_start ? ascii_upper(s[b]) : ascii_lower(s[b]);
      word_start = false;
    } else {
      r.append(s, b, i - b);
      word_start = false;
    }
  }
  return string_result(in, std::move(r));
}

Value f_tojson(Interp& in, const Value& v, CallArgs& a) {
  a.check("tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonStyle st;
  st.ensure_ascii = truthy(a.get(0, "ensure_ascii", Value::boolean(false)));
  Value indent = a.get(1, "indent", Value::none());
  if (indent.is_integral()) {
    int64_t n = indent.as_int();
    if (n > 10000) fail("tojson indent too large");
    st.indent = std::string(static_cast<size_t>(std::max<int64_t>(n, 0)), ' ');
  } else if (indent.is_string()) {
    st.indent = indent.str();
  } else if (!indent.is_none()) {
    failf("tojson indent must be an int or a string, not {}", type_name(indent));
  }
  if (st.indent) st.item_sep = ",";
  Value seps = a.get(2, "separators", Value::none());
  if (!seps.is_none()) {
    if (!seps.is_list() || seps.items().size() != 2 || !seps.items()[0].is_string() ||
        !seps.items()[1].is_string()) {
      fail("tojson separators must be a pair of strings");
    }
    st.item_sep = seps.items()[0].str();
    st.key_sep = seps.items()[1].str();
  }
  st.sort_keys = truthy(a.get(3, "sort_keys", Value::boolean(false)));
  Sink sink = in.sink();
  json_to(sink, v, st, 0);
  return string_result(in, sink.take());
}

Value f_trim(Interp& in, const Value& v, CallArgs& a) {
  a.check("trim", {"chars"});
  const std::string* chars = opt_str_arg(a.find(0, "chars"), "trim");
  std::string s = in.str(v);
  return Value::string(std::string(py_strip(s, StripSet(chars), true, true)), v.markup());
}

Value f_unique(Interp& in, const Value& v, CallArgs& a) {
  a.check("unique", {"case_sensitive", "attribute"});
  bool cs = truthy(a.get(0, "case_sensitive", Value::boolean(false)));
  const Value* attribute = a.find(1, "attribute");
  std::vector<Value> out;
  std::vector<std::string> seen;
  for (Value& it : iterate(in, v)) {
    Value k = sort_key(in, it, attribute, cs);
    std::string ck = canonical_key(k);
    if (std::find(seen.begin(), seen.end(), ck) != seen.end()) continue;
    seen.push_back(std::move(ck));
    out.push_back(std::move(it));
  }
  return Value::iterator(std::move(out), "generator");
}

Value f_wordcount(Interp& in, const Value& v, CallArgs& a) {
  a.check("wordcount", {});
  std::string s = in.str(v);
  int64_t n = 0;
  bool in_word = false;
  for (char c : s) {
    bool w = ascii_alpha(c) || ascii_digit(c) || c == '_' || static_cast<unsigned char>(c) >= 0x80;
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

struct FilterEntry {
  std::string_view name;
  FilterFn fn;
};

constexpr FilterEntry kFilters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", f_first},
    {"float", f_float},
    {"forceescape", f_forceescape},
    {"format", f_format},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"unique", f_unique},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

FilterFn find_filter(std::string_view name) {
  for (const FilterEntry& e : kFilters) {
    if (e.name == name) return e.fn;
  }
  return nullptr;
}

// ----------------------------------------------------------------------------------------
// Tests
// ----------------------------------------------------------------------------------------

const Value& test_arg(CallArgs& a, const char* test) {
  if (a.pos.empty()) failf("test '{}' needs an argument", test);
  return a.pos[0];
}

bool t_defined(Interp&, const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_undefined(Interp&, const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_none(Interp&, const Value& v, CallArgs&) { return v.is_none(); }
bool t_boolean(Interp&, const Value& v, CallArgs&) { return v.is_bool(); }
bool t_true(Interp&, const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }
bool t_false(Interp&, const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool t_integer(Interp&, const Value& v, CallArgs&) { return v.is_int(); }
bool t_float(Interp&, const Value& v, CallArgs&) { return v.is_float(); }
bool t_number(Interp&, const Value& v, CallArgs&) { return v.is_number(); }
bool t_string(Interp&, const Value& v, CallArgs&) { return v.is_string(); }
bool t_mapping(Interp&, const Value& v, CallArgs&) { return v.is_dict(); }
bool t_iterable(Interp&, const Value& v, CallArgs&) {
  return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
}
bool t_sequence(Interp&, const Value& v, CallArgs&) {
  if (v.is_iterator()) return false;
  return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
}
bool t_callable(Interp&, const Value& v, CallArgs&) { return v.is_function(); }
bool t_escaped(Interp&, const Value& v, CallArgs&) { return v.is_string() && v.markup(); }
bool t_sameas(Interp&, const Value& v, CallArgs& a) {
  const Value& o = test_arg(a, "sameas");
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Value::Kind::kNone:
    case Value::Kind::kUndefined: return true;
    case Value::Kind::kBool:
    case Value::Kind::kInt: return v.as_int() == o.as_int();
    case Value::Kind::kFloat: return v.as_double() == o.as_double();
    default: return v.identity() == o.identity();
  }
}
bool t_in(Interp&, const Value& v, CallArgs& a) { return py_contains(test_arg(a, "in"), v); }
bool t_eq(Interp&, const Value& v, CallArgs& a) { return py_equal(v, test_arg(a, "eq")); }
bool t_ne(Interp&, const Value& v, CallArgs& a) { return !py_equal(v, test_arg(a, "ne")); }
bool t_lt(Interp&, const Value& v, CallArgs& a) {
  return py_compare(v, test_arg(a, "lt"), "<") < 0;
}
bool t_le(Interp&, const Value& v, CallArgs& a) {
  return py_compare(v, test_arg(a, "le"), "<=") <= 0;
}
bool t_gt(Interp&, const Value& v, CallArgs& a) {
  return py_compare(v, test_arg(a, "gt"), ">") > 0;
}
bool t_ge(Interp&, const Value& v, CallArgs& a) {
  return py_compare(v, test_arg(a, "ge"), ">=") >= 0;
}
bool t_divisibleby(Interp& in, const Value& v, CallArgs& a) {
  Value r = op_binary(in, BinOp::kMod, v, test_arg(a, "divisibleby"));
  return py_equal(r, Value::integer(0));
}
bool t_even(Interp& in, const Value& v, CallArgs&) {
  return py_equal(op_binary(in, BinOp::kMod, v, Value::integer(2)), Value::integer(0));
}
bool t_odd(Interp& in, const Value& v, CallArgs&) {
  return py_equal(op_binary(in, BinOp::kMod, v, Value::integer(2)), Value::integer(1));
}
bool t_lower(Interp& in, const Value& v, CallArgs&) {
  std::string s = in.str(v);
  bool cased = false;
  for (char c : s) {
    if (c >= 'A' && c <= 'Z') return false;
    if (c >= 'a' && c <= 'z') cased = true;
  }
  return cased;
}
bool t_upper(Interp& in, const Value& v, CallArgs&) {
  std::string s = in.str(v);
  bool cased = false;
  for (char c : s) {
    if (c >= 'a' && c <= 'z') return false;
    if (c >= 'A' && c <= 'Z') cased = true;
  }
  return cased;
}
bool t_filter(Interp&, const Value& v, CallArgs&) {
  return v.is_string() && find_filter(v.str()) != nullptr;
}
bool t_test(Interp&, const Value& v, CallArgs&) {
  return v.is_string() && find_test(v.str()) != nullptr;
}

struct TestEntry {
  std::string_view name;
  TestFn fn;
};

constexpr TestEntry kTests[] = {
    {"!=", t_ne},
    {"<", t_lt},
    {"<=", t_le},
    {"==", t_eq},
    {">", t_gt},
    {">=", t_ge},
    {"boolean", t_boolean},
    {"callable", t_callable},
    {"defined", t_defined},
    {"divisibleby", t_divisibleby},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"escaped", t_escaped},
    {"even", t_even},
    {"false", t_false},
    {"filter", t_filter},
    {"float", t_float},
    {"ge", t_ge},
    {"greaterthan", t_gt},
    {"gt", t_gt},
    {"in", t_in},
    {"integer", t_integer},
    {"iterable", t_iterable},
    {"le", t_le},
    {"lessthan", t_lt},
    {"lower", t_lower},
    {"lt", t_lt},
    {"mapping", t_mapping},
    {"ne", t_ne},
    {"none", t_none},
    {"number", t_number},
    {"odd", t_odd},
    {"sameas", t_sameas},
    {"sequence", t_sequence},
    {"string", t_string},
    {"test", t_test},
    {"true", t_true},
    {"undefined", t_undefined},
    {"upper", t_upper},
};

TestFn find_test(std::string_view name) {
  for (const TestEntry& e : kTests) {
    if (e.name == name) return e.fn;
  }
  return nullptr;
}

// ----------------------------------------------------------------------------------------
// Globals: range, dict, namespace, raise_exception, strftime_now
// ----------------------------------------------------------------------------------------

struct BuiltinFunc final : FuncObj {
  using Fn = Value (*)(Interp& in, CallArgs& args);
  BuiltinFunc(std::string n, Fn f) : name(std::move(n)), fn(f) {}
  Value call(Interp& in, CallArgs& args) const override { return fn(in, args); }
  std::string repr() const override { return "<built-in function " + name + ">"; }
  std::string name;
  Fn fn;
};

constexpr int64_t kMaxRange = 100000;  // Jinja's sandbox MAX_RANGE

Value g_range(Interp& in, CallArgs& a) {
  if (!a.kw.empty()) fail("range() takes no keyword arguments");
  if (a.pos.empty() || a.pos.size() > 3) {
    failf("range expected 1 to 3 arguments, got {}", a.pos.size());
  }
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) {
    stop = int_arg(a.pos[0], "range");
  } else {
    start = int_arg(a.pos[0], "range");
    stop = int_arg(a.pos[1], "range");
    if (a.pos.size() == 3) step = int_arg(a.pos[2], "range");
  }
  if (step == 0) fail("range() arg 3 must not be zero");
  double count = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                           static_cast<double>(step));
  if (count > static_cast<double>(kMaxRange)) {
    failf("Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).", kMaxRange);
  }
  std::vector<Value> r;
  if (count > 0) {
    in.charge_items(static_cast<size_t>(count));
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      r.push_back(Value::integer(i));
    }
  }
  return Value::list(std::move(r));
}

Value g_dict(Interp&, CallArgs& a) {
  auto d = std::make_shared<DictObj>();
  for (const Value& p : a.pos) {
    if (!p.is_dict()) fail("dict() positional argument must be a mapping");
    for (const auto& [k, v] : p.dict().entries) d->set(k, v);
  }
  for (auto& [k, v] : a.kw) d->set(Value::string(k), v);
  return Value::dict(std::move(d));
}

Value g_namespace(Interp& in, CallArgs& a) {
  auto ns = std::make_shared<NsObj>();
  for (const Value& p : a.pos) {
    if (!p.is_dict()) fail("namespace() positional argument must be a mapping");
    for (const auto& [k, v] : p.dict().entries) {
      if (!k.is_string()) fail("namespace() keys must be strings");
      ns->set(k.str(), v);
    }
  }
  for (auto& [k, v] : a.kw) ns->set(k, v);
  in.namespaces.push_back(ns);
  return Value::ns(std::move(ns));
}

Value g_raise_exception(Interp& in, CallArgs& a) {
  Value msg = a.get(0, "message", Value::string(""));
  throw JinjaError{StatusCode::kInvalidArgument, in.str(msg), true};
}

Value g_strftime_now(Interp& in, CallArgs& a) {
  a.check("strftime_now", {"format"});
  std::string f = in.str(a.get(0, "format"));
  // datetime.strftime handles %f, %z and %Z itself (a naive datetime has no zone).
  std::string cfmt;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] == '\0') fail("strftime format contains a NUL character");
    if (f[i] == '%' && i + 1 < f.size()) {
      char c = f[i + 1];
      if (c == 'f') {
        cfmt += "000000";
        ++i;
        continue;
      }
      if (c == 'z' || c == 'Z') {
        ++i;
        continue;
      }
      cfmt += f[i];
      cfmt += f[++i];
      continue;
    }
    cfmt += f[i];
  }
  cfmt += '\x01';  // so that an empty result is told apart from an error
  std::time_t t;
  std::tm tm{};
  if (in.opts.now_unix_seconds) {
    t = static_cast<std::time_t>(*in.opts.now_unix_seconds);
    gmtime_r(&t, &tm);
  } else {
    t = std::time(nullptr);
    localtime_r(&t, &tm);
  }
  std::vector<char> buf(256);
  while (true) {
    size_t n = std::strftime(buf.data(), buf.size(), cfmt.c_str(), &tm);
    if (n > 0) return string_result(in, std::string(buf.data(), n - 1));
    if (buf.size() > 65536) fail("strftime result too long");
    buf.resize(buf.size() * 4);
  }
}

const Value* find_global(std::string_view name) {
  static const auto* globals = [] {
    auto* m = new std::vector<std::pair<std::string, Value>>();
    auto add = [&](const char* n, BuiltinFunc::Fn f) {
      m->emplace_back(n, Value::function(std::make_shared<BuiltinFunc>(n, f)));
    };
    add("range", g_range);
    add("dict", g_dict);
    add("namespace", g_namespace);
    add("raise_exception", g_raise_exception);
    add("strftime_now", g_strftime_now);
    return m;
  }();
  for (const auto& [k, v] : *globals) {
    if (k == name) return &v;
  }
  return nullptr;
}

// ----------------------------------------------------------------------------------------
// Macros and loops
// ----------------------------------------------------------------------------------------

struct MacroFunc final : FuncObj {
  MacroFunc(const MacroStmt* n, std::weak_ptr<Scope> c) : node(n), closure(std::move(c)) {}
  Value call(Interp& in, CallArgs& args) const override;
  std::string repr() const override { return "<Macro '" + node->name + "'>"; }
  const MacroStmt* node;
  std::weak_ptr<Scope> closure;  // weak: the scope holds the macro
};

Value MacroFunc::call(Interp& in, CallArgs& args) const {
  const MacroStmt& m = *node;
  in.step();
  if (in.call_depth >= in.opts.max_call_depth) {
    fail_limit(fmt::format("macro calls nested deeper than {}", in.opts.max_call_depth));
  }
  if (args.pos.size() > m.params.size() && !m.uses_varargs) {
    failf("macro '{}' takes not more than {} argument(s)", m.name, m.params.size());
  }
  std::shared_ptr<Scope> parent = closure.lock();
  auto scope = std::make_shared<Scope>(parent ? parent : in.root);

  struct Restore {
    Interp& in;
    std::shared_ptr<Scope> scope;
    std::string* out;
    size_t offset;
    Interp::Flow flow;
    ~Restore() {
      in.scope = std::move(scope);
      in.out = out;
      in.stmt_offset = offset;
      in.flow = flow;
      --in.call_depth;
    }
  } restore{in, in.scope, in.out, in.stmt_offset, in.flow};
  ++in.call_depth;
  in.scope = scope;
  in.flow = Interp::Flow::kNormal;

  auto kw_value = [&](const std::string& name) -> const Value* {
    for (const auto& [k, v] : args.kw) {
      if (k == name) return &v;
    }
    return nullptr;
  };
  for (size_t i = 0; i < m.params.size(); ++i) {
    const auto& [pname, def] = m.params[i];
    const Value* kv = kw_value(pname);
    if (i < args.pos.size()) {
      if (kv != nullptr) failf("macro '{}' got multiple values for argument '{}'", m.name, pname);
      scope->set(pname, args.pos[i]);
    } else if (kv != nullptr) {
      scope->set(pname, *kv);
    } else if (def) {
      scope->set(pname, def->eval(in));
    } else {
      scope->set(pname, Value::undefined(fmt::format("parameter '{}' was not provided", pname)));
    }
  }
  auto extra_kw = std::make_shared<DictObj>();
  for (const auto& [k, v] : args.kw) {
    bool is_param =
        std::any_of(m.params.begin(), m.params.end(), [&](const auto& p) { return p.first == k; });
    if (is_param) continue;
    if (!m.uses_kwargs) failf("macro '{}' takes no keyword argument '{}'", m.name, k);
    extra_kw->set(Value::string(k), v);
  }
  if (m.uses_varargs) {
    std::vector<Value> extra;
    for (size_t i = m.params.size(); i < args.pos.size(); ++i) extra.push_back(args.pos[i]);
    scope->set("varargs", Value::list(std::move(extra), true));
  }
  if (m.uses_kwargs) scope->set("kwargs", Value::dict(std::move(extra_kw)));

  std::string buf;
  in.out = &buf;
  in.exec_body(m.body);
  return Value::string(std::move(buf));
}

struct LoopCycle final : FuncObj {
  explicit LoopCycle(size_t i) : index0(i) {}
  Value call(Interp&, CallArgs& args) const override {
    if (args.pos.empty()) fail("no items for cycling given");
    return args.pos[index0 % args.pos.size()];
  }
  std::string repr() const override { return "<bound method LoopContext.cycle>"; }
  size_t index0;
};

// loop.changed(*values): true on the first call and whenever the values differ from the
// previous call's (state shared by all iterations of one loop).
struct LoopChanged final : FuncObj {
  explicit LoopChanged(std::shared_ptr<std::optional<Value>> s) : last(std::move(s)) {}
  Value call(Interp&, CallArgs& args) const override {
    Value now = Value::list(args.pos);
    bool changed = !last->has_value() || !py_equal(**last, now);
    *last = std::move(now);
    return Value::boolean(changed);
  }
  std::string repr() const override { return "<bound method LoopContext.changed>"; }
  std::shared_ptr<std::optional<Value>> last;
};

Value make_loop(size_t i, size_t n, const std::vector<Value>& items,
                const std::shared_ptr<std::optional<Value>>& changed_state) {
  static const auto* keys = [] {
    auto* k = new std::vector<Value>();
    for (const char* name : {"index", "index0", "revindex", "revindex0", "first", "last", "length",
                             "depth", "depth0", "previtem", "nextitem", "cycle", "changed"}) {
      k->push_back(Value::string(name));
    }
    return k;
  }();
  const auto& k = *keys;
  auto d = std::make_shared<DictObj>();
  d->entries.reserve(k.size());
  int64_t ii = static_cast<int64_t>(i), nn = static_cast<int64_t>(n);
  d->set(k[0], Value::integer(ii + 1));
  d->set(k[1], Value::integer(ii));
  d->set(k[2], Value::integer(nn - ii));
  d->set(k[3], Value::integer(nn - ii - 1));
  d->set(k[4], Value::boolean(i == 0));
  d->set(k[5], Value::boolean(i + 1 == n));
  d->set(k[6], Value::integer(nn));
  d->set(k[7], Value::integer(1));
  d->set(k[8], Value::integer(0));
  if (i > 0) d->set(k[9], items[i - 1]);
  if (i + 1 < n) d->set(k[10], items[i + 1]);
  d->set(k[11], Value::function(std::make_shared<LoopCycle>(i)));
  d->set(k[12], Value::function(std::make_shared<LoopChanged>(changed_state)));
  return Value::dict(std::move(d));
}

// ----------------------------------------------------------------------------------------
// Expression evaluation
// ----------------------------------------------------------------------------------------

CallArgs eval_args(Interp& in, const ArgExprs& a) {
  CallArgs args;
  args.pos.reserve(a.pos.size());
  for (const ExprPtr& e : a.pos) args.pos.push_back(e->eval(in));
  for (const auto& [k, e] : a.kw) args.kw.emplace_back(k, e->eval(in));
  return args;
}

Value NameExpr::do_eval(Interp& in) const { return in.lookup(name); }

Value ListExpr::do_eval(Interp& in) const {
  std::vector<Value> vals;
  vals.reserve(items.size());
  for (const ExprPtr& e : items) vals.push_back(e->eval(in));
  in.charge_items(vals.size());
  return Value::list(std::move(vals), tuple);
}

Value DictExpr::do_eval(Interp& in) const {
  auto d = std::make_shared<DictObj>();
  for (const auto& [k, v] : items) {
    Value key = k->eval(in);
    d->set(std::move(key), v->eval(in));
  }
  in.charge_items(items.size() * 2);
  return Value::dict(std::move(d));
}

Value UnaryExpr::do_eval(Interp& in) const {
  Value v = operand->eval(in);
  if (op == '!') return Value::boolean(!truthy(v));
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_integral()) {
    if (op == '+') return Value::integer(v.as_int());
    if (v.as_int() == std::numeric_limits<int64_t>::min()) fail("integer overflow");
    return Value::integer(-v.as_int());
  }
  if (v.is_float()) return Value::number(op == '+' ? v.as_double() : -v.as_double());
  failf("bad operand type for unary {}: '{}'", op, type_name(v));
}

Value BinaryExpr::do_eval(Interp& in) const {
  Value a = lhs->eval(in);
  Value b = rhs->eval(in);
  return op_binary(in, op, a, b);
}

Value ConcatExpr::do_eval(Interp& in) const {
  std::string r;
  for (const ExprPtr& e : parts) {
    Value v = e->eval(in);
    if (v.is_string()) {
      in.charge(r.size() + v.str().size());
      r += v.str();
    } else {
      std::string s = in.str(v);
      in.charge(r.size() + s.size());
      r += s;
    }
  }
  return Value::string(std::move(r));
}

Value LogicExpr::do_eval(Interp& in) const {
  Value l = lhs->eval(in);
  if (is_and ? !truthy(l) : truthy(l)) return l;
  return rhs->eval(in);
}

Value CompareExpr::do_eval(Interp& in) const {
  Value left = first->eval(in);
  for (const auto& [op, e] : rest) {
    Value right = e->eval(in);
    if (!compare_op(op, left, right)) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value CondExpr::do_eval(Interp& in) const {
  if (truthy(cond->eval(in))) return then->eval(in);
  if (otherwise) return otherwise->eval(in);
  return Value::undefined("the inline if-expression evaluated to false and has no else section");
}

Value GetAttrExpr::do_eval(Interp& in) const { return get_attr(obj->eval(in), name); }

Value GetItemExpr::do_eval(Interp& in) const {
  Value o = obj->eval(in);
  Value k = key->eval(in);
  return get_item(in, o, k);
}

Value SliceExpr::do_eval(Interp& in) const {
  Value o = obj->eval(in);
  Value a = start ? start->eval(in) : Value::none();
  Value b = stop ? stop->eval(in) : Value::none();
  Value c = step ? step->eval(in) : Value::none();
  return slice_value(in, o, a, b, c);
}

Value CallExpr::do_eval(Interp& in) const {
  Value f = callee->eval(in);
  CallArgs args = eval_args(in, this->args);
  if (f.is_undefined()) fail_undefined(f);
  if (!f.is_function()) failf("'{}' object is not callable", type_name(f));
  return f.func().call(in, args);
}

Value FilterExpr::do_eval(Interp& in) const {
  if (call.fn == nullptr) failf("no filter named '{}'", call.name);
  Value v = input->eval(in);
  CallArgs args = eval_args(in, call.args);
  return call.fn(in, v, args);
}

Value TestExpr::do_eval(Interp& in) const {
  if (fn == nullptr) failf("no test named '{}'", name);
  Value v = input->eval(in);
  CallArgs a = eval_args(in, args);
  return Value::boolean(fn(in, v, a) != negated);
}

Value apply_filters(Interp& in, Value v, const std::vector<FilterCall>& filters) {
  for (const FilterCall& fc : filters) {
    if (fc.fn == nullptr) failf("no filter named '{}'", fc.name);
    CallArgs args = eval_args(in, fc.args);
    v = fc.fn(in, v, args);
  }
  return v;
}

// ----------------------------------------------------------------------------------------
// Statement execution
// ----------------------------------------------------------------------------------------

void bind_target(Interp& in, Scope& scope, const Target& t, const Value& v) {
  if (!t.unpack) {
    scope.set(t.names[0], v);
    return;
  }
  if (!(v.is_list() || v.is_string() || v.is_dict())) {
    failf("cannot unpack non-iterable {} object", type_name(v));
  }
  std::vector<Value> parts = iterate(in, v);
  if (parts.size() > t.names.size()) {
    failf("too many values to unpack (expected {})", t.names.size());
  }
  if (parts.size() < t.names.size()) {
    failf("not enough values to unpack (expected {}, got {})", t.names.size(), parts.size());
  }
  for (size_t i = 0; i < parts.size(); ++i) scope.set(t.names[i], parts[i]);
}

void TextStmt::do_exec(Interp& in) const { in.write(text); }

void OutputStmt::do_exec(Interp& in) const {
  in.stmt_offset = offset;
  Value v = expr->eval(in);
  if (v.is_string()) {
    in.write(v.str());
  } else if (!v.is_undefined()) {
    in.write(in.str(v));
  }
}

void IfStmt::do_exec(Interp& in) const {
  for (const auto& [cond, body] : branches) {
    in.stmt_offset = cond->offset;
    if (truthy(cond->eval(in))) {
      in.exec_body(body);
      return;
    }
  }
  in.exec_body(else_body);
}

void ForStmt::do_exec(Interp& in) const {
  in.stmt_offset = offset;
  Value seq = iter->eval(in);
  if (!(seq.is_list() || seq.is_dict() || seq.is_string() || seq.is_undefined())) {
    failf("'{}' object is not iterable", type_name(seq));
  }
  std::vector<Value> items = iterate(in, seq);
  std::shared_ptr<Scope> outer = in.scope;
  if (cond) {
    std::vector<Value> kept;
    for (Value& it : items) {
      in.step();
      auto s = std::make_shared<Scope>(outer);
      bind_target(in, *s, target, it);
      ScopeSwap swap(in, s);
      in.stmt_offset = cond->offset;
      if (truthy(cond->eval(in))) kept.push_back(std::move(it));
    }
    items.swap(kept);
  }
  if (items.empty()) {
    ScopeSwap swap(in, std::make_shared<Scope>(outer));
    in.exec_body(else_body);
    return;
  }
  const size_t n = items.size();
  auto changed_state = std::make_shared<std::optional<Value>>();
  for (size_t i = 0; i < n; ++i) {
    in.step();
    auto s = std::make_shared<Scope>(outer);
    bind_target(in, *s, target, items[i]);
    if (uses_loop) s->set("loop", make_loop(i, n, items, changed_state));
    ScopeSwap swap(in, std::move(s));
    in.exec_body(body);
    if (in.flow == Interp::Flow::kBreak) {
      in.flow = Interp::Flow::kNormal;
      break;
    }
    in.flow = Interp::Flow::kNormal;
  }
}

void SetStmt::do_exec(Interp& in) const {
  in.stmt_offset = offset;
  Value v = value->eval(in);
  if (!target.ns_attr.empty()) {
    Value ns = in.lookup(target.names[0]);
    if (!ns.is_ns()) fail("cannot assign attribute on non-namespace object");
    ns.ns().set(target.ns_attr, std::move(v));
    return;
  }
  bind_target(in, *in.scope, target, v);
}

void SetBlockStmt::do_exec(Interp& in) const {
  in.stmt_offset = offset;
  Value v = Value::string(in.capture(body));
  v = apply_filters(in, std::move(v), filters);
  if (!target.ns_attr.empty()) {
    Value ns = in.lookup(target.names[0]);
    if (!ns.is_ns()) fail("cannot assign attribute on non-namespace object");
    ns.ns().set(target.ns_attr, std::move(v));
    return;
  }
  bind_target(in, *in.scope, target, v);
}

void MacroStmt::do_exec(Interp& in) const {
  in.scope->set(name, Value::function(std::make_shared<MacroFunc>(this, in.scope)));
}

void FilterBlockStmt::do_exec(Interp& in) const {
  in.stmt_offset = offset;
  Value v = apply_filters(in, Value::string(in.capture(body)), filters);
  in.stmt_offset = offset;
  if (v.is_string()) {
    in.write(v.str());
  } else {
    in.write(in.str(v));
  }
}

void WithStmt::do_exec(Interp& in) const {
  in.stmt_offset = offset;
  auto s = std::make_shared<Scope>(in.scope);
  for (const auto& [tg, e] : assigns) bind_target(in, *s, tg, e->eval(in));
  ScopeSwap swap(in, std::move(s));
  in.exec_body(body);
}

void LoopControlStmt::do_exec(Interp& in) const {
  in.flow = is_break ? Interp::Flow::kBreak : Interp::Flow::kContinue;
}

void BlockStmt::do_exec(Interp& in) const { in.exec_body(body); }

// ----------------------------------------------------------------------------------------
// Entry points
// ----------------------------------------------------------------------------------------

// Jinja's lexer: \r\n and \r become \n; one trailing newline is dropped
// (keep_trailing_newline=False).
std::string normalize_newlines(std::string_view src) {
  std::string s;
  s.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    char c = src[i];
    if (c == '\r') {
      s += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      s += c;
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

template <typename Json>
StatusOr<std::string> render_impl(const Program& prog, const Json& context,
                                  const JinjaRenderOptions& opts) {
  if (!context.is_object()) return invalid_argument("jinja render context must be a JSON object");
  Interp in(prog, opts);
  std::string out;
  try {
    in.ctx = from_json(context, 0);
    in.out = &out;
    in.exec_body(prog.body);
  } catch (const JinjaError& e) {
    if (e.raw) return Status(e.code, e.message);
    int line = prog.map.locate(in.stmt_offset).first;
    return Status(e.code, fmt::format("jinja template error at line {}: {}", line, e.message));
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kResourceExhausted, "out of memory rendering a jinja template");
  } catch (const std::exception& e) {
    return internal_error("jinja render failed: {}", e.what());
  }
  return out;
}

}  // namespace
}  // namespace jinja_detail

StatusOr<JinjaTemplate> JinjaTemplate::parse(std::string_view source) {
  using namespace jinja_detail;
  constexpr size_t kMaxSource = size_t{64} << 20;
  if (source.size() > kMaxSource) return invalid_argument("jinja template larger than 64 MiB");
  try {
    auto prog = std::make_shared<Program>(normalize_newlines(source));
    Lexer lexer(prog->source, prog->map);
    Parser parser(lexer.run(), prog->map);
    prog->body = parser.parse_template();
    return JinjaTemplate(std::move(prog));
  } catch (const JinjaError& e) {
    return Status(e.code, "jinja template syntax error at " + e.message);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kResourceExhausted, "out of memory parsing a jinja template");
  }
}

StatusOr<std::string> JinjaTemplate::render(const nlohmann::json& context,
                                            const JinjaRenderOptions& options) const {
  return jinja_detail::render_impl(*program_, context, options);
}

StatusOr<std::string> JinjaTemplate::render(const nlohmann::ordered_json& context,
                                            const JinjaRenderOptions& options) const {
  return jinja_detail::render_impl(*program_, context, options);
}

}  // namespace strata
