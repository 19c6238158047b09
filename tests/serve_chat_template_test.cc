// Chat templates through the real server (issue 24 item 13): --chat-template FILE and a
// checkpoint's tokenizer_config.json chat_template. The prompt ids the server computes equal
// the tokenizer's encoding of what Python's Jinja2 rendered for the same conversation
// (testdata/chat_templates/expected.json, made by its make_expected.py); a conversation the
// template refuses (raise_exception) is a 400 carrying the template's message; a template that
// does not parse stops the server at start.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "model/tokenizer.h"
#include "runner_fixtures.h"
#include "serve/serving_stack.h"
#include "serve/test_http_client.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

fs::path templates_dir() {
  const char* src = std::getenv("STRATA_SOURCE_DIR");
  return fs::path(src ? src : STRATA_SOURCE_DIR) / "testdata" / "chat_templates";
}

const ojson& expected() {
  static const ojson e = [] {
    std::ifstream in(templates_dir() / "expected.json");
    return ojson::parse(in);
  }();
  return e;
}

// The Jinja2 output of `tmpl` for `conversation` with a generation prompt (no tools).
const ojson& expected_case(const std::string& tmpl, const std::string& conversation) {
  for (const ojson& c : expected().at("cases"))
    if (c["template"] == tmpl && c["conversation"] == conversation && c["name"] == conversation &&
        !c["with_tools"].get<bool>())
      return c;
  ADD_FAILURE() << "no case " << tmpl << " / " << conversation;
  static const ojson none;
  return none;
}

std::unique_ptr<ServingStack> start(const std::string& dir, const std::string& chat_template,
                                    Status* error = nullptr) {
  ServeOptions o;
  o.model_dir = dir;
  o.http.host = "127.0.0.1";
  o.http.port = 0;
  o.runner.threads = 1;
  o.http.chat_template = chat_template;
  auto s = ServingStack::start(o);
  if (error) *error = s.ok() ? Status() : s.status();
  return s.ok() ? std::move(s).value() : nullptr;
}

// Prompt ids of a chat request (max_tokens 1, return_token_ids).
testing::HttpReply chat(int port, const ojson& messages) {
  ojson b = {{"messages", messages}, {"max_tokens", 1}, {"return_token_ids", true}};
  return testing::http_post(port, "/v1/chat/completions", b.dump());
}

TEST(ServeChatTemplate, FlagTemplateMatchesJinja2) {
  const std::string tmpl = "teknium-OpenHermes-2.5-Mistral-7B.jinja";
  auto s = start(testing::model_dir("stories260K"), (templates_dir() / "templates" / tmpl).string());
  ASSERT_TRUE(s);
  auto tok = load_tokenizer_from_dir(testing::model_dir("stories260K"));
  ASSERT_TRUE(tok.ok());
  for (const char* conv : {"multi_turn", "multi_turn_no_system", "special_text", "user_only"}) {
    SCOPED_TRACE(conv);
    const ojson& c = expected_case(tmpl, conv);
    const auto r = chat(s->port(), expected().at("conversations").at(conv));
    ASSERT_EQ(r.status, 200) << r.body;
    const std::vector<int32_t> want = (*tok)->encode(c["output"].get<std::string>(), true);
    EXPECT_EQ(json::parse(r.body)["prompt_token_ids"].get<std::vector<int32_t>>(), want);
  }
  // Text content parts are joined into a string first (vLLM's "string" content format).
  const ojson parts = ojson::array(
      {{{"role", "user"},
        {"content", ojson::array({{{"type", "text"}, {"text", "Hel"}}, {{"type", "text"}, {"text", "lo!"}}})}}});
  const auto joined = chat(s->port(), parts);
  ASSERT_EQ(joined.status, 200) << joined.body;
  EXPECT_EQ(json::parse(joined.body)["prompt_token_ids"].get<std::vector<int32_t>>(),
            (*tok)->encode(expected_case(tmpl, "user_only")["output"].get<std::string>(), true));
}

TEST(ServeChatTemplate, CheckpointTemplateAndItsErrors) {
  const std::string tmpl = "google-gemma-2-2b-it.jinja";
  const fs::path dir = fs::temp_directory_path() / ("strata-chat-tmpl-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::copy(testing::model_dir("stories260K"), dir);
  std::ifstream in(templates_dir() / "templates" / tmpl);
  const std::string source((std::istreambuf_iterator<char>(in)), {});
  {
    std::ofstream cfg(dir / "tokenizer_config.json");
    cfg << ojson({{"chat_template", source}, {"bos_token", "<bos>"},
                  {"eos_token", {{"content", "<eos>"}, {"special", true}}}}).dump();
  }
  auto s = start(dir.string(), "");
  ASSERT_TRUE(s);
  auto tok = load_tokenizer_from_dir(dir.string());
  ASSERT_TRUE(tok.ok());
  for (const char* conv : {"user_only", "multi_turn_no_system"}) {
    SCOPED_TRACE(conv);
    const auto r = chat(s->port(), expected().at("conversations").at(conv));
    ASSERT_EQ(r.status, 200) << r.body;
    const std::vector<int32_t> want =
        (*tok)->encode(expected_case(tmpl, conv)["output"].get<std::string>(), true);
    EXPECT_EQ(json::parse(r.body)["prompt_token_ids"].get<std::vector<int32_t>>(), want);
  }
  // Gemma's template refuses a system message (raise_exception): 400 with its words.
  const auto r = chat(s->port(), expected().at("conversations").at("system_user"));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("System role not supported"), std::string::npos) << r.body;
  s.reset();
  fs::remove_all(dir);
}

TEST(ServeChatTemplate, BadTemplatesStopTheStart) {
  Status st;
  EXPECT_FALSE(start(testing::model_dir("stories260K"), "{% if %}oops", &st));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("line 1"), std::string::npos) << st.message();
  EXPECT_FALSE(start(testing::model_dir("stories260K"), "/no/such/file.jinja", &st));
  EXPECT_NE(st.message().find("no such file"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace strata
