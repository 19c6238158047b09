#include "serve/chat_template.h"

#include "serve/deepseek_v4_parsers.h"

#include <cctype>

namespace strata {

ChatFormat chat_format_for_architecture(const std::string& architecture) {
  std::string a;
  for (char c : architecture) a += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return a.rfind("deepseek", 0) == 0 ? ChatFormat::kDeepSeek : ChatFormat::kPlain;
}

StatusOr<std::string> render_chat(ChatFormat format, const std::vector<ChatMessage>& messages,
                                  const ChatTemplateOptions& options) {
  if (messages.empty()) return invalid_argument("messages must not be empty");
  if (format == ChatFormat::kDeepSeek) {
    DeepseekV4PromptOptions po;
    po.thinking = options.thinking;
    return render_deepseek_v4_prompt(messages, options.tools_json, po);
  }
  if (!options.tools_json.empty() && options.tools_json != "[]")
    return invalid_argument("this model has no tool-call format: 'tools' need a DeepSeek model");
  std::string out;
  for (const ChatMessage& m : messages) {
    if (m.role != "system" && m.role != "developer" && m.role != "user" && m.role != "assistant")
      return invalid_argument("unsupported message role '{}'", m.role);
    out += (m.role == "developer" ? std::string("system") : m.role) + ": " + m.content + "\n";
  }
  if (options.add_generation_prompt) out += "assistant:";
  return out;
}

}  // namespace strata
