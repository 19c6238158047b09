// ChoiceStreams with a chat parser, fed scripted engine events (RequestStream::push): the
// non-streaming message and the streamed deltas of a DeepSeek V4 answer with reasoning and a
// DSML tool call agree field by field, whatever the event chunking.
#include "serve/choice_streams.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>
#include <string>
#include <vector>

namespace strata {
namespace {

using json = nlohmann::json;

const std::string kOutput =
    "Let me check the weather.</think>It is sunny.\n\n<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

// The output as engine events of random sizes (byte boundaries anywhere), then the end.
std::shared_ptr<RequestStream> scripted(uint64_t seed, FinishReason reason) {
  auto s = std::make_shared<RequestStream>(1, nullptr);
  std::mt19937_64 rng(seed);
  size_t pos = 0;
  while (pos < kOutput.size()) {
    const size_t n = std::min<size_t>(1 + rng() % 9, kOutput.size() - pos);
    RequestEvent e;
    e.text = kOutput.substr(pos, n);
    e.tokens = {static_cast<int32_t>(pos)};
    pos += n;
    s->push(std::move(e));
  }
  RequestEvent end;
  end.finished = true;
  end.finish_reason = reason;
  end.prompt_tokens = 5;
  end.completion_tokens = 40;
  s->push(std::move(end));
  return s;
}

ChoiceRenderOptions chat_options() {
  ChoiceRenderOptions o;
  o.meta = {ApiEndpoint::kChat, "chatcmpl-test", 0, "m"};
  DeepseekV4ParserOptions p;
  p.thinking = true;
  p.tools_enabled = true;
  o.chat_parser = p;
  return o;
}

TEST(ChoiceStreams, ParsedChatStreamingEqualsNonStreaming) {
  ChoiceStreams whole({ChoiceRun{0, 0, scripted(1, FinishReason::kStop), {}}}, chat_options());
  auto body = whole.collect(nullptr);
  ASSERT_TRUE(body.ok()) << body.status().to_string();
  const json j = json::parse(*body);
  const json& c = j["choices"][0];
  EXPECT_EQ(c["finish_reason"], "tool_calls");
  EXPECT_EQ(c["message"]["reasoning_content"], "Let me check the weather.");
  EXPECT_EQ(c["message"]["content"], "It is sunny.");
  ASSERT_EQ(c["message"]["tool_calls"].size(), 1u);
  const json& call = c["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()),
            json({{"city", "Paris"}, {"days", 3}}));

  for (uint64_t seed = 2; seed < 40; ++seed) {
    SCOPED_TRACE(seed);
    ChoiceStreams streamed({ChoiceRun{0, 0, scripted(seed, FinishReason::kStop), {}}}, chat_options());
    std::string sse;
    httplib::DataSink sink;
    bool done = false;
    sink.write = [&](const char* d, size_t n) {
      sse.append(d, n);
      return true;
    };
    sink.done = [&] { done = true; };
    for (int i = 0; i < 1000 && !done; ++i) ASSERT_TRUE(streamed.pump(sink));
    ASSERT_TRUE(done);
    std::string reasoning, content, name, args, id, finish;
    size_t at = 0;
    while ((at = sse.find("data: ", at)) != std::string::npos) {
      const size_t end = sse.find("\n\n", at);
      const std::string payload = sse.substr(at + 6, end - at - 6);
      at = end;
      if (payload == "[DONE]") break;
      const json chunk = json::parse(payload);
      const json& d = chunk["choices"][0]["delta"];
      if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
      if (d.contains("content")) content += d["content"].get<std::string>();
      if (d.contains("tool_calls")) {
        const json& tc = d["tool_calls"][0];
        EXPECT_EQ(tc["index"], 0);
        if (tc.contains("id")) id = tc["id"];
        if (tc["function"].contains("name")) name = tc["function"]["name"];
        const std::string frag = tc["function"].value("arguments", "");
        EXPECT_EQ(frag.find("DSML"), std::string::npos) << frag;
        args += frag;
      }
      if (!chunk["choices"][0]["finish_reason"].is_null()) finish = chunk["choices"][0]["finish_reason"];
    }
    EXPECT_EQ(reasoning, c["message"]["reasoning_content"]);
    EXPECT_EQ(content, c["message"]["content"]);
    EXPECT_EQ(name, call["function"]["name"]);
    EXPECT_EQ(args, call["function"]["arguments"]);
    EXPECT_EQ(id, call["id"]);  // same id seed (response id + choice index)
    EXPECT_EQ(finish, "tool_calls");
  }
}

// A stop by length keeps its reason even with calls; no parser: plain content.
TEST(ChoiceStreams, LengthFinishAndNoParser) {
  ChoiceStreams cut({ChoiceRun{0, 0, scripted(3, FinishReason::kLength), {}}}, chat_options());
  const json j = json::parse(*cut.collect(nullptr));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  ChoiceRenderOptions plain = chat_options();
  plain.chat_parser.reset();
  ChoiceStreams raw({ChoiceRun{0, 0, scripted(4, FinishReason::kStop), {}}}, plain);
  const json r = json::parse(*raw.collect(nullptr));
  EXPECT_EQ(r["choices"][0]["message"]["content"], kOutput);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
}

}  // namespace
}  // namespace strata
