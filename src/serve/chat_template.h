// Chat templates, written in C++ (no template engine): messages -> prompt text.
//
// kDeepSeek (DeepSeek V4 chat format; role markers are special tokens), rendered by
// render_deepseek_v4_prompt (serve/deepseek_v4_parsers.h, after DeepSeek's encoding_dsv4.py):
//   <｜begin▁of▁sentence｜>{system}
//   <｜User｜>{user}<｜Assistant｜></think>{assistant}<｜end▁of▁sentence｜> ...
//   <｜User｜>{last user}<｜Assistant｜></think>      (generation prompt, non-thinking mode)
// With thinking = true the generation prompt ends in "<think>" instead of "</think>", and
// earlier assistant turns keep "</think>" before their content (their reasoning dropped).
// Tools (options.tools_json) go into the system message as a "## Tools" section; assistant
// tool calls become DSML blocks and tool results <tool_result> blocks.
//
// kPlain (for the Llama demo models, which have no chat format):
//   "{role}: {content}\n" per message, then "assistant:" as the generation prompt.
//   The caller prepends BOS as a token id.
//
// Errors: InvalidArgument for an unknown role, an empty message list, tools on kPlain, or
// malformed tools / tool calls.
// Thread safety: pure functions.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace strata {

// One OpenAI tool call: {"id", "type": "function", "function": {"name", "arguments"}}.
// `arguments` is a JSON object text.
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;
  bool operator==(const ToolCall&) const = default;
};

// One chat message. Roles: "system", "developer", "user", "assistant", and for the DeepSeek
// format also "tool" (a tool result) and "latest_reminder".
struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string r, std::string c) : role(std::move(r)), content(std::move(c)) {}
  std::string role;
  std::string content;
  std::string reasoning_content;     // assistant; kept only where DeepSeek's encoder keeps it
  std::vector<ToolCall> tool_calls;  // assistant; `arguments` as the client sent it (JSON text)
  std::string tool_call_id;          // tool; orders tool results by call order
};

enum class ChatFormat { kDeepSeek, kPlain };

struct ChatTemplateOptions {
  bool add_generation_prompt = true;  // kPlain only (the DeepSeek encoder always adds it)
  bool thinking = false;  // DeepSeek only
  std::string tools_json;  // DeepSeek only: the request's OpenAI `tools` array ("" = none)
};

// Chooses the format for a model architecture ("deepseek*" -> kDeepSeek, else kPlain).
ChatFormat chat_format_for_architecture(const std::string& architecture);

StatusOr<std::string> render_chat(ChatFormat format, const std::vector<ChatMessage>& messages,
                                  const ChatTemplateOptions& options = {});

}  // namespace strata
