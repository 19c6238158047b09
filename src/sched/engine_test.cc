#include "sched/engine.h"

#include <gtest/gtest.h>

#include <random>

#include "sched/fake_runner.h"

namespace strata {
namespace {

// Independent greedy reference over the fake model: argmax with lowest id on ties.
std::vector<int32_t> reference_greedy(std::vector<int32_t> history, int n, int32_t vocab,
                                      int32_t eos = -1) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    auto l = fake_logits(history, vocab);
    int32_t best = 0;
    for (int32_t v = 1; v < vocab; ++v) {
      if (l[v] > l[best]) best = v;
    }
    out.push_back(best);
    if (best == eos) break;
    history.push_back(best);
  }
  return out;
}

struct Collected {
  std::vector<int32_t> tokens;
  std::string text;
  RequestEvent final_event;
  bool done = false;
};

// Drives the engine on this thread until every stream has finished (bounded).
std::vector<Collected> run_all(Engine& engine, std::vector<std::shared_ptr<RequestStream>> streams,
                               int max_iters = 20000) {
  std::vector<Collected> out(streams.size());
  for (int iter = 0; iter < max_iters; ++iter) {
    bool all = true;
    for (size_t i = 0; i < streams.size(); ++i) {
      while (!out[i].done) {
        auto e = streams[i]->next(std::chrono::milliseconds(0));
        if (!e) break;
        out[i].tokens.insert(out[i].tokens.end(), e->tokens.begin(), e->tokens.end());
        out[i].text += e->text;
        if (e->finished) {
          out[i].done = true;
          out[i].final_event = *e;
        }
      }
      all = all && out[i].done;
    }
    if (all) break;
    engine.step_once();
  }
  return out;
}

std::vector<int32_t> prompt_of(int n, int seed) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((seed * 7 + i * 13) % 60 + 2);
  return p;
}

GenerationParams greedy(int max_tokens) {
  GenerationParams g;
  g.temperature = 0;
  g.max_tokens = max_tokens;
  return g;
}

TEST(EngineTest, GreedyOutputMatchesReferenceUnderAnyBatching) {
  // The same 5 requests under different chunk sizes, budgets and seat counts: every
  // request's tokens equal its solo greedy reference.
  const int32_t vocab = 64;
  std::vector<SchedulerOptions> configs = {
      {.max_num_seqs = 1, .max_num_batched_tokens = 1000, .chunk_size = 1000},
      {.max_num_seqs = 8, .max_num_batched_tokens = 7, .chunk_size = 3},
      {.max_num_seqs = 3, .max_num_batched_tokens = 16, .chunk_size = 5},
  };
  for (const auto& cfg : configs) {
    FakeRunner runner({.vocab = vocab, .max_context = 128});
    Engine engine(&runner, nullptr, {.scheduler = cfg});
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int r = 0; r < 5; ++r) {
      auto s = engine.submit(prompt_of(5 + 4 * r, r), greedy(6 + r));
      ASSERT_TRUE(s.ok());
      streams.push_back(*s);
    }
    auto out = run_all(engine, streams);
    for (int r = 0; r < 5; ++r) {
      ASSERT_TRUE(out[r].done);
      EXPECT_EQ(out[r].tokens, reference_greedy(prompt_of(5 + 4 * r, r), 6 + r, vocab))
          << "request " << r << " chunk " << cfg.chunk_size;
      EXPECT_EQ(out[r].final_event.finish_reason, FinishReason::kLength);
      EXPECT_EQ(out[r].final_event.completion_tokens, 6 + r);
    }
    EXPECT_EQ(runner.live_sequences(), 0);
    if (cfg.max_num_seqs > 1) {
      EXPECT_GT(runner.max_batch_items(), 1);
    }
  }
}

TEST(EngineTest, PreemptionUnderTinyPoolKeepsOutputsExact) {
  const int32_t vocab = 64;
  FakeRunner runner({.vocab = vocab, .max_context = 128, .pool_tokens = 40});
  Engine engine(&runner, nullptr,
                {.scheduler = {.max_num_seqs = 8, .max_num_batched_tokens = 64, .chunk_size = 8}});
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int r = 0; r < 4; ++r) streams.push_back(*engine.submit(prompt_of(10, r), greedy(12)));
  auto out = run_all(engine, streams);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(out[r].done);
    EXPECT_EQ(out[r].final_event.finish_reason, FinishReason::kLength) << r;
    EXPECT_EQ(out[r].tokens, reference_greedy(prompt_of(10, r), 12, vocab)) << r;
  }
  EXPECT_GT(engine.stats().num_preemptions_total, 0);
  EXPECT_EQ(runner.live_sequences(), 0);
}

// EOS ends the output ids (as vLLM's token_ids) and is counted in completion_tokens; it adds
// no text.
TEST(EngineTest, EosStopsAndEndsTheOutputIds) {
  const int32_t vocab = 64;
  // Pick as EOS the 3rd greedy token of the reference.
  auto ref = reference_greedy(prompt_of(6, 1), 10, vocab);
  const int32_t eos = ref[2];
  FakeRunner runner({.vocab = vocab, .max_context = 128, .eos_id = eos});
  Engine engine(&runner, nullptr, {});
  auto out = run_all(engine, {*engine.submit(prompt_of(6, 1), greedy(10))});
  auto expect = reference_greedy(prompt_of(6, 1), 10, vocab, eos);
  ASSERT_EQ(expect.back(), eos);
  EXPECT_EQ(out[0].tokens, expect);
  EXPECT_EQ(out[0].final_event.finish_reason, FinishReason::kStop);
  EXPECT_EQ(out[0].final_event.completion_tokens, static_cast<int64_t>(expect.size()));
}

TEST(EngineTest, StopTokenIdsAndIgnoreEos) {
  const int32_t vocab = 64;
  auto ref = reference_greedy(prompt_of(6, 2), 10, vocab);
  FakeRunner runner({.vocab = vocab, .max_context = 128, .eos_id = ref[1]});
  Engine engine(&runner, nullptr, {});
  GenerationParams p = greedy(10);
  p.ignore_eos = true;
  p.stop_token_ids = {ref[4]};
  auto out = run_all(engine, {*engine.submit(prompt_of(6, 2), p)});
  // ref[4] may equal an earlier token; the first occurrence stops.
  size_t k = 0;
  while (ref[k] != ref[4]) ++k;
  EXPECT_EQ(out[0].tokens, std::vector<int32_t>(ref.begin(), ref.begin() + k + 1));  // + the stop id
  EXPECT_EQ(out[0].final_event.finish_reason, FinishReason::kStop);
}

TEST(EngineTest, ContextLimitClipsGeneration) {
  const int32_t vocab = 64;
  FakeRunner runner({.vocab = vocab, .max_context = 20});
  Engine engine(&runner, nullptr, {});
  auto out = run_all(engine, {*engine.submit(prompt_of(15, 3), greedy(100))});
  EXPECT_EQ(out[0].tokens.size(), 5u);  // prompt + generated <= 20
  EXPECT_EQ(out[0].final_event.finish_reason, FinishReason::kLength);
  EXPECT_EQ(out[0].tokens, reference_greedy(prompt_of(15, 3), 5, vocab));
}

TEST(EngineTest, RejectsBadInput) {
  FakeRunner runner({.vocab = 64, .max_context = 20});
  Engine engine(&runner, nullptr, {});
  EXPECT_EQ(engine.submit({}, greedy(3)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.submit({1, 64}, greedy(3)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.submit(prompt_of(20, 1), greedy(3)).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(engine.submit({1, 2}, greedy(0)).status().code(), StatusCode::kInvalidArgument);
  GenerationParams p = greedy(3);
  p.top_p = 0;
  EXPECT_EQ(engine.submit({1, 2}, p).status().code(), StatusCode::kInvalidArgument);
  GenerationParams b = greedy(3);
  b.logit_bias = {{64, 1.0f}};  // outside the vocabulary
  EXPECT_EQ(engine.submit({1, 2}, b).status().code(), StatusCode::kInvalidArgument);
  b.logit_bias = {{3, 101.0f}};
  EXPECT_EQ(engine.submit({1, 2}, b).status().code(), StatusCode::kInvalidArgument);
  GenerationParams pp = greedy(3);
  pp.presence_penalty = 2.5;
  EXPECT_EQ(engine.submit({1, 2}, pp).status().code(), StatusCode::kInvalidArgument);
  pp.presence_penalty = 0;
  pp.repetition_penalty = 0;
  EXPECT_EQ(engine.submit({1, 2}, pp).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(engine.submit(prompt_of(19, 1), greedy(3)).ok());
}

TEST(EngineTest, CancelFreesStateImmediately) {
  FakeRunner runner({.vocab = 64, .max_context = 128});
  Engine engine(&runner, nullptr, {});
  auto s1 = *engine.submit(prompt_of(10, 1), greedy(50));
  auto s2 = *engine.submit(prompt_of(10, 2), greedy(5));
  engine.step_once();
  engine.step_once();
  EXPECT_EQ(runner.live_sequences(), 2);
  s1->cancel();
  engine.step_once();
  EXPECT_EQ(runner.live_sequences(), 1);
  auto out = run_all(engine, {s1, s2});
  EXPECT_EQ(out[0].final_event.finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(out[1].final_event.finish_reason, FinishReason::kLength);
  EXPECT_EQ(runner.live_sequences(), 0);
  EXPECT_EQ(runner.used_tokens(), 0);
  EngineStats st = engine.stats();
  EXPECT_EQ(st.num_running, 0);
  EXPECT_EQ(st.num_waiting, 0);
}

TEST(EngineTest, RunnerFailureEndsRequestsWithErrorAndEngineRecovers) {
  FakeRunner runner({.vocab = 64, .max_context = 128});
  Engine engine(&runner, nullptr, {});
  auto s1 = *engine.submit(prompt_of(10, 1), greedy(5));
  runner.fail_next_step = true;
  auto out = run_all(engine, {s1});
  EXPECT_EQ(out[0].final_event.finish_reason, FinishReason::kError);
  EXPECT_EQ(out[0].final_event.error.code(), StatusCode::kInternal);
  EXPECT_EQ(runner.live_sequences(), 0);
  auto out2 = run_all(engine, {*engine.submit(prompt_of(10, 1), greedy(5))});
  EXPECT_EQ(out2[0].final_event.finish_reason, FinishReason::kLength);
  EXPECT_EQ(out2[0].tokens, reference_greedy(prompt_of(10, 1), 5, 64));
}

// NaN logits (a numerical fault) end that request with an error, not a token; the request
// batched with it is unaffected and every state slot is released.
TEST(EngineTest, NanLogitsEndTheRequestWithAnError) {
  FakeRunner runner({.vocab = 64, .max_context = 128});
  Engine engine(&runner, nullptr, {});
  auto s1 = *engine.submit(prompt_of(10, 1), greedy(5));
  auto s2 = *engine.submit(prompt_of(10, 2), greedy(5));
  runner.nan_logits_seq = s2->id();
  auto out = run_all(engine, {s1, s2});
  EXPECT_EQ(out[0].final_event.finish_reason, FinishReason::kLength);
  EXPECT_EQ(out[0].tokens, reference_greedy(prompt_of(10, 1), 5, 64));
  EXPECT_EQ(out[1].final_event.finish_reason, FinishReason::kError);
  EXPECT_EQ(out[1].final_event.error.code(), StatusCode::kInternal);
  EXPECT_NE(out[1].final_event.error.message().find("NaN or +inf logits"), std::string::npos);
  EXPECT_TRUE(out[1].tokens.empty());
  EXPECT_EQ(runner.live_sequences(), 0);
}

TEST(EngineTest, ShutdownEndsPendingRequestsWithError) {
  FakeRunner runner({.vocab = 64, .max_context = 128});
  auto engine = std::make_unique<Engine>(&runner, nullptr, EngineOptions{});
  auto s1 = *engine->submit(prompt_of(10, 1), greedy(50));
  engine->step_once();
  auto s2 = *engine->submit(prompt_of(10, 2), greedy(50));
  engine->shutdown();
  for (auto& s : {s1, s2}) {
    std::optional<RequestEvent> e;
    for (int i = 0; i < 100; ++i) {
      e = s->next(std::chrono::milliseconds(0));
      if (!e || e->finished) break;
    }
    ASSERT_TRUE(e && e->finished);
    EXPECT_EQ(e->finish_reason, FinishReason::kError);
    EXPECT_EQ(e->error.code(), StatusCode::kUnavailable);
  }
  EXPECT_EQ(runner.live_sequences(), 0);
  EXPECT_EQ(engine->submit({1, 2}, greedy(2)).status().code(), StatusCode::kUnavailable);
}

TEST(EngineTest, ThreadedEngineServesConcurrentRequests) {
  FakeRunner runner({.vocab = 64, .max_context = 128});
  Engine engine(&runner, nullptr, {.scheduler = {.max_num_seqs = 4, .max_num_batched_tokens = 32, .chunk_size = 8}});
  engine.start();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int r = 0; r < 6; ++r) streams.push_back(*engine.submit(prompt_of(7 + r, r), greedy(8)));
  for (int r = 0; r < 6; ++r) {
    std::vector<int32_t> toks;
    bool done = false;
    for (int i = 0; i < 2000 && !done; ++i) {
      auto e = streams[r]->next(std::chrono::milliseconds(50));
      if (!e) continue;
      toks.insert(toks.end(), e->tokens.begin(), e->tokens.end());
      done = e->finished;
    }
    ASSERT_TRUE(done);
    EXPECT_EQ(toks, reference_greedy(prompt_of(7 + r, r), 8, 64));
  }
  engine.shutdown();
  EXPECT_EQ(runner.live_sequences(), 0);
}

TEST(EngineTest, PrefixCacheCountersAndCachedTokens) {
  FakeRunner runner({.vocab = 64, .max_context = 128, .prefix_block = 4});
  Engine engine(&runner, nullptr, {});
  auto out1 = run_all(engine, {*engine.submit(prompt_of(13, 1), greedy(2))});
  auto out2 = run_all(engine, {*engine.submit(prompt_of(13, 1), greedy(2))});
  EXPECT_EQ(out1[0].final_event.cached_tokens, 0);
  EXPECT_EQ(out2[0].final_event.cached_tokens, 12);
  EXPECT_EQ(out1[0].tokens, out2[0].tokens);
  EngineStats st = engine.stats();
  EXPECT_EQ(st.prefix_cache_queries_total, 26);
  EXPECT_EQ(st.prefix_cache_hits_total, 12);
  EXPECT_EQ(st.prompt_tokens_total, 26);
  EXPECT_EQ(st.generation_tokens_total, 4);
}

// Token i decodes to one letter; 62 and 63 are the two bytes of "é" (C3 A9).
class LetterTokenizer : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view, bool) const override { return {}; }
  std::string token_bytes(int32_t id, int32_t) const override {
    if (id == 62) return "\xC3";
    if (id == 63) return "\xA9";
    return std::string(1, static_cast<char>('a' + id % 26));
  }
  int32_t vocab_size() const override { return 64; }
  std::optional<int32_t> bos_id() const override { return std::nullopt; }
  std::optional<int32_t> eos_id() const override { return std::nullopt; }
  std::optional<int32_t> token_to_id(std::string_view) const override { return std::nullopt; }
  std::string id_to_token(int32_t id) const override { return token_bytes(id, -1); }
};

std::string letters(const std::vector<int32_t>& ids) {
  LetterTokenizer t;
  std::string s;
  for (int32_t id : ids) s += t.token_bytes(id, -1);
  return s;
}

TEST(EngineTest, StopStringCutsTextAcrossTokens) {
  const int32_t vocab = 62;  // letters only
  auto ref = reference_greedy(prompt_of(6, 4), 20, vocab);
  const std::string full = letters(ref);
  const std::string stop = full.substr(5, 3);  // spans tokens 5..7
  const std::string expect = full.substr(0, full.find(stop));
  FakeRunner runner({.vocab = vocab, .max_context = 128});
  LetterTokenizer tok;
  Engine engine(&runner, &tok, {});
  GenerationParams p = greedy(20);
  p.stop = {"zzzzzzzzzz", stop};
  auto out = run_all(engine, {*engine.submit(prompt_of(6, 4), p)});
  EXPECT_EQ(out[0].text, expect);
  EXPECT_EQ(out[0].final_event.finish_reason, FinishReason::kStop);
  EXPECT_EQ(runner.live_sequences(), 0);
}

TEST(EngineTest, TextWithoutStopIsTheFullDecode) {
  const int32_t vocab = 62;
  auto ref = reference_greedy(prompt_of(6, 5), 9, vocab);
  FakeRunner runner({.vocab = vocab, .max_context = 128});
  LetterTokenizer tok;
  Engine engine(&runner, &tok, {});
  GenerationParams p = greedy(9);
  p.stop = {"qqqqqqqqqqqqqqqqqqqqqq"};  // never matches but forces hold-back logic
  auto out = run_all(engine, {*engine.submit(prompt_of(6, 5), p)});
  EXPECT_EQ(out[0].text, letters(ref));
}

TEST(EngineTest, RandomizedLoadAgainstReference) {
  // Random arrivals, sizes, budgets, pool sizes and cancellations; after every step the
  // invariants hold; every request that was not cancelled yields its solo reference; in
  // the end all state is released.
  std::mt19937_64 rng(12345);
  for (int round = 0; round < 6; ++round) {
    const int32_t vocab = 64;
    FakeRunnerOptions fo;
    fo.vocab = vocab;
    fo.max_context = 64;
    fo.pool_tokens = 40 + static_cast<int64_t>(rng() % 200);
    fo.prefix_block = (round % 2) ? 4 : 0;
    FakeRunner runner(fo);
    SchedulerOptions so;
    so.max_num_seqs = 1 + static_cast<int32_t>(rng() % 6);
    so.max_num_batched_tokens = 1 + static_cast<int64_t>(rng() % 40);
    so.chunk_size = 1 + static_cast<int64_t>(rng() % 16);
    Engine engine(&runner, nullptr, {.scheduler = so});
    struct Req {
      std::vector<int32_t> prompt;
      int max_tokens;
      std::shared_ptr<RequestStream> stream;
      std::vector<int32_t> got;
      bool cancelled = false;
      bool done = false;
      FinishReason reason = FinishReason::kNone;
    };
    std::vector<Req> reqs;
    for (int iter = 0; iter < 3000; ++iter) {
      if (reqs.size() < 25 && rng() % 3 == 0) {
        Req r;
        r.prompt = prompt_of(1 + static_cast<int>(rng() % 30), static_cast<int>(rng() % 1000));
        r.max_tokens = 1 + static_cast<int>(rng() % 12);
        r.stream = *engine.submit(r.prompt, greedy(r.max_tokens));
        reqs.push_back(std::move(r));
      }
      if (!reqs.empty() && rng() % 25 == 0) {
        Req& r = reqs[rng() % reqs.size()];
        if (!r.done) {
          r.cancelled = true;
          r.stream->cancel();
        }
      }
      engine.step_once();
      engine.check_invariants();
      for (Req& r : reqs) {
        while (!r.done) {
          auto e = r.stream->next(std::chrono::milliseconds(0));
          if (!e) break;
          r.got.insert(r.got.end(), e->tokens.begin(), e->tokens.end());
          if (e->finished) {
            r.done = true;
            r.reason = e->finish_reason;
          }
        }
      }
      bool all_done = reqs.size() >= 25;
      for (const Req& r : reqs) all_done = all_done && r.done;
      if (all_done) break;
    }
    for (const Req& r : reqs) {
      ASSERT_TRUE(r.done) << "round " << round;
      if (r.reason == FinishReason::kCancelled) {
        EXPECT_TRUE(r.cancelled);
        continue;
      }
      if (r.reason == FinishReason::kError) {
        // Only a request that cannot fit even alone may fail.
        EXPECT_GT(static_cast<int64_t>(r.prompt.size()) + r.max_tokens, fo.pool_tokens - 1);
        continue;
      }
      EXPECT_EQ(r.reason, FinishReason::kLength);
      EXPECT_EQ(r.got, reference_greedy(r.prompt, r.max_tokens, vocab)) << "round " << round;
    }
    EXPECT_EQ(runner.live_sequences(), 0);
    EXPECT_EQ(runner.used_tokens(), 0);
  }
}

}  // namespace
}  // namespace strata
