// Issue 22: a token's state depends only on the tokens before it. Through the Engine (the
// server's loop, driven with step_once) and the real runners of every model family:
//   * prefix grid: shared prefixes of 1, 2 and 3 alignment units (V4.1: 64 tokens) with tails
//     of 1, unit-1, unit, unit+1 and other lengths, sent in a random order, several at once
//     (batched and interleaved); every response's ids AND logprobs are bit-identical to the
//     same prompt sent alone to a fresh runner; multi-turn chats (turn 2 = turn 1 + its answer
//     + new ids) likewise; the V4.1 runner really hits (cached_tokens = the shared depth);
//   * preemption: small state pools, random arrivals and cancels force preemptions and
//     recompute; no request errs, every finished one is bit-identical to its run alone on a
//     roomy fresh runner, and at the end no request holds any state.
// All three families keep their sequences in one shared pool with a prefix cache (V4 and V4.1:
// DeepseekCacheRunner).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "exec/deepseek_v4/deepseek_v4_runner.h"
#include "exec/runner_factory.h"
#include "runner_fixtures.h"
#include "sched/engine.h"
#include "sched/spec_decode.h"

namespace strata {
namespace {

using testing::model_dir;

struct Output {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  int64_t cached = 0;
  FinishReason reason = FinishReason::kNone;
  std::string error;
};

bool same(const Output& a, const Output& b) {
  if (a.ids != b.ids || a.logprobs.size() != b.logprobs.size()) return false;
  for (size_t i = 0; i < a.logprobs.size(); ++i)  // bit for bit (no NaN expected)
    if (!(a.logprobs[i] == b.logprobs[i])) return false;
  return true;
}

std::unique_ptr<ModelRunner> make_runner(const std::string& model, int64_t kv_tokens) {
  return testing::fresh_runner(model, kv_tokens);
}

GenerationParams greedy(int64_t max_tokens) {
  GenerationParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.logprobs = 1;
  p.ignore_eos = true;
  return p;
}

// Drives `engine` until every stream has finished; `before_step(k)` may submit or cancel.
struct Driver {
  explicit Driver(Engine* e) : engine(e) {}
  Engine* engine;
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::map<RequestId, Output> out;
  void submit(const std::vector<int32_t>& prompt, const GenerationParams& p) {
    auto s = engine->submit(prompt, p);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    streams.push_back(*s);
  }
  void drain() {
    for (auto& s : streams) {
      while (auto ev = s->next(std::chrono::milliseconds(0))) {
        Output& o = out[s->id()];
        o.ids.insert(o.ids.end(), ev->tokens.begin(), ev->tokens.end());
        for (const auto& lp : ev->logprobs) o.logprobs.push_back(lp.logprob);
        if (ev->finished) {
          o.reason = ev->finish_reason;
          o.cached = ev->cached_tokens;
          o.error = ev->error.ok() ? "" : ev->error.to_string();
        }
        if (ev->finished) break;
      }
    }
  }
  bool all_done() const {
    if (out.size() < streams.size()) return false;
    for (const auto& [id, o] : out)
      if (o.reason == FinishReason::kNone) return false;
    return true;
  }
  // `more()`: requests are still to arrive.
  void run(const std::function<void(int)>& before_step = nullptr,
           const std::function<bool()>& more = nullptr) {
    for (int k = 0; k < 100000; ++k) {
      if (before_step) before_step(k);
      const bool worked = engine->step_once();
      engine->check_invariants();
      drain();
      if (!worked && all_done() && !(more && more())) return;
    }
    FAIL() << "engine did not finish";
  }
};

// The same prompt alone on a fresh runner (a "fresh server").
Output alone(const std::string& model, const std::vector<int32_t>& prompt, int64_t max_tokens) {
  auto r = make_runner(model, 0);
  Engine e(r.get(), nullptr, EngineOptions{});
  Driver d{&e};
  d.submit(prompt, greedy(max_tokens));
  d.run();
  return d.out.begin()->second;
}

std::vector<int32_t> ids(std::mt19937& rng, int64_t n, int32_t vocab) {
  std::uniform_int_distribution<int32_t> u(3, vocab - 8);
  std::vector<int32_t> v(n);
  for (auto& t : v) t = u(rng);
  return v;
}

void prefix_grid(const std::string& model) {
  auto runner = make_runner(model, 0);
  ASSERT_TRUE(runner);
  const int64_t unit = runner->prefix_alignment() > 0 ? runner->prefix_alignment() : 64;
  const int32_t vocab = runner->info().vocab_size;
  const int64_t ctx = runner->info().max_context;
  std::mt19937 rng(22);
  struct Case {
    std::vector<int32_t> prompt;
    int64_t shared = 0;  // whole units shared with another prompt of the grid
  };
  std::vector<Case> cases;
  for (int64_t units : {1, 2, 3}) {
    const std::vector<int32_t> base = ids(rng, units * unit, vocab);
    for (int64_t tail : {int64_t{1}, unit - 1, unit, unit + 1, int64_t{7}, 2 * unit + 3}) {
      if (units * unit + tail + 8 > ctx) continue;
      Case c;
      c.prompt = base;
      const auto t = ids(rng, tail, vocab);
      c.prompt.insert(c.prompt.end(), t.begin(), t.end());
      c.shared = units * unit;
      cases.push_back(std::move(c));
    }
  }
  std::shuffle(cases.begin(), cases.end(), rng);
  const int64_t kMax = 4;
  Engine engine(runner.get(), nullptr, EngineOptions{});
  Driver d{&engine};
  // Interleaved: three prompts at a time, the next ones arriving while those run.
  size_t next = 0;
  d.run(
      [&](int k) {
        if (k % 3 == 0)
          for (int j = 0; j < 3 && next < cases.size(); ++j)
            d.submit(cases[next++].prompt, greedy(kMax));
      },
      [&] { return next < cases.size(); });
  ASSERT_EQ(d.out.size(), cases.size());
  int hits = 0, i = 0;
  for (const auto& [id, o] : d.out) {
    const Case& c = cases[static_cast<size_t>(i++)];
    EXPECT_EQ(o.reason, FinishReason::kLength) << o.error;
    hits += o.cached > 0;
    EXPECT_LT(o.cached, static_cast<int64_t>(c.prompt.size()));
    if (runner->prefix_alignment() > 0) {
      EXPECT_EQ(o.cached % runner->prefix_alignment(), 0);
    }
    const Output cold = alone(model, c.prompt, kMax);
    EXPECT_TRUE(same(o, cold)) << model << ": prompt of " << c.prompt.size() << " ids (hit "
                               << o.cached << ") differs from its run alone";
  }
  if (runner->prefix_alignment() > 0) {
    // Six prompts share each base; all but the first of a base to finish can hit it.
    EXPECT_GE(hits, static_cast<int>(cases.size()) - 6) << model;
  }

  // Multi-turn: turn 2 = turn 1 + its answer + new ids; turn 3 likewise.
  std::vector<int32_t> convo = ids(rng, unit + 11, vocab);
  int64_t computed_before = 0;  // positions the previous turn computed (its last id is not fed)
  for (int turn = 0; turn < 3 && static_cast<int64_t>(convo.size()) + 40 < ctx; ++turn) {
    Driver t{&engine};
    t.submit(convo, greedy(6));
    t.run();
    const Output& o = t.out.begin()->second;
    EXPECT_TRUE(same(o, alone(model, convo, 6))) << model << " turn " << turn;
    if (turn > 0 && runner->prefix_alignment() > 0) {
      const int64_t depth = std::min<int64_t>(computed_before, static_cast<int64_t>(convo.size()) - 1);
      EXPECT_EQ(o.cached, depth / unit * unit)
          << model << " turn " << turn << ": the previous turn's prompt and answer are cached";
    }
    computed_before = static_cast<int64_t>(convo.size() + o.ids.size()) - 1;
    convo.insert(convo.end(), o.ids.begin(), o.ids.end());
    const auto more = ids(rng, 9 + turn * 13, vocab);
    convo.insert(convo.end(), more.begin(), more.end());
  }
}

void preemption(const std::string& model, int64_t kv_tokens, int64_t prompt_max,
                std::unique_ptr<ModelRunner> tight_runner = nullptr,
                const SpeculativeConfig& spec = {}) {
  auto tight = tight_runner ? std::move(tight_runner) : make_runner(model, kv_tokens);
  ASSERT_TRUE(tight);
  const int32_t vocab = tight->info().vocab_size;
  std::mt19937 rng(7);
  struct Req {
    std::vector<int32_t> prompt;
    int64_t max_tokens;
    bool cancel;
  };
  std::vector<Req> reqs;
  std::uniform_int_distribution<int64_t> len(prompt_max / 4, prompt_max);
  for (int i = 0; i < 8; ++i) reqs.push_back({ids(rng, len(rng), vocab), 8 + i % 5, i % 4 == 3});
  // A shared prefix between two of them, so hits and preemption mix.
  reqs[5].prompt.assign(reqs[1].prompt.begin(), reqs[1].prompt.end());
  reqs[5].prompt.push_back(11);
  EngineOptions eo;
  eo.scheduler.max_num_batched_tokens = 256;
  eo.scheduler.chunk_size = 96;
  eo.speculative = spec;
  ASSERT_TRUE(check_speculative_config(spec, *tight).ok());
  Engine engine(tight.get(), nullptr, eo);
  Driver d{&engine};
  std::vector<int> arrive(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) arrive[i] = static_cast<int>(i) * 2 + (rng() % 3);
  size_t next = 0;
  d.run(
      [&](int k) {
        for (; next < reqs.size() && arrive[next] <= k; ++next)
          d.submit(reqs[next].prompt, greedy(reqs[next].max_tokens));
        for (size_t i = 0; i < d.streams.size(); ++i)
          if (reqs[i].cancel && k == arrive[i] + 6) d.streams[i]->cancel();
      },
      [&] { return next < reqs.size(); });
  const EngineStats st = engine.stats();
  EXPECT_GT(st.num_preemptions_total, 0) << model << ": the pool was not tight enough to test";
  EXPECT_EQ(st.requests_failed_total, 0) << model;
  if (spec.enabled()) {
    EXPECT_GT(st.spec_decode_num_drafts, 0) << model << ": no drafts verified";
  }
  size_t i = 0;
  for (const auto& [id, o] : d.out) {
    const Req& r = reqs[i++];
    EXPECT_TRUE(o.error.empty()) << model << ": " << o.error;
    if (o.reason == FinishReason::kCancelled) continue;
    EXPECT_EQ(o.reason, FinishReason::kLength) << o.error;
    EXPECT_TRUE(same(o, alone(model, r.prompt, r.max_tokens)))
        << model << ": request " << i - 1 << " (" << r.prompt.size() << " ids) differs from "
        << "its never-preempted run";
  }
  for (const CacheUsage& u : tight->cache_usage()) {
    if (u.kind.find("prefix_cache") == std::string::npos) {
      EXPECT_EQ(u.used_bytes, 0) << model << " " << u.kind << " still held after every request ended";
    }
  }
}

// The scenario: 3 concurrent 300-id prompts, 60 generated ids each, --kv-cache-tokens
// 64 (which used to preempt 38 times and return different text from token ~21 on, and with
// 500-id prompts failed bystanders with HTTP 500).
TEST(PrefixPurity, V41ThreeLongRequestsSmallPool) {
  const std::string model = "deepseek-v41-tiny";
  auto tight = make_runner(model, 64);
  ASSERT_TRUE(tight);
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 3; ++i) prompts.push_back(ids(rng, 300, tight->info().vocab_size));
  Engine engine(tight.get(), nullptr, EngineOptions{});
  Driver d{&engine};
  for (const auto& p : prompts) d.submit(p, greedy(60));
  d.run();
  EXPECT_EQ(engine.stats().requests_failed_total, 0);
  std::printf("  preemptions: %lld\n", static_cast<long long>(engine.stats().num_preemptions_total));
  size_t i = 0;
  for (const auto& [id, o] : d.out) {
    EXPECT_EQ(o.reason, FinishReason::kLength) << o.error;
    EXPECT_TRUE(same(o, alone(model, prompts[i], 60))) << "request " << i;
    ++i;
  }
}

// V4 with few sequence slots (each owner's pool is max_tokens/unit + max_seqs blocks of 128:
// 5 blocks = 640 positions per owner, room for the longest request alone plus one unit).
std::unique_ptr<ModelRunner> tight_v4_runner() {
  V41RunnerCacheOptions co;
  co.max_seqs = 3;
  co.max_tokens = 256;
  auto r = DeepseekV4Runner::create(model_dir("deepseek-v4flash-tiny"), "", 2, co);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : nullptr;
}
TEST(PrefixPurity, V4Preemption) { preemption("deepseek-v4flash-tiny", 0, 440, tight_v4_runner()); }

// The same with the models' own drafters: preempted and recomputed sequences (drafter rings
// and the MTP carry included) still give each request its output alone.
SpeculativeConfig drafter(const char* method) {
  SpeculativeConfig c;
  c.method = method;
  c.num_speculative_tokens = 3;
  return c;
}
TEST(PrefixPurity, V4PreemptionWithMtp) {
  preemption("deepseek-v4flash-tiny", 0, 440, tight_v4_runner(), drafter("mtp"));
}
TEST(PrefixPurity, V41PreemptionWithDspark) {
  preemption("deepseek-v41-tiny", 64, 440, nullptr, drafter("dspark"));
}

TEST(PrefixPurity, LlamaGrid) { prefix_grid("stories260K"); }
TEST(PrefixPurity, V41Grid) { prefix_grid("deepseek-v41-tiny"); }
TEST(PrefixPurity, V4Grid) { prefix_grid("deepseek-v4flash-tiny"); }
TEST(PrefixPurity, LlamaPreemption) { preemption("stories260K", 160, 120); }
// (The V4.1 pools keep max_seqs blocks of slack per owner beyond --kv-cache-tokens: long
// prompts are needed to make them short.)
TEST(PrefixPurity, V41Preemption) { preemption("deepseek-v41-tiny", 64, 440); }

}  // namespace
}  // namespace strata
