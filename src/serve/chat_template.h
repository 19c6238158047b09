// Chat templates, written in C++ (no template engine): messages -> prompt text.
//
// kDeepSeek (DeepSeek V3.x / V4 chat format; role markers are special tokens):
//   <｜begin▁of▁sentence｜>{system messages, concatenated}
//   <｜User｜>{user}<｜Assistant｜></think>{assistant}<｜end▁of▁sentence｜> ...
//   <｜User｜>{last user}<｜Assistant｜></think>      (generation prompt, non-thinking mode)
// With thinking = true the generation prompt ends in "<think>" instead of "</think>", and
// earlier assistant turns keep "</think>" before their content (their reasoning dropped).
// Source: DeepSeek's published chat format (tokenizer_config.json chat_template of
// DeepSeek-V3.1 and encoding_dsv32.py); the text here is written from that description.
//
// kPlain (for the Llama demo models, which have no chat format):
//   "{role}: {content}\n" per message, then "assistant:" as the generation prompt.
//   The caller prepends BOS as a token id.
//
// Errors: InvalidArgument for an unknown role or an empty message list.
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace strata {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant" (also "developer" = system)
  std::string content;
};

enum class ChatFormat { kDeepSeek, kPlain };

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  bool thinking = false;  // DeepSeek only
};

// Chooses the format for a model architecture ("deepseek*" -> kDeepSeek, else kPlain).
ChatFormat chat_format_for_architecture(const std::string& architecture);

StatusOr<std::string> render_chat(ChatFormat format, const std::vector<ChatMessage>& messages,
                                  const ChatTemplateOptions& options = {});

}  // namespace strata
