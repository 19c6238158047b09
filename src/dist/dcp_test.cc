// DCP building blocks (dist/dcp.h): the ownership map round-trips and is dense per rank; the
// global top-k from per-rank candidates equals the single-rank selection, ties included (the
// all-equal counterexample of pd-dcp-ep.md §3.3), and a rank that breaks ties the other way
// (negative control) selects a different set; the LSE merge with the sink applied once equals
// full attention with the sink for sinks -30 / 0 / +30, with empty shards and with every shard
// empty, and applying the sink per shard (negative control) does not.
#include "dist/dcp.h"
#include "dist/expert_comm.h"

#include <cmath>
#include <random>
#include <set>

#include <gtest/gtest.h>

namespace strata::dcp {
namespace {

TEST(DcpOwnership, RoundTripAndDenseLocalIndices) {
  for (int64_t S : {1, 2, 8})
    for (int Wd : {1, 2, 3, 4}) {
      std::vector<std::set<int64_t>> locals(Wd);
      for (int64_t g = 0; g < 500; ++g) {
        const int r = owner(g, S, Wd);
        const int64_t l = local_index(g, S, Wd);
        ASSERT_EQ(global_index(r, l, S, Wd), g) << "S " << S << " Wd " << Wd;
        locals[r].insert(l);
      }
      for (int r = 0; r < Wd; ++r) {
        ASSERT_EQ(static_cast<int64_t>(locals[r].size()), owned_count(500, r, S, Wd));
        if (!locals[r].empty()) {
          EXPECT_EQ(*locals[r].rbegin(), owned_count(500, r, S, Wd) - 1);
        }
      }
      for (int64_t n = 0; n < 100; ++n) {
        int64_t sum = 0;
        for (int r = 0; r < Wd; ++r) sum += owned_count(n, r, S, Wd);
        EXPECT_EQ(sum, n);
      }
    }
  // S = 8: a candidate block of 8 records has one owner.
  for (int64_t g = 0; g < 64; ++g) EXPECT_EQ(owner(g, 8, 2), owner(g - g % 8, 8, 2));
}

// Every rank's candidates = the records it owns, scored by `score(g)`.
std::vector<std::vector<Candidate>> shard(const std::vector<float>& scores, int64_t S, int Wd,
                                          int64_t k, bool reverse_ties = false) {
  std::vector<std::vector<Candidate>> per(Wd);
  for (int64_t g = 0; g < static_cast<int64_t>(scores.size()); ++g)
    per[owner(g, S, Wd)].push_back({scores[g], g});
  for (auto& c : per) {
    if (!reverse_ties) {
      c = local_topk(std::move(c), k);
    } else {  // the wrong local comparator: larger positions first among equal scores
      std::sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) {
        return a.score != b.score ? a.score > b.score : a.pos > b.pos;
      });
      c.resize(std::min<size_t>(c.size(), k));
    }
  }
  return per;
}

std::vector<int64_t> single_rank(const std::vector<float>& scores, int64_t k) {
  return merge_topk({shard(scores, 1, 1, k)[0]}, k);
}

TEST(DcpTopk, AllEqualScoresEqualSingleRank) {
  const std::vector<float> equal(2048, 1.0f);
  const auto want = single_rank(equal, 512);
  ASSERT_EQ(want.size(), 512u);
  EXPECT_EQ(want.front(), 0);
  EXPECT_EQ(want.back(), 511);
  for (int64_t S : {1, 8})
    for (int Wd : {2, 3, 4}) EXPECT_EQ(merge_topk(shard(equal, S, Wd, 512), 512), want);
  // Negative control (pd-dcp-ep.md §3.3): ranks keep their largest ids locally.
  EXPECT_NE(merge_topk(shard(equal, 1, 2, 512, /*reverse_ties=*/true), 512), want);
}

TEST(DcpTopk, RandomScoresWithTiesEqualSingleRank) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t n = 1 + rng() % 300, k = 1 + rng() % 64;
    std::vector<float> s(n);
    for (auto& v : s) {
      const int q = static_cast<int>(rng() % 6);  // few distinct values: many ties
      v = q == 0 ? -INFINITY : static_cast<float>(q);
    }
    const int64_t S = 1 + rng() % 8;
    const int Wd = 1 + static_cast<int>(rng() % 4);
    const auto want = single_rank(s, k);
    EXPECT_EQ(merge_topk(shard(s, S, Wd, k), k), want) << "n " << n << " k " << k;
    for (int64_t p : want) EXPECT_NE(s[p], -INFINITY);  // invalid ones never selected
  }
}

// Full attention with the sink in the denominator (the reference): f64.
std::vector<double> reference(const std::vector<float>& q, const std::vector<float>& K,
                              const std::vector<float>& V, int64_t n, int64_t dim, float scale,
                              float sink) {
  std::vector<double> z(n), out(dim, 0.0);
  double m = sink;
  for (int64_t j = 0; j < n; ++j) {
    double d = 0;
    for (int64_t i = 0; i < dim; ++i) d += double(q[i]) * K[j * dim + i];
    z[j] = d * scale;
    m = std::max(m, z[j]);
  }
  double den = std::exp(double(sink) - m);
  for (int64_t j = 0; j < n; ++j) den += std::exp(z[j] - m);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < dim; ++i) out[i] += std::exp(z[j] - m) / den * V[j * dim + i];
  return out;
}

TEST(DcpMerge, SinkOnceEqualsFullAttention) {
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.f, 1.f);
  const int64_t dim = 16;
  const float scale = 0.25f;
  double worst_control = 0;
  for (int64_t n : {0, 1, 2, 3, 37})
    for (int Wd : {1, 2, 4})
      for (float sink : {-30.f, 0.f, 30.f}) {
        std::vector<float> q(dim), K(n * dim), V(n * dim);
        for (auto& v : q) v = g(rng);
        for (auto& v : K) v = 3 * g(rng);
        for (auto& v : V) v = g(rng);
        std::vector<Partial> parts;
        std::vector<Partial> control;
        for (int r = 0; r < Wd; ++r) {
          std::vector<float> k, v;
          int64_t m = 0;
          for (int64_t j = 0; j < n; ++j)
            if (owner(j, 1, Wd) == r) {
              k.insert(k.end(), K.begin() + j * dim, K.begin() + (j + 1) * dim);
              v.insert(v.end(), V.begin() + j * dim, V.begin() + (j + 1) * dim);
              ++m;
            }
          parts.push_back(partial_attention(q, k, v, m, dim, scale));
          // Negative control: each shard applies the sink itself.
          Partial c = parts.back();
          if (c.lse != -INFINITY)
            for (auto& x : c.o) x *= 1.f / (1.f + std::exp(sink - c.lse));
          control.push_back(c);
        }
        std::vector<float> out(dim), bad(dim);
        merge_partials(parts, dim, sink, out.data());
        const auto want = reference(q, K, V, n, dim, scale, sink);
        for (int64_t i = 0; i < dim; ++i) {
          ASSERT_FALSE(std::isnan(out[i]));
          EXPECT_NEAR(out[i], want[i], 1e-5 * (1 + std::fabs(want[i])))
              << "n " << n << " Wd " << Wd << " sink " << sink;
        }
        if (n == 0) {
          for (float x : out) EXPECT_EQ(x, 0.f);
        }
        // The control: merge the per-shard-sinked outputs without a sink (sink = -inf).
        merge_partials(control, dim, -INFINITY, bad.data());
        for (int64_t i = 0; i < dim; ++i)
          worst_control = std::max(worst_control, std::fabs(bad[i] - want[i]));
      }
  EXPECT_GT(worst_control, 1e-2) << "applying the sink per shard must not pass";
}

}  // namespace
}  // namespace strata::dcp

namespace strata {
namespace {
TEST(ExpertOwnership, ContiguousRangesCoverEveryExpertOnce) {
  for (int64_t E : {1, 3, 8, 128, 384})
    for (int size : {1, 2, 3, 4, 7}) {
      for (int64_t e = 0; e < E; ++e) {
        const int r = expert_owner(e, E, size);
        ASSERT_GE(r, 0);
        ASSERT_LT(r, size);
        EXPECT_LE(expert_begin(r, E, size), e) << E << " " << size << " " << e;
        EXPECT_LT(e, expert_begin(r + 1, E, size)) << E << " " << size << " " << e;
      }
      EXPECT_EQ(expert_begin(size, E, size), E);
    }
}
// for_owned visits exactly the records owner() gives the rank, ascending, for any range.
TEST(DcpOwnership, ForOwnedVisitsTheRanksRecords) {
  for (int Wd : {1, 2, 3})
    for (int64_t S : {1, 2, 5})
      for (int64_t g0 : {0, 1, 4, 13})
        for (int64_t g1 : {0, 3, 14, 40})
          for (int r = 0; r < Wd; ++r) {
            std::vector<int64_t> want, got;
            for (int64_t g = g0; g < g1; ++g)
              if (dcp::owner(g, S, Wd) == r) want.push_back(g);
            dcp::for_owned(g0, g1, S, Wd, r, [&](int64_t g) { got.push_back(g); });
            EXPECT_EQ(got, want) << "Wd " << Wd << " S " << S << " [" << g0 << ", " << g1
                                 << ") rank " << r;
          }
}

}  // namespace
}  // namespace strata
