#include "serve/deepseek_v4_parsers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata {
namespace {

// ---- DSML spelled out by hand (DeepSeek V4, encoding_dsv4.py) ----
const std::string kEosTok = "<｜end▁of▁sentence｜>";
const std::string kS = "<｜DSML｜tool_calls>";
const std::string kE = "</｜DSML｜tool_calls>";
const std::string kInvEnd = "</｜DSML｜invoke>";

std::string inv(const std::string& name) { return "<｜DSML｜invoke name=\"" + name + "\">"; }

std::string par(const std::string& name, bool is_string, const std::string& value) {
  return "<｜DSML｜parameter name=\"" + name + "\" string=\"" + (is_string ? "true" : "false") +
         "\">" + value + "</｜DSML｜parameter>";
}

// One invoke as DeepSeek's encoder lays it out.
std::string invoke(const std::string& name, const std::vector<std::string>& params) {
  std::string s = inv(name) + "\n";
  for (size_t i = 0; i < params.size(); ++i) s += (i ? "\n" : "") + params[i];
  return s + "\n" + kInvEnd;
}

std::string block(const std::vector<std::string>& invokes) {
  std::string s = kS + "\n";
  for (size_t i = 0; i < invokes.size(); ++i) s += (i ? "\n" : "") + invokes[i];
  return s + "\n" + kE;
}

const std::string kSeed = "req-42";

DeepseekV4ParserOptions opts(bool thinking, bool tools, DsmlDialect d = DsmlDialect::kV4) {
  DeepseekV4ParserOptions o;
  o.thinking = thinking;
  o.tools_enabled = tools;
  o.dialect = d;
  o.id_seed = kSeed;
  return o;
}

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80                ? 1
               : (c & 0xE0) == 0xC0 ? 2
               : (c & 0xF0) == 0xE0 ? 3
               : (c & 0xF8) == 0xF0 ? 4
                                    : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

// Feeds `text` cut at `cuts` (sorted offsets), checks the per-delta invariants, and returns
// the accumulated result.
ParsedChatOutput run_stream(const std::string& text, const DeepseekV4ParserOptions& o,
                            const std::vector<size_t>& cuts, bool well_formed,
                            std::string* failure) {
  DeepseekV4StreamParser p(o);
  std::vector<ChatDelta> all;
  size_t prev = 0;
  for (size_t c : cuts) {
    auto d = p.feed(std::string_view(text).substr(prev, c - prev));
    all.insert(all.end(), d.begin(), d.end());
    prev = c;
  }
  auto d = p.feed(std::string_view(text).substr(prev));
  all.insert(all.end(), d.begin(), d.end());
  d = p.finish();
  all.insert(all.end(), d.begin(), d.end());
  EXPECT_TRUE(p.feed("more").empty());

  ParsedChatOutput out;
  int begun = 0;
  for (const ChatDelta& x : all) {
    auto fail = [&](const std::string& why) {
      if (failure->empty()) *failure = why + " in delta '" + x.text + "'";
    };
    if (x.type != ChatDelta::Type::kToolCallBegin && x.text.empty()) fail("empty delta");
    if (valid_utf8(text) && !valid_utf8(x.text)) fail("invalid UTF-8");
    if (x.text.find(kEosTok) != std::string::npos) fail("EOS");
    if (x.type == ChatDelta::Type::kToolCallBegin) {
      if (x.tool_index != begun) fail("tool index out of order");
      if (x.tool_call_id != make_tool_call_id(kSeed, x.tool_index)) fail("tool id");
      ++begun;
    }
    if (x.type == ChatDelta::Type::kToolCallArguments) {
      if (x.tool_index != begun - 1) fail("arguments for a tool call that is not the latest");
      if (well_formed && (x.text.find("<｜") != std::string::npos ||
                          x.text.find("DSML") != std::string::npos)) {
        fail("markup in arguments");
      }
    }
    if (well_formed && x.text.find("DSML") != std::string::npos) fail("markup in a field");
    accumulate_delta(&out, x);
  }
  out.markup_error = p.markup_error();
  return out;
}

void expect_same(const ParsedChatOutput& want, const ParsedChatOutput& got,
                 const std::string& where) {
  ASSERT_EQ(want.reasoning_content, got.reasoning_content) << where;
  ASSERT_EQ(want.content, got.content) << where;
  ASSERT_EQ(want.tool_calls.size(), got.tool_calls.size()) << where;
  for (size_t i = 0; i < want.tool_calls.size(); ++i) {
    ASSERT_EQ(want.tool_calls[i].name, got.tool_calls[i].name) << where;
    ASSERT_EQ(want.tool_calls[i].id, got.tool_calls[i].id) << where;
    ASSERT_EQ(want.tool_calls[i].arguments, got.tool_calls[i].arguments) << where;
  }
  ASSERT_EQ(want.markup_error, got.markup_error) << where;
}

struct Case {
  std::string name;
  std::string text;
  bool thinking;
  bool tools;
  DsmlDialect dialect = DsmlDialect::kV4;
  bool well_formed = true;
};

const std::string kWeatherBlock = block(
    {invoke("get_weather", {par("location", true, "Beijing"), par("unit", true, "celsius")})});

const std::string kTypedBlock = block({
    invoke("search", {par("query", true, "杭州 \"天气\"\n第二行\\ 😀 tab\there"),
                      par("count", false, "5"),
                      par("filters", false, "{\"tags\": [\"a\", \"b\"], \"max\": 3}"),
                      par("flag", false, "true"), par("none", false, "null")}),
    invoke("calc", {par("expr", false, " 1.50 ")}),
});

std::vector<Case> all_cases() {
  return {
      {"plain", "Hello, world! 你好 😀", false, false},
      {"plain_tools_on", "Just an answer, no tools. <b> a < b </b>", false, true},
      {"think", "Let me think… 思考</think>The answer is 42.", true, false},
      {"think_leading_tag", "<think>reason</think>answer", true, false},
      {"think_unclosed", "I am still thinking 🤔 and never close", true, false},
      {"think_unclosed_tools", "still thinking, <｜DSML｜tool not really", true, true,
       DsmlDialect::kV4, false},
      {"nonthink_with_tags", "a</think>b<think>c", false, false},
      {"eos_end", "Answer." + kEosTok, false, false},
      {"eos_mid", "Ans" + kEosTok + "wer" + kEosTok, true, true},
      {"weather_think", "The user wants the weather.</think>\n\n" + kWeatherBlock + kEosTok, true,
       true},
      {"typed_two_calls", "Let me check both.\n\n" + kTypedBlock + kEosTok, false, true},
      {"implicit_end", "I will search 搜索.\n\n" + kWeatherBlock + kEosTok, true, true},
      {"implicit_end_then_think_end", "Plan.\n\n" + kWeatherBlock + "</think>", true, true},
      {"two_blocks", kWeatherBlock + "\n\n" + kTypedBlock, false, true},
      {"text_after_block", "Before.\n\n" + kWeatherBlock + "\n\nAnything else?", false, true},
      {"trailing_newlines", "Answer.\n\n", false, true},
      {"three_newlines", "a\n\n\n" + kWeatherBlock, false, true},
      {"empty_block", "Done.\n\n" + kS + "\n" + kE, false, true},
      {"no_params", block({invoke("ping", {})}), false, true},
      {"json_body", kS + "\n" + inv("f") + "\n{\"a\": 1, \"b\": [true]}\n" + kInvEnd + "\n" + kE,
       false, true},
      {"tools_off_keeps_markup", "x\n\n" + kWeatherBlock, false, false, DsmlDialect::kV4, false},
      {"lookalike_text", "x <｜User｜> <｜DSML｜tool y <｜DSML｜", false, true, DsmlDialect::kV4,
       false},
      {"v41", "Hi.\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"a\" "
              "string=\"true\">x</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>",
       false, true, DsmlDialect::kV41},
      {"v32_any", "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"g\">\n<｜DSML｜parameter "
                  "name=\"n\" string=\"false\">7</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
                  "</｜DSML｜function_calls>",
       false, true, DsmlDialect::kAny},
      // Malformed.
      {"bad_json_value", block({invoke("f", {par("x", false, "[1, 2")})}), false, true,
       DsmlDialect::kV4, false},
      {"garbage_after_start", "Hi\n\n" + kS + "\nnot a tool call\n" + kE, false, true,
       DsmlDialect::kV4, false},
      {"garbage_in_invoke",
       kS + "\n" + inv("f") + "\n" + par("a", true, "1") + "\noops\n" + kInvEnd + "\n" + kE, false,
       true, DsmlDialect::kV4, false},
      {"unclosed_invoke", "Sure.\n\n" + kS + "\n" + inv("f") + "\n" +
                              "<｜DSML｜parameter name=\"a\" string=\"true\">trunc 截",
       false, true, DsmlDialect::kV4, false},
      {"unclosed_json_param", kS + "\n" + inv("f") + "\n<｜DSML｜parameter name=\"a\" "
                                   "string=\"false\">{\"k\": 1",
       true, true, DsmlDialect::kV4, false},
      {"half_tag_at_end", "Text " + kS + "\n<｜DSML｜invoke na", false, true, DsmlDialect::kV4,
       false},
      {"missing_block_end", kWeatherBlock.substr(0, kWeatherBlock.size() - kE.size()), false,
       true, DsmlDialect::kV4, false},
      {"missing_string_attr",
       block({invoke("f", {"<｜DSML｜parameter name=\"n\">42</｜DSML｜parameter>",
                           "<｜DSML｜parameter name=\"s\">abc</｜DSML｜parameter>"})}),
       false, true, DsmlDialect::kV4, false},
      {"bad_invoke_tag", kS + "\n<｜DSML｜invoke nam=\"f\">\n" + kInvEnd + "\n" + kE, false, true,
       DsmlDialect::kV4, false},
  };
}

// ---- Exact non-streaming results ----

TEST(DeepseekV4Output, ReasoningSplit) {
  auto r = parse_deepseek_v4_output("Let me think.</think>The answer is 42.", true, false);
  EXPECT_EQ(r.reasoning_content, "Let me think.");
  EXPECT_EQ(r.content, "The answer is 42.");
  r = parse_deepseek_v4_output("<think>R</think>C", true, false);
  EXPECT_EQ(r.reasoning_content, "R");
  EXPECT_EQ(r.content, "C");
  r = parse_deepseek_v4_output("</think>C", true, false);
  EXPECT_EQ(r.reasoning_content, "");
  EXPECT_EQ(r.content, "C");
  // Thinking mode without </think>: vLLM (DeepSeekR1ReasoningParser) keeps it all reasoning.
  r = parse_deepseek_v4_output("never closes", true, true);
  EXPECT_EQ(r.reasoning_content, "never closes");
  EXPECT_EQ(r.content, "");
  // Non-thinking mode: everything is content, tags included.
  r = parse_deepseek_v4_output("no closing tag", false, false);
  EXPECT_EQ(r.content, "no closing tag");
  r = parse_deepseek_v4_output("a</think>b", false, true);
  EXPECT_EQ(r.reasoning_content, "");
  EXPECT_EQ(r.content, "a</think>b");
}

TEST(DeepseekV4Output, EosNeverReachesAField) {
  auto r = parse_deepseek_v4_output("Hel" + kEosTok + "lo" + kEosTok, false, false);
  EXPECT_EQ(r.content, "Hello");
  r = parse_deepseek_v4_output("R" + kEosTok, true, false);
  EXPECT_EQ(r.reasoning_content, "R");
  r = parse_deepseek_v4_output("R</think>" + kWeatherBlock + kEosTok, true, true);
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.tool_calls.size(), 1u);
}

TEST(DeepseekV4Output, WeatherToolCall) {
  auto r = parse_deepseek_v4_output(
      "The user wants the weather.</think>\n\n" + kWeatherBlock + kEosTok, opts(true, true));
  EXPECT_EQ(r.reasoning_content, "The user wants the weather.");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].id, make_tool_call_id(kSeed, 0));
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"location": "Beijing", "unit": "celsius"})");
  EXPECT_FALSE(r.markup_error);
  EXPECT_TRUE(nlohmann::json::accept(r.tool_calls[0].arguments));
}

TEST(DeepseekV4Output, TypedParametersAndTwoCalls) {
  auto r = parse_deepseek_v4_output("Let me check both.\n\n" + kTypedBlock, opts(false, true));
  EXPECT_EQ(r.content, "Let me check both.");
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].name, "search");
  EXPECT_EQ(r.tool_calls[0].arguments,
            R"({"query": "杭州 \"天气\"\n第二行\\ 😀 tab\there", "count": 5, )"
            R"("filters": {"tags": ["a", "b"], "max": 3}, "flag": true, "none": null})");
  EXPECT_EQ(r.tool_calls[1].name, "calc");
  EXPECT_EQ(r.tool_calls[1].arguments, R"({"expr": 1.50})");
  EXPECT_NE(r.tool_calls[0].id, r.tool_calls[1].id);
  auto j = nlohmann::json::parse(r.tool_calls[0].arguments);
  EXPECT_EQ(j["query"], "杭州 \"天气\"\n第二行\\ 😀 tab\there");
  EXPECT_EQ(j["filters"]["max"], 3);
}

TEST(DeepseekV4Output, ToolBlockEndsReasoning) {
  // vLLM DeepSeekV4ReasoningParser: a tool-calls block inside reasoning ends it.
  auto r = parse_deepseek_v4_output("I will search.\n\n" + kWeatherBlock, opts(true, true));
  EXPECT_EQ(r.reasoning_content, "I will search.");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  // ... and the first </think> after it is dropped (vLLM's partition).
  r = parse_deepseek_v4_output("Plan.\n\n" + kWeatherBlock + "</think>", opts(true, true));
  EXPECT_EQ(r.reasoning_content, "Plan.");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  // Without tools the block stays reasoning.
  r = parse_deepseek_v4_output("Plan.\n\n" + kWeatherBlock, opts(true, false));
  EXPECT_EQ(r.reasoning_content, "Plan.\n\n" + kWeatherBlock);
}

TEST(DeepseekV4Output, SeparatorsAndTextAroundBlocks) {
  auto r = parse_deepseek_v4_output("Answer.\n\n", opts(false, true));
  EXPECT_EQ(r.content, "Answer.\n\n");
  r = parse_deepseek_v4_output("a\n\n\n" + kWeatherBlock, opts(false, true));
  EXPECT_EQ(r.content, "a\n");
  r = parse_deepseek_v4_output("Before.\n\n" + kWeatherBlock + "\n\nAnything else?",
                               opts(false, true));
  EXPECT_EQ(r.content, "Before.Anything else?");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  r = parse_deepseek_v4_output(kWeatherBlock + "\n\n" + kTypedBlock, opts(false, true));
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.tool_calls.size(), 3u);
  EXPECT_EQ(r.tool_calls[2].name, "calc");
  r = parse_deepseek_v4_output("Done.\n\n" + kS + "\n" + kE, opts(false, true));
  EXPECT_EQ(r.content, "Done.");
  EXPECT_TRUE(r.tool_calls.empty());
  r = parse_deepseek_v4_output(block({invoke("ping", {})}), opts(false, true));
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, "{}");
}

TEST(DeepseekV4Output, ToolsOffOrOtherDialectIsContent) {
  auto r = parse_deepseek_v4_output("x\n\n" + kWeatherBlock, opts(false, false));
  EXPECT_EQ(r.content, "x\n\n" + kWeatherBlock);
  std::string v41 =
      "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"a\" "
      "string=\"true\">x</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";
  r = parse_deepseek_v4_output(v41, opts(false, true, DsmlDialect::kV4));
  EXPECT_EQ(r.content, v41);
  r = parse_deepseek_v4_output(v41, opts(false, true, DsmlDialect::kV41));
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"a": "x"})");
  r = parse_deepseek_v4_output(v41, opts(false, true, DsmlDialect::kAny));
  ASSERT_EQ(r.tool_calls.size(), 1u);
}

TEST(DeepseekV4Output, JsonBodyInvoke) {
  auto r = parse_deepseek_v4_output(
      kS + "\n" + inv("f") + "\n{\"a\": 1, \"b\": [true]}\n" + kInvEnd + "\n" + kE,
      opts(false, true));
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"a": 1, "b": [true]})");
  EXPECT_FALSE(r.markup_error);
}

TEST(DeepseekV4Output, MalformedMarkupKeepsText) {
  // Bad JSON in a string="false" parameter: the raw text becomes a JSON string.
  auto r = parse_deepseek_v4_output(block({invoke("f", {par("x", false, "[1, 2")})}),
                                    opts(false, true));
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"x": "[1, 2"})");
  EXPECT_TRUE(r.markup_error);

  // A block that fails before its first invoke goes back into content verbatim.
  std::string text = "Hi\n\n" + kS + "\nnot a tool call\n" + kE;
  r = parse_deepseek_v4_output(text, opts(false, true));
  EXPECT_EQ(r.content, text);
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_TRUE(r.markup_error);

  // Garbage after a call started: the call is closed, the rest is content.
  r = parse_deepseek_v4_output(
      kS + "\n" + inv("f") + "\n" + par("a", true, "1") + "\noops\n" + kInvEnd + "\n" + kE,
      opts(false, true));
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"a": "1"})");
  EXPECT_EQ(r.content, "oops\n" + kInvEnd + "\n" + kE);
  EXPECT_TRUE(r.markup_error);

  // Truncated stream inside a string parameter: closed as valid JSON.
  r = parse_deepseek_v4_output(
      "Sure.\n\n" + kS + "\n" + inv("f") + "\n<｜DSML｜parameter name=\"a\" string=\"true\">trunc",
      opts(false, true));
  EXPECT_EQ(r.content, "Sure.");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"a": "trunc"})");
  EXPECT_TRUE(r.markup_error);

  // Truncated inside a JSON parameter: not JSON yet, so a string.
  r = parse_deepseek_v4_output(
      kS + "\n" + inv("f") + "\n<｜DSML｜parameter name=\"a\" string=\"false\">{\"k\": 1",
      opts(false, true));
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"a": "{\"k\": 1"})");

  // A half-written tag at the end: everything is content.
  text = "Text " + kS + "\n<｜DSML｜invoke na";
  r = parse_deepseek_v4_output(text, opts(false, true));
  EXPECT_EQ(r.content, text);
  EXPECT_TRUE(r.tool_calls.empty());

  // Missing string attribute: JSON when it parses, else a string.
  r = parse_deepseek_v4_output(
      block({invoke("f", {"<｜DSML｜parameter name=\"n\">42</｜DSML｜parameter>",
                          "<｜DSML｜parameter name=\"s\">abc</｜DSML｜parameter>"})}),
      opts(false, true));
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"n": 42, "s": "abc"})");

  // Every argument string is valid JSON, whatever the markup.
  for (const Case& c : all_cases()) {
    auto out = parse_deepseek_v4_output(c.text, opts(c.thinking, c.tools, c.dialect));
    for (const ToolCall& t : out.tool_calls) {
      EXPECT_TRUE(nlohmann::json::accept(t.arguments)) << c.name << ": " << t.arguments;
    }
  }
}

TEST(DeepseekV4Output, ToolCallIds) {
  std::string id = make_tool_call_id("seed", 3);
  EXPECT_EQ(id.size(), 5u + 24u);
  EXPECT_EQ(id.rfind("call_", 0), 0u);
  EXPECT_EQ(id, make_tool_call_id("seed", 3));
  EXPECT_NE(id, make_tool_call_id("seed", 4));
  EXPECT_NE(id, make_tool_call_id("seeds", 3));
  // Without a seed, ids are random per parser but still well-formed.
  auto a = parse_deepseek_v4_output(kWeatherBlock, false, true);
  auto b = parse_deepseek_v4_output(kWeatherBlock, false, true);
  ASSERT_EQ(a.tool_calls.size(), 1u);
  EXPECT_NE(a.tool_calls[0].id, b.tool_calls[0].id);
  EXPECT_EQ(a.tool_calls[0].id.size(), 29u);
}

TEST(DeepseekV4Output, OpenAiJson) {
  ChatDelta begin;
  begin.type = ChatDelta::Type::kToolCallBegin;
  begin.tool_index = 0;
  begin.tool_call_id = "call_x";
  begin.tool_name = "f";
  EXPECT_EQ(chat_delta_to_openai(begin).dump(),
            R"({"tool_calls":[{"function":{"arguments":"","name":"f"},"id":"call_x",)"
            R"("index":0,"type":"function"}]})");
  ChatDelta args;
  args.type = ChatDelta::Type::kToolCallArguments;
  args.tool_index = 0;
  args.text = "{\"a\": ";
  EXPECT_EQ(chat_delta_to_openai(args).dump(),
            R"({"tool_calls":[{"function":{"arguments":"{\"a\": "},"index":0}]})");
  ChatDelta r;
  r.type = ChatDelta::Type::kReasoning;
  r.text = "hm";
  EXPECT_EQ(chat_delta_to_openai(r).dump(), R"({"reasoning_content":"hm"})");
  EXPECT_EQ(tool_calls_to_openai({{"call_1", "f", "{}"}}).dump(),
            R"([{"function":{"arguments":"{}","name":"f"},"id":"call_1","type":"function"}])");
}

// ---- Streaming == non-streaming for any split ----

void check_case_splits(const Case& c, const DeepseekV4ParserOptions& o, bool three_way,
                       int random_runs, uint32_t seed) {
  const std::string& t = c.text;
  const ParsedChatOutput want = parse_deepseek_v4_output(t, o);
  std::string failure;
  auto where = [&](const std::vector<size_t>& cuts) {
    std::string s = c.name + " thinking=" + std::to_string(o.thinking) +
                    " tools=" + std::to_string(o.tools_enabled) + " cuts=";
    for (size_t x : cuts) s += std::to_string(x) + ",";
    return s;
  };
  auto one = [&](const std::vector<size_t>& cuts) {
    failure.clear();
    ParsedChatOutput got = run_stream(t, o, cuts, c.well_formed, &failure);
    ASSERT_TRUE(failure.empty()) << where(cuts) << ": " << failure;
    expect_same(want, got, where(cuts));
  };
  for (size_t i = 0; i <= t.size(); ++i) {
    one({i});
    if (::testing::Test::HasFatalFailure()) return;
  }
  if (three_way) {
    for (size_t i = 0; i <= t.size(); ++i) {
      for (size_t j = i; j <= t.size(); ++j) {
        one({i, j});
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
  std::vector<size_t> bytes;
  for (size_t i = 1; i < t.size(); ++i) bytes.push_back(i);
  one(bytes);
  std::mt19937 rng(seed);
  for (int run = 0; run < random_runs; ++run) {
    std::vector<size_t> cuts;
    size_t max_chunk = 1 + rng() % 16;
    for (size_t pos = 0;;) {
      pos += 1 + rng() % max_chunk;
      if (pos >= t.size()) break;
      cuts.push_back(pos);
    }
    one(cuts);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

class SplitTest : public ::testing::TestWithParam<int> {};

TEST_P(SplitTest, StreamingEqualsNonStreaming) {
  const Case c = all_cases()[GetParam()];
  SCOPED_TRACE(c.name);
  // The case's own configuration: every 2-split, every 3-split when short, random splits.
  check_case_splits(c, opts(c.thinking, c.tools, c.dialect), c.text.size() <= 200, 300,
                    1234 + GetParam());
  // The other configurations: every 2-split and random splits.
  for (int k = 0; k < 4; ++k) {
    bool th = k & 1, tl = k & 2;
    if (th == c.thinking && tl == c.tools) continue;
    // Markup may legitimately reach a field under another configuration.
    Case other = c;
    other.well_formed = false;
    check_case_splits(other, opts(th, tl, c.dialect), false, 60, 99 + GetParam() * 4 + k);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(AllCases, SplitTest,
                         ::testing::Range(0, static_cast<int>(all_cases().size())),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return all_cases()[info.param].name;
                         });

TEST(DeepseekV4Stream, DeltaOrderAndShape) {
  DeepseekV4StreamParser p(opts(true, true));
  std::vector<ChatDelta> d;
  for (const std::string& chunk :
       {std::string("Thinking"), std::string(" hard</think>Sure.\n\n<｜DSML｜tool_"),
        std::string("calls>\n") + inv("get_weather") + "\n<｜DSML｜parameter name=\"location\" "
                    "string=\"true\">Bei",
        std::string("jing</｜DSML｜parameter>\n") + kInvEnd + "\n" + kE, kEosTok}) {
    auto x = p.feed(chunk);
    d.insert(d.end(), x.begin(), x.end());
  }
  auto x = p.finish();
  d.insert(d.end(), x.begin(), x.end());
  ASSERT_GE(d.size(), 5u);
  EXPECT_EQ(d[0].type, ChatDelta::Type::kReasoning);
  EXPECT_EQ(d[0].text, "Thinking");
  EXPECT_EQ(d[1].type, ChatDelta::Type::kReasoning);
  EXPECT_EQ(d[1].text, " hard");
  EXPECT_EQ(d[2].type, ChatDelta::Type::kContent);
  EXPECT_EQ(d[2].text, "Sure.");
  EXPECT_EQ(d[3].type, ChatDelta::Type::kToolCallBegin);
  EXPECT_EQ(d[3].tool_name, "get_weather");
  EXPECT_EQ(d[4].type, ChatDelta::Type::kToolCallArguments);
  EXPECT_EQ(d[4].text, "{\"location\": \"Bei");  // arguments stream before the value ends
  EXPECT_EQ(p.tool_call_count(), 1);
  EXPECT_FALSE(p.markup_error());
}

TEST(DeepseekV4Stream, HoldsIncompleteUtf8) {
  DeepseekV4StreamParser p(opts(false, false));
  std::string s = "é";  // 2 bytes
  auto a = p.feed(s.substr(0, 1));
  EXPECT_TRUE(a.empty());
  auto b = p.feed(s.substr(1));
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].text, "é");
}

TEST(DeepseekV4Stream, LargeValuesInSmallChunks) {
  // 3-byte chunks over ~1 MB of output: each stage must stay linear.
  std::string arr = "[";
  for (int i = 0; i < 40000; ++i) arr += (i ? ", " : "") + std::to_string(i);
  arr += "]";
  std::string str(200000, 'x');
  for (size_t i = 0; i < str.size(); i += 97) str[i] = '"';
  std::string body = "{\"k\": " + arr + "}";
  std::string text = std::string(200000, 'r') + "</think>" + std::string(200000, 'c') +
                     "\n\n" +
                     block({invoke("f", {par("a", false, arr), par("s", true, str)})}) + "\n" +
                     kS + "\n" + inv("g") + "\n" + body + "\n" + kInvEnd + "\n" + kE;
  DeepseekV4StreamParser p(opts(true, true));
  ParsedChatOutput out;
  for (size_t i = 0; i < text.size(); i += 3) {
    for (const ChatDelta& d : p.feed(std::string_view(text).substr(i, 3))) {
      accumulate_delta(&out, d);
    }
  }
  for (const ChatDelta& d : p.finish()) accumulate_delta(&out, d);
  EXPECT_EQ(out.reasoning_content.size(), 200000u);
  EXPECT_EQ(out.content, std::string(200000, 'c'));
  ASSERT_EQ(out.tool_calls.size(), 2u);
  auto j = nlohmann::json::parse(out.tool_calls[0].arguments);
  EXPECT_EQ(j["a"].size(), 40000u);
  EXPECT_EQ(j["s"], str);
  EXPECT_EQ(out.tool_calls[1].arguments, body);
}

// ---- Prompt side ----

const std::string kToolsIntro =
    "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can "
    "invoke tools by writing a \"<｜DSML｜tool_calls>\" block like the following:\n\n"
    "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"$TOOL_NAME\">\n<｜DSML｜parameter "
    "name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n...\n"
    "</｜DSML｜invoke>\n<｜DSML｜invoke name=\"$TOOL_NAME2\">\n...\n</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>\n\nString parameters should be specified as is and set "
    "`string=\"true\"`. For all other types (numbers, booleans, arrays, objects), pass the value "
    "in JSON format and set `string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by "
    "<think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any tool "
    "calls or final response.\n\nOtherwise, output directly after </think> with tool calls or "
    "final response.\n\n### Available Tool Schemas\n\n";
const std::string kToolsOutro =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
    "tool calls.\n";

// test_input_1.json of DeepSeek-V4-Flash's encoding/tests, as an OpenAI tools array.
const std::string kFixtureTools = R"([
  {"type": "function", "function": {
    "name": "get_weather",
    "description": "Get the weather for a specific location",
    "parameters": {"type": "object", "properties": {
      "location": {"type": "string", "description": "The city name"},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
               "description": "Temperature unit"}},
      "required": ["location"]}}},
  {"type": "function", "function": {
    "name": "search",
    "description": "Search the web for information",
    "parameters": {"type": "object", "properties": {
      "query": {"type": "string", "description": "Search query"},
      "num_results": {"type": "integer", "description": "Number of results to return"}},
      "required": ["query"]}}}
])";

DeepseekV4Message msg(std::string role, std::string content, std::string reasoning = "",
                      std::vector<ToolCall> calls = {}, std::string tool_call_id = "") {
  DeepseekV4Message m;
  m.role = std::move(role);
  m.content = std::move(content);
  m.reasoning_content = std::move(reasoning);
  m.tool_calls = std::move(calls);
  m.tool_call_id = std::move(tool_call_id);
  return m;
}

TEST(DeepseekV4Prompt, PublishedFixtureOne) {
  // Expected text: DeepSeek's encoding/tests/test_output_1.txt (DeepSeek-V4-Flash), as
  // transcribed in osaurus-ai's DeepSeekV4ToolEncodingTests.swift.
  std::vector<DeepseekV4Message> m = {
      msg("system", "You are a helpful assistant."),
      msg("user", "What's the weather in Beijing?"),
      msg("assistant", "",
          "The user wants to know the weather in Beijing. I should use the get_weather tool.",
          {{"call_001", "get_weather", R"({"location": "Beijing", "unit": "celsius"})"}}),
      msg("tool", R"({"temperature": 22, "condition": "sunny", "humidity": 45})", "", {},
          "call_001"),
      msg("assistant",
          "The weather in Beijing is currently sunny with a temperature of 22°C and 45% humidity.",
          "Got the weather data. Let me format a nice response."),
  };
  DeepseekV4PromptOptions o;
  o.thinking = true;
  auto p = render_deepseek_v4_prompt(m, kFixtureTools, o);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const std::string want =
      "<｜begin▁of▁sentence｜>You are a helpful assistant.\n\n" + kToolsIntro +
      R"({"name": "get_weather", "description": "Get the weather for a specific location", )"
      R"("parameters": {"type": "object", "properties": {"location": {"type": "string", )"
      R"("description": "The city name"}, "unit": {"type": "string", "enum": ["celsius", )"
      R"("fahrenheit"], "description": "Temperature unit"}}, "required": ["location"]}})"
      "\n"
      R"({"name": "search", "description": "Search the web for information", "parameters": )"
      R"({"type": "object", "properties": {"query": {"type": "string", "description": )"
      R"("Search query"}, "num_results": {"type": "integer", "description": "Number of )"
      R"(results to return"}}, "required": ["query"]}})" +
      kToolsOutro +
      "<｜User｜>What's the weather in Beijing?<｜Assistant｜><think>The user wants to know the "
      "weather in Beijing. I should use the get_weather tool.</think>\n\n" + kWeatherBlock +
      kEosTok + "<｜User｜><tool_result>{\"temperature\": 22, \"condition\": \"sunny\", "
      "\"humidity\": 45}</tool_result><｜Assistant｜><think>Got the weather data. Let me format a "
      "nice response.</think>The weather in Beijing is currently sunny with a temperature of "
      "22°C and 45% humidity." + kEosTok;
  EXPECT_EQ(*p, want);
}

TEST(DeepseekV4Prompt, DropThinkingUnlessTools) {
  std::vector<DeepseekV4Message> m = {msg("system", "S"), msg("user", "One"),
                                      msg("assistant", "First answer.", "First reasoning."),
                                      msg("user", "Two")};
  DeepseekV4PromptOptions o;
  o.thinking = true;
  auto p = render_deepseek_v4_prompt(m, "", o);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p,
            "<｜begin▁of▁sentence｜>S<｜User｜>One<｜Assistant｜></think>First answer."
            "<｜end▁of▁sentence｜><｜User｜>Two<｜Assistant｜><think>");
  const std::string echo = R"([{"type": "function", "function": {"name": "echo", )"
                           R"("description": "Echo the text back.", "parameters": {"type": )"
                           R"("object", "properties": {"text": {"type": "string", )"
                           R"("description": "The text"}}, "required": ["text"]}}}])";
  p = render_deepseek_v4_prompt(m, echo, o);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p,
            "<｜begin▁of▁sentence｜>S\n\n" + kToolsIntro +
                R"({"name": "echo", "description": "Echo the text back.", "parameters": )"
                R"({"type": "object", "properties": {"text": {"type": "string", )"
                R"("description": "The text"}}, "required": ["text"]}})" +
                kToolsOutro +
                "<｜User｜>One<｜Assistant｜><think>First reasoning.</think>First answer."
                "<｜end▁of▁sentence｜><｜User｜>Two<｜Assistant｜><think>");
  // Chat mode.
  o.thinking = false;
  p = render_deepseek_v4_prompt(m, "", o);
  EXPECT_EQ(*p,
            "<｜begin▁of▁sentence｜>S<｜User｜>One<｜Assistant｜></think>First answer."
            "<｜end▁of▁sentence｜><｜User｜>Two<｜Assistant｜></think>");
  // drop_thinking = false keeps earlier reasoning.
  o.thinking = true;
  o.drop_thinking = false;
  p = render_deepseek_v4_prompt(m, "", o);
  EXPECT_EQ(*p,
            "<｜begin▁of▁sentence｜>S<｜User｜>One<｜Assistant｜><think>First reasoning.</think>"
            "First answer.<｜end▁of▁sentence｜><｜User｜>Two<｜Assistant｜><think>");
}

TEST(DeepseekV4Prompt, ToolResultsInCallOrder) {
  std::vector<DeepseekV4Message> m = {
      msg("system", "S"), msg("user", "Q"),
      msg("assistant", "", "R",
          {{"call_A", "alpha", R"({"n": "1"})"}, {"call_B", "beta", R"({"n": "2"})"}}),
      msg("tool", "B result", "", {}, "call_B"), msg("tool", "A result", "", {}, "call_A")};
  DeepseekV4PromptOptions o;
  o.thinking = true;
  auto p = render_deepseek_v4_prompt(m, "", o);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, "<｜begin▁of▁sentence｜>S<｜User｜>Q<｜Assistant｜></think>\n\n" +
                    block({invoke("alpha", {par("n", true, "1")}),
                           invoke("beta", {par("n", true, "2")})}) +
                    kEosTok +
                    "<｜User｜><tool_result>A result</tool_result>\n\n<tool_result>B result"
                    "</tool_result><｜Assistant｜><think>");
}

TEST(DeepseekV4Prompt, ArgumentsAndUserTextAfterResults) {
  std::vector<DeepseekV4Message> m = {
      msg("user", "Q"),
      msg("assistant", "", "R",
          {{"call_1", "mixed",
            R"({"name": "a/b", "count": 7, "flag": false, "list": [1, "two"], )"
            R"("nested": {"k": -1}, "nothing": null, "x": 1.0})"},
           {"call_2", "broken", "not json"}}),
      msg("tool", "result", "", {}, "call_1"), msg("user", "And now this.")};
  DeepseekV4PromptOptions o;
  o.thinking = true;
  o.drop_thinking = false;
  auto p = render_deepseek_v4_prompt(m, "", o);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p,
            "<｜begin▁of▁sentence｜><｜User｜>Q<｜Assistant｜><think>R</think>\n\n" +
                block({invoke("mixed", {par("name", true, "a/b"), par("count", false, "7"),
                                        par("flag", false, "false"),
                                        par("list", false, "[1, \"two\"]"),
                                        par("nested", false, "{\"k\": -1}"),
                                        par("nothing", false, "null"), par("x", false, "1.0")}),
                       invoke("broken", {par("arguments", true, "not json")})}) +
                kEosTok +
                "<｜User｜><tool_result>result</tool_result>\n\nAnd now this.<｜Assistant｜>"
                "<think>");
}

TEST(DeepseekV4Prompt, EffortReminderDeveloperContinue) {
  std::vector<DeepseekV4Message> m = {msg("user", "solve it")};
  DeepseekV4PromptOptions o;
  o.thinking = true;
  o.reasoning_effort = "max";
  auto p = render_deepseek_v4_prompt(m, "", o);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p,
            "<｜begin▁of▁sentence｜>Reasoning Effort: Absolute maximum with no shortcuts "
            "permitted.\nYou MUST be very thorough in your thinking and comprehensively decompose "
            "the problem to resolve the root cause, rigorously stress-testing your logic against "
            "all potential paths, edge cases, and adversarial scenarios.\nExplicitly write out "
            "your entire deliberation process, documenting every intermediate step, considered "
            "alternative, and rejected hypothesis to ensure absolutely no assumption is left "
            "unchecked.\n\n<｜User｜>solve it<｜Assistant｜><think>");
  o.reasoning_effort = "high";
  EXPECT_EQ(*render_deepseek_v4_prompt(m, "", o),
            "<｜begin▁of▁sentence｜><｜User｜>solve it<｜Assistant｜><think>");

  m = {msg("system", "S"), msg("latest_reminder", "2026-02-21"), msg("developer", "D"),
       msg("assistant", "partial")};
  DeepseekV4PromptOptions c;
  c.continue_final_message = true;
  EXPECT_EQ(*render_deepseek_v4_prompt(m, "", c),
            "<｜begin▁of▁sentence｜>S<｜latest_reminder｜>2026-02-21<｜User｜>D<｜Assistant｜>"
            "</think>partial");
  c.add_bos = false;
  c.continue_final_message = false;
  EXPECT_EQ(*render_deepseek_v4_prompt({msg("user", "u"), msg("user", "v")}, "[]", c),
            "<｜User｜>u\n\nv<｜Assistant｜></think>");
}

TEST(DeepseekV4Prompt, ToolsOnNonSystemStartAndErrors) {
  const std::string t = R"([{"type": "function", "function": {"name": "f"}}])";
  auto p = render_deepseek_v4_prompt({msg("user", "u")}, t, {});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, "<｜begin▁of▁sentence｜>\n\n" + kToolsIntro + "{\"name\": \"f\"}" +
                    kToolsOutro + "<｜User｜>u<｜Assistant｜></think>");
  EXPECT_EQ(*render_deepseek_v4_tools_section(t), kToolsIntro + "{\"name\": \"f\"}" + kToolsOutro);
  EXPECT_FALSE(render_deepseek_v4_prompt({}, "", {}).ok());
  EXPECT_FALSE(render_deepseek_v4_prompt({msg("wizard", "x")}, "", {}).ok());
  EXPECT_FALSE(render_deepseek_v4_prompt({msg("developer", "")}, "", {}).ok());
  EXPECT_FALSE(render_deepseek_v4_prompt({msg("user", "u")}, "{", {}).ok());
  EXPECT_FALSE(render_deepseek_v4_prompt({msg("user", "u")}, "{}", {}).ok());
  EXPECT_FALSE(
      render_deepseek_v4_prompt({msg("user", "u")}, "[{\"type\": \"function\"}]", {}).ok());
  DeepseekV4PromptOptions o;
  o.reasoning_effort = "medium";
  EXPECT_FALSE(render_deepseek_v4_prompt({msg("user", "u")}, "", o).ok());
  auto bad = render_deepseek_v4_prompt({msg("user", "u")}, "[1]", {});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST(DeepseekV4Prompt, PythonStyleJson) {
  EXPECT_EQ(*python_style_json(R"({"b": 1, "a": [1.0, 1e16, 1.5e-7, 0.0001, 1e-05, -0.0, )"
                               R"(123456789012345678, "é\n\u0001/", true, null, {}, []]})"),
            R"({"b": 1, "a": [1.0, 1e+16, 1.5e-07, 0.0001, 1e-05, -0.0, 123456789012345678, )"
            R"("é\n\u0001/", true, null, {}, []]})");
  EXPECT_FALSE(python_style_json("{").ok());
}

TEST(DeepseekV4RoundTrip, ParsedCallsRenderBackToTheGeneratedText) {
  // What the model writes after "<｜Assistant｜><think>" ...
  const std::string generated = "Need data.</think>Checking.\n\n" + kTypedBlock;
  auto r = parse_deepseek_v4_output(generated + kEosTok, opts(true, true));
  ASSERT_EQ(r.tool_calls.size(), 2u);
  // ... comes back byte for byte when the parsed message is rendered as history (the
  // arguments are kept as the model wrote them, so a prefix cache can match).
  std::vector<DeepseekV4Message> m = {
      msg("user", "Q"), msg("assistant", r.content, r.reasoning_content, r.tool_calls)};
  DeepseekV4PromptOptions o;
  o.thinking = true;
  o.drop_thinking = false;
  auto p = render_deepseek_v4_prompt(m, "", o);
  ASSERT_TRUE(p.ok());
  const std::string head = "<｜begin▁of▁sentence｜><｜User｜>Q<｜Assistant｜><think>";
  // encoding_dsv4.py re-serializes JSON values (json.loads then json.dumps): " 1.50 " -> 1.5.
  std::string expect = generated;
  expect.replace(expect.find(" 1.50 "), 6, "1.5");
  EXPECT_EQ(*p, head + expect + kEosTok);
}

}  // namespace
}  // namespace strata
