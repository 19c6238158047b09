// --reasoning-parser / --tool-call-parser deepseek_v4 through the real server on the tiny
// V4.1 model (issue 24 item 14). Its stand-in tokenizer has no think or DSML tokens, so the
// model never writes markup; what is checked here is the wiring: in thinking mode the whole
// generation is reasoning_content (no closing tag came), equal to the content a server
// without parsers returns for the same request, streamed deltas join to the same text,
// `tools` are accepted only with the tool-call parser, and the flags refuse a non-DeepSeek
// model. (The parsing itself: serve/deepseek_v4_parsers_test.cc, serve/choice_streams_test.cc.)
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "runner_fixtures.h"
#include "serve/serving_stack.h"
#include "serve/test_http_client.h"

namespace strata {
namespace {

using json = nlohmann::json;
using testing::http_post;

std::unique_ptr<ServingStack> start(const std::string& model, bool parsers) {
  ServeOptions o;
  o.model_dir = testing::model_dir(model);
  o.http.host = "127.0.0.1";
  o.http.port = 0;
  o.runner.threads = 1;
  if (parsers) o.http.reasoning_parser = o.http.tool_call_parser = "deepseek_v4";
  auto s = ServingStack::start(o);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(s).value() : nullptr;
}

TEST(ServeParsers, ReasoningContentAndToolsOnV41Tiny) {
  auto parsed = start("deepseek-v41-tiny", true);
  auto plain = start("deepseek-v41-tiny", false);
  ASSERT_TRUE(parsed && plain);
  json req = {{"messages", {{{"role", "user"}, {"content", "tok1"}}}}, {"max_tokens", 8},
              {"temperature", 0}, {"chat_template_kwargs", {{"thinking", true}}}};
  const auto a = http_post(parsed->port(), "/v1/chat/completions", req.dump());
  const auto b = http_post(plain->port(), "/v1/chat/completions", req.dump());
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(b.status, 200) << b.body;
  const json am = json::parse(a.body)["choices"][0]["message"];
  const json bm = json::parse(b.body)["choices"][0]["message"];
  EXPECT_EQ(am["reasoning_content"], bm["content"]);
  // The stand-in tokenizer maps the chat text to its unknown token: the response says so.
  const json bj = json::parse(b.body);
  ASSERT_TRUE(bj.contains("warnings")) << b.body;
  EXPECT_NE(bj["warnings"][0].get<std::string>().find("unknown token"), std::string::npos);
  // A prompt of known words has no warning.
  const auto known = http_post(plain->port(), "/v1/completions",
                               json({{"prompt", "tok0"}, {"max_tokens", 2}}).dump());
  ASSERT_EQ(known.status, 200) << known.body;
  EXPECT_FALSE(json::parse(known.body).contains("warnings")) << known.body;
  EXPECT_EQ(am["content"], "");
  EXPECT_FALSE(bm.contains("reasoning_content"));
  // Non-thinking: everything is content, no reasoning.
  req["chat_template_kwargs"]["thinking"] = false;
  const json c = json::parse(http_post(parsed->port(), "/v1/chat/completions", req.dump()).body);
  const json d = json::parse(http_post(plain->port(), "/v1/chat/completions", req.dump()).body);
  EXPECT_EQ(c["choices"][0]["message"]["content"], d["choices"][0]["message"]["content"]);
  EXPECT_TRUE(c["choices"][0]["message"]["reasoning_content"].is_null());
  // Streaming: the reasoning deltas join to the same text.
  req["chat_template_kwargs"]["thinking"] = true;
  req["stream"] = true;
  const auto s = http_post(parsed->port(), "/v1/chat/completions", req.dump());
  ASSERT_TRUE(s.done);
  std::string reasoning;
  for (const std::string& p : s.data) {
    const json chunk = json::parse(p);
    const json& delta = chunk["choices"][0]["delta"];
    if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"].get<std::string>();
  }
  EXPECT_EQ(reasoning, am["reasoning_content"]);
  // Tools: accepted with the parser (rendered into the prompt: chat_template_test checks the
  // text; this tokenizer maps any chat to one token), refused without it; forced tool
  // choices and tools on completions are 400s.
  json tools = json::array({{{"type", "function"},
                             {"function", {{"name", "get_weather"}, {"description", "tok2 tok3"},
                                           {"parameters", {{"type", "object"}}}}}}});
  json treq = {{"messages", {{{"role", "user"}, {"content", "tok1"}}}}, {"max_tokens", 4},
               {"temperature", 0}, {"tools", tools}};
  const auto t = http_post(parsed->port(), "/v1/chat/completions", treq.dump());
  ASSERT_EQ(t.status, 200) << t.body;
  EXPECT_EQ(http_post(plain->port(), "/v1/chat/completions", treq.dump()).status, 400);
  treq["tool_choice"] = "required";
  EXPECT_EQ(http_post(parsed->port(), "/v1/chat/completions", treq.dump()).status, 400);
  EXPECT_EQ(http_post(parsed->port(), "/v1/completions",
                      json({{"prompt", {1, 2}}, {"tools", tools}}).dump()).status, 400);
}

TEST(ServeParsers, RefusedOnANonDeepseekModel) {
  ServeOptions o;
  o.model_dir = testing::model_dir("stories260K");
  o.http.port = 0;
  o.http.reasoning_parser = "deepseek_v4";
  auto s = ServingStack::start(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("DeepSeek"), std::string::npos) << s.status().message();
}

}  // namespace
}  // namespace strata
