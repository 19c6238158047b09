#include "serve/openai_api.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

namespace strata {
namespace {

using json = nlohmann::json;

TEST(OpenAiApiTest, ParsesCompletionWithAllKnownFields) {
  auto r = parse_openai_request(ApiEndpoint::kCompletions, R"({
    "model": "m", "prompt": "hi", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
    "top_k": 3, "min_p": 0.1, "seed": 42, "stop": ["a", "b"], "stream": true,
    "stream_options": {"include_usage": true}, "logprobs": 2, "ignore_eos": true,
    "stop_token_ids": [5], "best_of": 1, "unknown_field": {"x": 1}})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->model, "m");
  ASSERT_EQ(r->prompts.size(), 1u);
  EXPECT_EQ(*r->prompts[0].text, "hi");
  EXPECT_EQ(r->params.max_tokens, 7);
  EXPECT_DOUBLE_EQ(r->params.temperature, 0.5);
  EXPECT_DOUBLE_EQ(r->params.top_p, 0.9);
  EXPECT_EQ(r->params.top_k, 3);
  EXPECT_DOUBLE_EQ(r->params.min_p, 0.1);
  EXPECT_EQ(*r->params.seed, 42u);
  EXPECT_EQ(r->params.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_EQ(r->params.logprobs, 2);
  EXPECT_TRUE(r->params.ignore_eos);
  EXPECT_EQ(r->params.stop_token_ids, (std::vector<int32_t>{5}));
}

TEST(OpenAiApiTest, ParsesPenaltiesAndLogitBias) {
  auto r = parse_openai_request(ApiEndpoint::kCompletions, R"({
    "prompt": "hi", "presence_penalty": 0.5, "frequency_penalty": -0.25,
    "repetition_penalty": 1.2, "logit_bias": {"7": 100, "12": -3.5}})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_DOUBLE_EQ(r->params.presence_penalty, 0.5);
  EXPECT_DOUBLE_EQ(r->params.frequency_penalty, -0.25);
  EXPECT_DOUBLE_EQ(r->params.repetition_penalty, 1.2);
  auto lb = r->params.logit_bias;
  std::sort(lb.begin(), lb.end());
  ASSERT_EQ(lb.size(), 2u);
  EXPECT_EQ(lb[0], (std::pair<int32_t, float>{7, 100.0f}));
  EXPECT_EQ(lb[1], (std::pair<int32_t, float>{12, -3.5f}));
}

TEST(OpenAiApiTest, TokenPromptsAndDefaults) {
  auto r = parse_openai_request(ApiEndpoint::kCompletions, R"({"prompt": [1, 2, 3]})");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->prompts.size(), 1u);
  EXPECT_EQ(r->prompts[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(r->params.max_tokens, 16);
  EXPECT_FALSE(r->max_tokens_given);
  auto r2 = parse_openai_request(ApiEndpoint::kCompletions, R"({"prompt": [[4, 5]], "max_tokens": null})");
  ASSERT_TRUE(r2.ok());
  ASSERT_EQ(r2->prompts.size(), 1u);
  EXPECT_EQ(r2->prompts[0].tokens, (std::vector<int32_t>{4, 5}));
}

// Several prompts (strings and token lists mixed) and n: prompts x n choices, bounded.
TEST(OpenAiApiTest, SeveralPromptsAndN) {
  auto r = parse_openai_request(ApiEndpoint::kCompletions, R"({"prompt": ["a b", [7, 8], "c"], "n": 3})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->prompts.size(), 3u);
  EXPECT_EQ(*r->prompts[0].text, "a b");
  EXPECT_EQ(r->prompts[1].tokens, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(*r->prompts[2].text, "c");
  EXPECT_EQ(r->n, 3);
  EXPECT_TRUE(parse_openai_request(ApiEndpoint::kChat,
      R"({"messages": [{"role": "user", "content": "x"}], "n": 64})").ok());
  for (const char* bad : {R"({"prompt": "x", "n": 0})", R"({"prompt": "x", "n": 65})",
                          R"({"prompt": ["x", "y"], "n": 33})", R"({"prompt": ["x", []]})",
                          R"({"prompt": ["x", 3]})", R"({"prompt": [[1], ["a"]]})"}) {
    auto b = parse_openai_request(ApiEndpoint::kCompletions, bad);
    EXPECT_FALSE(b.ok()) << bad;
  }
}

TEST(OpenAiApiTest, TopKOffValuesAndReturnTokenIds) {
  for (const char* b : {R"({"prompt": "x", "top_k": -1})", R"({"prompt": "x", "top_k": 0})"}) {
    auto r = parse_openai_request(ApiEndpoint::kCompletions, b);
    ASSERT_TRUE(r.ok()) << b;
    EXPECT_LE(r->params.top_k, 0) << b;
  }
  auto r = parse_openai_request(ApiEndpoint::kCompletions, R"({"prompt": "x", "return_token_ids": true})");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->return_token_ids);
}

TEST(OpenAiApiTest, RejectsBadInputsWithInvalidArgument) {
  const char* bad[] = {
      R"({"prompt": "x", )",                        // malformed JSON
      R"([1, 2])",                                  // not an object
      R"({"prompt": "x", "max_tokens": "5"})",      // wrong type
      R"({"prompt": "x", "max_tokens": 2.5})",      // not an integer
      R"({"prompt": "x", "max_tokens": 0})",        // <= 0
      R"({"prompt": "x", "max_tokens": -3})",
      R"({"prompt": "x", "temperature": "hot"})",
      R"({"prompt": "x", "stream": "yes"})",
      R"({"prompt": "x", "stop": 5})",
      R"({"prompt": "x", "best_of": 3})",             // not implemented: 400, not ignored
      R"({"prompt": "x", "best_of": "2"})",
      R"({"prompt": 12})",
      R"({"prompt": []})",
      R"({"max_tokens": 3})",                        // no prompt
      R"({"prompt": "x", "model": 3})",
      R"({"prompt": "x", "logit_bias": [1, 2]})",     // not an object
      R"({"prompt": "x", "logit_bias": {"abc": 1}})", // key not a token id
      R"({"prompt": "x", "logit_bias": {"-4": 1}})",
      R"({"prompt": "x", "logit_bias": {"7": "up"}})",
      R"({"prompt": "x", "presence_penalty": "lots"})",
      R"({"prompt": "x", "return_token_ids": 1})",  // not a bool
      R"({"prompt": "x", "min_tokens": "3"})",
      R"({"prompt": "x", "tools": [{"type": "function"}]})",   // unsupported, not ignored
      R"({"prompt": "x", "tool_choice": "auto"})",
      R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {}}})",  // no schema
      R"({"prompt": "x", "response_format": "json"})",
      R"({"prompt": "x", "suffix": "end"})",
      R"({"prompt": "x", "prompt_logprobs": 1})",
  };
  for (const char* b : bad) {
    auto r = parse_openai_request(ApiEndpoint::kCompletions, b);
    ASSERT_FALSE(r.ok()) << b;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << b;
    EXPECT_EQ(api_error_for(r.status()).http_status, 400);
  }
}

// response_format json_schema: the schema is compiled into GenerationParams::json_schema;
// a malformed wrapper or a schema outside the supported subset is a 400 saying what.
TEST(OpenAiApiTest, ResponseFormatJsonSchema) {
  auto r = parse_openai_request(ApiEndpoint::kChat, R"({
    "messages": [{"role": "user", "content": "hi"}],
    "response_format": {"type": "json_schema", "json_schema": {"name": "person", "strict": true,
      "schema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"],
                 "additionalProperties": false}}}})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_NE(r->params.json_schema, nullptr);
  EXPECT_FALSE(r->params.json_object);
  // name and strict are optional here.
  r = parse_openai_request(ApiEndpoint::kCompletions,
      R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "array"}}}})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_NE(r->params.json_schema, nullptr);
  struct Case { const char* format; const char* needle; };
  for (const Case& c : std::vector<Case>{
           {R"({"type": "json_schema"})", "'response_format.json_schema' must be an object"},
           {R"({"type": "json_schema", "json_schema": []})", "'response_format.json_schema' must be an object"},
           {R"({"type": "json_schema", "json_schema": {"name": "n"}})", "'response_format.json_schema.schema' is required"},
           {R"({"type": "json_schema", "json_schema": {"schema": "object"}})", "must be a JSON Schema object"},
           {R"({"type": "json_schema", "json_schema": {"name": 3, "schema": {}}})", "json_schema.name' must be a string"},
           {R"({"type": "json_schema", "json_schema": {"strict": "yes", "schema": {}}})", "json_schema.strict' must be a boolean"},
           {R"({"type": "json_schema", "json_schema": {"schema": {"type": "object", "properties": {"d": {"type": "string", "format": "date"}}}}})",
            "unsupported JSON Schema keyword 'format' at #/properties/d"},
           {R"({"type": "json_schema", "json_schema": {"schema": {"type": "object", "properties": {"p": {"type": "string", "pattern": "a+"}}}}})",
            "'pattern' at #/properties/p"},
           {R"({"type": "json_schema", "json_schema": {"schema": {"type": "number"}}})", "top-level value can only be a number"},
           {R"({"type": "grammar"})", "'grammar' is not supported"},
       }) {
    const std::string body = std::string(R"({"prompt": "x", "response_format": )") + c.format + "}";
    auto bad = parse_openai_request(ApiEndpoint::kCompletions, body);
    ASSERT_FALSE(bad.ok()) << body;
    EXPECT_EQ(api_error_for(bad.status()).http_status, 400) << body;
    EXPECT_NE(bad.status().message().find(c.needle), std::string::npos) << bad.status().message();
  }
}

// Issue 24 item 5: a body's nesting depth and its stop list are bounded while parsing.
TEST(OpenAiApiTest, DeepNestingAndHugeStopListsAreRefused) {
  auto nested = [](int depth) {
    return R"({"prompt": "x", "extra": )" + std::string(depth, '[') + std::string(depth, ']') + "}";
  };
  EXPECT_TRUE(parse_openai_request(ApiEndpoint::kCompletions, nested(kMaxJsonDepth - 2)).ok());
  for (int depth : {kMaxJsonDepth, 4 << 20}) {
    auto r = parse_openai_request(ApiEndpoint::kCompletions, nested(depth));
    ASSERT_FALSE(r.ok()) << depth;
    EXPECT_NE(r.status().message().find("nested deeper than"), std::string::npos) << r.status().message();
  }
  EXPECT_FALSE(parse_json_body(nested(1000)).ok());
  nlohmann::json b = {{"prompt", "x"}, {"stop", nlohmann::json::array()}};
  for (size_t i = 0; i < kMaxStopSequences; ++i) b["stop"].push_back("s" + std::to_string(i));
  EXPECT_TRUE(parse_openai_request(ApiEndpoint::kCompletions, b.dump()).ok());
  b["stop"].push_back("one more");
  EXPECT_FALSE(parse_openai_request(ApiEndpoint::kCompletions, b.dump()).ok());
  b["stop"] = std::string(kMaxStopBytes + 1, 'a');
  EXPECT_FALSE(parse_openai_request(ApiEndpoint::kCompletions, b.dump()).ok());
  b["stop"] = std::string(kMaxStopBytes, 'a');
  EXPECT_TRUE(parse_openai_request(ApiEndpoint::kCompletions, b.dump()).ok());
}

// Unknown fields are listed (the server logs them); unsupported ones asking for nothing pass.
TEST(OpenAiApiTest, UnknownFieldsListedAndEmptyUnsupportedOnesAccepted) {
  auto r = parse_openai_request(ApiEndpoint::kChat, R"({
    "messages": [{"role": "user", "content": "hi"}], "frobnicate": 1, "user": "u1",
    "tools": [], "tool_choice": "none", "response_format": {"type": "text"}, "min_tokens": 4,
    "max_tokens": 8, "skip_special_tokens": true})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->ignored_fields, (std::vector<std::string>{"frobnicate", "skip_special_tokens"}));
  EXPECT_EQ(r->params.min_tokens, 4);
}

TEST(OpenAiApiTest, ParsesChatMessagesAndOptions) {
  auto r = parse_openai_request(ApiEndpoint::kChat, R"({
    "messages": [{"role": "system", "content": "be brief"},
                 {"role": "user", "content": [{"type": "text", "text": "hel"}, {"type": "text", "text": "lo"}]}],
    "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 3,
    "chat_template_kwargs": {"thinking": true}})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->messages.size(), 2u);
  EXPECT_EQ(r->messages[1].content, "hello");
  EXPECT_EQ(r->params.max_tokens, 9);
  EXPECT_EQ(r->params.logprobs, 3);
  EXPECT_TRUE(r->chat_options.thinking);
  EXPECT_FALSE(parse_openai_request(ApiEndpoint::kChat, R"({"messages": "hi"})").ok());
  EXPECT_FALSE(parse_openai_request(ApiEndpoint::kChat, R"({"messages": []})").ok());
  EXPECT_FALSE(parse_openai_request(ApiEndpoint::kChat, R"({"messages": [{"content": "x"}]})").ok());
}

TEST(OpenAiApiTest, ErrorMappingAndBody) {
  EXPECT_EQ(api_error_for(not_found("x")).http_status, 404);
  EXPECT_EQ(api_error_for(out_of_range("x")).http_status, 400);
  EXPECT_EQ(api_error_for(out_of_range("x")).code, "context_length_exceeded");
  EXPECT_EQ(api_error_for(Status(StatusCode::kUnavailable, "x")).http_status, 503);
  EXPECT_EQ(api_error_for(internal_error("x")).http_status, 500);
  json j = json::parse(render_error(api_error_for(invalid_argument("bad thing"))));
  EXPECT_EQ(j["error"]["message"], "bad thing");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(j["error"].contains("param"));
  EXPECT_TRUE(j["error"].contains("code"));
}

TEST(OpenAiApiTest, RendersResponsesAndChunks) {
  ResponseMeta m{ApiEndpoint::kCompletions, "cmpl-1", 100, "m"};
  json j = json::parse(render_response(m, "abc", FinishReason::kLength, nullptr, {3, 2, 1}, nullptr));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "abc");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["total_tokens"], 5);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 1);
  ResponseMeta c{ApiEndpoint::kChat, "chatcmpl-1", 100, "m"};
  std::string chunk = render_stream_chunk(c, "x", true, std::nullopt, nullptr, nullptr);
  ASSERT_EQ(chunk.rfind("data: ", 0), 0u);
  ASSERT_EQ(chunk.substr(chunk.size() - 2), "\n\n");
  json cj = json::parse(chunk.substr(6));
  EXPECT_EQ(cj["object"], "chat.completion.chunk");
  EXPECT_EQ(cj["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(cj["choices"][0]["delta"]["content"], "x");
  EXPECT_TRUE(cj["choices"][0]["finish_reason"].is_null());
  // Invalid UTF-8 never breaks the JSON.
  json bad = json::parse(render_response(m, "a\xC3", FinishReason::kStop, nullptr, {}, nullptr));
  EXPECT_EQ(bad["choices"][0]["text"], "a\xEF\xBF\xBD");
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

TEST(OpenAiApiTest, HugeIntegersAreNotWrapped) {
  auto r = parse_openai_request(ApiEndpoint::kCompletions,
                                R"({"prompt": "x", "max_tokens": 9223372036854775808})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("9223372036854775808"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(r.status().message().find("-9223372036854775808"), std::string::npos);
  EXPECT_TRUE(parse_openai_request(ApiEndpoint::kCompletions,
                                   R"({"prompt": "x", "max_tokens": 9223372036854775807})")
                  .ok());
}

}  // namespace
}  // namespace strata
