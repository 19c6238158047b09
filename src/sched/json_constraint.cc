// JsonPrefix (see json_constraint.h).
#include "sched/json_constraint.h"


namespace strata {
namespace {
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
}  // namespace

bool JsonPrefix::end_value() {
  if (stack_.empty()) {
    done_ = true;  // the top-level object closed
    return true;
  }
  want_ = Want::kCommaOrClose;
  return true;
}

// Number states: 1 after '-', 2 after a leading 0, 3 in integer digits, 4 after '.', 5 in
// fraction digits, 6 after e/E, 7 after the exponent sign, 8 in exponent digits. A number may
// end in states 2, 3, 5 and 8.
NumberStep json_number_step(uint8_t& st, uint8_t& digits, char c, bool integer_only,
                            int max_int_digits, int max_exp_digits) {
  using enum NumberStep;
  const bool dot = c == '.' && !integer_only, exp = (c == 'e' || c == 'E') && !integer_only;
  const bool can_end = st == 2 || st == 3 || st == 5 || st == 8;
  auto to = [&](uint8_t s) { st = s; return kTake; };
  switch (st) {
    case 0: if (c == '-') return to(1);
            [[fallthrough]];
    case 1: if (c == '0') return to(2);
            if (!is_digit(c)) return kReject;
            digits = 1;
            return to(3);
    case 3: if (is_digit(c)) return ++digits <= max_int_digits ? kTake : kReject;
            [[fallthrough]];
    case 2: if (dot) return to(4);
            [[fallthrough]];
    case 5: if (exp) return to(6);
            if (st == 5 && is_digit(c)) return kTake;
            return can_end ? kEnd : kReject;
    case 4: return is_digit(c) ? to(5) : kReject;
    case 6: if (c == '+' || c == '-') return to(7);
            [[fallthrough]];
    case 7: if (!is_digit(c)) return kReject;
            digits = 1;
            return to(8);
    case 8: if (is_digit(c)) return ++digits <= max_exp_digits ? kTake : kReject;
            return kEnd;
    default: return kReject;
  }
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
      switch (json_number_step(num_state_, num_digits_, c, false, kMaxIntDigits, kMaxExpDigits)) {
        case NumberStep::kTake: return true;
        case NumberStep::kReject: return false;
        case NumberStep::kEnd: break;
      }
      lex_ = Lex::kNone;
      return end_value() && feed(c);
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
        num_state_ = num_digits_ = 0;
        return json_number_step(num_state_, num_digits_, c, false, kMaxIntDigits, kMaxExpDigits) ==
               NumberStep::kTake;
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
