// JsonPrefix: an incremental checker of JSON text (RFC 8259), byte by byte, for constrained
// decoding (OpenAI's response_format {"type": "json_object"}): feed() accepts a byte only if
// the text so far is still the prefix of some valid JSON object, and complete() says the
// object has closed. Strings are checked for escapes (\uXXXX included) and control bytes;
// bytes >= 0x80 are taken as they come (the tokenizer's UTF-8 is not re-validated). Numbers
// follow the JSON grammar (-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?) with at most kMaxIntDigits
// integer and kMaxExpDigits exponent digits, so every number fits a double (parsers such as
// nlohmann's refuse 1e400). Two more bounds keep a model from looping inside the grammar:
// nesting depth <= kMaxDepth, at most kMaxSpaces consecutive whitespace bytes and none
// before the object (a model left free to emit whitespace can spend its whole budget on it).
//
// JsonTokenMask: the allowed next tokens of a request, given every token's bytes
// (ByteTokenMask over JsonPrefix, sched/token_mask.h).
// Thread safety: values; one request's sampler uses its own instance.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "sched/token_mask.h"

namespace strata {

// One byte of a JSON number (-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?, at most max_int_digits
// integer and max_exp_digits exponent digits; integer_only: no fraction or exponent).
// `state` starts at 0 (before the first byte) and `digits` at 0; kEnd: c is not part of the
// number, which is complete (c belongs to what follows); kReject: c cannot come here.
enum class NumberStep : uint8_t { kTake, kEnd, kReject };
NumberStep json_number_step(uint8_t& state, uint8_t& digits, char c, bool integer_only,
                            int max_int_digits, int max_exp_digits);

class JsonPrefix {
 public:
  static constexpr int kMaxDepth = 32;
  static constexpr int kMaxSpaces = 2;
  static constexpr int kMaxIntDigits = 20;
  static constexpr int kMaxExpDigits = 2;
  // Feeds one byte: true (and the state advanced) when the text stays a valid prefix;
  // false leaves the state unspecified (feed a copy to test).
  bool feed(char c);
  // Feeds every byte of `s` (false at the first invalid one).
  bool feed(std::string_view s);
  // The top-level object has closed (only whitespace may follow).
  bool complete() const { return done_; }

 private:
  enum class Want : uint8_t {
    kValue,        // any value (after ':' / '[' / ',' in an array)
    kKeyOrClose,   // after '{'
    kKey,          // after ',' in an object
    kColon,        // after a key
    kCommaOrClose, // after a value inside a container
  };
  enum class Lex : uint8_t { kNone, kString, kEscape, kUnicode, kNumber, kLiteral };
  bool end_value();        // a value finished: what the container wants next
  Want want_ = Want::kValue;
  Lex lex_ = Lex::kNone;
  bool key_ = false;         // the string being lexed is an object key
  bool started_ = false;     // the top-level '{' was seen
  bool done_ = false;
  bool just_opened_array_ = false;  // the last non-space byte was '['
  uint8_t hex_left_ = 0;     // \uXXXX digits still expected
  uint8_t num_state_ = 0;    // see feed()
  uint8_t num_digits_ = 0;   // digits of the integer part / of the exponent
  uint8_t spaces_ = 0;
  std::string literal_;      // "true" / "false" / "null" being matched
  size_t literal_pos_ = 0;
  std::string stack_;        // '{' / '[' per open container
};

// Allowed-token masks over a vocabulary (token_mask.h): the object may close, then only the
// stop ids may follow.
using JsonTokenMask = ByteTokenMask<JsonPrefix>;

}  // namespace strata
