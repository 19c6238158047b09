// Expert-parallel MoE dispatch / combine (exec/ep_moe.h) over an in-process group of 1-4 ranks
// (dist/fake_expert_comm.h): every rank leaves with the one-rank layer's output bit for bit --
// routed experts on the token's FP8-quantized row (UE8M0 scales), each token's expert rows
// summed in ascending expert id in fp32, + the shared expert, rounded to bf16 -- for random
// routing, skewed routing (every token to rank 0's experts), a one-token decode step and fewer
// tokens than ranks; the expert sees the FP8 codes and scales the origin quantized, and each
// rank issues the same three collectives per call.
#include "exec/ep_moe.h"

#include <cmath>
#include <cstring>
#include <mutex>
#include <random>

#include <gtest/gtest.h>

#include "dist/fake_expert_comm.h"
#include "kernels/act_quant.h"
#include "model/dtype.h"

namespace strata {
namespace {

constexpr int64_t kD = 64, kBlock = 32, kE = 8;

// Toy experts whose bf16-rounded sum still shows the fp32 summation order: routed expert e
// adds +-2^21 (sign by parity) to rw * (q[d] * s[d / block]) * (1 + e / 3), and the shared
// expert cancels the +-2^21 terms of the token's picks exactly, so the result is small but
// its fp32 rounding happened at the large intermediate's ulp (0.25) in the order of the sum.
float big(int64_t e) { return (e % 2 ? -1.0f : 1.0f) * 0x1p21f; }
void toy_routed(int64_t e, const kernels::QuantActs& a, const float* rw, float* out) {
  for (int64_t r = 0; r < a.m; ++r)
    for (int64_t d = 0; d < a.k; ++d)
      out[r * a.k + d] = rw[r] * (a.q[r * a.k + d] * a.scales[r * (a.k / a.block) + d / a.block]) *
                         (1.0f + static_cast<float>(e) / 3.0f) + big(e);
}
// The routing and inputs of the case being run (the shared expert finds its token by row).
const std::vector<std::vector<int32_t>>* g_sel = nullptr;
const std::vector<float>* g_x = nullptr;
void toy_shared(const float* x, int64_t n, float* out) {
  for (int64_t r = 0; r < n; ++r) {
    int64_t tok = -1;
    for (size_t t = 0; t < g_sel->size() && tok < 0; ++t)
      if (0 == std::memcmp(&(*g_x)[t * kD], x + r * kD, kD * sizeof(float))) tok = t;
    ASSERT_GE(tok, 0);
    float cancel = 0;
    for (int32_t e : (*g_sel)[tok]) cancel -= big(e);
    for (int64_t d = 0; d < kD; ++d) out[r * kD + d] = 0.5f * x[r * kD + d] + cancel;
  }
}

// The one-rank layer: each token's rows from its picks in ascending expert id.
std::vector<float> one_rank(const std::vector<std::vector<int32_t>>& sel,
                            const std::vector<std::vector<float>>& wts,
                            const std::vector<float>& x) {
  const int64_t S = static_cast<int64_t>(sel.size()), nkb = kD / kBlock;
  std::vector<float> q(S * kD), s(S * nkb), out(S * kD), row(kD), sh(kD);
  kernels::act_quant_fp8(x.data(), S, kD, kBlock, kernels::ScaleFmt::kUe8m0, nullptr, q.data(),
                         s.data());
  for (int64_t t = 0; t < S; ++t) {
    std::vector<float> y(kD, 0.0f);
    for (int64_t e = 0; e < kE; ++e)
      for (size_t j = 0; j < sel[t].size(); ++j) {
        if (sel[t][j] != e) continue;
        toy_routed(e, kernels::QuantActs{&q[t * kD], &s[t * nkb], 1, kD, kBlock}, &wts[t][j],
                   row.data());
        for (int64_t d = 0; d < kD; ++d) y[d] += row[d];
      }
    toy_shared(&x[t * kD], 1, sh.data());
    for (int64_t d = 0; d < kD; ++d) out[t * kD + d] = round_to_bf16(y[d] + sh[d]);
  }
  return out;
}

void expect_ranks_equal_one_rank(const std::vector<std::vector<int32_t>>& sel,
                                 const std::vector<std::vector<float>>& wts, int ranks) {
  const int64_t S = static_cast<int64_t>(sel.size());
  std::mt19937 rng(static_cast<uint32_t>(S * 31 + ranks));
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> x(S * kD);
  for (float& v : x) v = round_to_bf16(nd(rng));
  g_sel = &sel;
  g_x = &x;
  const std::vector<float> want = one_rank(sel, wts, x);
  EpMoeExperts ex;
  ex.dim = kD;
  ex.act_block = kBlock;
  ex.routed = toy_routed;
  ex.shared = toy_shared;
  FakeExpertGroup g(ranks);
  std::vector<std::vector<float>> got(ranks, std::vector<float>(S * kD, -1.0f));
  g.run([&](ExpertComm& c) {
    moe_expert_parallel(c, sel, wts, kE, x.data(), S, ex, got[c.rank()].data());
  });
  for (int r = 0; r < ranks; ++r) {
    EXPECT_EQ(g.calls(r), 3) << "rank " << r;
    EXPECT_EQ(0, std::memcmp(got[r].data(), want.data(), want.size() * sizeof(float)))
        << ranks << " ranks, rank " << r << ", " << S << " tokens";
  }
}

std::vector<std::vector<int32_t>> route(int64_t S, int k, int64_t span, uint32_t seed,
                                        std::vector<std::vector<float>>* wts) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> sel(S);
  wts->assign(S, {});
  for (int64_t t = 0; t < S; ++t)
    while (static_cast<int>(sel[t].size()) < k) {
      const int32_t e = static_cast<int32_t>(rng() % span);
      bool dup = false;
      for (int32_t v : sel[t]) dup |= v == e;
      if (dup) continue;
      sel[t].push_back(e);
      (*wts)[t].push_back(0.25f + static_cast<float>(rng() % 97) / 61.0f);
    }
  return sel;
}

TEST(ExpertParallelMoe, EveryRankGetsTheOneRankBits) {
  for (int ranks : {1, 2, 3, 4})
    for (int64_t S : {1, 2, 5, 40}) {
      std::vector<std::vector<float>> wts;
      auto sel = route(S, 3, kE, static_cast<uint32_t>(S + 100 * ranks), &wts);
      expect_ranks_equal_one_rank(sel, wts, ranks);
    }
}

TEST(ExpertParallelMoe, SkewedRoutingToOneRanksExperts) {
  for (int ranks : {2, 4}) {
    std::vector<std::vector<float>> wts;
    auto sel = route(17, 2, kE / ranks, 7, &wts);  // only rank 0's experts
    expect_ranks_equal_one_rank(sel, wts, ranks);
  }
}

TEST(ExpertParallelMoe, TheExpertSeesTheOriginsFp8CodesAndScales) {
  // What reaches an expert is the origin's act_quant row exactly (codes and scales), whatever
  // rank computes it.
  std::vector<std::vector<float>> wts;
  auto sel = route(6, 2, kE, 3, &wts);
  std::vector<float> x(6 * kD);
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 5.0f);
  for (float& v : x) v = round_to_bf16(nd(rng));
  g_sel = &sel;
  g_x = &x;
  std::vector<float> q(6 * kD), s(6 * (kD / kBlock));
  kernels::act_quant_fp8(x.data(), 6, kD, kBlock, kernels::ScaleFmt::kUe8m0, nullptr, q.data(),
                         s.data());
  std::mutex mu;
  int rows_seen = 0, rows_wrong = 0;
  EpMoeExperts ex;
  ex.dim = kD;
  ex.act_block = kBlock;
  ex.shared = toy_shared;
  FakeExpertGroup g(3);
  std::vector<std::vector<float>> out(3, std::vector<float>(6 * kD));
  g.run([&](ExpertComm& c) {
    EpMoeExperts mine = ex;
    mine.routed = [&](int64_t e, const kernels::QuantActs& a, const float* rw, float* o) {
      // Find each row's token by its route weight's slot in the routing.
      for (int64_t r = 0; r < a.m; ++r) {
        int64_t tok = -1;
        for (int64_t t = 0; t < 6; ++t)
          for (size_t j = 0; j < sel[t].size(); ++j)
            if (sel[t][j] == e && wts[t][j] == rw[r] &&
                0 == std::memcmp(&a.q[r * kD], &q[t * kD], kD * sizeof(float)))
              tok = t;
        std::lock_guard<std::mutex> lock(mu);
        ++rows_seen;
        if (tok < 0 || 0 != std::memcmp(&a.scales[r * (kD / kBlock)], &s[tok * (kD / kBlock)],
                                        (kD / kBlock) * sizeof(float)))
          ++rows_wrong;
      }
      toy_routed(e, a, rw, o);
    };
    moe_expert_parallel(c, sel, wts, kE, x.data(), 6, mine, out[c.rank()].data());
  });
  EXPECT_EQ(rows_seen, 12);
  EXPECT_EQ(rows_wrong, 0);
}

TEST(ExpertParallelMoe, LayersWithFewerExpertsThanRanksAreRefused) {
  EXPECT_TRUE(check_expert_parallel_layer(3, 8, 8).ok());
  EXPECT_TRUE(check_expert_parallel_layer(3, 0, 4).ok());  // a dense layer
  const Status st = check_expert_parallel_layer(3, 2, 3);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("layer 3 has 2 routed experts, fewer than the 3 ranks"),
            std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace strata
