// JSON Schema constrained decoding (OpenAI's response_format {"type": "json_schema"}).
//
// JsonSchema::compile turns a schema (nlohmann::json) into an immutable node graph, shared
// by every request that uses it. JsonSchemaState is one request's checker: like JsonPrefix
// (json_constraint.h) it takes the text byte by byte, accepts a byte only if the text so far
// is the prefix of some JSON value valid under the schema, and says when the value is
// complete. The lexical rules and anti-looping bounds are JsonPrefix's (kMaxDepth nesting, at
// most kMaxSpaces consecutive whitespace bytes and none before the value, at most
// kMaxIntDigits integer and kMaxExpDigits exponent digits); in addition strings must be
// valid UTF-8 and \u escapes valid UTF-16 (a high surrogate needs its low one), so the
// finished text always parses.
//
// Supported subset (docs/structured-output.md):
//   type            a name or a list of names: object, array, string, number, integer,
//                   boolean, null. integer = -?(0|[1-9][0-9]*) (no fraction, no exponent).
//                   Absent = any type.
//   properties      the declared keys, each with its schema; keys are emitted exactly as
//                   nlohmann dumps them, in any order, at most once each.
//   required        every listed key must appear before the object may close (a required
//                   key missing from `properties` is refused when no other keys are allowed).
//   additionalProperties  false = only declared keys; true or a schema = other keys too
//                   (without backslash escapes, no repeats). Absent: only the declared keys
//                   when `properties` is given (strict, as OpenAI / xgrammar), else any keys
//                   with any values.
//   items (a schema), minItems, maxItems
//   minLength, maxLength   in Unicode code points
//   enum, const     of strings, numbers, booleans and null; the value is emitted exactly as
//                   nlohmann dumps it (so 1.0 as "1.0", never "1"). With `type` the values
//                   of other types are dropped; no other keyword may sit beside them.
//   anyOf           any schemas (the checker follows every branch the text so far fits);
//                   no sibling keywords but annotations.
//   oneOf           only when its branches admit disjoint JSON types (then it is anyOf).
//   $ref            a local JSON pointer ("#/$defs/X", "#/definitions/X", "#"); recursion
//                   is allowed (bounded by kMaxDepth); no sibling keywords but annotations.
//   $defs, definitions, and the annotations title, description, default, examples,
//   $schema, $id, $comment, deprecated, readOnly, writeOnly are accepted and ignored.
// Every other keyword (pattern, format, minimum, allOf, not, prefixItems, uniqueItems,
// patternProperties, ...) is refused: InvalidArgument naming the keyword and its JSON
// pointer, never output that could violate it. Also refused: the schema `false`, an empty
// enum, min > max, and a top-level value that can only be a number (a number has no last
// byte a decoder could see; where the top level may be something else, it is that).
//
// Limits: a schema whose every instance nests deeper than kMaxDepth (e.g. a required
// recursive property) leads to a dead end (the token mask then allows only the stop ids).
//
// Thread safety: a compiled JsonSchema is immutable (share it freely); JsonSchemaState is a
// value, used by one request's sampler.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"
#include "sched/json_constraint.h"

namespace strata {

class JsonSchema {
 public:
  // Type bits of Node::types.
  enum : uint8_t {
    kObject = 1, kArray = 2, kString = 4, kNumber = 8, kInteger = 16, kBoolean = 32, kNull = 64,
    kAnyType = 127,
  };
  static constexpr int32_t kForbidden = -1;  // Node::additional: no other keys
  static constexpr int32_t kAny = 0;         // the node every value fits

  struct Node {
    uint8_t types = kAnyType;
    // Candidate texts of a literal value: the enum/const dumps (is_enum), else the
    // true/false/null the types allow.
    bool is_enum = false;
    std::vector<std::string> literals;
    // object
    std::vector<std::string> keys;  // dumped, with their quotes
    std::vector<int32_t> key_nodes;
    std::vector<int32_t> required;  // indices into keys
    int32_t additional = kAny;      // node of other keys' values, or kForbidden
    // array
    int32_t items = kAny;
    int64_t min_items = 0, max_items = INT64_MAX;
    // string
    int64_t min_length = 0, max_length = INT64_MAX;
    // anyOf / oneOf: the value fits one of these nodes (no other field applies)
    std::vector<int32_t> any_of;
  };

  // InvalidArgument for a schema outside the subset, naming the keyword and its JSON pointer.
  static StatusOr<std::shared_ptr<const JsonSchema>> compile(const nlohmann::json& schema);

  const Node& node(int32_t i) const { return nodes_[static_cast<size_t>(i)]; }
  int32_t root() const { return root_; }

 private:
  friend class JsonSchemaCompiler;
  std::vector<Node> nodes_;
  int32_t root_ = kAny;
};

class JsonSchemaState {
 public:
  // JsonPrefix's bounds.
  static constexpr int kMaxDepth = JsonPrefix::kMaxDepth;
  static constexpr int kMaxSpaces = JsonPrefix::kMaxSpaces;
  static constexpr int kMaxIntDigits = JsonPrefix::kMaxIntDigits;
  static constexpr int kMaxExpDigits = JsonPrefix::kMaxExpDigits;

  JsonSchemaState() = default;  // no schema: feed() refuses everything
  explicit JsonSchemaState(std::shared_ptr<const JsonSchema> schema);
  // Feeds one byte: true (and the state advanced) when the text is still the prefix of a
  // valid value; false leaves the state unspecified (feed a copy to test).
  bool feed(char c);
  bool feed(std::string_view s);
  // The value has ended (only whitespace may follow).
  bool complete() const;

  // One reading of the text (a path through the schema); anyOf keeps one per branch the
  // text so far fits. Implementation detail (json_schema.cc).
  enum class Want : uint8_t { kValue, kValueOrClose, kKeyOrClose, kKey, kColon, kCommaOrClose };
  enum class Lex : uint8_t { kNone, kString, kEscape, kUnicode, kNumber, kLiteral };
  struct Frame {  // an open object or array
    int32_t node = 0;
    bool object = false;
    int64_t count = 0;               // array: elements so far
    std::vector<uint64_t> seen;      // object: a bit per declared key given
    std::vector<std::string> extra;  // object: the other keys given
    bool operator==(const Frame&) const = default;
  };
  struct Path {
    std::vector<Frame> stack;
    Want want = Want::kValue;
    Lex lex = Lex::kNone;
    bool key = false;       // the string being lexed is a key
    bool started = false;   // the value's first byte was read
    bool done = false;
    bool need_low = false;  // a \u high surrogate was read: a \u low one must follow
    uint8_t hex_left = 0, num_state = 0, num_digits = 0, spaces = 0, utf8_left = 0;
    uint8_t utf8_lo = 0x80, utf8_hi = 0xBF;  // the next UTF-8 continuation byte's range
    uint16_t hex = 0;
    int32_t pending = -1;   // the node of the next value (want kValue / kValueOrClose)
    int32_t lex_node = -1;  // the node of the scalar being lexed
    int64_t length = 0;     // code points of the string being lexed
    std::string text;       // the key / literal being lexed
    bool operator==(const Path&) const = default;
  };

 private:
  void expand();  // splits paths that want a value of an anyOf node; drops duplicates
  std::shared_ptr<const JsonSchema> schema_;
  std::vector<Path> paths_;
};

}  // namespace strata
