// Churn soak with tiers (issue 26 "done when"): 2,000 requests against a working pool far
// smaller than what they share, with a host tier that demotes to a disk tier. Prompts are one
// of 8 shared 40-token prefixes plus a random suffix, so most hits come from the tiers after
// the working pool evicted the prefix; every 7th request is cancelled right after submission.
// Asserts: every other request finishes by length with no error, and its tokens and logprobs
// equal a roomy engine's without tiers (every 25th request compared); cancelled ones end
// aborted; nothing leaks (no state held at the end, engine invariants after every step); the
// tiers served hits and saw no error or rejection.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>

#include "runner_fixtures.h"
#include "sched/engine.h"

namespace strata {
namespace {

using testing::model_dir;

struct Out {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  FinishReason reason = FinishReason::kNone;
  std::string error;
  int64_t cached = 0;
};

GenerationParams greedy(int64_t n) {
  GenerationParams p;
  p.temperature = 0;
  p.max_tokens = n;
  p.logprobs = 1;
  p.ignore_eos = true;
  return p;
}

// Runs the requests through `e` in waves of `wave`, cancelling those with cancel[i].
std::vector<Out> run(Engine& e, const std::vector<std::vector<int32_t>>& prompts,
                     const std::vector<int64_t>& max_tokens, const std::vector<char>& cancel,
                     size_t wave) {
  std::vector<Out> out(prompts.size());
  for (size_t base = 0; base < prompts.size(); base += wave) {
    std::vector<std::pair<size_t, std::shared_ptr<RequestStream>>> live;
    for (size_t i = base; i < std::min(prompts.size(), base + wave); ++i) {
      auto s = e.submit(prompts[i], greedy(max_tokens[i]));
      EXPECT_TRUE(s.ok()) << s.status().to_string();
      if (!s.ok()) continue;
      if (cancel[i]) e.cancel((*s)->id());
      live.emplace_back(i, *s);
    }
    size_t done = 0;
    for (int k = 0; k < 100000 && done < live.size(); ++k) {
      e.step_once();
      e.check_invariants();
      done = 0;
      for (auto& [i, s] : live) {
        Out& o = out[i];
        while (o.reason == FinishReason::kNone) {
          auto ev = s->next(std::chrono::milliseconds(0));
          if (!ev) break;
          o.ids.insert(o.ids.end(), ev->tokens.begin(), ev->tokens.end());
          for (const auto& lp : ev->logprobs) o.logprobs.push_back(lp.logprob);
          if (ev->finished) {
            o.reason = ev->finish_reason;
            o.error = ev->error.ok() ? "" : ev->error.to_string();
            o.cached = ev->cached_tokens;
          }
        }
        done += o.reason != FinishReason::kNone;
      }
    }
    EXPECT_EQ(done, live.size()) << "wave at " << base << " did not finish";
  }
  return out;
}

TEST(KvTiersSoak, ChurnWithATinyWorkingPool) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / fmt::format("strata-soak-{}", ::getpid())).string();
  std::filesystem::remove_all(dir);
  const int32_t vocab = 512;
  std::mt19937 rng(2026);
  std::vector<std::vector<int32_t>> prefixes;
  for (int i = 0; i < 8; ++i) prefixes.push_back(testing::random_prompt(40, 100 + i, vocab));
  const size_t n = 2000;
  std::vector<std::vector<int32_t>> prompts(n);
  std::vector<int64_t> max_tokens(n);
  std::vector<char> cancel(n);
  for (size_t i = 0; i < n; ++i) {
    prompts[i] = prefixes[rng() % prefixes.size()];
    const auto tail = testing::random_prompt(1 + rng() % 20, static_cast<uint32_t>(5000 + i), vocab);
    prompts[i].insert(prompts[i].end(), tail.begin(), tail.end());
    max_tokens[i] = 1 + rng() % 4;
    cancel[i] = i % 7 == 3;
  }
  RunnerOptions ro;
  ro.threads = 1;
  ro.kv_cache_tokens = 96;  // running capacity; the prefix cache gets as many again
  ro.tiers.host_bytes = 64 << 10;  // a few units; the rest is demoted to disk
  ro.tiers.disk_dir = dir;
  ASSERT_TRUE(prepare_runner_tiers(model_dir("stories260K"), &ro).ok());
  ASSERT_TRUE(ro.unit_store);
  auto runner = make_model_runner(model_dir("stories260K"), ro);
  ASSERT_TRUE(runner.ok()) << runner.status().to_string();
  EngineOptions eo;
  eo.scheduler.max_num_seqs = 4;
  std::vector<Out> got;
  {
    Engine e(runner->get(), nullptr, eo);
    got = run(e, prompts, max_tokens, cancel, 16);
    const EngineStats st = e.stats();
    for (const CacheUsage& u : st.cache_usage) {
      if (u.kind == "kv") {
        EXPECT_EQ(u.used_bytes, 0) << "state still held after every request ended";
      }
    }
    EXPECT_GT(st.prefix_cache_hits_total, 0);
  }
  const std::vector<TierStats> tiers = ro.unit_store->stats();
  ASSERT_EQ(tiers.size(), 2u);
  for (const TierStats& t : tiers) {
    EXPECT_EQ(t.errors, 0) << t.tier;
    EXPECT_EQ(t.rejected, 0) << t.tier;
  }
  EXPECT_GT(tiers[0].evictions, 0) << "the host tier is smaller than the shared prefixes";
  EXPECT_GT(tiers[0].demotions, 0);
  EXPECT_GT(tiers[1].hits, 0) << "hits served from the disk tier";
  EXPECT_GT(tiers[0].prefetched, 0) << "waiting requests' prefixes were read ahead";
  size_t finished = 0, aborted = 0;
  for (size_t i = 0; i < n; ++i) {
    if (cancel[i]) {
      EXPECT_EQ(got[i].reason, FinishReason::kCancelled) << i;
      ++aborted;
      continue;
    }
    EXPECT_EQ(got[i].reason, FinishReason::kLength) << i << " " << got[i].error;
    EXPECT_EQ(static_cast<int64_t>(got[i].ids.size()), max_tokens[i]) << i;
    ++finished;
  }
  EXPECT_GT(aborted, 250u);
  EXPECT_GT(finished, 1600u);
  // Every 25th request against a roomy engine without tiers.
  std::vector<std::vector<int32_t>> ref_prompts;
  std::vector<int64_t> ref_max;
  std::vector<size_t> which;
  for (size_t i = 0; i < n; i += 25)
    if (!cancel[i]) {
      ref_prompts.push_back(prompts[i]);
      ref_max.push_back(max_tokens[i]);
      which.push_back(i);
    }
  auto roomy = testing::fresh_runner("stories260K", 0, 1);
  Engine ref_engine(roomy.get(), nullptr, EngineOptions{});
  const std::vector<Out> ref =
      run(ref_engine, ref_prompts, ref_max, std::vector<char>(ref_prompts.size(), 0), 1);
  for (size_t j = 0; j < which.size(); ++j) {
    EXPECT_EQ(got[which[j]].ids, ref[j].ids) << "request " << which[j];
    EXPECT_TRUE(got[which[j]].logprobs == ref[j].logprobs) << "request " << which[j];
  }
  runner->reset();  // the chain flushes its host tier into `dir` when the last owner goes
  ro.unit_store.reset();
  std::filesystem::remove_all(dir);
}

// A request cancelled while its prefix is being read ahead from disk: the engine is unharmed,
// nothing is held, and the same prompt afterwards hits the prefix and answers as a cold run.
TEST(KvTiersSoak, CancelWhileItsPrefixLoads) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / fmt::format("strata-cancel-{}", ::getpid())).string();
  std::filesystem::remove_all(dir);
  const auto prompt = testing::random_prompt(100, 7, 512);
  RunnerOptions ro;
  ro.threads = 1;
  ro.tiers.host_bytes = 1 << 20;
  ro.tiers.disk_dir = dir;
  Out cold;
  {  // a first server stores the prefix (flushed to disk when it goes)
    ASSERT_TRUE(prepare_runner_tiers(model_dir("stories260K"), &ro).ok());
    auto r = make_model_runner(model_dir("stories260K"), ro);
    ASSERT_TRUE(r.ok());
    Engine e(r->get(), nullptr, EngineOptions{});
    cold = run(e, {prompt}, {4}, {0}, 1)[0];
    ASSERT_EQ(cold.reason, FinishReason::kLength);
  }
  ro.unit_store.reset();
  ASSERT_TRUE(prepare_runner_tiers(model_dir("stories260K"), &ro).ok());
  auto r = make_model_runner(model_dir("stories260K"), ro);
  ASSERT_TRUE(r.ok());
  auto e = std::make_unique<Engine>(r->get(), nullptr, EngineOptions{});
  const Out cancelled = run(*e, {prompt}, {4}, {1}, 1)[0];  // cancelled at once: prefetch in flight
  EXPECT_EQ(cancelled.reason, FinishReason::kCancelled);
  for (const CacheUsage& u : e->stats().cache_usage) {
    if (u.kind == "kv") {
      EXPECT_EQ(u.used_bytes, 0);
    }
  }
  ro.unit_store->wait_prefetch();
  const Out again = run(*e, {prompt}, {4}, {0}, 1)[0];
  EXPECT_EQ(again.reason, FinishReason::kLength);
  EXPECT_EQ(again.cached, 96);
  EXPECT_EQ(again.ids, cold.ids);
  EXPECT_TRUE(again.logprobs == cold.logprobs);
  EXPECT_GE(ro.unit_store->stats()[0].prefetched, 1);
  e.reset();  // the engine before its runner
  r->reset();
  ro.unit_store.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata
