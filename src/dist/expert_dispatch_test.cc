// The expert-parallel dispatch plan (dist/expert_dispatch.h): for random, skewed and tiny
// routings over 1-4 ranks, what each rank plans to send is exactly what its peer plans to
// receive (dispatch and combine), every (token, expert) pick is computed exactly once by the
// expert's owner, and every pick comes back to the token's origin once, in ascending expert id.
#include "dist/expert_dispatch.h"

#include <random>
#include <utility>

#include <gtest/gtest.h>

#include "dist/expert_comm.h"

namespace strata {
namespace {

struct Routing {
  std::vector<std::vector<int32_t>> sel;
  std::vector<std::vector<float>> wts;
};

Routing random_routing(int64_t S, int64_t E, int k, uint32_t seed, int64_t only_below = 0) {
  std::mt19937 rng(seed);
  Routing r;
  r.sel.resize(S);
  r.wts.resize(S);
  const int64_t span = only_below > 0 ? only_below : E;
  for (int64_t t = 0; t < S; ++t) {
    while (static_cast<int>(r.sel[t].size()) < k) {
      const int32_t e = static_cast<int32_t>(rng() % span);
      bool dup = false;
      for (int32_t x : r.sel[t]) dup |= x == e;
      if (dup) continue;
      r.sel[t].push_back(e);
      r.wts[t].push_back(static_cast<float>(rng() % 1000) / 1000.0f);
    }
  }
  return r;
}

void check_plans(const Routing& rt, int64_t E, int ranks) {
  const int64_t S = static_cast<int64_t>(rt.sel.size());
  std::vector<ExpertDispatchPlan> p;
  for (int r = 0; r < ranks; ++r) p.push_back(plan_expert_dispatch(rt.sel, rt.wts, E, ranks, r));
  std::vector<int> computed(S * E, 0), returned(S * E, 0);
  for (int a = 0; a < ranks; ++a) {
    EXPECT_EQ(p[a].tok_begin.front(), 0);
    EXPECT_EQ(p[a].tok_begin.back(), S);
    for (int b = 0; b < ranks; ++b) {
      EXPECT_EQ(p[a].send_toks[b], p[b].recv_toks[a]) << a << " -> " << b;
      EXPECT_EQ(p[a].back_rows[b], static_cast<int64_t>(p[b].ret_toks[a].size()))
          << a << " returns to " << b;
      for (int64_t t : p[a].send_toks[b])
        EXPECT_TRUE(t >= p[a].own_begin() && t < p[a].own_end());
    }
    int64_t prev_e = -1;
    for (const ExpertDispatchPlan::Call& c : p[a].calls) {
      EXPECT_GT(c.e, prev_e);
      prev_e = c.e;
      EXPECT_EQ(expert_owner(c.e, E, ranks), a);
      ASSERT_EQ(c.toks.size(), c.rw.size());
      for (size_t i = 0; i < c.toks.size(); ++i) {
        ++computed[c.toks[i] * E + c.e];
        // The token was dispatched to this rank.
        bool got = false;
        for (int s = 0; s < ranks; ++s)
          for (int64_t t : p[a].recv_toks[s]) got |= t == c.toks[i];
        EXPECT_TRUE(got) << "token " << c.toks[i] << " at rank " << a;
        // And its route weight is the routing's.
        bool w_ok = false;
        for (size_t j = 0; j < rt.sel[c.toks[i]].size(); ++j)
          w_ok |= rt.sel[c.toks[i]][j] == c.e && rt.wts[c.toks[i]][j] == c.rw[i];
        EXPECT_TRUE(w_ok);
      }
    }
    // What comes back to a, token by token, arrives in ascending expert id.
    std::vector<int64_t> last_e(S, -1);
    for (int r = 0; r < ranks; ++r) {
      const ExpertDispatchPlan& q = p[r];
      size_t at = 0;
      for (const ExpertDispatchPlan::Call& c : q.calls)
        for (int64_t t : c.toks) {
          if (t < p[a].own_begin() || t >= p[a].own_end()) continue;
          ASSERT_LT(at, p[a].ret_toks[r].size());
          EXPECT_EQ(p[a].ret_toks[r][at++], t);
          EXPECT_GT(c.e, last_e[t]);
          last_e[t] = c.e;
          ++returned[t * E + c.e];
        }
      EXPECT_EQ(at, p[a].ret_toks[r].size());
    }
  }
  for (int64_t t = 0; t < S; ++t)
    for (int64_t e = 0; e < E; ++e) {
      int picks = 0;
      for (int32_t x : rt.sel[t]) picks += x == e;
      EXPECT_EQ(computed[t * E + e], picks) << "token " << t << " expert " << e;
      EXPECT_EQ(returned[t * E + e], picks) << "token " << t << " expert " << e;
    }
}

TEST(ExpertDispatchPlan, PeersAgreeAndEveryPickIsComputedAndReturnedOnce) {
  for (int ranks : {1, 2, 3, 4})
    for (int64_t S : {1, 2, 3, 7, 33}) {
      check_plans(random_routing(S, 8, 2, static_cast<uint32_t>(S * 10 + ranks)), 8, ranks);
      // Skewed: every token picks only rank 0's experts.
      check_plans(random_routing(S, 12, 2, 5, 12 / ranks), 12, ranks);
    }
}

TEST(ExpertDispatchPlan, FewerTokensThanRanksLeavesSomeRanksWithoutTokens) {
  const Routing rt = random_routing(2, 8, 2, 1);
  int empty = 0;
  for (int r = 0; r < 4; ++r) {
    const ExpertDispatchPlan p = plan_expert_dispatch(rt.sel, rt.wts, 8, 4, r);
    if (p.own_end() == p.own_begin()) {
      ++empty;
      for (const auto& s : p.send_toks) EXPECT_TRUE(s.empty());
    }
  }
  EXPECT_EQ(empty, 2);
  check_plans(rt, 8, 4);
}

}  // namespace
}  // namespace strata
