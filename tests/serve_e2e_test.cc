// End-to-end: the real server (ServingStack: make_model_runner + tokenizer + Engine +
// HttpServer) on the embedded stories260K model, bound to 127.0.0.1 on a free port.
// Exercises every endpoint, streaming and not, concurrency, client disconnect mid-stream
// (state and slot come back, checked through /metrics), each bad input, and bench-serve
// replays of the Mooncake and Azure trace slices in testdata/traces.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "exec/generate.h"
#include "sched/json_constraint.h"
#include "sched/json_schema.h"
#include "serve/bench_client.h"
#include "serve/bench_report.h"
#include "serve/bench_workload.h"
#include "serve/serving_stack.h"
#include "serve/test_http_client.h"

namespace strata {
namespace {

using json = nlohmann::json;
using testing::http_get;
using testing::http_post;

std::string source_dir() {
  const char* src = std::getenv("STRATA_SOURCE_DIR");
  return src ? src : STRATA_SOURCE_DIR;
}

class ServeE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ServeOptions o;
    o.model_dir = source_dir() + "/models/stories260K";
    o.http.host = "127.0.0.1";
    o.http.port = 0;
    o.http.threads = 32;
    o.http.max_body_bytes = 256 * 1024;
    o.engine.scheduler = {.max_num_seqs = 8, .max_num_batched_tokens = 256, .chunk_size = 64};
    o.runner.threads = 2;
    auto s = ServingStack::start(o);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    stack_ = s->release();
  }
  static void TearDownTestSuite() {
    delete stack_;
    stack_ = nullptr;
  }
  static int port() { return stack_->port(); }

  // The text of a streamed /v1/completions request (its chunks' choices concatenated).
  static std::string streamed_text(const json& body) {
    auto st = http_post(port(), "/v1/completions", body.dump());
    EXPECT_EQ(st.status, 200) << st.body;
    EXPECT_TRUE(st.done) << st.body;
    std::string streamed;
    for (const std::string& d : st.data) {
      const json chunk = json::parse(d);
      for (const json& ch : chunk["choices"]) streamed += ch["text"].get<std::string>();
    }
    return streamed;
  }

  // Polls /metrics until `pred(text)` holds (bounded: ~10 s).
  static std::string wait_metrics(const std::function<bool(const std::string&)>& pred) {
    std::string text;
    for (int i = 0; i < 200; ++i) {
      text = http_get(port(), "/metrics").body;
      if (pred(text)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return text;
  }

  static ServingStack* stack_;
};
ServingStack* ServeE2eTest::stack_ = nullptr;

double metric(const std::string& text, const std::string& name_and_labels) {
  const size_t p = text.find("\n" + name_and_labels + " ");
  if (p == std::string::npos) return -1;
  return std::stod(text.substr(p + name_and_labels.size() + 2));
}

const std::string kModelLabel = "{model_name=\"stories260K\"}";

void expect_openai_error(const testing::HttpReply& r, int status) {
  EXPECT_EQ(r.status, status) << r.body;
  json j = json::parse(r.body, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.body;
  ASSERT_TRUE(j.contains("error")) << r.body;
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_TRUE(j["error"]["type"].is_string());
}

// A second server on a port that is in use fails to start (cpp-httplib's default
// SO_REUSEPORT would have let it share the port and half the connections).
TEST_F(ServeE2eTest, SecondServerOnTheSamePortFailsToStart) {
  ServeOptions o;
  o.model_dir = source_dir() + "/models/stories260K";
  o.http.host = "127.0.0.1";
  o.http.port = port();
  auto s = ServingStack::start(o);
  EXPECT_FALSE(s.ok());
  for (int i = 0; i < 8; ++i) {
    auto m = http_get(port(), "/v1/models");
    ASSERT_EQ(m.status, 200);
    EXPECT_EQ(json::parse(m.body)["data"][0]["id"], "stories260K");
  }
}

TEST_F(ServeE2eTest, HealthAndModels) {
  EXPECT_EQ(http_get(port(), "/health").status, 200);
  auto m = http_get(port(), "/v1/models");
  ASSERT_EQ(m.status, 200);
  json j = json::parse(m.body);
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["data"][0]["id"], "stories260K");
  EXPECT_EQ(j["data"][0]["max_model_len"], 512);
}

// Reference: exec/generate.h greedy on a separately loaded stories260K runner (no scheduler,
// no server).
StatusOr<GenerateResult> reference_generate(const std::string& prompt, int64_t max_tokens) {
  RunnerOptions ro;
  ro.threads = 1;
  STRATA_ASSIGN_OR_RETURN(auto runner, make_model_runner(source_dir() + "/models/stories260K", ro));
  STRATA_ASSIGN_OR_RETURN(auto tok, load_tokenizer_from_dir(source_dir() + "/models/stories260K"));
  GenerateOptions go;
  go.max_tokens = max_tokens;
  go.sampling.temperature = 0;
  return generate(*runner, *tok, prompt, go);
}

TEST_F(ServeE2eTest, GreedyCompletionMatchesGenerate) {
  auto ref = reference_generate("Once upon a time", 40);
  ASSERT_TRUE(ref.ok());
  ASSERT_FALSE(ref->text.empty());

  auto r = http_post(port(), "/v1/completions",
                     R"({"model": "stories260K", "prompt": "Once upon a time", "max_tokens": 40, "temperature": 0})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], ref->text);
  EXPECT_EQ(j["usage"]["prompt_tokens"], static_cast<int64_t>(ref->prompt_ids.size()));
  EXPECT_EQ(j["usage"]["completion_tokens"].get<int64_t>(),
            static_cast<int64_t>(ref->generated_ids.size()) + (ref->stopped_by_token ? 1 : 0));

  // Streaming gives the same text, chunk by chunk, ending in [DONE] with usage.
  auto s = http_post(port(), "/v1/completions",
                     R"({"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0,
                         "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_EQ(s.status, 200);
  EXPECT_TRUE(s.done);
  std::string text;
  std::string finish;
  bool usage = false;
  for (const std::string& d : s.data) {
    json c = json::parse(d);
    ASSERT_FALSE(c.contains("error")) << d;
    if (c.contains("usage") && !c["usage"].is_null()) usage = true;
    if (c["choices"].empty()) continue;
    text += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, ref->text);
  EXPECT_TRUE(usage);
  EXPECT_EQ(finish, ref->stopped_by_token ? "stop" : "length");
}

// vLLM's return_token_ids: the ids the server tokenized and generated, next to the text,
// checked against the direct generate() loop; in streaming the chunks' ids concatenate to the
// same list and prompt_token_ids comes once, on the first chunk.
TEST_F(ServeE2eTest, ReturnTokenIdsMatchGenerate) {
  auto ref = reference_generate("Once upon a time", 30);
  ASSERT_TRUE(ref.ok());
  ASSERT_FALSE(ref->generated_ids.empty());

  auto r = http_post(port(), "/v1/completions",
                     R"({"prompt": "Once upon a time", "max_tokens": 30, "temperature": 0, "return_token_ids": true})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  const json& c = j["choices"][0];
  EXPECT_EQ(c["prompt_token_ids"].get<std::vector<int32_t>>(), ref->prompt_ids);
  std::vector<int32_t> ids = c["token_ids"].get<std::vector<int32_t>>();
  EXPECT_EQ(static_cast<int64_t>(ids.size()), j["usage"]["completion_tokens"].get<int64_t>());
  // the stop token (if any) is the last id; the text has everything before it
  std::vector<int32_t> without_stop = ids;
  if (ref->stopped_by_token) without_stop.pop_back();
  EXPECT_EQ(without_stop, ref->generated_ids);
  EXPECT_EQ(c["text"], ref->text);

  auto plain = json::parse(http_post(port(), "/v1/completions",
                                     R"({"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0})")
                               .body);
  EXPECT_FALSE(plain["choices"][0].contains("token_ids"));
  EXPECT_FALSE(plain["choices"][0].contains("prompt_token_ids"));

  auto s = http_post(port(), "/v1/completions",
                     R"({"prompt": "Once upon a time", "max_tokens": 30, "temperature": 0, "stream": true, "return_token_ids": true})");
  ASSERT_EQ(s.status, 200);
  std::vector<int32_t> streamed;
  int with_prompt = 0, with_ids = 0;
  bool first = true;
  for (const std::string& d : s.data) {
    json ch = json::parse(d);
    if (ch["choices"].empty()) continue;
    const json& cc = ch["choices"][0];
    if (cc.contains("prompt_token_ids")) {
      ++with_prompt;
      EXPECT_TRUE(first);
      EXPECT_EQ(cc["prompt_token_ids"].get<std::vector<int32_t>>(), ref->prompt_ids);
    }
    first = false;
    if (cc.contains("token_ids")) {
      ++with_ids;
      for (int32_t t : cc["token_ids"].get<std::vector<int32_t>>()) streamed.push_back(t);
    }
  }
  EXPECT_GE(with_ids, 1);
  EXPECT_EQ(with_prompt, 1);
  EXPECT_EQ(streamed, ids);

  // chat: prompt_token_ids at the top level, token_ids on the choice
  auto ch = http_post(port(), "/v1/chat/completions",
                      R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "temperature": 0, "return_token_ids": true})");
  ASSERT_EQ(ch.status, 200) << ch.body;
  json jc = json::parse(ch.body);
  EXPECT_TRUE(jc["prompt_token_ids"].is_array());
  EXPECT_EQ(jc["prompt_token_ids"].size(), jc["usage"]["prompt_tokens"].get<size_t>());
  EXPECT_EQ(jc["choices"][0]["token_ids"].size(), jc["usage"]["completion_tokens"].get<size_t>());
  expect_openai_error(http_post(port(), "/v1/completions",
                                R"({"prompt": "x", "return_token_ids": "yes"})"),
                      400);
}

TEST_F(ServeE2eTest, SeededSamplingIsReproducibleAndLogprobs) {
  const char* body = R"({"prompt": "The cat", "max_tokens": 20, "temperature": 1.0, "top_p": 0.9, "seed": 7, "logprobs": 2})";
  auto a = http_post(port(), "/v1/completions", body);
  auto b = http_post(port(), "/v1/completions", body);
  ASSERT_EQ(a.status, 200) << a.body;
  json ja = json::parse(a.body), jb = json::parse(b.body);
  EXPECT_EQ(ja["choices"][0]["text"], jb["choices"][0]["text"]);
  const json& lp = ja["choices"][0]["logprobs"];
  ASSERT_TRUE(lp.is_object());
  EXPECT_EQ(lp["tokens"].size(), lp["token_logprobs"].size());
  for (const json& v : lp["token_logprobs"]) EXPECT_LE(v.get<double>(), 0.0);
  for (const json& t : lp["top_logprobs"]) EXPECT_EQ(t.size(), 2u);
}

TEST_F(ServeE2eTest, ChatCompletionsPlainTemplate) {
  auto r = http_post(port(), "/v1/chat/completions",
                     R"({"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 12, "temperature": 0})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_string());
  auto s = http_post(port(), "/v1/chat/completions",
                     R"({"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 12, "temperature": 0, "stream": true})");
  ASSERT_EQ(s.status, 200);
  EXPECT_TRUE(s.done);
  ASSERT_FALSE(s.data.empty());
  json first = json::parse(s.data.front());
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (const std::string& d : s.data) {
    json c = json::parse(d);
    if (!c["choices"].empty() && c["choices"][0]["delta"].contains("content")) {
      text += c["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  EXPECT_EQ(text, j["choices"][0]["message"]["content"]);
}

TEST_F(ServeE2eTest, ConcurrentRequestsEqualTheirSoloOutputs) {
  const int n = 8;
  auto body = [](int i) {
    return json({{"prompt", "Tim and " + std::to_string(i) + " friends"},
                 {"max_tokens", 24 + i},
                 {"temperature", 0},
                 {"ignore_eos", true},
                 {"stream", i % 2 == 0}})
        .dump();
  };
  auto text_of = [](const testing::HttpReply& r) {
    if (r.data.empty()) return json::parse(r.body)["choices"][0]["text"].get<std::string>();
    std::string t;
    for (const auto& d : r.data) {
      json c = json::parse(d);
      if (!c["choices"].empty()) t += c["choices"][0]["text"].get<std::string>();
    }
    return t;
  };
  std::vector<std::string> solo(n), together(n);
  for (int i = 0; i < n; ++i) {
    auto r = http_post(port(), "/v1/completions", body(i));
    ASSERT_EQ(r.status, 200);
    solo[i] = text_of(r);
  }
  std::vector<std::thread> threads;
  std::vector<testing::HttpReply> replies(n);
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] { replies[i] = http_post(port(), "/v1/completions", body(i)); });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(replies[i].status, 200);
    EXPECT_EQ(text_of(replies[i]), solo[i]) << "request " << i;
  }
}

TEST_F(ServeE2eTest, ClientDisconnectMidStreamFreesEverything) {
  const std::string before = http_get(port(), "/metrics").body;
  const double aborted0 =
      metric(before, "strata:request_success_total{model_name=\"stories260K\",finished_reason=\"abort\"}");
  // A long generation; the client hangs up after 3 chunks.
  auto r = http_post(port(), "/v1/completions",
                     R"({"prompt": "Once", "max_tokens": 500, "ignore_eos": true, "stream": true})",
                     /*disconnect_after=*/3);
  EXPECT_EQ(r.data.size(), 3u);
  EXPECT_FALSE(r.done);
  // /metrics is eventually consistent (gauges and histograms are separate snapshots):
  // wait until the abort is counted and the gauges show the slot back.
  const std::string after = wait_metrics([&](const std::string& t) {
    return metric(t, "strata:request_success_total{model_name=\"stories260K\",finished_reason=\"abort\"}") >
               aborted0 &&
           metric(t, "strata:num_requests_running" + kModelLabel) == 0 &&
           metric(t, "strata:cache_used_bytes{model_name=\"stories260K\",kind=\"kv\",tier=\"host\"}") == 0;
  });
  EXPECT_EQ(metric(after, "strata:request_success_total{model_name=\"stories260K\",finished_reason=\"abort\"}"),
            aborted0 + 1);
  EXPECT_EQ(metric(after, "strata:num_requests_running" + kModelLabel), 0);
  EXPECT_EQ(metric(after, "strata:num_requests_waiting" + kModelLabel), 0);
  EXPECT_EQ(metric(after, "strata:cache_used_bytes{model_name=\"stories260K\",kind=\"kv\",tier=\"host\"}"), 0);
  EXPECT_GT(metric(after, "strata:cache_capacity_bytes{model_name=\"stories260K\",kind=\"kv\",tier=\"host\"}"), 0);
  // The server still serves.
  EXPECT_EQ(http_post(port(), "/v1/completions", R"({"prompt": "Hi", "max_tokens": 3})").status, 200);
}

// Sends `body` as a non-streaming POST on a raw connection and hangs up at once, without
// reading the reply (issue 24 item 7).
void post_and_hang_up(int port, const std::string& body) {
  const int fd = testing::connect_raw(port);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(testing::send_raw(fd, testing::raw_post("/v1/completions", body)));
  close(fd);
}

TEST_F(ServeE2eTest, ClientDisconnectNonStreamingFreesEverything) {
  const std::string abort_metric =
      "strata:request_success_total{model_name=\"stories260K\",finished_reason=\"abort\"}";
  const std::string before = http_get(port(), "/metrics").body;
  const double aborted0 = metric(before, abort_metric);
  const double tokens0 = metric(before, "strata:generation_tokens_total" + kModelLabel);
  constexpr int kClients = 16, kMaxTokens = 500;
  for (int i = 0; i < kClients; ++i)
    post_and_hang_up(port(), R"({"prompt": "Once", "max_tokens": 500, "ignore_eos": true})");
  const std::string after = wait_metrics([&](const std::string& t) {
    return metric(t, abort_metric) >= aborted0 + kClients &&
           metric(t, "strata:num_requests_running" + kModelLabel) == 0 &&
           metric(t, "strata:num_requests_waiting" + kModelLabel) == 0;
  });
  // Every request was cancelled, long before it could have run to its end.
  EXPECT_EQ(metric(after, abort_metric), aborted0 + kClients);
  EXPECT_LT(metric(after, "strata:generation_tokens_total" + kModelLabel) - tokens0,
            kClients * kMaxTokens / 2.0);
  EXPECT_EQ(metric(after, "strata:num_requests_running" + kModelLabel), 0);
  EXPECT_EQ(metric(after, "strata:cache_used_bytes{model_name=\"stories260K\",kind=\"kv\",tier=\"host\"}"), 0);
  EXPECT_EQ(http_post(port(), "/v1/completions", R"({"prompt": "Hi", "max_tokens": 3})").status, 200);
}

// Issue 24 item 8, on the real server: three completions pipelined on one connection are
// all answered, in order, each as it is answered alone; a client that half-closes after its
// request (shutdown(SHUT_WR)) still gets its completion.
TEST_F(ServeE2eTest, PipelinedAndHalfClosedRequestsAreAnswered) {
  std::vector<std::string> bodies, alone;
  for (const char* p : {"Once upon", "The cat", "A little girl"}) {
    bodies.push_back(json{{"prompt", p}, {"max_tokens", 12}, {"temperature", 0}}.dump());
    const auto r = http_post(port(), "/v1/completions", bodies.back());
    ASSERT_EQ(r.status, 200) << r.body;
    alone.push_back(json::parse(r.body)["choices"][0]["text"].get<std::string>());
  }
  const int fd = testing::connect_raw(port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(testing::send_raw(fd, testing::raw_post("/v1/completions", bodies[0]) +
                                        testing::raw_post("/v1/completions", bodies[1]) +
                                        testing::raw_post("/v1/completions", bodies[2], true)));
  const std::vector<testing::HttpReply> got = testing::parse_raw_responses(testing::read_raw(fd, 30000));
  close(fd);
  ASSERT_EQ(got.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(got[i].status, 200) << got[i].body;
    EXPECT_EQ(json::parse(got[i].body)["choices"][0]["text"], alone[i]) << "response " << i;
  }
  // Half-close: the request, then FIN; the answer still arrives (after an interim 100).
  const int h = testing::connect_raw(port());
  ASSERT_GE(h, 0);
  ASSERT_TRUE(testing::send_raw(h, testing::raw_post("/v1/completions", bodies[0])));
  ASSERT_EQ(shutdown(h, SHUT_WR), 0);
  const std::vector<testing::HttpReply> half = testing::parse_raw_responses(testing::read_raw(h, 30000));
  close(h);
  ASSERT_EQ(half.size(), 1u);
  ASSERT_EQ(half[0].status, 200) << half[0].body;
  EXPECT_EQ(json::parse(half[0].body)["choices"][0]["text"], alone[0]);
}

// Issue 24 item 6, on the real server: 1,000 clients that send their headers a line at a
// time hold no worker; /health and a completion are answered between their rounds.
TEST_F(ServeE2eTest, ThousandSlowClientsDoNotStopServing) {
  constexpr int kSlow = 1000;
  ASSERT_GE(testing::raise_fd_limit(2 * kSlow + 256), 2u * kSlow + 256)
      << "this test needs 2,256 descriptors";
  testing::SlowClients slow(port(), kSlow);
  ASSERT_EQ(slow.open(), kSlow);
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(slow.trickle(round), kSlow);
    EXPECT_EQ(http_get(port(), "/health").status, 200) << "round " << round;
    const auto r = http_post(port(), "/v1/completions", R"({"prompt": "Once", "max_tokens": 4})");
    EXPECT_EQ(r.status, 200) << "round " << round << ": " << r.body;
  }
  EXPECT_EQ(slow.finish(), kSlow);
}

// min_tokens (vLLM): greedy output that ends on EOS after k tokens goes on to at least
// min_tokens = k + 5, the first k - 1 tokens unchanged (EOS was never the argmax before).
TEST_F(ServeE2eTest, MinTokensHoldsBackEos) {
  auto ask = [&](int min_tokens) {
    json b = {{"prompt", "Once upon a time"}, {"max_tokens", 400}, {"temperature", 0},
              {"return_token_ids", true}, {"min_tokens", min_tokens}};
    auto r = http_post(port(), "/v1/completions", b.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body);
  };
  const json free_run = ask(0);
  ASSERT_EQ(free_run["choices"][0]["finish_reason"], "stop") << free_run.dump();
  const auto ids = free_run["choices"][0]["token_ids"].get<std::vector<int32_t>>();
  const int k = static_cast<int>(ids.size());
  ASSERT_GT(k, 1);
  const json held = ask(k + 5);
  const auto held_ids = held["choices"][0]["token_ids"].get<std::vector<int32_t>>();
  ASSERT_GE(static_cast<int>(held_ids.size()), k + 5);
  EXPECT_TRUE(std::equal(ids.begin(), ids.end() - 1, held_ids.begin()));
  EXPECT_NE(held_ids[k - 1], ids[k - 1]);  // EOS held back at position k
  // min_tokens above max_tokens is a 400
  EXPECT_EQ(http_post(port(), "/v1/completions",
                      R"({"prompt": "x", "max_tokens": 4, "min_tokens": 5})").status, 400);
}

// Issue 24 item 5 through the server: deep nesting is a 400 naming the limit.
TEST_F(ServeE2eTest, DeeplyNestedBodyIsRefused) {
  const std::string deep = R"({"prompt": "x", "junk": )" + std::string(100000, '[') +
                           std::string(100000, ']') + "}";
  auto r = http_post(port(), "/v1/completions", deep);
  expect_openai_error(r, 400);
  EXPECT_NE(r.body.find("nested deeper"), std::string::npos) << r.body.substr(0, 200);
}

// n and several prompts (issue 24 item 15): choice p * n + i of a request equals the same
// prompt sent alone with seed + i; streamed chunks name their choice and add up to the same
// texts; usage counts each prompt once and every choice's tokens.
TEST_F(ServeE2eTest, SeveralPromptsAndNEqualSingleRequests) {
  const std::vector<std::string> prompts = {"Once upon a time", "The cat", "Lily and Ben"};
  constexpr int kN = 3;
  auto single = [&](const std::string& prompt, int seed) {
    json b = {{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0.8}, {"seed", seed},
              {"return_token_ids", true}};
    auto r = http_post(port(), "/v1/completions", b.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body);
  };
  json b = {{"prompt", prompts}, {"n", kN}, {"max_tokens", 12}, {"temperature", 0.8},
            {"seed", 100}, {"return_token_ids", true}};
  auto r = http_post(port(), "/v1/completions", b.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json all = json::parse(r.body);
  ASSERT_EQ(all["choices"].size(), prompts.size() * kN);
  int64_t prompt_tokens = 0, completion_tokens = 0;
  std::set<std::string> texts_of_first_prompt;
  for (size_t p = 0; p < prompts.size(); ++p) {
    for (int i = 0; i < kN; ++i) {
      const json& c = all["choices"][p * kN + i];
      EXPECT_EQ(c["index"], p * kN + i);
      const json one = single(prompts[p], 100 + i);
      EXPECT_EQ(c["text"], one["choices"][0]["text"]) << prompts[p] << " sample " << i;
      EXPECT_EQ(c["token_ids"], one["choices"][0]["token_ids"]);
      EXPECT_EQ(c["prompt_token_ids"], one["choices"][0]["prompt_token_ids"]);
      completion_tokens += one["usage"]["completion_tokens"].get<int64_t>();
      if (i == 0) prompt_tokens += one["usage"]["prompt_tokens"].get<int64_t>();
      if (p == 0) texts_of_first_prompt.insert(c["text"].get<std::string>());
    }
  }
  EXPECT_GT(texts_of_first_prompt.size(), 1u) << "n samples should differ (seeds differ)";
  EXPECT_EQ(all["usage"]["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(all["usage"]["completion_tokens"], completion_tokens);

  // Streaming: the same choices, interleaved, each chunk naming its index.
  b["stream"] = true;
  b["stream_options"] = {{"include_usage", true}};
  auto s = http_post(port(), "/v1/completions", b.dump());
  ASSERT_EQ(s.status, 200);
  ASSERT_TRUE(s.done);
  std::map<int64_t, std::string> streamed;
  std::map<int64_t, std::string> finish;
  json usage;
  for (const std::string& d : s.data) {
    json ch = json::parse(d);
    if (ch.contains("usage") && !ch["usage"].is_null()) usage = ch["usage"];
    for (const json& c : ch["choices"]) {
      streamed[c["index"].get<int64_t>()] += c["text"].get<std::string>();
      if (!c["finish_reason"].is_null()) finish[c["index"].get<int64_t>()] = c["finish_reason"];
    }
  }
  ASSERT_EQ(streamed.size(), prompts.size() * kN);
  EXPECT_EQ(finish.size(), prompts.size() * kN);
  for (const auto& [k, text] : streamed) EXPECT_EQ(text, all["choices"][k]["text"]) << k;
  EXPECT_EQ(usage["completion_tokens"], completion_tokens);

  // Chat with n: greedy choices are all the single greedy answer.
  json chat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 8},
               {"temperature", 0}, {"n", 4}};
  auto c = http_post(port(), "/v1/chat/completions", chat.dump());
  ASSERT_EQ(c.status, 200) << c.body;
  const json cj = json::parse(c.body);
  ASSERT_EQ(cj["choices"].size(), 4u);
  for (const json& ch : cj["choices"])
    EXPECT_EQ(ch["message"]["content"], cj["choices"][0]["message"]["content"]);
  // Past 64 choices: a 400.
  expect_openai_error(http_post(port(), "/v1/completions",
                                json({{"prompt", prompts}, {"n", 22}}).dump()), 400);
}

// Seeded fuzz of request bodies (issue 24 item 3): valid requests with one value replaced
// by another JSON type or bytes flipped. Every reply is a 200 or a 4xx with an OpenAI error
// body -- never a dropped connection or a 5xx -- and the server still answers at the end.
TEST_F(ServeE2eTest, FuzzedBodiesGetAnswersNotCrashes) {
  const std::vector<std::pair<std::string, json>> seeds = {
      {"/v1/completions", {{"prompt", "Once"}, {"max_tokens", 3}, {"temperature", 0.5},
                           {"stop", {"x"}}, {"logprobs", 2}, {"n", 2}, {"seed", 1}}},
      {"/v1/completions", {{"prompt", {1, 2, 3}}, {"max_tokens", 2}, {"stream", true},
                           {"logit_bias", {{"5", 1}}}}},
      {"/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                {"max_tokens", 2}, {"top_logprobs", 1}, {"logprobs", true}}}};
  const json values[] = {nullptr, -1, 0, 1, int64_t{1} << 40, 1e308, -0.5, "x", "",
                         json::array(), json::array({1, "a"}), json::object(), true, false};
  std::mt19937_64 rng(0xf022);
  int answered = 0;
  for (int i = 0; i < 600; ++i) {
    const auto& [path, base] = seeds[rng() % seeds.size()];
    json b = base;
    std::vector<std::string> keys;
    for (auto it = b.begin(); it != b.end(); ++it) keys.push_back(it.key());
    std::string body;
    if (rng() % 5 == 0) {
      body = b.dump();
      for (int k = 0; k < 3; ++k) body[rng() % body.size()] = static_cast<char>(rng() & 0xff);
    } else {
      b[keys[rng() % keys.size()]] = values[rng() % std::size(values)];
      body = b.dump();
    }
    SCOPED_TRACE(body);
    const auto r = http_post(port(), path, body);
    ASSERT_NE(r.status, 0) << "connection dropped";
    EXPECT_TRUE(r.status == 200 || (r.status >= 400 && r.status < 500)) << r.status << " " << r.body;
    if (r.status >= 400) expect_openai_error(r, r.status);
    ++answered;
  }
  EXPECT_EQ(answered, 600);
  EXPECT_EQ(http_get(port(), "/health").status, 200);
}

// response_format json_object (constrained decoding): a finished answer parses as a JSON
// object (nlohmann's parser, independent of the checker); one cut by max_tokens is a prefix of
// one. Streaming gives the same text.
TEST_F(ServeE2eTest, JsonObjectResponseFormat) {
  int complete = 0;
  for (int seed = 1; seed <= 6; ++seed) {
    json b = {{"prompt", "Once upon a time"}, {"max_tokens", 200}, {"temperature", 1.0},
              {"seed", seed}, {"response_format", {{"type", "json_object"}}}};
    auto r = http_post(port(), "/v1/completions", b.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const json c = json::parse(r.body)["choices"][0];
    const std::string text = c["text"];
    if (c["finish_reason"] == "stop") {
      ++complete;
      ASSERT_TRUE(json::accept(text)) << text;
      EXPECT_TRUE(json::parse(text).is_object()) << text;
    } else {
      JsonPrefix p;
      EXPECT_TRUE(p.feed(text)) << text;
    }
    b["stream"] = true;
    EXPECT_EQ(streamed_text(b), text);
  }
  EXPECT_GT(complete, 0) << "no seed closed its object within 200 tokens";
  // With ignore_eos the request still ends where the object closes (no EOS text after it).
  int closed = 0;
  for (int seed = 1; seed <= 6; ++seed) {
    json b = {{"prompt", "Once upon a time"}, {"max_tokens", 200}, {"temperature", 1.0},
              {"seed", seed}, {"ignore_eos", true}, {"response_format", {{"type", "json_object"}}}};
    const json c = json::parse(http_post(port(), "/v1/completions", b.dump()).body)["choices"][0];
    if (c["finish_reason"] != "stop") continue;
    ++closed;
    EXPECT_TRUE(json::accept(c["text"].get<std::string>())) << c["text"];
  }
  EXPECT_GT(closed, 0);
  expect_openai_error(http_post(port(), "/v1/completions",  // json_schema without a schema
      R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {}}})"), 400);
}

// response_format json_schema (constrained decoding): a finished answer parses and keeps to
// the schema (checked here field by field, not by the checker); one cut by max_tokens is a
// prefix the checker accepts. Streaming gives the same text; chat works the same way.
TEST_F(ServeE2eTest, JsonSchemaResponseFormat) {
  const json schema = json::parse(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "minLength": 1, "maxLength": 12},
      "age": {"type": "integer"},
      "mood": {"enum": ["happy", "sad", 3]},
      "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
      "pet": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/Pet"}]}
    },
    "required": ["name", "age", "mood"],
    "additionalProperties": false,
    "$defs": {"Pet": {"type": "object", "properties": {"kind": {"enum": ["cat", "dog"]}},
                      "required": ["kind"], "additionalProperties": false}}
  })");
  auto compiled = JsonSchema::compile(schema);
  ASSERT_TRUE(compiled.ok()) << compiled.status().to_string();
  const auto check = [](const json& v) {
    ASSERT_TRUE(v.is_object()) << v;
    for (auto it = v.begin(); it != v.end(); ++it)
      EXPECT_TRUE(it.key() == "name" || it.key() == "age" || it.key() == "mood" || it.key() == "tags" ||
                  it.key() == "pet") << v;
    ASSERT_TRUE(v.contains("name") && v.contains("age") && v.contains("mood")) << v;
    ASSERT_TRUE(v["name"].is_string()) << v;
    EXPECT_GE(v["name"].get<std::string>().size(), 1u);
    EXPECT_TRUE(v["age"].is_number_integer()) << v;
    EXPECT_TRUE(v["mood"] == "happy" || v["mood"] == "sad" || v["mood"] == 3) << v;
    if (v.contains("tags")) {
      ASSERT_TRUE(v["tags"].is_array()) << v;
      EXPECT_LE(v["tags"].size(), 3u);
      for (const json& t : v["tags"]) EXPECT_TRUE(t.is_string()) << v;
    }
    if (v.contains("pet") && !v["pet"].is_null()) {
      ASSERT_TRUE(v["pet"].is_object()) << v;
      EXPECT_EQ(v["pet"].size(), 1u) << v;
      EXPECT_TRUE(v["pet"]["kind"] == "cat" || v["pet"]["kind"] == "dog") << v;
    }
  };
  const json format = {{"type", "json_schema"},
                       {"json_schema", {{"name", "person"}, {"strict", true}, {"schema", schema}}}};
  int complete = 0;
  for (int seed = 1; seed <= 6; ++seed) {
    json b = {{"prompt", "Once upon a time"}, {"max_tokens", 200}, {"temperature", 1.0},
              {"seed", seed}, {"response_format", format}};
    auto r = http_post(port(), "/v1/completions", b.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const json c = json::parse(r.body)["choices"][0];
    const std::string text = c["text"];
    SCOPED_TRACE(text);
    if (c["finish_reason"] == "stop") {
      ++complete;
      ASSERT_TRUE(json::accept(text));
      check(json::parse(text));
    } else {
      JsonSchemaState st(*compiled);
      EXPECT_TRUE(st.feed(text));
    }
    b["stream"] = true;
    EXPECT_EQ(streamed_text(b), text);
  }
  EXPECT_GT(complete, 0) << "no seed closed its object within 200 tokens";
  // Chat, with ignore_eos: the request still ends where the value does.
  int chat_closed = 0;
  for (int seed = 1; seed <= 3; ++seed) {
    json b = {{"messages", {{{"role", "user"}, {"content", "Tell me about a person"}}}},
              {"max_tokens", 200}, {"temperature", 0.8}, {"seed", seed}, {"ignore_eos", true},
              {"response_format", format}};
    auto r = http_post(port(), "/v1/chat/completions", b.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const json c = json::parse(r.body)["choices"][0];
    const std::string text = c["message"]["content"];
    SCOPED_TRACE(text);
    if (c["finish_reason"] != "stop") continue;
    ++chat_closed;
    ASSERT_TRUE(json::accept(text));
    check(json::parse(text));
  }
  EXPECT_GT(chat_closed, 0);
  // Schemas outside the subset: 400 naming the keyword.
  json bad = {{"prompt", "x"}, {"response_format", format}};
  bad["response_format"]["json_schema"]["schema"]["properties"]["name"]["pattern"] = "^[A-Z]";
  auto r = http_post(port(), "/v1/completions", bad.dump());
  expect_openai_error(r, 400);
  EXPECT_NE(r.body.find("pattern"), std::string::npos) << r.body;
}

// Found by a new-user check: max_tokens near INT64_MAX is a 400 whose message has no
// wrapped sum; the Content-Type media type is case-insensitive.
TEST_F(ServeE2eTest, HugeMaxTokensAndContentTypeCase) {
  auto r = http_post(port(), "/v1/completions", R"({"prompt": "Once", "max_tokens": 9223372036854775807})");
  expect_openai_error(r, 400);
  EXPECT_EQ(r.body.find("-9223372036854775"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("9223372036854775809"), std::string::npos) << r.body;
  httplib::Client cl("127.0.0.1", port());
  auto res = cl.Post("/v1/completions", R"({"prompt": "Hi", "max_tokens": 2})", "Application/JSON; charset=utf-8");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
}

TEST_F(ServeE2eTest, BadInputsGetOpenAiErrors) {
  expect_openai_error(http_post(port(), "/v1/completions", R"({"prompt": "x", )"), 400);
  expect_openai_error(http_post(port(), "/v1/completions", R"({"prompt": "x", "max_tokens": "9"})"), 400);
  expect_openai_error(http_post(port(), "/v1/completions", R"({"prompt": "x", "temperature": [1]})"), 400);
  expect_openai_error(http_post(port(), "/v1/completions", R"({"prompt": "x", "max_tokens": 0})"), 400);
  expect_openai_error(http_post(port(), "/v1/completions", R"({"prompt": "x", "max_tokens": -1})"), 400);
  expect_openai_error(http_post(port(), "/v1/chat/completions", R"({"messages": "x"})"), 400);
  expect_openai_error(http_post(port(), "/v1/completions", R"({"prompt": [1, 2, 99999]})"), 400);
  // top_k: -1 and 0 mean off (vLLM); below -1 is a mistake, not "off"
  expect_openai_error(http_post(port(), "/v1/completions", R"({"prompt": "x", "top_k": -3})"), 400);
  EXPECT_EQ(http_post(port(), "/v1/completions", R"({"prompt": "x", "max_tokens": 2, "top_k": -1})").status, 200);
  // Prompt longer than the 512-token context, as ids and as text.
  json long_ids = {{"prompt", std::vector<int32_t>(600, 5)}};
  auto r = http_post(port(), "/v1/completions", long_ids.dump());
  expect_openai_error(r, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "context_length_exceeded");
  std::string words;
  for (int i = 0; i < 700; ++i) words += " cat";
  expect_openai_error(http_post(port(), "/v1/completions", json({{"prompt", words}}).dump()), 400);
  // Body over the limit (256 KiB here).
  json big = {{"prompt", "x"}, {"padding", std::string(300 * 1024, 'y')}};
  expect_openai_error(http_post(port(), "/v1/completions", big.dump()), 413);
  // Unknown model.
  auto m = http_post(port(), "/v1/completions", R"({"model": "gpt-9", "prompt": "x"})");
  expect_openai_error(m, 404);
  EXPECT_EQ(json::parse(m.body)["error"]["code"], "model_not_found");
  // Unknown fields are ignored.
  EXPECT_EQ(http_post(port(), "/v1/completions",
                      R"({"prompt": "x", "max_tokens": 2, "frobnicate": {"a": [1, 2]}, "user": "u"})")
                .status,
            200);
}

TEST_F(ServeE2eTest, MetricsExposeVllmNames) {
  ASSERT_EQ(http_post(port(), "/v1/completions", R"({"prompt": "A dog", "max_tokens": 5})").status, 200);
  const std::string t = http_get(port(), "/metrics").body;
  for (const char* name :
       {"strata:time_to_first_token_seconds_count", "strata:inter_token_latency_seconds_count",
        "strata:e2e_request_latency_seconds_count", "strata:request_queue_time_seconds_count",
        "strata:num_requests_running", "strata:num_requests_waiting", "strata:prompt_tokens_total",
        "strata:generation_tokens_total", "strata:prefix_cache_queries_total",
        "strata:prefix_cache_hits_total", "strata:num_preemptions_total"}) {
    EXPECT_GE(metric(t, std::string(name) + kModelLabel), 0) << name;
  }
  EXPECT_GE(metric(t, "strata:generation_tokens_total" + kModelLabel), 5);
  EXPECT_NE(t.find("# TYPE strata:time_to_first_token_seconds histogram"), std::string::npos);
}

TEST_F(ServeE2eTest, BenchReplaysMooncakeSlice) {
  WorkloadOptions wo;
  wo.vocab = 512;
  wo.max_context = 512;
  wo.block_tokens = 16;
  wo.time_scale = 0.02;   // 15 s of trace -> 0.3 s
  wo.length_scale = 0.05;
  auto w = load_mooncake_trace(source_dir() + "/testdata/traces/mooncake_conversation_head50.jsonl", wo);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  // Independently computed (a short Python script over the same 50 lines, same rules):
  // 13 requests need more than 512 tokens; 36 of the 481 replayed blocks have their chain
  // in an earlier replayed request.
  EXPECT_EQ(w->skipped_too_long, 13);
  EXPECT_EQ(w->requests.size(), 37u);
  EXPECT_EQ(w->oracle_blocks, 481);
  EXPECT_NEAR(w->oracle_prefix_hit_rate, 36.0 / 481.0, 1e-12);
  BenchClientOptions co;
  co.url = "http://127.0.0.1:" + std::to_string(port());
  auto run = run_benchmark(*w, co);
  ASSERT_TRUE(run.ok()) << run.status().to_string();
  json s = summarize_bench(*w, *run, {.ttft_ms = 60000});
  EXPECT_EQ(s["completed"], 37) << s["errors"].dump();
  EXPECT_EQ(s["failed"], 0);
  int64_t expected_in = 0, expected_out = 0;
  for (const auto& r : w->requests) {
    expected_in += static_cast<int64_t>(r.prompt.size());
    expected_out += r.output_tokens;
  }
  EXPECT_EQ(s["total_input_tokens"], expected_in);
  EXPECT_EQ(s["total_output_tokens"], expected_out);  // ignore_eos: exact lengths
  EXPECT_GT(s["mean_ttft_ms"].get<double>(), 0);
  EXPECT_GT(s["request_throughput"].get<double>(), 0);
  // The /metrics delta counts each prompt token once (first admission only).
  EXPECT_EQ(run->prefix_cache_queries, static_cast<double>(expected_in));
  // Measured hit rate vs the oracle: only meaningful with a prefix cache in the runner.
  if (stack_->runner().prefix_alignment() > 0) {
    EXPECT_NEAR(s["prefix_cache_hit_rate"].get<double>(), w->oracle_prefix_hit_rate, 0.02);
  } else {
    EXPECT_EQ(run->prefix_cache_hits, 0);
  }
}

// bench serve against a server with n-gram speculation: the /metrics delta gives the drafts,
// the accepted draft tokens and the mean acceptance length (1 + accepted / verify passes); a
// server without speculation reports none.
TEST_F(ServeE2eTest, BenchReportsSpeculativeAcceptance) {
  ServeOptions o;
  o.model_dir = source_dir() + "/models/stories260K";
  o.http.port = 0;
  o.http.threads = 8;
  o.engine.scheduler = {.max_num_seqs = 4, .max_num_batched_tokens = 256, .chunk_size = 64};
  o.engine.speculative.method = "ngram";
  o.engine.speculative.num_speculative_tokens = 4;
  o.engine.speculative.prompt_lookup_min = 1;
  o.runner.threads = 1;
  auto spec = ServingStack::start(o);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  Workload w;
  w.name = "repeat";
  for (int i = 0; i < 6; ++i) {
    BenchRequest r;
    std::vector<int32_t> phrase;
    for (int k = 0; k < 7; ++k) phrase.push_back(3 + (i * 41 + k * 13) % 500);
    for (int rep = 0; rep < 4; ++rep) r.prompt.insert(r.prompt.end(), phrase.begin(), phrase.end());
    r.output_tokens = 40;
    w.requests.push_back(r);
  }
  BenchClientOptions co;
  co.url = "http://127.0.0.1:" + std::to_string((*spec)->port());
  auto run = run_benchmark(w, co);
  ASSERT_TRUE(run.ok()) << run.status().to_string();
  json s = summarize_bench(w, *run, {});
  EXPECT_EQ(s["completed"], 6) << s["errors"].dump();
  const std::string m = http_get((*spec)->port(), "/metrics").body;
  ASSERT_GT(run->spec_drafts, 0);
  EXPECT_EQ(run->spec_drafts, metric(m, "strata:spec_decode_num_drafts" + kModelLabel));
  EXPECT_EQ(run->spec_accepted_tokens, metric(m, "strata:spec_decode_num_accepted_tokens" + kModelLabel));
  EXPECT_LE(run->spec_accepted_tokens, run->spec_draft_tokens);
  EXPECT_DOUBLE_EQ(s["spec_decode_mean_acceptance_length"].get<double>(),
                   1.0 + run->spec_accepted_tokens / run->spec_drafts);
  EXPECT_NE(render_bench_text(s).find("Mean acceptance length:"), std::string::npos);
  (*spec)->shutdown();
  // The shared server runs without speculation: nothing to report.
  co.url = "http://127.0.0.1:" + std::to_string(port());
  auto plain = run_benchmark(w, co);
  ASSERT_TRUE(plain.ok());
  json p = summarize_bench(w, *plain, {});
  EXPECT_TRUE(p["spec_decode_mean_acceptance_length"].is_null());
  EXPECT_EQ(render_bench_text(p).find("Mean acceptance length:"), std::string::npos);
}

TEST_F(ServeE2eTest, BenchReplaysAzureSlice) {
  WorkloadOptions wo;
  wo.vocab = 512;
  wo.max_context = 512;
  wo.time_scale = 0.02;   // ~37 s of trace -> 0.7 s
  wo.length_scale = 0.05;
  auto w = load_azure_trace(source_dir() + "/testdata/traces/azure_code_2023_head50.csv", wo);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(static_cast<int64_t>(w->requests.size()) + w->skipped_too_long, 50);
  ASSERT_GT(w->requests.size(), 30u);
  BenchClientOptions co;
  co.url = "http://127.0.0.1:" + std::to_string(port());
  co.max_concurrency = 16;
  auto run = run_benchmark(*w, co);
  ASSERT_TRUE(run.ok());
  json s = summarize_bench(*w, *run, {});
  EXPECT_EQ(s["completed"].get<size_t>(), w->requests.size()) << s["errors"].dump();
  EXPECT_EQ(s["failed"], 0);
  EXPECT_FALSE(render_bench_svg(*run, "azure").empty());
}

TEST_F(ServeE2eTest, PreemptionUnderSmallKvCacheKeepsOutputsExact) {
  // A second server whose KV cache holds only 640 tokens: six concurrent requests of
  // 60 + 400 tokens cannot all fit (two already need 920), so the scheduler preempts and
  // recomputes. Every output must still equal the request's solo output on the roomy server.
  // The six requests must overlap in time for a preemption to happen; on a loaded machine a
  // round may not overlap enough, so up to five rounds run (each one checked for exactness)
  // until one of them preempted.
  ServeOptions o;
  o.model_dir = source_dir() + "/models/stories260K";
  o.http.port = 0;
  o.http.threads = 16;
  o.engine.scheduler = {.max_num_seqs = 6, .max_num_batched_tokens = 128, .chunk_size = 32};
  o.runner.threads = 1;
  o.runner.kv_cache_tokens = 640;
  auto small = ServingStack::start(o);
  ASSERT_TRUE(small.ok()) << small.status().to_string();
  const int n = 6;
  auto body = [](int i) {
    std::vector<int32_t> prompt;
    for (int k = 0; k < 60; ++k) prompt.push_back(3 + (i * 37 + k * 11) % 500);
    return json({{"prompt", prompt}, {"max_tokens", 400}, {"temperature", 0}, {"ignore_eos", true}})
        .dump();
  };
  std::vector<std::string> solo(n);
  for (int i = 0; i < n; ++i) {
    auto r = http_post(port(), "/v1/completions", body(i));
    ASSERT_EQ(r.status, 200) << r.body;
    solo[i] = json::parse(r.body)["choices"][0]["text"];
  }
  double preemptions = 0;
  for (int round = 0; round < 5 && preemptions == 0; ++round) {
    std::vector<testing::HttpReply> replies(n);
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&, i] { replies[i] = http_post((*small)->port(), "/v1/completions", body(i)); });
    }
    for (auto& t : threads) t.join();
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(replies[i].status, 200) << replies[i].body;
      EXPECT_EQ(json::parse(replies[i].body)["choices"][0]["text"], solo[i]) << "round " << round << " request " << i;
    }
    preemptions = metric(http_get((*small)->port(), "/metrics").body,
                         "strata:num_preemptions_total" + kModelLabel);
  }
  const std::string m = http_get((*small)->port(), "/metrics").body;
  EXPECT_GT(preemptions, 0);
  EXPECT_EQ(metric(m, "strata:cache_used_bytes{model_name=\"stories260K\",kind=\"kv\",tier=\"host\"}"), 0);
  (*small)->shutdown();
}

// A checkpoint without a tokenizer (the V4-Flash tiny golden model): prompts are token ids,
// the text is empty, and the generated ids come back as token_ids without being asked for,
// equal to the greedy generate_ids() loop on a separately loaded runner.
// A request that fits the context but outgrows a pool smaller than it (--kv-cache-tokens 64)
// fails with a 400 naming the flag, not a 500.
TEST(ServeSmallPoolTest, OutgrowingThePoolIsA400) {
  ServeOptions o;
  o.model_dir = source_dir() + "/models/stories260K";
  o.http.host = "127.0.0.1";
  o.http.port = 0;
  o.runner.threads = 1;
  o.runner.kv_cache_tokens = 64;
  auto s = ServingStack::start(o);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  auto r = http_post((*s)->port(), "/v1/completions",
                     R"({"prompt": "Once upon a time", "max_tokens": 100, "ignore_eos": true})");
  expect_openai_error(r, 400);
  EXPECT_NE(r.body.find("--kv-cache-tokens"), std::string::npos) << r.body;
}

TEST(ServeNoTokenizerTest, TokenIdsComeBackWithoutBeingAsked) {
  const std::string dir = source_dir() + "/models/deepseek-v4flash-tiny";
  ServeOptions o;
  o.model_dir = dir;
  o.http.host = "127.0.0.1";
  o.http.port = 0;
  o.runner.threads = 1;
  auto stack = ServingStack::start(o);
  ASSERT_TRUE(stack.ok()) << stack.status().to_string();
  const std::vector<int32_t> prompt = {5, 17, 42, 99, 7};
  RunnerOptions ro;
  ro.threads = 1;
  auto runner = make_model_runner(dir, ro);
  ASSERT_TRUE(runner.ok());
  GenerateOptions go;
  go.max_tokens = 6;
  go.sampling.temperature = 0;
  go.add_bos = false;  // the server takes an id prompt as given
  auto ref = generate_ids(**runner, nullptr, prompt, go);
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  ASSERT_FALSE(ref->generated_ids.empty());

  auto r = http_post((*stack)->port(), "/v1/completions",
                     json({{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["choices"][0]["text"], "");
  std::vector<int32_t> ids = j["choices"][0]["token_ids"].get<std::vector<int32_t>>();
  if (ref->stopped_by_token) ids.pop_back();  // the stop token ends the list
  EXPECT_EQ(ids, ref->generated_ids);
  EXPECT_EQ(j["choices"][0]["prompt_token_ids"].get<std::vector<int32_t>>(), prompt);
  // sampled until EOS: the stop token ends token_ids and is counted in completion_tokens
  int stops = 0;
  for (int seed = 1; seed <= 5; ++seed) {
    auto e = http_post((*stack)->port(), "/v1/completions",
                       json({{"prompt", prompt}, {"max_tokens", 500}, {"seed", seed}}).dump());
    ASSERT_EQ(e.status, 200) << e.body;
    json je = json::parse(e.body);
    const auto got = je["choices"][0]["token_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(static_cast<int64_t>(got.size()), je["usage"]["completion_tokens"].get<int64_t>());
    if (je["choices"][0]["finish_reason"] == "stop") {
      ++stops;
      ASSERT_FALSE(got.empty());
      const ModelInfo& info = (*runner)->info();
      EXPECT_TRUE(got.back() == info.eos_id || got.back() == info.bos_id) << got.back();
    }
  }
  EXPECT_GT(stops, 0);  // the tiny model samples EOS within 1000 tokens for these seeds
  // a text prompt is a clear 400, not an empty completion
  auto t = http_post((*stack)->port(), "/v1/completions", R"({"prompt": "hello", "max_tokens": 2})");
  EXPECT_EQ(t.status, 400) << t.body;
  EXPECT_NE(t.body.find("no tokenizer"), std::string::npos) << t.body;
  (*stack)->shutdown();
}

}  // namespace
}  // namespace strata
