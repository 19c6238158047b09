// Speculative decoding in the engine over the FakeRunner: configuration parsing, the n-gram
// proposer, and outputs equal to non-speculative decoding for every draft width and every
// partial-accept count, with the runner's cut-back rollback and with the recompute fallback.
#include "sched/spec_decode.h"
#include "sched/spec_test_helpers.h"

#include <gtest/gtest.h>

#include "sched/engine.h"
#include "sched/fake_runner.h"

namespace strata {
namespace {

TEST(SpeculativeConfig, ParsesVllmFields) {
  auto c = parse_speculative_config(
      R"({"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 3, "prompt_lookup_min": 1})");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->method, "ngram");
  EXPECT_EQ(c->num_speculative_tokens, 5);
  EXPECT_EQ(c->prompt_lookup_max, 3);
  EXPECT_EQ(c->prompt_lookup_min, 1);
  EXPECT_FALSE(parse_speculative_config("").value().enabled());
  EXPECT_FALSE(parse_speculative_config("{}").value().enabled());
  // prompt_lookup_max alone below the default min pulls min down with it
  EXPECT_EQ(parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 1})")
                .value().prompt_lookup_min, 1);
}

TEST(SpeculativeConfig, RefusesWhatItCannotRun) {
  for (const char* bad : {
           "not json", "[1]", R"({"num_speculative_tokens": 3})",
           R"({"method": "ngram"})", R"({"method": "ngram", "num_speculative_tokens": 0})",
           R"({"method": "ngram", "num_speculative_tokens": 17})",
           R"({"method": "ngram", "num_speculative_tokens": "3"})",
           R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 5, "prompt_lookup_max": 2})",
           R"({"method": "ngram", "num_speculative_tokens": 3, "draft_model": "x"})",
           R"({"method": "eagle", "num_speculative_tokens": 3})",
           R"({"method": "mtp", "num_speculative_tokens": 1, "prompt_lookup_max": 3})",
           R"({"method": "dspark", "num_speculative_tokens": 2, "prompt_lookup_min": 1})",
           R"({"method": "dspark", "num_speculative_tokens": 2)"}) {
    auto c = parse_speculative_config(bad);
    EXPECT_FALSE(c.ok()) << bad;
    if (!c.ok()) {
      EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << bad;
    }
  }
  EXPECT_NE(parse_speculative_config(R"({"method": "eagle", "num_speculative_tokens": 3})")
                .status().message().find("available: ngram, dspark, mtp"), std::string::npos);
  EXPECT_NE(parse_speculative_config(R"({"method": "ngram")").status().message().find(
                "not valid JSON"), std::string::npos);
  // dspark parses; whether the model can run it is check_speculative_config's question.
  auto d = parse_speculative_config(R"({"method": "dspark", "num_speculative_tokens": 3})");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->method, "dspark");
  EXPECT_EQ(d->num_speculative_tokens, 3);
  for (const char* bad : {
           R"({"method": "ngram", "num_speculative_tokens": 2, "confidence_threshold": 0.5})",
           R"({"method": "dspark", "num_speculative_tokens": 2, "confidence_threshold": 1.5})",
           R"({"method": "mtp", "num_speculative_tokens": 2, "confidence_threshold": "high"})"}) {
    auto c = parse_speculative_config(bad);
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  auto t = parse_speculative_config(
      R"({"method": "dspark", "num_speculative_tokens": 5, "confidence_threshold": 0.7})");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_DOUBLE_EQ(t->confidence_threshold, 0.7);
  auto m = parse_speculative_config(R"({"method": "mtp", "num_speculative_tokens": 7})");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->method, "mtp");
  EXPECT_EQ(m->num_speculative_tokens, 7);
}

TEST(NgramProposer, ProposesWhatFollowedTheMostRecentMatch) {
  const NgramProposer p(1, 3);
  // ... 5 6 7 | 8 9 ... 5 6 7 | 1 2 ... 5 6 7  -> the latest "5 6 7" was followed by 1 2
  const std::vector<int32_t> t = {5, 6, 7, 8, 9, 3, 5, 6, 7, 1, 2, 4, 5, 6, 7};
  EXPECT_EQ(p.propose(SeqId{}, t, 2), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(p.propose(SeqId{}, t, 5), (std::vector<int32_t>{1, 2, 4, 5, 6}));
  // Longest n first: "9 4" never occurred, but "4" did (followed by 4 9).
  EXPECT_EQ(NgramProposer(1, 2).propose(SeqId{}, std::vector<int32_t>{4, 9, 8, 9, 4}, 3),
            (std::vector<int32_t>{9, 8, 9}));
  // min n = 2: a single-token match is not enough.
  EXPECT_TRUE(NgramProposer(2, 2).propose(SeqId{}, std::vector<int32_t>{4, 9, 8, 3, 4}, 3).empty());
  EXPECT_TRUE(p.propose(SeqId{}, std::vector<int32_t>{1}, 3).empty());
  // The match may run up to the end: proposals stop at the last token.
  EXPECT_EQ(NgramProposer(1, 1).propose(SeqId{}, std::vector<int32_t>{1, 1}, 4), (std::vector<int32_t>{1}));
}

// Proposes the fake model's own greedy continuation (every draft accepted), optionally
// corrupting draft `wrong_at` (1-based) so it is rejected there.
class OracleProposer : public DraftProposer {
 public:
  OracleProposer(int32_t vocab, int wrong_at) : vocab_(vocab), wrong_at_(wrong_at) {}
  std::vector<int32_t> propose(SeqId, std::span<const int32_t> tokens, int max_k) const override {
    std::vector<int32_t> h(tokens.begin(), tokens.end()), out;
    for (int i = 0; i < max_k; ++i) {
      auto l = fake_logits(h, vocab_);
      int32_t best = 0;
      for (int32_t v = 1; v < vocab_; ++v)
        if (l[v] > l[best]) best = v;
      if (i + 1 == wrong_at_) best = (best + 1) % vocab_;
      out.push_back(best);
      h.push_back(best);
    }
    return out;
  }

 private:
  int32_t vocab_;
  int wrong_at_;
};

struct SpecRun {
  std::vector<std::vector<int32_t>> tokens;
  EngineStats stats;
};

// Runs `n` requests (prompts that repeat, so n-gram drafts exist) to the end.
SpecRun run(const SpeculativeConfig& sc, bool rollback_unsupported, int n, GenerationParams g,
        std::unique_ptr<DraftProposer> proposer = nullptr, int64_t pool_tokens = 1 << 20) {
  FakeRunner runner({.vocab = 64, .max_context = 4096, .pool_tokens = pool_tokens});
  runner.rollback_unsupported = rollback_unsupported;
  EngineOptions eo;
  eo.scheduler = {.max_num_seqs = 8, .max_num_batched_tokens = 64, .chunk_size = 16};
  eo.speculative = sc;
  Engine engine(&runner, nullptr, eo);
  if (proposer) engine.set_proposer(std::move(proposer));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int r = 0; r < n; ++r) {
    std::vector<int32_t> prompt;
    for (int i = 0; i < 40; ++i) prompt.push_back((r * 5 + i * 7) % 20 + 2);
    GenerationParams gr = g;
    if (gr.seed) gr.seed = *gr.seed + r;
    streams.push_back(engine.submit(prompt, gr).value());
  }
  SpecRun out;
  out.tokens.resize(n);
  std::vector<bool> done(n, false);
  for (int iter = 0; iter < 100000; ++iter) {
    bool all = true;
    for (int r = 0; r < n; ++r) {
      while (!done[r]) {
        auto e = streams[r]->next(std::chrono::milliseconds(0));
        if (!e) break;
        out.tokens[r].insert(out.tokens[r].end(), e->tokens.begin(), e->tokens.end());
        if (e->finished) done[r] = true;
      }
      all = all && done[r];
    }
    if (all) break;
    engine.step_once();
    engine.check_invariants();
  }
  out.stats = engine.stats();
  EXPECT_EQ(runner.used_tokens(), 0) << "state left behind";
  return out;
}

using testing::greedy_params;
using testing::ngram_config;

TEST(SpeculativeEngine, EveryWidthAndEveryRejectPointEqualsPlainDecoding) {
  const SpecRun plain = run({}, false, 3, greedy_params(40));
  for (bool recompute : {false, true}) {
    for (int k = 1; k <= 7; ++k) {
      for (int j = 0; j <= k; ++j) {
        const SpecRun oracle = run(ngram_config(k), recompute, 3, greedy_params(40),
                               std::make_unique<OracleProposer>(64, j));
        EXPECT_EQ(oracle.tokens, plain.tokens) << "k " << k << " wrong draft " << j;
        EXPECT_GT(oracle.stats.spec_decode_num_drafts, 0);
        const SpecRun forced = run(ngram_config(k, j), recompute, 3, greedy_params(40),
                               std::make_unique<OracleProposer>(64, 0));
        EXPECT_EQ(forced.tokens, plain.tokens) << "k " << k << " forced reject " << j;
        if (j == 0) {  // the oracle with nothing wrong: every draft accepted
          EXPECT_EQ(oracle.stats.spec_decode_num_accepted_tokens,
                    oracle.stats.spec_decode_num_draft_tokens);
        } else {  // the first j-1 drafts of a step at most
          EXPECT_LE(forced.stats.spec_decode_num_accepted_tokens,
                    forced.stats.spec_decode_num_drafts * (j - 1));
        }
        EXPECT_EQ(recompute && j > 0, oracle.stats.spec_decode_rollback_recomputes > 0);
      }
      const SpecRun ng = run(ngram_config(k), recompute, 3, greedy_params(40));
      EXPECT_EQ(ng.tokens, plain.tokens) << "ngram k " << k;
    }
  }
}

// Sampling: each request's sampler draws every token in order, so a seeded request gives
// the same tokens with and without speculation.
TEST(SpeculativeEngine, SeededSamplingIsUnchanged) {
  GenerationParams g;
  g.temperature = 0.9;
  g.top_p = 0.95;
  g.max_tokens = 40;
  g.ignore_eos = true;
  g.seed = 1234;
  const SpecRun plain = run({}, false, 4, g);
  for (int k : {1, 3, 6}) {
    EXPECT_EQ(run(ngram_config(k), false, 4, g, std::make_unique<OracleProposer>(64, 0)).tokens, plain.tokens);
    EXPECT_EQ(run(ngram_config(k), true, 4, g, std::make_unique<OracleProposer>(64, 2)).tokens, plain.tokens);
  }
}

// A small shared pool: verifies are dropped when they do not fit and requests are
// preempted and recomputed; outputs are unchanged and nothing leaks.
TEST(SpeculativeEngine, TightPoolAndPreemptionKeepOutputs) {
  const SpecRun plain = run({}, false, 6, greedy_params(60), nullptr, 1 << 20);
  const SpecRun tight = run(ngram_config(5), false, 6, greedy_params(60), std::make_unique<OracleProposer>(64, 3), 260);
  EXPECT_EQ(tight.tokens, plain.tokens);
  EXPECT_GT(tight.stats.num_preemptions_total, 0);
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// Cancels while verifies are in flight (drafts planned, rows not yet resolved): every
// request's state is released at once, none leaks, and the engine keeps serving.
TEST(SpeculativeEngine, CancelMidVerifyFreesEverything) {
  for (bool recompute : {false, true}) {
    FakeRunner runner({.vocab = 64, .max_context = 4096, .pool_tokens = 1 << 20});
    runner.rollback_unsupported = recompute;
    EngineOptions eo;
    eo.scheduler = {.max_num_seqs = 8, .max_num_batched_tokens = 64, .chunk_size = 16};
    eo.speculative = testing::ngram_config(4);
    Engine engine(&runner, nullptr, eo);
    engine.set_proposer(std::make_unique<OracleProposer>(64, 3));
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int r = 0; r < 4; ++r)
      streams.push_back(engine.submit(std::vector<int32_t>(20, 3 + r), testing::greedy_params(200)).value());
    for (int i = 0; i < 12; ++i) engine.step_once();  // prefills, then verifies
    EXPECT_GT(engine.stats().spec_decode_num_drafts, 0);
    for (auto& s : streams) s->cancel();
    engine.step_once();
    engine.check_invariants();
    EXPECT_EQ(runner.used_tokens(), 0);
    EXPECT_EQ(engine.stats().num_running, 0);
    // Still serving: a new request runs to its end.
    auto s = engine.submit(std::vector<int32_t>(10, 5), testing::greedy_params(8)).value();
    for (int i = 0; i < 100; ++i) engine.step_once();
    int64_t n = 0;
    while (auto e = s->next(std::chrono::milliseconds(0))) {
      n += static_cast<int64_t>(e->tokens.size());
      if (e->finished) break;
    }
    EXPECT_EQ(n, 8);
    EXPECT_EQ(runner.used_tokens(), 0);
  }
}

}  // namespace
}  // namespace strata
