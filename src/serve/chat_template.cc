#include "serve/chat_template.h"

#include <cctype>

namespace strata {

namespace {
constexpr const char* kBos = "<｜begin▁of▁sentence｜>";
constexpr const char* kEos = "<｜end▁of▁sentence｜>";
constexpr const char* kUser = "<｜User｜>";
constexpr const char* kAssistant = "<｜Assistant｜>";
}  // namespace

ChatFormat chat_format_for_architecture(const std::string& architecture) {
  std::string a;
  for (char c : architecture) a += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return a.rfind("deepseek", 0) == 0 ? ChatFormat::kDeepSeek : ChatFormat::kPlain;
}

StatusOr<std::string> render_chat(ChatFormat format, const std::vector<ChatMessage>& messages,
                                  const ChatTemplateOptions& options) {
  if (messages.empty()) return invalid_argument("messages must not be empty");
  for (const ChatMessage& m : messages) {
    if (m.role != "system" && m.role != "developer" && m.role != "user" &&
        m.role != "assistant") {
      return invalid_argument("unsupported message role '{}'", m.role);
    }
  }
  std::string out;
  if (format == ChatFormat::kPlain) {
    for (const ChatMessage& m : messages) {
      out += (m.role == "developer" ? std::string("system") : m.role) + ": " + m.content + "\n";
    }
    if (options.add_generation_prompt) out += "assistant:";
    return out;
  }
  out = kBos;
  for (const ChatMessage& m : messages) {
    if (m.role == "system" || m.role == "developer") out += m.content;
  }
  for (const ChatMessage& m : messages) {
    if (m.role == "user") {
      out += kUser;
      out += m.content;
    } else if (m.role == "assistant") {
      out += kAssistant;
      out += "</think>";
      out += m.content;
      out += kEos;
    }
  }
  if (options.add_generation_prompt) {
    out += kAssistant;
    out += options.thinking ? "<think>" : "</think>";
  }
  return out;
}

}  // namespace strata
