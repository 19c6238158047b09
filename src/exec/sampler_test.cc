#include "exec/sampler.h"
#include "exec/sampler_reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <limits>
#include <map>
#include <random>

namespace strata {
namespace {

std::vector<float> logits_for(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

std::map<int32_t, int> histogram(SamplingParams p, const std::vector<float>& logits, int n) {
  Sampler s(p);
  std::map<int32_t, int> h;
  for (int i = 0; i < n; ++i) ++h[s.sample(logits).id];
  return h;
}

TEST(SamplerTest, GreedyTiesGoToLowestId) {
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler s(p);
  std::vector<float> l = {1.0f, 3.0f, 3.0f, -2.0f};
  EXPECT_EQ(s.sample(l).id, 1);
  EXPECT_EQ(argmax(l), 1);
  p.temperature = 1.0f;
  p.top_k = 1;
  EXPECT_EQ(Sampler(p).sample(l).id, 1);
}

TEST(SamplerTest, DeterministicPerSeed) {
  const auto l = logits_for({0.1, 0.2, 0.3, 0.4});
  SamplingParams p;
  p.seed = 7;
  Sampler a(p), b(p);
  std::vector<int32_t> sa, sb, sc;
  for (int i = 0; i < 200; ++i) {
    sa.push_back(a.sample(l).id);
    sb.push_back(b.sample(l).id);
  }
  p.seed = 8;
  Sampler c(p);
  for (int i = 0; i < 200; ++i) sc.push_back(c.sample(l).id);
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
}

TEST(SamplerTest, FrequenciesFollowProbabilities) {
  const std::vector<double> probs = {0.1, 0.2, 0.3, 0.4};
  const int n = 20000;
  auto h = histogram(SamplingParams{}, logits_for(probs), n);
  for (int i = 0; i < 4; ++i) {
    const double sd = std::sqrt(n * probs[i] * (1 - probs[i]));
    EXPECT_NEAR(h[i], n * probs[i], 5 * sd) << i;
  }
}

TEST(SamplerTest, TemperatureSharpens) {
  // p ∝ probs^(1/T): T = 0.5 squares the probabilities: {1,4,9,16}/30.
  SamplingParams p;
  p.temperature = 0.5f;
  const int n = 20000;
  auto h = histogram(p, logits_for({0.1, 0.2, 0.3, 0.4}), n);
  EXPECT_NEAR(h[3], n * 16.0 / 30, 5 * std::sqrt(n * 0.53 * 0.47));
  EXPECT_NEAR(h[0], n * 1.0 / 30, 5 * std::sqrt(n * 0.033 * 0.967));
}

TEST(SamplerTest, TopKTopPMinPFilter) {
  const auto l = logits_for({0.2, 0.5, 0.3, 0.0001});
  SamplingParams p;
  p.top_k = 2;
  auto h = histogram(p, l, 5000);
  EXPECT_EQ(h.count(0) + h.count(3), 0u);
  EXPECT_NEAR(h[1], 5000 * 0.5 / 0.8, 5 * std::sqrt(5000 * 0.625 * 0.375));
  p = SamplingParams{};
  p.top_p = 0.7f;  // 0.5 + 0.3 >= 0.7: keeps ids 1 and 2
  h = histogram(p, l, 3000);
  EXPECT_EQ(h.count(0) + h.count(3), 0u);
  EXPECT_GT(h[2], 0);
  p.top_p = 0.45f;  // 0.5 alone reaches 0.45
  h = histogram(p, l, 500);
  EXPECT_EQ(h[1], 500);
  p = SamplingParams{};
  p.min_p = 0.5f;  // keep p >= 0.25: ids 1 (0.5) and 2 (0.3)
  h = histogram(p, l, 3000);
  EXPECT_EQ(h.count(0) + h.count(3), 0u);
  EXPECT_GT(h[2], 0);
}

// The filters on a large vocabulary (where only the head of the order is sorted) pick the
// same tokens as a full sort of every candidate (exec/sampler_reference.h), same seed, over
// peaked, flat and tied distributions, cuts inside and far beyond the first few hundred
// tokens.
TEST(SamplerTest, FiltersMatchAFullSortOnLargeVocabularies) {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal;
  int draws = 0;
  for (int64_t n : {int64_t{5}, int64_t{300}, int64_t{4000}, int64_t{129280}}) {
    for (float spread : {0.0f, 0.05f, 1.0f, 6.0f}) {  // 0: every logit tied
      std::vector<float> logits(n);
      for (auto& v : logits) v = spread * normal(gen);
      for (int cfg = 0; cfg < 6; ++cfg) {
        SamplingParams p;
        p.seed = 11 + cfg;
        p.temperature = cfg % 2 ? 0.7f : 1.0f;
        if (cfg == 0) p.top_p = 0.9f;
        if (cfg == 1) p.top_p = 0.999f;
        if (cfg == 2) p.top_k = 3000, p.top_p = 0.95f;
        if (cfg == 3) p.min_p = 0.05f;
        if (cfg == 4) p.min_p = 0.0001f, p.top_p = 0.99f;
        if (cfg == 5) p.top_k = 40;
        Sampler s(p);
        std::mt19937_64 ref_rng(p.seed);
        for (int t = 0; t < 4; ++t, ++draws)
          ASSERT_EQ(s.sample(logits).id, sample_by_full_sort(p, logits, ref_rng))
              << "n=" << n << " spread=" << spread << " cfg=" << cfg << " draw=" << t;
      }
    }
  }
  EXPECT_EQ(draws, 4 * 4 * 6 * 4);
}

// NaN or +inf logits are a fault (counted in the message); -inf masks and finite values
// are fine.
TEST(SamplerTest, CheckLogitsFlagsNanAndPlusInf) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(check_logits(std::vector<float>{1.0f, -inf, -3.5f, 3e38f}).ok());
  EXPECT_TRUE(check_logits(std::vector<float>{}).ok());
  const Status nan = check_logits(std::vector<float>{1.0f, std::nanf(""), std::nanf(""), -inf});
  EXPECT_EQ(nan.code(), StatusCode::kInternal);
  EXPECT_NE(nan.message().find("(2 NaN, 0 +inf of 4)"), std::string::npos) << nan.message();
  const Status pinf = check_logits(std::vector<float>{inf, 0.0f});
  EXPECT_EQ(pinf.code(), StatusCode::kInternal);
  EXPECT_NE(pinf.message().find("(0 NaN, 1 +inf of 2)"), std::string::npos) << pinf.message();
}

TEST(SamplerTest, Logprobs) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = true;
  p.top_logprobs = 2;
  std::vector<float> l = {0.0f, std::log(3.0f), -100.0f};
  auto r = Sampler(p).sample(l);
  EXPECT_EQ(r.id, 1);
  EXPECT_NEAR(r.logprob, std::log(0.75), 1e-6);
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_EQ(r.top[0].first, 1);
  EXPECT_EQ(r.top[1].first, 0);
  EXPECT_NEAR(r.top[1].second, std::log(0.25), 1e-6);
}

TEST(SamplerTest, ValidatesParams) {
  SamplingParams p;
  EXPECT_TRUE(validate_sampling_params(p).ok());
  p.temperature = -1;
  EXPECT_FALSE(validate_sampling_params(p).ok());
  p = SamplingParams{};
  p.top_p = 0;
  EXPECT_FALSE(validate_sampling_params(p).ok());
  p = SamplingParams{};
  p.top_k = -3;
  EXPECT_FALSE(validate_sampling_params(p).ok());
  p.top_k = -1;  // off, as 0
  EXPECT_TRUE(validate_sampling_params(p).ok());
  p = SamplingParams{};
  p.min_p = 2;
  EXPECT_FALSE(validate_sampling_params(p).ok());
}

}  // namespace
}  // namespace strata
