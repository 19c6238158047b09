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

}  // namespace
}  // namespace strata
