// JsonPrefix (see json_constraint.h).
#include "sched/json_constraint.h"


namespace strata {
namespace {
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
// Number states: 1 after '-', 2 after a leading 0, 3 in integer digits, 4 after '.',
// 5 in fraction digits, 6 after e/E, 7 after the exponent sign, 8 in exponent digits.
// A number may end in states 2, 3, 5 and 8.
bool number_can_end(uint8_t s) { return s == 2 || s == 3 || s == 5 || s == 8; }
}  // namespace

bool JsonPrefix::end_value() {
  if (stack_.empty()) {
    done_ = true;  // the top-level object closed
    return true;
  }
  want_ = Want::kCommaOrClose;
  return true;
}

bool JsonPrefix::end_number(char c) {
  if (!number_can_end(num_state_)) return false;
  lex_ = Lex::kNone;
  if (!end_value()) return false;
  return feed(c);
}

bool JsonPrefix::feed(std::string_view s) {
  for (char c : s)
    if (!feed(c)) return false;
  return true;
}

bool JsonPrefix::feed(char c) {
  const auto u = static_cast<unsigned char>(c);
  switch (lex_) {
    case Lex::kString:
      if (c == '"') {
        lex_ = Lex::kNone;
        if (key_) {
          key_ = false;
          want_ = Want::kColon;
          return true;
        }
        return end_value();
      }
      if (c == '\\') lex_ = Lex::kEscape;
      return u >= 0x20;  // control bytes must be escaped
    case Lex::kEscape:
      if (c == 'u') {
        lex_ = Lex::kUnicode;
        hex_left_ = 4;
        return true;
      }
      lex_ = Lex::kString;
      return c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
             c == 't';
    case Lex::kUnicode:
      if (!is_hex(c)) return false;
      if (--hex_left_ == 0) lex_ = Lex::kString;
      return true;
    case Lex::kLiteral:
      if (c != literal_[literal_pos_]) return false;
      if (++literal_pos_ == literal_.size()) {
        lex_ = Lex::kNone;
        return end_value();
      }
      return true;
    case Lex::kNumber:
      switch (num_state_) {
        case 1: if (c == '0') { num_state_ = 2; return true; }
                if (is_digit(c)) { num_state_ = 3; num_digits_ = 1; return true; }
                return false;
        case 2: if (c == '.') { num_state_ = 4; return true; }
                if (c == 'e' || c == 'E') { num_state_ = 6; return true; }
                return end_number(c);
        case 3: if (is_digit(c)) return ++num_digits_ <= kMaxIntDigits;
                if (c == '.') { num_state_ = 4; return true; }
                if (c == 'e' || c == 'E') { num_state_ = 6; return true; }
                return end_number(c);
        case 4: if (is_digit(c)) { num_state_ = 5; return true; }
                return false;
        case 5: if (is_digit(c)) return true;
                if (c == 'e' || c == 'E') { num_state_ = 6; return true; }
                return end_number(c);
        case 6: if (c == '+' || c == '-') { num_state_ = 7; return true; }
                if (is_digit(c)) { num_state_ = 8; num_digits_ = 1; return true; }
                return false;
        case 7: if (is_digit(c)) { num_state_ = 8; num_digits_ = 1; return true; }
                return false;
        case 8: if (is_digit(c)) return ++num_digits_ <= kMaxExpDigits;
                return end_number(c);
        default: return false;
      }
    case Lex::kNone:
      break;
  }
  if (is_space(c)) {
    if (!started_ || ++spaces_ > kMaxSpaces) return false;
    return true;
  }
  spaces_ = 0;
  if (done_) return false;  // only whitespace after the object
  if (!started_) {
    if (c != '{') return false;  // json_object: the top level is an object
    started_ = true;
    stack_.push_back('{');
    want_ = Want::kKeyOrClose;
    return true;
  }
  switch (want_) {
    case Want::kKeyOrClose:
      if (c == '}') {
        stack_.pop_back();
        return end_value();
      }
      [[fallthrough]];
    case Want::kKey:
      if (c != '"') return false;
      lex_ = Lex::kString;
      key_ = true;
      return true;
    case Want::kColon:
      if (c != ':') return false;
      want_ = Want::kValue;
      return true;
    case Want::kCommaOrClose:
      if (c == ',') {
        want_ = stack_.back() == '{' ? Want::kKey : Want::kValue;
        return true;
      }
      if ((c == '}' && stack_.back() == '{') || (c == ']' && stack_.back() == '[')) {
        stack_.pop_back();
        return end_value();
      }
      return false;
    case Want::kValue:
      if (c == ']' && just_opened_array_) {  // "[]"
        just_opened_array_ = false;
        stack_.pop_back();
        return end_value();
      }
      just_opened_array_ = false;
      if (c == '{' || c == '[') {
        if (static_cast<int>(stack_.size()) >= kMaxDepth) return false;
        stack_.push_back(c);
        want_ = c == '{' ? Want::kKeyOrClose : Want::kValue;
        just_opened_array_ = c == '[';
        return true;
      }
      if (c == '"') {
        lex_ = Lex::kString;
        return true;
      }
      if (c == '-' || is_digit(c)) {
        lex_ = Lex::kNumber;
        num_state_ = c == '-' ? 1 : c == '0' ? 2 : 3;
        num_digits_ = num_state_ == 3 ? 1 : 0;
        return true;
      }
      if (c == 't' || c == 'f' || c == 'n') {
        literal_ = c == 't' ? "true" : c == 'f' ? "false" : "null";
        literal_pos_ = 1;
        lex_ = Lex::kLiteral;
        return true;
      }
      return false;
  }
  return false;
}

}  // namespace strata
