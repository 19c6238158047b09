// StopChecker: finds stop strings in a request's streamed text.
//
// Text arrives in pieces; a piece is released only when no stop string can still start
// inside it: push() holds back the longest tail of the text that is a prefix of some stop
// string. When a stop string completes, push() returns the text before its earliest
// occurrence and matched() becomes true; the stop string and anything after it are dropped
// (OpenAI semantics). Inputs are whole UTF-8 characters (StreamDecoder output), and a held
// tail always starts at a character boundary because stop strings are valid UTF-8.
//
// Thread safety: one instance per request; not thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace strata {

class StopChecker {
 public:
  explicit StopChecker(std::vector<std::string> stops);
  // Adds text; returns the text that may be emitted now.
  std::string push(std::string_view text);
  bool matched() const { return matched_; }
  // Returns and clears the held-back text (when the request ends for another reason).
  std::string flush();

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool matched_ = false;
};

}  // namespace strata
