#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/cpu_features.h"
#include "kernels/norm.h"
#include "kernels/rope.h"

namespace strata::kernels {
namespace {

std::vector<float> random_vec(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

TEST(RmsNormTest, MatchesDoubleFormulaAndScalar) {
  for (int64_t n : {1, 7, 64, 257}) {
    auto x = random_vec(n, n), w = random_vec(n, n + 1);
    std::vector<float> out(n), out_ref(n);
    rmsnorm(x.data(), w.data(), n, 1e-5f, out.data());
    ref::rmsnorm(x.data(), w.data(), n, 1e-5f, out_ref.data());
    EXPECT_EQ(0, std::memcmp(out.data(), out_ref.data(), n * 4));
    double ss = 0;
    for (float v : x) ss += double(v) * v;
    double r = 1.0 / std::sqrt(ss / n + 1e-5);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(out[i], w[i] * x[i] * r, 1e-5);
  }
}

TEST(RopeTest, InterleavedMatchesFormula) {
  const int hd = 8, heads = 2;
  const int64_t pos = 5;
  auto v = random_vec(hd * heads, 1);
  auto orig = v;
  std::vector<float> c(hd / 2), s(hd / 2);
  rope_table(pos, hd, 10000.0, c.data(), s.data());
  rope_apply(v.data(), heads, hd, c.data(), s.data(), RopeStyle::kInterleaved);
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < hd / 2; ++i) {
      // llama2.c: freq = 1 / 10000^(head_dim_index / head_size) with head_dim_index = 2i.
      double ang = pos / std::pow(10000.0, (2.0 * i) / hd);
      double a = orig[h * hd + 2 * i], b = orig[h * hd + 2 * i + 1];
      EXPECT_NEAR(v[h * hd + 2 * i], a * std::cos(ang) - b * std::sin(ang), 1e-6);
      EXPECT_NEAR(v[h * hd + 2 * i + 1], a * std::sin(ang) + b * std::cos(ang), 1e-6);
    }
}

TEST(RopeTest, HalfSplitIsPermutedInterleaved) {
  // Permuting each head's (2i, 2i+1) pairs to (i, i + d/2) turns one style into the other.
  const int hd = 16, heads = 3;
  auto v = random_vec(hd * heads, 2);
  std::vector<float> perm(v.size());
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < hd / 2; ++i) {
      perm[h * hd + i] = v[h * hd + 2 * i];
      perm[h * hd + hd / 2 + i] = v[h * hd + 2 * i + 1];
    }
  std::vector<float> c(hd / 2), s(hd / 2);
  rope_table(77, hd, 10000.0, c.data(), s.data());
  rope_apply(v.data(), heads, hd, c.data(), s.data(), RopeStyle::kInterleaved);
  rope_apply(perm.data(), heads, hd, c.data(), s.data(), RopeStyle::kHalfSplit);
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < hd / 2; ++i) {
      EXPECT_EQ(perm[h * hd + i], v[h * hd + 2 * i]);
      EXPECT_EQ(perm[h * hd + hd / 2 + i], v[h * hd + 2 * i + 1]);
    }
}

TEST(SoftmaxTest, SumsToOneAndMatchesDouble) {
  std::vector<float> x = {1.0f, 2.0f, 3.0f, -1.0f, 1000.0f};
  softmax(x.data(), 5);
  EXPECT_NEAR(x[4], 1.0f, 1e-6);
  std::vector<float> y = {0.0f, std::log(3.0f)};
  softmax(y.data(), 2);
  EXPECT_NEAR(y[0], 0.25f, 1e-7);
  EXPECT_NEAR(y[1], 0.75f, 1e-7);
}

TEST(SwigluTest, MatchesFormula) {
  std::vector<float> g = {0.0f, 1.0f, -2.0f}, u = {3.0f, 2.0f, 0.5f};
  swiglu(g.data(), u.data(), 3);
  EXPECT_EQ(g[0], 0.0f);
  EXPECT_NEAR(g[1], 1.0 / (1.0 + std::exp(-1.0)) * 2.0, 1e-6);
  EXPECT_NEAR(g[2], -2.0 / (1.0 + std::exp(2.0)) * 0.5, 1e-6);
}

TEST(ExpTest, CanonicalExpIsAccurate) {
  for (float x = -87.0f; x <= 88.0f; x += 0.173f) {
    const double want = std::exp(double(x));
    EXPECT_NEAR(exp_canonical(x) / want, 1.0, 4e-7) << x;
  }
  EXPECT_EQ(exp_canonical(0.0f), 1.0f);
}

TEST(SoftmaxTest, Avx2MatchesScalarBitExactly) {
  if (!cpu_has_avx2_fma()) GTEST_SKIP();
  for (int64_t n : {1, 3, 8, 9, 31, 64, 257, 1000}) {
    auto x = random_vec(n, n + 100);
    for (auto& v : x) v *= 20.0f;
    auto y = x, xe = x, ye = x;
    ref::softmax(x.data(), n);
    avx2::softmax(y.data(), n);
    EXPECT_EQ(0, std::memcmp(x.data(), y.data(), n * 4)) << n;
    double sum = 0;
    for (float v : x) sum += v;
    EXPECT_NEAR(sum, 1.0, 1e-5);
    for (int64_t i = 0; i < n; ++i) xe[i] = exp_canonical(xe[i]);
    avx2::exp_inplace(ye.data(), n);
    EXPECT_EQ(0, std::memcmp(xe.data(), ye.data(), n * 4)) << n;
  }
}

TEST(SwigluTest, Avx2MatchesScalarBitExactly) {
  if (!cpu_has_avx2_fma()) GTEST_SKIP();
  for (int64_t n : {1, 7, 8, 17, 172, 2048}) {
    auto g = random_vec(n, n), u = random_vec(n, n + 1);
    for (auto& v : g) v *= 30.0f;
    auto g2 = g;
    ref::swiglu(g.data(), u.data(), n);
    avx2::swiglu(g2.data(), u.data(), n);
    EXPECT_EQ(0, std::memcmp(g.data(), g2.data(), n * 4)) << n;
  }
}

struct PagedKvFixture {
  // T positions, n_kv heads of dim hd, stored in blocks of bs positions.
  PagedKvFixture(int64_t T, int n_kv, int hd, int64_t bs) : hd(hd), n_kv(n_kv) {
    k = random_vec(T * n_kv * hd, 11);
    v = random_vec(T * n_kv * hd, 12);
    const int64_t nb = (T + bs - 1) / bs;
    kb.resize(nb * bs * n_kv * hd);
    vb.resize(nb * bs * n_kv * hd);
    std::copy(k.begin(), k.end(), kb.begin());
    std::copy(v.begin(), v.end(), vb.begin());
    for (int64_t b = 0; b < nb; ++b) {
      kp.push_back(kb.data() + b * bs * n_kv * hd);
      vp.push_back(vb.data() + b * bs * n_kv * hd);
    }
    view = KvBlocks{kp.data(), vp.data(), bs, int64_t{n_kv} * hd};
  }
  int hd, n_kv;
  std::vector<float> k, v, kb, vb;
  std::vector<const float*> kp, vp;
  KvBlocks view;
};

TEST(AttentionTest, MatchesDoubleReferenceAndScalar) {
  for (int64_t bs : {3, 4, 16})
  for (int hd : {8, 13, 64, 72, 128})
    for (int64_t T : {1, 5, 33, 70}) {
      PagedKvFixture f(T, 2, hd, bs);
      auto q = random_vec(hd, 13);
      for (auto& v : q) v *= 4.0f;
      for (int g = 0; g < 2; ++g) {
        std::vector<float> out(hd), out_ref(hd), sc(attention_scratch_floats(T, hd));
        attention_head(q.data(), f.view, g, hd, T, sc.data(), out.data());
        ref::attention_head(q.data(), f.view, g, hd, T, sc.data(), out_ref.data());
        EXPECT_EQ(0, std::memcmp(out.data(), out_ref.data(), hd * 4));
        std::vector<double> s(T);
        double mx = -1e300, sum = 0;
        for (int64_t t = 0; t < T; ++t) {
          double d = 0;
          for (int i = 0; i < hd; ++i) d += double(q[i]) * f.k[(t * 2 + g) * hd + i];
          s[t] = d / std::sqrt(double(hd));
          mx = std::max(mx, s[t]);
        }
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (int i = 0; i < hd; ++i) {
          double o = 0;
          for (int64_t t = 0; t < T; ++t) o += s[t] / sum * f.v[(t * 2 + g) * hd + i];
          EXPECT_NEAR(out[i], o, 1e-5);
        }
      }
    }
}


// Decode context parallelism (attention.h): ranks that store only their chunks (in runs of
// S chunks, densely, as dist/dcp.h's local_index lays them out) compute the partials of those
// chunks; merged in chunk order they give attention_head's bits exactly. Merging the same
// partials rank by rank instead (a per-rank pre-sum's order) changes bits somewhere: the
// comparison can fail.
TEST(AttentionTest, ShardedChunkPartialsMergeToTheSameBits) {
  int order_mattered = 0;
  for (int D : {2, 3})
    for (int64_t S : {1, 2})
      for (int hd : {8, 13, 64})
        for (int64_t T : {1, 17, 70, 200}) {
          PagedKvFixture f(T, 2, hd, 16);
          auto q = random_vec(hd, 17);
          for (auto& v : q) v *= 4.0f;
          const int64_t C = kAttnChunk, run = C * S, nc = attention_chunks(T);
          const int64_t stride = hd + 2;
          for (int g = 0; g < 2; ++g) {
            std::vector<float> want(hd), sc(attention_scratch_floats(T, hd));
            attention_head(q.data(), f.view, g, hd, T, sc.data(), want.data());
            std::vector<float> parts(nc * stride), rank_major;
            for (int r = 0; r < D; ++r) {
              // This rank's rows, densely: local row l = global row of its l-th owned position.
              std::vector<float> kl, vl;
              for (int64_t t = 0; t < T; ++t)
                if ((t / run) % D == r) {
                  kl.insert(kl.end(), f.k.begin() + t * 2 * hd, f.k.begin() + (t + 1) * 2 * hd);
                  vl.insert(vl.end(), f.v.begin() + t * 2 * hd, f.v.begin() + (t + 1) * 2 * hd);
                }
              kl.resize(kl.size() + run * 2 * hd);
              vl.resize(vl.size() + run * 2 * hd);
              std::vector<const float*> kp, vp;
              for (size_t b = 0; b * run * 2 * hd < kl.size(); ++b) {
                kp.push_back(kl.data() + b * run * 2 * hd);
                vp.push_back(vl.data() + b * run * 2 * hd);
              }
              const KvBlocks local{kp.data(), vp.data(), run, int64_t{2} * hd};
              for (int64_t c = 0; c < nc; ++c) {
                if ((c * C / run) % D != r) continue;
                const int64_t g0 = c * C;
                const int64_t r0 = (g0 / (run * D)) * run + g0 % run;  // dcp::local_index
                attention_chunk_partial(q.data(), local, g, hd, r0, std::min(C, T - g0),
                                        parts.data() + c * stride);
                rank_major.insert(rank_major.end(), parts.begin() + c * stride,
                                  parts.begin() + (c + 1) * stride);
              }
            }
            std::vector<float> got(hd), other(hd);
            attention_merge(parts.data(), nc, stride, hd, got.data());
            EXPECT_EQ(0, std::memcmp(got.data(), want.data(), hd * 4))
                << "D " << D << " S " << S << " hd " << hd << " T " << T;
            attention_merge(rank_major.data(), nc, stride, hd, other.data());
            order_mattered += std::memcmp(other.data(), want.data(), hd * 4) != 0;
          }
        }
  EXPECT_GT(order_mattered, 0);
}

}  // namespace
}  // namespace strata::kernels
