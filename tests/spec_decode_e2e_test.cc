// Speculative decoding on the real model families (issue 28): n-gram drafts (and the models'
// own drafters: DSpark on V4.1, MTP on V4) verified by the target give token ids equal to
// plain decoding -- greedy for every draft width and every forced reject point, seeded
// sampling, 8 concurrent requests, prefix hits, a pool small enough to preempt -- and every
// pool is back at its baseline after. Llama (stories260K) rolls back by cutting its KV;
// DeepSeek V4.1 / V4 with the undo record (drafter state included: drafts after any partial
// accept equal the drafts of plain decoding at the same committed prefix).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>

#include "model/tokenizer.h"
#include "runner_fixtures.h"
#include "sched/engine.h"
#include "sched/json_schema.h"
#include "sched/spec_decode.h"
#include "sched/spec_test_helpers.h"

namespace strata {
namespace {

struct Out {
  std::vector<std::vector<int32_t>> tokens;
  EngineStats stats;
};

std::vector<int32_t> repetitive_prompt(int variant, int32_t vocab) {
  // A phrase said three times (what prompt lookup feeds on), different per request.
  std::vector<int32_t> phrase;
  for (int i = 0; i < 9; ++i) phrase.push_back((variant * 31 + i * 17) % (vocab - 3) + 3);
  std::vector<int32_t> p;
  for (int r = 0; r < 3; ++r) p.insert(p.end(), phrase.begin(), phrase.end());
  return p;
}

using ProposerFactory = std::function<std::unique_ptr<DraftProposer>(ModelRunner*)>;

Out run(const std::string& model, const SpeculativeConfig& sc, int n, const GenerationParams& g,
        int64_t kv_tokens = 0, bool twice = false, std::vector<int32_t> text_prompt = {},
        const ProposerFactory& proposer = nullptr) {
  auto runner = testing::fresh_runner(model, kv_tokens);
  if (!runner) return {};
  EngineOptions eo;
  eo.scheduler = {.max_num_seqs = 8, .max_num_batched_tokens = 128, .chunk_size = 32};
  eo.speculative = sc;
  EXPECT_TRUE(check_speculative_config(sc, *runner).ok());
  Engine engine(runner.get(), nullptr, eo);
  if (proposer) engine.set_proposer(proposer(runner.get()));
  const int32_t vocab = runner->info().vocab_size;
  const auto baseline = runner->cache_usage();
  Out out;
  for (int pass = 0; pass < (twice ? 2 : 1); ++pass) {  // pass 2: prefix hits
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int r = 0; r < n; ++r) {
      GenerationParams gr = g;
      if (gr.seed) gr.seed = *gr.seed + r;
      streams.push_back(
          engine.submit(text_prompt.empty() ? repetitive_prompt(r, vocab) : text_prompt, gr).value());
    }
    std::vector<std::vector<int32_t>> toks(n);
    std::vector<bool> done(n, false);
    for (int iter = 0; iter < 20000; ++iter) {
      bool all = true;
      for (int r = 0; r < n; ++r) {
        while (!done[r]) {
          auto e = streams[r]->next(std::chrono::milliseconds(0));
          if (!e) break;
          toks[r].insert(toks[r].end(), e->tokens.begin(), e->tokens.end());
          EXPECT_TRUE(!e->finished || e->finish_reason != FinishReason::kError) << e->error.to_string();
          if (e->finished) done[r] = true;
        }
        all = all && done[r];
      }
      if (all) break;
      engine.step_once();
    }
    if (pass == 0) out.tokens = toks;
    else EXPECT_EQ(toks, out.tokens) << "after prefix hits";
  }
  out.stats = engine.stats();
  const auto after = runner->cache_usage();
  EXPECT_EQ(after.size(), baseline.size());
  for (size_t i = 0; i < after.size() && i < baseline.size(); ++i)
    EXPECT_EQ(after[i].used_bytes, baseline[i].used_bytes) << after[i].kind;
  return out;
}

using testing::greedy_params;
using testing::ngram_config;

class SpecDecodeFamilies : public ::testing::TestWithParam<const char*> {};

TEST_P(SpecDecodeFamilies, GreedyEqualsPlainForEveryWidthAndRejectPoint) {
  const std::string model = GetParam();
  const Out plain = run(model, {}, 2, greedy_params(24));
  ASSERT_EQ(plain.tokens.size(), 2u);
  for (int k = 1; k <= 7; ++k) {
    const Out s = run(model, ngram_config(k), 2, greedy_params(24));
    EXPECT_EQ(s.tokens, plain.tokens) << model << " k " << k;
    EXPECT_GT(s.stats.spec_decode_num_draft_tokens, 0) << "no drafts proposed";
    // Every family cuts its state back: no rollback recomputes.
    EXPECT_EQ(s.stats.spec_decode_rollback_recomputes, 0) << model << " k " << k;
    for (int j = 1; j <= k; j += (model == "stories260K" ? 1 : 3)) {
      EXPECT_EQ(run(model, ngram_config(k, j), 2, greedy_params(24)).tokens, plain.tokens)
          << model << " k " << k << " forced reject at " << j;
    }
  }
}

TEST_P(SpecDecodeFamilies, ConcurrentSeededAndPrefixHitsEqualPlain) {
  const std::string model = GetParam();
  GenerationParams g;
  g.temperature = 0.8;
  g.top_k = 20;
  g.max_tokens = 20;
  g.ignore_eos = true;
  g.seed = 7;
  const Out plain = run(model, {}, 8, g);
  const Out spec = run(model, ngram_config(4), 8, g, 0, /*twice=*/true);
  EXPECT_EQ(spec.tokens, plain.tokens);
  EXPECT_GT(spec.stats.spec_decode_num_drafts, 0);
}

INSTANTIATE_TEST_SUITE_P(Models, SpecDecodeFamilies,
                         ::testing::Values("stories260K", "deepseek-v41-tiny", "deepseek-v4flash-tiny"));

SpeculativeConfig drafter_config(const std::string& method, int k, int reject_at = 0) {
  SpeculativeConfig c;
  c.method = method;
  c.num_speculative_tokens = k;
  c.force_reject_at = reject_at;
  return c;
}
SpeculativeConfig dspark_config(int k, int reject_at = 0) {
  return drafter_config("dspark", k, reject_at);
}

// The model's own drafter: DSpark on the V4.1 golden checkpoint, MTP on the V4 one (random
// weights: drafts are rarely right, so every step exercises rejection and the rollback).
struct DrafterCase {
  const char* model;
  const char* method;
  int max_k;
};
class SpecDecodeDrafter : public ::testing::TestWithParam<DrafterCase> {};

TEST_P(SpecDecodeDrafter, GreedyEqualsPlainForEveryWidthAndRejectPoint) {
  const DrafterCase dc = GetParam();
  const Out plain = run(dc.model, {}, 2, greedy_params(20));
  ASSERT_EQ(plain.tokens.size(), 2u);
  for (int k = 1; k <= dc.max_k; ++k) {
    const Out s = run(dc.model, drafter_config(dc.method, k), 2, greedy_params(20));
    EXPECT_EQ(s.tokens, plain.tokens) << "k " << k;
    EXPECT_GT(s.stats.spec_decode_num_draft_tokens, 0) << "no drafts proposed";
    EXPECT_EQ(s.stats.spec_decode_rollback_recomputes, 0) << "k " << k;
    for (int j = 1; j <= k; j += 2)
      EXPECT_EQ(run(dc.model, drafter_config(dc.method, k, j), 2, greedy_params(20)).tokens,
                plain.tokens)
          << "k " << k << " forced reject at " << j;
  }
}

TEST_P(SpecDecodeDrafter, ConcurrentSeededAndPrefixHitsEqualPlain) {
  const DrafterCase dc = GetParam();
  GenerationParams g;
  g.temperature = 0.8;
  g.top_k = 20;
  g.max_tokens = 16;
  g.ignore_eos = true;
  g.seed = 11;
  const Out plain = run(dc.model, {}, 8, g);
  const Out spec = run(dc.model, drafter_config(dc.method, 3), 8, g, 0, /*twice=*/true);
  EXPECT_EQ(spec.tokens, plain.tokens);
  EXPECT_GT(spec.stats.spec_decode_num_drafts, 0);
}

// The drafter's state (DSpark rings; MTP ring and carry) rolls back with the rest: with
// drafts whose first j tokens are the true continuation (an oracle wrapped around the model's
// drafter), every step accepts exactly j and rejects the next; the model's draft at each
// committed prefix must equal the draft at that prefix during plain decoding.
class RecordingDspark : public DraftProposer {
 public:
  RecordingDspark(ModelRunner* r, std::vector<int32_t> truth, int right,
                  std::map<size_t, std::vector<int32_t>>* seen)
      : runner_(r), truth_(std::move(truth)), right_(right), seen_(seen) {}
  std::vector<int32_t> propose(SeqId seq, std::span<const int32_t> tokens,
                               int max_k) const override {
    auto d = runner_->draft_tokens(seq, tokens.back(), 5);
    EXPECT_TRUE(d.ok() || tokens.size() < 3) << d.status().to_string();
    if (d.ok()) {
      auto [it, fresh] = seen_->emplace(tokens.size(), *d);
      EXPECT_EQ(it->second, *d) << "two drafts at the same prefix differ, length " << tokens.size();
    }
    if (right_ < 0) return {};  // record only: plain decoding
    std::vector<int32_t> out;
    for (int i = 0; i < max_k && tokens.size() + i < truth_.size(); ++i) {
      const int32_t t = truth_[tokens.size() + i];
      out.push_back(i < right_ ? t : (t + 1) % runner_->info().vocab_size);
    }
    return out;
  }

 private:
  ModelRunner* runner_;
  std::vector<int32_t> truth_;
  int right_;
  std::map<size_t, std::vector<int32_t>>* seen_;
};

TEST_P(SpecDecodeDrafter, DraftsAfterPartialAcceptsEqualPlainDrafts) {
  const DrafterCase dc = GetParam();
  const std::string model = dc.model;
  auto runner = testing::fresh_runner(model, 0);
  ASSERT_TRUE(runner);
  const std::vector<int32_t> prompt = repetitive_prompt(0, runner->info().vocab_size);
  std::map<size_t, std::vector<int32_t>> plain_drafts;
  const Out plain = run(model, drafter_config(dc.method, 5), 1, greedy_params(24), 0, false, prompt,
                        [&](ModelRunner* r) {
                          return std::make_unique<RecordingDspark>(r, std::vector<int32_t>{}, -1,
                                                                   &plain_drafts);
                        });
  ASSERT_EQ(plain.tokens.size(), 1u);
  std::vector<int32_t> truth = prompt;
  truth.insert(truth.end(), plain.tokens[0].begin(), plain.tokens[0].end());
  ASSERT_GT(plain_drafts.size(), 20u);
  for (int right = 0; right <= 4; ++right) {
    std::map<size_t, std::vector<int32_t>> drafts;
    const Out s = run(model, drafter_config(dc.method, 5), 1, greedy_params(24), 0, false, prompt,
                      [&](ModelRunner* r) {
                        return std::make_unique<RecordingDspark>(r, truth, right, &drafts);
                      });
    EXPECT_EQ(s.tokens, plain.tokens) << right << " right";
    EXPECT_GT(s.stats.spec_decode_num_accepted_tokens, right > 0 ? 0 : -1);
    int compared = 0;
    for (const auto& [len, d] : drafts) {
      auto it = plain_drafts.find(len);
      if (it == plain_drafts.end()) continue;
      ++compared;
      EXPECT_EQ(d, it->second) << right << " right, prefix length " << len;
    }
    EXPECT_GT(compared, 3) << right << " right";
  }
}

// Confidence-scheduled width (spec-tiers.md S10): only the leading drafts whose confidence
// is >= tau are verified; the output never depends on tau, and a higher tau verifies fewer
// drafts (tau 1 none that are not certain).
TEST_P(SpecDecodeDrafter, ConfidenceThresholdKeepsOutputs) {
  const DrafterCase dc = GetParam();
  const Out plain = run(dc.model, {}, 2, greedy_params(20));
  int64_t prev = -1;
  std::vector<int64_t> verified;
  for (double tau : {0.0, 0.01, 0.5, 0.7, 1.0}) {
    SpeculativeConfig c = drafter_config(dc.method, 4);
    c.confidence_threshold = tau;
    const Out s = run(dc.model, c, 2, greedy_params(20));
    EXPECT_EQ(s.tokens, plain.tokens) << "tau " << tau;
    const int64_t n = s.stats.spec_decode_num_draft_tokens;
    if (prev >= 0) {
      EXPECT_LE(n, prev) << "tau " << tau;
    }
    prev = n;
    verified.push_back(n);
  }
  EXPECT_LT(verified.back(), verified.front()) << "the threshold never cut a draft";
  std::string seen;
  for (int64_t v : verified) seen += std::to_string(v) + " ";
  RecordProperty("draft_tokens_by_tau", seen);
}

INSTANTIATE_TEST_SUITE_P(Models, SpecDecodeDrafter,
                         ::testing::Values(DrafterCase{"deepseek-v41-tiny", "dspark", 5},
                                           DrafterCase{"deepseek-v4flash-tiny", "mtp", 7}),
                         [](const auto& info) { return std::string(info.param.method); });

TEST(SpecDecodeDspark, RefusedWhereItCannotRun) {
  auto llama = testing::fresh_runner("stories260K", 0);
  auto v41 = testing::fresh_runner("deepseek-v41-tiny", 0);
  ASSERT_TRUE(llama && v41);
  EXPECT_EQ(llama->draft_block_size(), 0);
  EXPECT_EQ(v41->draft_block_size(), 5);
  Status st = check_speculative_config(dspark_config(2), *llama);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.to_string();
  EXPECT_NE(st.message().find("DSpark"), std::string::npos) << st.to_string();
  st = check_speculative_config(dspark_config(6), *v41);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("block size 5"), std::string::npos) << st.to_string();
  EXPECT_TRUE(check_speculative_config(dspark_config(5), *v41).ok());
  EXPECT_TRUE(check_speculative_config(ngram_config(7), *llama).ok());
  // Without the engine's guard, a runner with no drafter gives no proposer at all.
  EXPECT_EQ(make_proposer(dspark_config(2), llama.get()), nullptr);
  EXPECT_NE(make_proposer(dspark_config(2), v41.get()), nullptr);
}

TEST(SpecDecodeMtp, RefusedWhereItCannotRun) {
  auto v41 = testing::fresh_runner("deepseek-v41-tiny", 0);
  auto v4 = testing::fresh_runner("deepseek-v4flash-tiny", 0);
  ASSERT_TRUE(v41 && v4);
  EXPECT_EQ(v4->drafter_method(), "mtp");
  EXPECT_EQ(v41->drafter_method(), "dspark");
  Status st = check_speculative_config(drafter_config("mtp", 2), *v41);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.to_string();
  EXPECT_NE(st.message().find("MTP layer"), std::string::npos) << st.to_string();
  st = check_speculative_config(dspark_config(2), *v4);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.to_string();
  EXPECT_NE(st.message().find("'mtp' drafter"), std::string::npos) << st.to_string();
  EXPECT_TRUE(check_speculative_config(drafter_config("mtp", 16), *v4).ok());
  EXPECT_EQ(make_proposer(drafter_config("mtp", 2), v41.get()), nullptr);
  EXPECT_NE(make_proposer(drafter_config("mtp", 2), v4.get()), nullptr);
}

// On the trained model, prompt lookup is accepted where the text repeats, and Llama rolls
// back by cutting its KV (no recompute).
TEST(SpecDecodeLlama, AcceptsOnRepetitionAndCutsBack) {
  auto tok = load_tokenizer_from_dir(testing::model_dir("stories260K"));
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  std::vector<int32_t> prompt = {1};  // BOS
  for (int32_t t : (*tok)->encode("Once upon a time, there was a little girl named Lily. Lily"))
    prompt.push_back(t);
  const Out plain = run("stories260K", {}, 1, greedy_params(120), 0, false, prompt);
  const Out s = run("stories260K", ngram_config(5), 1, greedy_params(120), 0, false, prompt);
  EXPECT_EQ(s.tokens, plain.tokens);
  EXPECT_GT(s.stats.spec_decode_num_accepted_tokens, 0);
  EXPECT_EQ(s.stats.spec_decode_rollback_recomputes, 0);
  int64_t per_pos = 0;
  for (int64_t v : s.stats.spec_decode_num_accepted_tokens_per_pos) per_pos += v;
  EXPECT_EQ(per_pos, s.stats.spec_decode_num_accepted_tokens);
}

// Lossless acceptance as a distribution test, independent of the seed-for-seed equality
// above: 400 requests sampled (temperature 1) with speculation and 400 without, on disjoint
// seeds, over a repetitive prompt where the n-gram drafts are often right. For each of the
// first 4 generated positions a two-sample chi-square test over the tokens seen (categories
// under 20 draws pooled) must not reject equality at p = 0.001 (fixed seeds: deterministic).
// (Since a seeded request equals its plain run token for token, the statistic is the one of
// plain decoding on the same two seed sets; this checks the claim from the other side.)
TEST(SpecDecodeLlama, SampledDistributionMatchesPlain) {
  auto tok = load_tokenizer_from_dir(testing::model_dir("stories260K"));
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  std::vector<int32_t> prompt = {1};  // BOS
  for (int32_t t : (*tok)->encode("Lily saw a big cat. Lily saw a big cat. Lily saw a big cat. Lily saw a"))
    prompt.push_back(t);
  GenerationParams g;
  g.temperature = 1.0;
  g.max_tokens = 4;
  g.ignore_eos = true;
  const int n = 400;
  g.seed = 10000;
  const Out plain = run("stories260K", {}, n, g, 0, false, prompt);
  g.seed = 50000;
  const Out spec = run("stories260K", ngram_config(3), n, g, 0, false, prompt);
  ASSERT_EQ(plain.tokens.size(), static_cast<size_t>(n));
  ASSERT_EQ(spec.tokens.size(), static_cast<size_t>(n));
  EXPECT_GT(spec.stats.spec_decode_num_accepted_tokens, n / 4) << "drafts must be accepted often";
  for (int pos = 0; pos < 4; ++pos) {
    std::map<int32_t, std::pair<int, int>> counts;
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(plain.tokens[r].size(), 4u);
      ASSERT_EQ(spec.tokens[r].size(), 4u);
      ++counts[plain.tokens[r][pos]].first;
      ++counts[spec.tokens[r][pos]].second;
    }
    double chi2 = 0;
    int cats = 0, pool_a = 0, pool_b = 0;
    for (const auto& [t, ab] : counts) {
      if (ab.first + ab.second < 20) {
        pool_a += ab.first;
        pool_b += ab.second;
        continue;
      }
      chi2 += std::pow(ab.first - ab.second, 2) / (ab.first + ab.second);
      ++cats;
    }
    if (pool_a + pool_b > 0) {
      chi2 += std::pow(pool_a - pool_b, 2) / (pool_a + pool_b);
      ++cats;
    }
    const double df = std::max(1, cats - 1);
    // Wilson-Hilferty: the chi-square quantile at p = 0.001 (z = 3.09).
    const double crit = df * std::pow(1 - 2 / (9 * df) + 3.09 * std::sqrt(2 / (9 * df)), 3);
    EXPECT_LT(chi2, crit) << "position " << pos << ": chi2 " << chi2 << " over " << cats
                          << " categories";
    std::printf("position %d: chi2 %.2f, df %.0f, critical %.2f\n", pos, chi2, df, crit);
  }
}

// A KV pool so small that requests are preempted: outputs still equal plain decoding.
TEST(SpecDecodeLlama, TightPoolPreemptsAndStaysEqual) {
  const Out plain = run("stories260K", {}, 6, greedy_params(40));
  const Out s = run("stories260K", ngram_config(6, 2), 6, greedy_params(40), /*kv_tokens=*/192);
  EXPECT_EQ(s.tokens, plain.tokens);
  EXPECT_GT(s.stats.num_preemptions_total, 0);
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// response_format with speculation: the token that closes the value ends the answer exactly
// as without speculation (a fresh-clone check found the closing '}' dropped when it came as
// the target's token after accepted drafts).
TEST(SpecDecodeLlama, JsonSchemaAnswersEqualPlainAndParse) {
  auto tok = load_tokenizer_from_dir(testing::model_dir("stories260K"));
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  auto compiled = JsonSchema::compile(nlohmann::json::parse(R"({"type": "object",
      "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
      "required": ["name", "age"], "additionalProperties": false})"));
  ASSERT_TRUE(compiled.ok()) << compiled.status().to_string();
  const std::shared_ptr<const JsonSchema> schema = *compiled;
  std::vector<int32_t> prompt = {1};
  for (int32_t t : (*tok)->encode(R"({"name": "Lily", "age": 3} {"name": "Lily", "age": 3} {"name":)"))
    prompt.push_back(t);
  // Proposes what a recorded run emitted next (every draft right up to the closing token).
  struct Replay : DraftProposer {
    std::vector<int32_t> all;
    std::vector<int32_t> propose(SeqId, std::span<const int32_t> t, int max_k) const override {
      if (t.size() >= all.size() || !std::equal(t.begin(), t.end(), all.begin())) return {};
      const size_t n = std::min<size_t>(max_k, all.size() - t.size());
      return std::vector<int32_t>(all.begin() + t.size(), all.begin() + t.size() + n);
    }
  };
  auto answer = [&](const SpeculativeConfig& sc, uint64_t seed, std::string* text,
                    const std::vector<int32_t>* replay) {
    auto runner = testing::fresh_runner("stories260K");
    EngineOptions eo;
    eo.speculative = sc;
    Engine engine(runner.get(), tok->get(), eo);
    if (replay != nullptr) {
      auto r = std::make_unique<Replay>();
      r->all = prompt;
      r->all.insert(r->all.end(), replay->begin(), replay->end());
      engine.set_proposer(std::move(r));
    }
    GenerationParams g;
    g.temperature = seed == 0 ? 0.0 : 1.0;
    g.seed = seed;
    g.max_tokens = 120;
    g.json_schema = schema;
    auto s = engine.submit(prompt, g).value();
    std::vector<int32_t> ids;
    FinishReason reason = FinishReason::kNone;
    for (int i = 0; i < 2000 && reason == FinishReason::kNone; ++i) {
      engine.step_once();
      while (auto e = s->next(std::chrono::milliseconds(0))) {
        ids.insert(ids.end(), e->tokens.begin(), e->tokens.end());
        *text += e->text;
        if (e->finished) {
          reason = e->finish_reason;
          break;
        }
      }
    }
    EXPECT_NE(reason, FinishReason::kNone);
    if (reason == FinishReason::kStop) {
      EXPECT_FALSE(nlohmann::json::parse(*text, nullptr, false).is_discarded()) << *text;
    }
    return ids;
  };
  int64_t accepted = 0, closed = 0;
  for (uint64_t seed : {0, 1, 2, 3, 4, 5, 6, 7}) {
    std::string plain_text, spec_text;
    const auto plain = answer({}, seed, &plain_text, nullptr);
    const auto spec = answer(ngram_config(4), seed, &spec_text, nullptr);
    EXPECT_EQ(spec, plain) << "seed " << seed;
    EXPECT_EQ(spec_text, plain_text) << "seed " << seed;
    for (int k : {2, 5}) {
      std::string replay_text;
      EXPECT_EQ(answer(ngram_config(k), seed, &replay_text, &plain), plain) << "seed " << seed;
      EXPECT_EQ(replay_text, plain_text) << "seed " << seed << " k " << k;
    }
    accepted += static_cast<int64_t>(spec.size());
    closed += !plain_text.empty() && plain_text.find('}') != std::string::npos;
  }
  EXPECT_GT(accepted, 0);
  EXPECT_GT(closed, 0) << "no answer closed its object: the test checks nothing";
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// Llama rollback at every boundary: a sequence that fed k rejected tokens after position L
// and was cut back to L + 1 gives, for every later position, logits == a cold run's (the
// same bits), for cuts around the 16-token unit (+-1, odd and even) and widths 1, 4, 7.
// Every family cuts its state back without recompute (Llama its KV; V4.1 / V4 their paged
// rows plus the undo record of rings, compressor tails, DSpark rings and Engram history): after
// a verify of the next real token(s) and wrong drafts, truncating to the accepted length and
// feeding the rest gives logits equal to a cold run at every later position -- across window,
// compression-group and prefix-unit boundaries, widths 1/4/7, accepts 0 and k/2.
class SpecTruncate : public ::testing::TestWithParam<const char*> {};

TEST_P(SpecTruncate, TruncatedStateGivesColdLogitsAtEveryBoundary) {
  auto runner = testing::fresh_runner(GetParam());
  ASSERT_TRUE(runner);
  const int64_t V = runner->info().vocab_size;
  std::vector<int32_t> real(60);
  for (size_t i = 0; i < real.size(); ++i) real[i] = static_cast<int32_t>((i * 37 + 11) % (V - 3) + 3);
  const int64_t N = static_cast<int64_t>(real.size());
  std::vector<float> cold;
  {
    ASSERT_TRUE(runner->add_sequence(SeqId{1}).ok());
    StepItem it{SeqId{1}, real, true, -1, true};
    ASSERT_TRUE(runner->step({&it, 1}, &cold).ok());
    runner->release_sequence(SeqId{1});
  }
  const auto baseline = runner->cache_usage();
  int64_t id = 100;
  for (int64_t L : {1, 2, 14, 15, 16, 17, 30, 31, 32, 33, 47, 48}) {
    for (int64_t k : {1, 4, 7}) {
      for (int64_t a : {int64_t{0}, k / 2}) {
        const SeqId seq{id++};
        ASSERT_TRUE(runner->add_sequence(seq).ok());
        std::vector<float> rows;
        StepItem first{seq, std::span<const int32_t>(real).first(L), true};
        ASSERT_TRUE(runner->step({&first, 1}, &rows).ok());
        // The next real token, a right drafts, then wrong ones (k drafts in all).
        std::vector<int32_t> verify(real.begin() + L, real.begin() + L + 1 + a);
        for (int64_t j = a; j < k; ++j) verify.push_back(static_cast<int32_t>((real[L + 1 + j] + 1) % V));
        StepItem b{seq, verify, true, -1, true};
        ASSERT_TRUE(runner->step({&b, 1}, &rows).ok());
        const int64_t keep = L + 1 + a;
        Status st = runner->truncate_sequence(seq, keep);
        ASSERT_TRUE(st.ok()) << GetParam() << " L " << L << " k " << k << ": " << st.to_string();
        ASSERT_EQ(runner->sequence_length(seq), keep);
        StepItem c{seq, std::span<const int32_t>(real).subspan(keep), true, -1, true};
        ASSERT_TRUE(runner->step({&c, 1}, &rows).ok());
        ASSERT_EQ(static_cast<int64_t>(rows.size()), (N - keep) * V);
        // Row r of the resumed step is position keep + r of the cold run.
        EXPECT_TRUE(std::equal(rows.begin(), rows.end(), cold.begin() + keep * V))
            << GetParam() << " L " << L << " k " << k << " a " << a;
        runner->release_sequence(seq);
      }
    }
  }
  const auto after = runner->cache_usage();
  ASSERT_EQ(after.size(), baseline.size());
  for (size_t i = 0; i < after.size(); ++i) {
    if (after[i].kind.find("prefix_cache") == std::string::npos) {
      EXPECT_EQ(after[i].used_bytes, baseline[i].used_bytes) << after[i].kind;
    }
  }
}

// A cut the undo record does not cover (no verify before it, or below the verify's start) is
// refused with nothing changed; the scheduler's recompute path stays the fallback.
TEST(SpecTruncateDeepseek, UncoveredCutIsRefused) {
  auto runner = testing::fresh_runner("deepseek-v41-tiny");
  ASSERT_TRUE(runner);
  const std::vector<int32_t> ids = {5, 9, 11, 13, 17, 19, 23, 29};
  ASSERT_TRUE(runner->add_sequence(SeqId{3}).ok());
  std::vector<float> rows;
  StepItem a{SeqId{3}, ids, true};
  ASSERT_TRUE(runner->step({&a, 1}, &rows).ok());
  Status st = runner->truncate_sequence(SeqId{3}, 4);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented) << st.to_string();
  EXPECT_EQ(runner->sequence_length(SeqId{3}), 8);
  EXPECT_EQ(runner->truncate_sequence(SeqId{3}, 9).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(runner->truncate_sequence(SeqId{4}, 1).code(), StatusCode::kInvalidArgument);
  const std::vector<int32_t> v = {31, 37, 41};
  StepItem b{SeqId{3}, v, true, -1, true};
  ASSERT_TRUE(runner->step({&b, 1}, &rows).ok());
  EXPECT_EQ(runner->truncate_sequence(SeqId{3}, 7).code(), StatusCode::kUnimplemented);
  EXPECT_EQ(runner->sequence_length(SeqId{3}), 11);
  EXPECT_TRUE(runner->truncate_sequence(SeqId{3}, 9).ok());
  EXPECT_EQ(runner->sequence_length(SeqId{3}), 9);
}

INSTANTIATE_TEST_SUITE_P(Models, SpecTruncate,
                         ::testing::Values("stories260K", "deepseek-v41-tiny", "deepseek-v4flash-tiny"));

}  // namespace
}  // namespace strata
