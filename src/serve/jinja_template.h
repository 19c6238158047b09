// JinjaTemplate: a Jinja2-subset renderer for Hugging Face `chat_template` strings.
//
// Renders the chat templates shipped in tokenizer_config.json the way transformers'
// apply_chat_template does: an ImmutableSandboxedEnvironment with trim_blocks=True,
// lstrip_blocks=True, the loopcontrols extension ({% break %} / {% continue %}), the
// {% generation %} tag, and the globals/filters transformers adds (raise_exception,
// strftime_now, and a tojson that is json.dumps(x, ensure_ascii=False, ...)). Values follow
// Python semantics (str(), repr(), ==, +, truthiness, json.dumps output), and a missing
// variable / attribute / key is Jinja's default Undefined (falsy, renders as "", an error
// when used further: attribute access, calls, arithmetic). See NOTES.md for what is and is
// not supported.
//
// Errors: parse() returns InvalidArgument with "line L, column C" for syntax errors and for
// unsupported constructs (unknown filters/tests, {% include %}, ...). render() returns
// InvalidArgument for runtime errors; for raise_exception(msg) the status message is exactly
// msg. A template that hits a JinjaRenderOptions limit (output size, work, loop iterations,
// macro recursion) gets ResourceExhausted: hostile templates end in an error, never a crash.
//
// Key order: JSON objects keep the order of the json value passed in. nlohmann::json sorts
// object keys; pass an nlohmann::ordered_json (parsed from the request body) when the order
// must match Python's (e.g. tool schemas rendered with tojson).
//
// Thread safety: a parsed JinjaTemplate is immutable; render() is const and may be called
// from many threads at once. Copies share the parsed program.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace strata {

struct JinjaRenderOptions {
  // Longest rendered text, and longest string any expression may build.
  size_t max_output_bytes = size_t{16} << 20;
  // Bytes produced by all string/list operations of one render, added up.
  size_t max_work_bytes = size_t{512} << 20;
  // Loop iterations plus macro calls of one render.
  uint64_t max_steps = 1'000'000;
  // Nested macro calls.
  int max_call_depth = 64;
  // Nested statements + expressions being evaluated at once (guards the C++ stack).
  int max_eval_depth = 1000;
  // Clock of strftime_now(): unset = the wall clock in local time (as transformers does);
  // set = this many seconds since the epoch, formatted in UTC (for reproducible tests).
  std::optional<int64_t> now_unix_seconds;
};

namespace jinja_detail {
struct Program;
}  // namespace jinja_detail

class JinjaTemplate {
 public:
  // Parses once; InvalidArgument ("line L, column C: ...") on a syntax error or unsupported
  // construct.
  static StatusOr<JinjaTemplate> parse(std::string_view source);

  // `context` must be a JSON object; its members become the template's variables.
  StatusOr<std::string> render(const nlohmann::json& context,
                               const JinjaRenderOptions& options = {}) const;
  StatusOr<std::string> render(const nlohmann::ordered_json& context,
                               const JinjaRenderOptions& options = {}) const;

 private:
  explicit JinjaTemplate(std::shared_ptr<const jinja_detail::Program> program)
      : program_(std::move(program)) {}

  std::shared_ptr<const jinja_detail::Program> program_;
};

}  // namespace strata
