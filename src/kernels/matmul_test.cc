#include "kernels/matmul.h"

#include <cblas.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu_features.h"

namespace strata::kernels {
namespace {

std::vector<float> random_vec(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    out[i] = static_cast<uint16_t>(u >> 16);  // truncation is fine for test data
  }
  return out;
}

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

const int64_t kKs[] = {1, 7, 8, 9, 31, 33, 64, 257};
const int64_t kNs[] = {1, 3, 5, 17, 33};
const int64_t kMs[] = {1, 2, 3, 4, 5, 7, 9};

TEST(MatmulTest, CanonicalOrderByHand) {
  // K = 10: lanes 0..7 take x[k]*w[k] (one fma each from 0), then the fixed tree, then tail.
  std::vector<float> x(10), w(10);
  for (int i = 0; i < 10; ++i) {
    x[i] = static_cast<float>(i + 1);
    w[i] = 0.5f;
  }
  float a[8];
  for (int l = 0; l < 8; ++l) a[l] = x[l] * 0.5f;
  float s = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
  s = s + x[8] * 0.5f;
  s = s + x[9] * 0.5f;  // exact in f32 for these small values
  EXPECT_EQ(ref::dot(x.data(), w.data(), 10), s);
  EXPECT_EQ(s, 27.5f);
  EXPECT_EQ(dot(x.data(), w.data(), 10), s);
}

TEST(MatmulTest, Avx2MatchesScalarBitExactly) {
  if (!cpu_has_avx2_fma()) GTEST_SKIP() << "no AVX2/FMA";
  for (int64_t K : kKs)
    for (int64_t N : kNs)
      for (int64_t M : kMs)
        for (WType t : {WType::kF32, WType::kBF16}) {
          auto x = random_vec(M * K, 1 + K);
          auto wf = random_vec(N * K, 2 + N);
          auto wb = to_bf16(wf);
          WeightMatrix w{t, t == WType::kF32 ? static_cast<const void*>(wf.data()) : wb.data(), N, K};
          std::vector<float> y_ref(M * N), y_avx(M * N, -1.0f);
          ref::matmul(x.data(), M, w, y_ref.data());
          avx2::matmul_rows(x.data(), M, w, y_avx.data(), 0, N);
          ASSERT_TRUE(bits_equal(y_ref, y_avx)) << "M=" << M << " N=" << N << " K=" << K;
          EXPECT_EQ(ref::dot(x.data(), wf.data(), K), avx2::dot(x.data(), wf.data(), K));
        }
}

TEST(MatmulTest, MatchesOpenBlasWithinTolerance) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2}) {
    force_isa(isa);
    for (int64_t K : {1, 33, 257, 1024})
      for (int64_t N : {1, 17, 64})
        for (int64_t M : {1, 5, 16}) {
          auto x = random_vec(M * K, 7);
          auto wf = random_vec(N * K, 8);
          WeightMatrix w{WType::kF32, wf.data(), N, K};
          std::vector<float> y(M * N), yb(M * N);
          matmul(x.data(), M, w, y.data(), nullptr);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x.data(), K,
                      wf.data(), K, 0.0f, yb.data(), N);
          for (int64_t i = 0; i < M * N; ++i)
            ASSERT_NEAR(y[i], yb[i], 1e-5 * K) << "M=" << M << " N=" << N << " K=" << K;
        }
  }
  force_isa(cpu_has_avx2_fma() ? Isa::kAvx2 : Isa::kScalar);
}

TEST(MatmulTest, BatchInvariant) {
  ThreadPool pool(2);
  for (WType t : {WType::kF32, WType::kBF16}) {
    const int64_t K = 257, N = 67;
    auto wf = random_vec(N * K, 3);
    auto wb = to_bf16(wf);
    WeightMatrix w{t, t == WType::kF32 ? static_cast<const void*>(wf.data()) : wb.data(), N, K};
    auto x = random_vec(64 * K, 4);
    for (int64_t M = 2; M <= 64; ++M) {
      std::vector<float> y(M * N);
      matmul(x.data(), M, w, y.data(), &pool);
      for (int64_t m = 0; m < M; m += (M > 8 ? 7 : 1)) {
        std::vector<float> alone(N);
        matmul(x.data() + m * K, 1, w, alone.data(), nullptr);
        ASSERT_EQ(0, std::memcmp(alone.data(), y.data() + m * N, N * 4)) << "M=" << M << " m=" << m;
      }
    }
  }
}

TEST(MatmulTest, ThreadCountInvariant) {
  const int64_t K = 768, N = 515, M = 13;
  auto wf = random_vec(N * K, 5);
  auto x = random_vec(M * K, 6);
  WeightMatrix w{WType::kF32, wf.data(), N, K};
  std::vector<float> y1(M * N), y2(M * N), y3(M * N);
  ThreadPool p1(1), p2(2), p3(3);
  matmul(x.data(), M, w, y1.data(), &p1);
  matmul(x.data(), M, w, y2.data(), &p2);
  matmul(x.data(), M, w, y3.data(), &p3);
  EXPECT_TRUE(bits_equal(y1, y2));
  EXPECT_TRUE(bits_equal(y1, y3));
}

TEST(MatmulTest, MultiEqualsSeparate) {
  const int64_t K = 72;
  auto w1 = random_vec(40 * K, 21), w2 = random_vec(9 * K, 22), w3 = random_vec(33 * K, 23);
  auto x = random_vec(3 * K, 24);
  WeightMatrix a{WType::kF32, w1.data(), 40, K}, b{WType::kF32, w2.data(), 9, K},
      c{WType::kF32, w3.data(), 33, K};
  ThreadPool pool(3);
  std::vector<float> ya(3 * 40), yb(3 * 9), yc(3 * 33), ra(ya.size()), rb(yb.size()), rc(yc.size());
  matmul_multi(x.data(), 3, {&a, &b, &c}, {ya.data(), yb.data(), yc.data()}, &pool);
  ref::matmul(x.data(), 3, a, ra.data());
  ref::matmul(x.data(), 3, b, rb.data());
  ref::matmul(x.data(), 3, c, rc.data());
  EXPECT_TRUE(bits_equal(ya, ra));
  EXPECT_TRUE(bits_equal(yb, rb));
  EXPECT_TRUE(bits_equal(yc, rc));
}

TEST(MatmulTest, Bf16WidenedExactly) {
  // bf16 0x3FC0 = 1.5, 0xC000 = -2.0: the product uses the exact widened values.
  std::vector<uint16_t> w = {0x3FC0, 0xC000};
  std::vector<float> x = {2.0f, 3.0f};
  WeightMatrix wm{WType::kBF16, w.data(), 1, 2};
  float y = 0;
  matmul(x.data(), 1, wm, &y, nullptr);
  EXPECT_EQ(y, 2.0f * 1.5f + 3.0f * -2.0f);
}

}  // namespace
}  // namespace strata::kernels
