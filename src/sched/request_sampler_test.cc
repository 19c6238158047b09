#include "sched/request_sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace strata {
namespace {

GenerationParams params(double t) {
  GenerationParams p;
  p.temperature = t;
  return p;
}

TEST(RequestSamplerTest, GreedyIsArgmaxLowestIdOnTies) {
  RequestSampler s(params(0), 1);
  std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(s.sample(l).token, 1);
}

TEST(RequestSamplerTest, TopK1IsGreedyAtAnyTemperature) {
  GenerationParams p = params(5.0);
  p.top_k = 1;
  RequestSampler s(p, 7);
  std::vector<float> l = {0.1f, 0.3f, 0.2f};
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(l).token, 1);
}

TEST(RequestSamplerTest, SameSeedSameSequence) {
  GenerationParams p = params(1.0);
  p.seed = 1234;
  RequestSampler a(p, 1), b(p, 999);  // explicit seed wins over the fallback
  std::vector<float> l(50);
  for (int i = 0; i < 50; ++i) l[i] = static_cast<float>((i * 37) % 11) * 0.3f;
  std::vector<int32_t> ta, tb;
  for (int i = 0; i < 100; ++i) {
    ta.push_back(a.sample(l).token);
    tb.push_back(b.sample(l).token);
  }
  EXPECT_EQ(ta, tb);
  std::map<int32_t, int> distinct;
  for (int32_t t : ta) distinct[t]++;
  EXPECT_GT(distinct.size(), 3u);  // actually random
}

TEST(RequestSamplerTest, FrequenciesFollowSoftmaxOfScaledLogits) {
  // logits ln(1), ln(2), ln(3), ln(4) at T = 1 give probabilities 0.1, 0.2, 0.3, 0.4.
  std::vector<float> l = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  RequestSampler s(params(1.0), 42);
  std::vector<int> count(4);
  const int n = 20000;
  for (int i = 0; i < n; ++i) count[s.sample(l).token]++;
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(count[k] / double(n), 0.1 * (k + 1), 0.015) << k;
  // T = 0.5 squares the probabilities: 1, 4, 9, 16 over 30.
  RequestSampler s2(params(0.5), 43);
  std::fill(count.begin(), count.end(), 0);
  for (int i = 0; i < n; ++i) count[s2.sample(l).token]++;
  const double sq[4] = {1 / 30.0, 4 / 30.0, 9 / 30.0, 16 / 30.0};
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(count[k] / double(n), sq[k], 0.015) << k;
}

TEST(RequestSamplerTest, TopPAndMinPRestrictTheSupport) {
  std::vector<float> l = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  GenerationParams p = params(1.0);
  p.top_p = 0.65;  // 0.4 + 0.3 = 0.7 >= 0.65: tokens 3 and 2 only
  RequestSampler s(p, 5);
  std::map<int32_t, int> seen;
  for (int i = 0; i < 2000; ++i) seen[s.sample(l).token]++;
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_TRUE(seen.count(3) && seen.count(2));
  GenerationParams q = params(1.0);
  q.min_p = 0.6;  // keep p >= 0.6 * 0.4 = 0.24: tokens 3 (0.4) and 2 (0.3)
  RequestSampler s2(q, 6);
  seen.clear();
  for (int i = 0; i < 2000; ++i) seen[s2.sample(l).token]++;
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_TRUE(seen.count(3) && seen.count(2));
}

TEST(RequestSamplerTest, LogprobsAreLogSoftmaxOfRawLogits) {
  GenerationParams p = params(0);
  p.logprobs = 2;
  RequestSampler s(p, 1);
  std::vector<float> l = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  SampleResult t = s.sample(l);
  EXPECT_EQ(t.token, 3);
  EXPECT_NEAR(t.logprob.logprob, std::log(0.4), 1e-5);
  ASSERT_EQ(t.logprob.top.size(), 2u);
  EXPECT_EQ(t.logprob.top[0].first, 3);
  EXPECT_EQ(t.logprob.top[1].first, 2);
  EXPECT_NEAR(t.logprob.top[1].second, std::log(0.3), 1e-5);
}

// Penalties and logit_bias (sched/request.h): greedy picks computed by hand.
TEST(RequestSamplerTest, LogitBiasMovesTheArgmax) {
  GenerationParams p = params(0);
  p.logit_bias = {{2, 5.0f}};
  RequestSampler s(p, 1);
  std::vector<float> l = {1.0f, 3.0f, -1.0f};  // token 2: -1 + 5 = 4 > 3
  EXPECT_EQ(s.sample(l).token, 2);
}

// min_tokens: the stop ids cannot be sampled before that many tokens, then they can.
TEST(RequestSamplerTest, MinTokensHoldsBackTheStopIds) {
  GenerationParams p = params(0);
  p.min_tokens = 2;
  RequestSampler s(p, 1, {}, {0, 2});
  std::vector<float> l = {5.0f, 1.0f, 4.0f};  // 0 then 2 are the best; both are stop ids
  EXPECT_EQ(s.sample(l).token, 1);
  EXPECT_EQ(s.sample(l).token, 1);
  EXPECT_EQ(s.sample(l).token, 0);
  GenerationParams q = params(0);
  RequestSampler free_s(q, 1, {}, {0, 2});
  EXPECT_EQ(free_s.sample(l).token, 0);
}

TEST(RequestSamplerTest, PresenceAndFrequencyPenalizeGeneratedTokens) {
  std::vector<float> l = {2.0f, 1.9f, 0.0f};
  GenerationParams p = params(0);
  p.presence_penalty = 0.5;  // after token 0 once: 2.0 - 0.5 = 1.5 < 1.9
  RequestSampler s(p, 1);
  EXPECT_EQ(s.sample(l).token, 0);
  EXPECT_EQ(s.sample(l).token, 1);
  // then token 1 also penalized: 1.9 - 0.5 = 1.4 < 1.5 -> 0 again
  EXPECT_EQ(s.sample(l).token, 0);
  GenerationParams f = params(0);
  f.frequency_penalty = 0.04;  // 2.0 - 0.04*n vs 1.9 - 0.04*m
  RequestSampler fs(f, 1);
  std::vector<int32_t> got;
  for (int i = 0; i < 5; ++i) got.push_back(fs.sample(l).token);
  // n=0: 2.0>1.9 -> 0; n=1: 1.96>1.9 -> 0; n=2: 1.92>1.9 -> 0; n=3: 1.88<1.9 -> 1;
  // n=3,m=1: 1.88 > 1.86 -> 0
  EXPECT_EQ(got, (std::vector<int32_t>{0, 0, 0, 1, 0}));
}

TEST(RequestSamplerTest, RepetitionPenaltyCoversPromptAndSignOfLogit) {
  GenerationParams p = params(0);
  p.repetition_penalty = 2.0;
  const std::vector<int32_t> prompt = {0, 2};
  RequestSampler s(p, 1, prompt);
  // token 0: 3.0 / 2 = 1.5 < 2.0 (token 1); token 2: -1 * 2 = -2
  std::vector<float> l = {3.0f, 2.0f, -1.0f, 1.8f};
  EXPECT_EQ(s.sample(l).token, 1);
  // now token 1 is seen too: 1.0; token 3 1.8 wins
  EXPECT_EQ(s.sample(l).token, 3);
}

TEST(RequestSamplerTest, LogprobsStayThoseOfTheRawLogits) {
  GenerationParams p = params(0);
  p.logprobs = 2;
  p.logit_bias = {{0, 10.0f}};
  RequestSampler s(p, 1);
  std::vector<float> l = {0.0f, 1.0f, 2.0f};
  SampleResult r = s.sample(l);
  EXPECT_EQ(r.token, 0);
  const double lz = std::log(std::exp(0.0) + std::exp(1.0) + std::exp(2.0));
  EXPECT_NEAR(r.logprob.logprob, 0.0 - lz, 1e-5);
  ASSERT_EQ(r.logprob.top.size(), 2u);
  EXPECT_EQ(r.logprob.top[0].first, 2);
  EXPECT_NEAR(r.logprob.top[0].second, 2.0 - lz, 1e-5);
  EXPECT_EQ(r.logprob.top[1].first, 1);
}

}  // namespace
}  // namespace strata
