// ChatPrompt (see chat_prompt.h).
#include "serve/chat_prompt.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace strata {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A tokenizer_config.json special-token value: a string or an AddedToken {"content": ...}.
std::string token_string(const ojson& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return "";
}

}  // namespace

StatusOr<std::shared_ptr<const ChatPrompt>> ChatPrompt::load(const std::string& flag,
                                                             const std::string& model_dir,
                                                             bool builtin,
                                                             const Tokenizer* tokenizer) {
  std::string source, origin;
  ojson config;
  const fs::path cfg_path = fs::path(model_dir) / "tokenizer_config.json";
  std::error_code ec;
  if (fs::exists(cfg_path, ec)) {
    config = ojson::parse(read_all(cfg_path), nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded())
      return invalid_argument("{}: malformed JSON", cfg_path.string());
  }
  if (!flag.empty()) {
    if (fs::is_regular_file(flag, ec)) {
      source = read_all(flag);
      origin = "--chat-template " + flag;
    } else if (flag.find("{%") != std::string::npos || flag.find("{{") != std::string::npos) {
      source = flag;
      origin = "--chat-template (inline)";
    } else {
      return invalid_argument("--chat-template '{}': no such file, and not a template", flag);
    }
  } else if (!builtin && config.is_object() && config.contains("chat_template")) {
    const ojson& t = config["chat_template"];
    if (t.is_string()) {
      source = t.get<std::string>();
    } else if (t.is_array()) {
      for (const ojson& e : t)
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
            e["template"].is_string())
          source = e["template"].get<std::string>();
      if (source.empty())
        return invalid_argument("{}: chat_template lists no \"default\" template", cfg_path.string());
    } else {
      return invalid_argument("{}: chat_template must be a string or a list", cfg_path.string());
    }
    origin = cfg_path.string();
  } else {
    return std::shared_ptr<const ChatPrompt>();  // the built-in format
  }
  StatusOr<JinjaTemplate> t = JinjaTemplate::parse(source);
  if (!t.ok()) return t.status().with_context("chat template from " + origin);
  std::shared_ptr<ChatPrompt> p(new ChatPrompt(std::move(*t)));
  p->origin_ = origin;
  if (config.is_object()) {
    if (config.contains("bos_token")) p->bos_token_ = token_string(config["bos_token"]);
    if (config.contains("eos_token")) p->eos_token_ = token_string(config["eos_token"]);
  }
  if (tokenizer != nullptr) {
    if (p->bos_token_.empty() && tokenizer->bos_id()) p->bos_token_ = tokenizer->id_to_token(*tokenizer->bos_id());
    if (p->eos_token_.empty() && tokenizer->eos_id()) p->eos_token_ = tokenizer->id_to_token(*tokenizer->eos_id());
  }
  return std::shared_ptr<const ChatPrompt>(std::move(p));
}

StatusOr<std::string> ChatPrompt::render(std::string_view request_body) const {
  const ojson body = ojson::parse(request_body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object() || !body.contains("messages"))
    return invalid_argument("chat request without messages");
  ojson ctx = ojson::object();
  // chat_template_kwargs first, so the fixed fields below win.
  if (body.contains("chat_template_kwargs") && body["chat_template_kwargs"].is_object())
    for (auto it = body["chat_template_kwargs"].begin(); it != body["chat_template_kwargs"].end(); ++it)
      ctx[it.key()] = it.value();
  // Text content parts become one string (vLLM's "string" content format: the templates of
  // text models concatenate content as a string).
  ojson messages = body["messages"];
  for (ojson& m : messages) {
    if (!m.is_object() || !m.contains("content") || !m["content"].is_array()) continue;
    std::string text;
    for (const ojson& part : m["content"])
      if (part.is_object() && part.value("type", "") == "text" && part.contains("text") &&
          part["text"].is_string())
        text += part["text"].get<std::string>();
    m["content"] = text;
  }
  ctx["messages"] = std::move(messages);
  const bool tools = body.contains("tools") && body["tools"].is_array() && !body["tools"].empty() &&
                     body.value("tool_choice", ojson("auto")) != "none";
  ctx["tools"] = tools ? body["tools"] : ojson(nullptr);
  ctx["add_generation_prompt"] = true;
  ctx["bos_token"] = bos_token_;
  ctx["eos_token"] = eos_token_;
  StatusOr<std::string> out = template_.render(ctx);
  if (!out.ok())
    return invalid_argument("the chat template ({}) cannot render this conversation: {}", origin_,
                            out.status().message());
  return out;
}

}  // namespace strata
