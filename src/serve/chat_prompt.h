// The chat template a server renders conversations with (issue 24 item 13), chosen at start:
//   1. --chat-template VALUE: a file holding a Jinja chat template, or (when no such file
//      exists) the template text itself, as vLLM takes it;
//   2. else, for a model without a built-in format, the model directory's
//      tokenizer_config.json `chat_template` (a string, or a list of {name, template} whose
//      "default" entry is used);
//   3. else the built-in format (serve/chat_template.h: DeepSeek's own encoder for DeepSeek
//      V4/V4.1, "role: text" lines otherwise).
// A Jinja template is rendered by serve/jinja_template.h with what transformers'
// apply_chat_template passes: messages (text content parts joined into one string, vLLM's
// "string" content format) and tools from the request (key order kept), the
// bos_token / eos_token strings of tokenizer_config.json (else the tokenizer's),
// add_generation_prompt = true, and the request's chat_template_kwargs.
// Errors: a file that cannot be read, a tokenizer_config.json that does not parse, or a
// template that does not parse: InvalidArgument naming the source (at start-up); a template
// that cannot render a request (raise_exception, an undefined used further): InvalidArgument
// with the template's message (HTTP 400).
// Thread safety: a ChatPrompt is immutable after load(); render() is const and reentrant.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "model/tokenizer.h"
#include "serve/jinja_template.h"

namespace strata {

class ChatPrompt {
 public:
  // `flag`: --chat-template ("" = none); `builtin`: the model has a built-in format (then the
  // checkpoint's template is not used). Returns null when the built-in format applies.
  static StatusOr<std::shared_ptr<const ChatPrompt>> load(const std::string& flag,
                                                          const std::string& model_dir,
                                                          bool builtin, const Tokenizer* tokenizer);
  // Renders the conversation of a chat request body (JSON text, already validated).
  StatusOr<std::string> render(std::string_view request_body) const;
  // Where the template came from ("--chat-template FILE", "tokenizer_config.json", ...).
  const std::string& origin() const { return origin_; }

 private:
  JinjaTemplate template_;
  std::string origin_;
  std::string bos_token_, eos_token_;
  ChatPrompt(JinjaTemplate t) : template_(std::move(t)) {}
};

}  // namespace strata
