// Issue 22 through the real server (ServingStack on 127.0.0.1, OpenAI /v1/completions with
// id prompts, "temperature": 0, "logprobs": 1, "return_token_ids": true), for Llama
// (stories260K), DeepSeek-V4.1 tiny and DeepSeek-V4 tiny: a grid of prompts sharing 1, 2 and 3
// alignment units, with tails of 1, unit-1, unit, unit+1 and other lengths, sent in a random
// order from 4 client threads at once to one long-lived server; then multi-turn chats (turn
// 2 = turn 1 + its answer + new ids). Every response's token ids and logprobs must be
// bit-identical to the same prompt sent to a fresh server. (The in-process Engine version
// with preemption and cancels is tests/prefix_purity_test.cc.)
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <random>
#include <thread>

#include "serve/serving_stack.h"
#include "serve/test_http_client.h"

namespace strata {
namespace {

using json = nlohmann::json;

std::string model_dir(const std::string& name) {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  return std::string(e ? e : STRATA_SOURCE_DIR) + "/models/" + name;
}

std::unique_ptr<ServingStack> start(const std::string& model) {
  ServeOptions o;
  o.model_dir = model_dir(model);
  o.http.host = "127.0.0.1";
  o.http.port = 0;
  o.http.threads = 8;
  o.engine.scheduler = {.max_num_seqs = 8, .max_num_batched_tokens = 256, .chunk_size = 96};
  o.runner.threads = 2;
  auto s = ServingStack::start(o);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(s).value() : nullptr;
}

struct Reply {
  int status = 0;
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  int64_t cached = -1;
  std::string body;
};

Reply complete(int port, const std::vector<int32_t>& prompt, int max_tokens) {
  json req = {{"prompt", prompt},          {"max_tokens", max_tokens}, {"temperature", 0},
              {"logprobs", 1},             {"return_token_ids", true}, {"ignore_eos", true}};
  auto r = testing::http_post(port, "/v1/completions", req.dump());
  Reply out;
  out.status = r.status;
  out.body = r.body;
  if (r.status != 200) return out;
  const json j = json::parse(r.body);
  const json& c = j["choices"][0];
  out.ids = c["token_ids"].get<std::vector<int32_t>>();
  for (const json& v : c["logprobs"]["token_logprobs"]) out.logprobs.push_back(v.get<float>());
  out.cached = j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
  return out;
}

bool same(const Reply& a, const Reply& b) {
  // JSON floats are printed with enough digits to round-trip an f32 exactly.
  return a.status == 200 && b.status == 200 && a.ids == b.ids && a.logprobs == b.logprobs;
}

void grid(const std::string& model) {
  auto server = start(model);
  ASSERT_TRUE(server);
  const int64_t align = server->runner().prefix_alignment();
  const int64_t unit = align > 0 ? align : 64;
  const int32_t vocab = server->runner().info().vocab_size;
  const int64_t ctx = server->runner().info().max_context;
  std::mt19937 rng(2211);
  auto ids = [&](int64_t n) {
    std::uniform_int_distribution<int32_t> u(3, vocab - 8);
    std::vector<int32_t> v(n);
    for (auto& t : v) t = u(rng);
    return v;
  };
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t units : {1, 2, 3}) {
    const auto base = ids(units * unit);
    for (int64_t tail : {int64_t{1}, unit - 1, unit, unit + 1, int64_t{10}}) {
      if (units * unit + tail + 8 > ctx) continue;
      auto p = base;
      const auto t = ids(tail);
      p.insert(p.end(), t.begin(), t.end());
      prompts.push_back(std::move(p));
    }
  }
  std::shuffle(prompts.begin(), prompts.end(), rng);
  std::vector<Reply> got(prompts.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t)
    clients.emplace_back([&] {
      for (size_t i; (i = next++) < prompts.size();) got[i] = complete(server->port(), prompts[i], 4);
    });
  for (auto& c : clients) c.join();
  int hits = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(got[i].status, 200) << got[i].body;
    EXPECT_EQ(got[i].ids.size(), 4u);
    EXPECT_EQ(got[i].logprobs.size(), 4u);
    hits += got[i].cached > 0;
    auto fresh = start(model);
    ASSERT_TRUE(fresh);
    const Reply cold = complete(fresh->port(), prompts[i], 4);
    EXPECT_EQ(cold.cached, 0);
    EXPECT_TRUE(same(got[i], cold)) << model << ": prompt of " << prompts[i].size()
                                    << " ids (cached " << got[i].cached << ") differs from a fresh server";
  }
  if (align > 0) {
    EXPECT_GE(hits, static_cast<int>(prompts.size()) / 2) << model;
  }
  // /metrics states the memory one cached unit costs (rows + boundary snapshot).
  const std::string metrics = testing::http_get(server->port(), "/metrics").body;
  const int64_t per_unit = server->runner().prefix_cache_bytes_per_unit();
  EXPECT_GT(per_unit, 0) << model;
  EXPECT_NE(metrics.find("strata:prefix_cache_bytes_per_unit{model_name=\"" +
                         server->runner().info().name + "\"} " + std::to_string(per_unit)),
            std::string::npos)
      << model << "\n" << metrics.substr(0, 2000);

  // Multi-turn.
  std::vector<int32_t> convo = ids(unit + 5);
  for (int turn = 0; turn < 3 && static_cast<int64_t>(convo.size()) + 30 < ctx; ++turn) {
    const Reply r = complete(server->port(), convo, 6);
    auto fresh = start(model);
    ASSERT_TRUE(fresh);
    EXPECT_TRUE(same(r, complete(fresh->port(), convo, 6))) << model << " turn " << turn;
    if (turn > 0 && align > 0) {
      EXPECT_GT(r.cached, 0) << model << " turn " << turn;
    }
    convo.insert(convo.end(), r.ids.begin(), r.ids.end());
    const auto more = ids(7 + 11 * turn);
    convo.insert(convo.end(), more.begin(), more.end());
  }
}

TEST(ServePrefixPurity, Llama) { grid("stories260K"); }
TEST(ServePrefixPurity, DeepseekV41Tiny) { grid("deepseek-v41-tiny"); }
TEST(ServePrefixPurity, DeepseekV4Tiny) { grid("deepseek-v4flash-tiny"); }

}  // namespace
}  // namespace strata
