// Tests for kernels/seq_gemm: a hand case where the sequential-FMA order gives a different
// answer than any pairwise/lane-split order, and bit-exact agreement of the packed kernels
// with a test-local scalar loop across ISA, shapes, batch sizes and thread counts.
#include "kernels/seq_gemm.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "base/thread_pool.h"
#include "kernels/cpu_features.h"

namespace strata::kernels {
namespace {

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// acc = fma(x_k, w_k, acc) in k order, written out independently of the kernel file.
float seq_dot(const float* x, const float* w, int64_t k) {
  float acc = 0.0f;
  for (int64_t i = 0; i < k; ++i) acc = std::fma(x[i], w[i], acc);
  return acc;
}

class IsaGuard {
 public:
  explicit IsaGuard(Isa isa) : old_(active_isa()) { force_isa(isa); }
  ~IsaGuard() { force_isa(old_); }

 private:
  Isa old_;
};

TEST(SeqGemm, SequentialOrderHandCase) {
  // 1e8 + 1 rounds back to 1e8 in fp32 (ulp 8), so the sequential sum is 0; a pairwise
  // order ((1e8 + -1e8) + 1) would give 1.
  const float x[3] = {1e8f, 1.0f, -1e8f};
  const float w[3] = {1.0f, 1.0f, 1.0f};
  for (Isa isa : {Isa::kScalar, Isa::kAvx2}) {
    IsaGuard g(isa);
    PackedSeqWeight p = pack_seq_weight_f32(w, 1, 3);
    float y = -1.0f;
    seq_gemm_packed(x, 1, p, &y, nullptr);
    EXPECT_EQ(y, 0.0f) << isa_name(active_isa());
  }
}

TEST(SeqGemm, MatchesScalarLoopBitExact) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ThreadPool pool2(2), pool3(3);
  // 1..7 tiles left after the 8-tile AVX-512 passes: n = 8 (1), 12 (2), 24 (3), 31 (4),
  // 33 (5), 48 (6), 56 (7), 100 (8 + 5), 120 (8 + 7), 200 (24 + 1).
  for (int64_t n : {1, 7, 8, 12, 24, 31, 33, 48, 56, 64, 100, 120, 200}) {
    for (int64_t k : {1, 5, 64, 129}) {
      for (bool bf16 : {true, false}) {
        std::vector<float> wf(n * k);
        std::vector<uint16_t> wb(n * k);
        for (int64_t i = 0; i < n * k; ++i) {
          wb[i] = to_bf16(nd(rng));
          wf[i] = bf16 ? from_bf16(wb[i]) : nd(rng) * 3.0f;
        }
        const int64_t mmax = 17;  // 9 and 17: the 8-row single-tile passes and a rest
        std::vector<float> x(mmax * k);
        for (auto& v : x) v = nd(rng) * 10.0f;
        PackedSeqWeight p = bf16 ? pack_seq_weight_bf16(wb.data(), n, k) : pack_seq_weight_f32(wf.data(), n, k);
        for (int64_t m : {1, 2, 3, 5, 9, 17}) {
          std::vector<float> want(m * n);
          for (int64_t r = 0; r < m; ++r)
            for (int64_t c = 0; c < n; ++c) want[r * n + c] = seq_dot(&x[r * k], &wf[c * k], k);
          for (int mode : {0, 1, 2}) {  // scalar, AVX2, AVX2 + AVX-512 (m = 1)
            IsaGuard g(mode == 0 ? Isa::kScalar : Isa::kAvx2);
            set_avx512_enabled(mode == 2);
            for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
              std::vector<float> y(m * n, NAN);
              seq_gemm_packed(x.data(), m, p, y.data(), pool);
              ASSERT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4))
                  << "n=" << n << " k=" << k << " m=" << m << " bf16=" << bf16 << " isa="
                  << isa_name(active_isa()) << " avx512=" << (mode == 2)
                  << " threads=" << (pool ? pool->num_threads() : 1);
            }
          }
          std::vector<float> yr(m * n);
          ref::seq_gemm_cols(x.data(), m, bf16 ? wb.data() : nullptr, bf16 ? nullptr : wf.data(), n, k,
                             yr.data(), 0, n);
          ASSERT_EQ(0, std::memcmp(yr.data(), want.data(), yr.size() * 4));
        }
      }
    }
  }
}

TEST(SeqGemm, FewRowsLongKSplitOverTilesBitExact) {
  // Like the mHC mixes (24 x 8192 f32): few multiply-adds but >= 256 KiB of weights, so the
  // rows are split over the pool in single tiles (with AVX-512 at m = 1: one pass of all the
  // tiles on the calling thread); the bits must not change.
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ThreadPool pool2(2), pool3(3);
  for (int64_t n : {12, 24}) {
    const int64_t k = 8192;
    std::vector<float> w(n * k), x(2 * k);
    for (auto& v : w) v = nd(rng);
    for (auto& v : x) v = nd(rng) * 4.0f;
    PackedSeqWeight p = pack_seq_weight_f32(w.data(), n, k);
    ASSERT_GE(p.bytes(), int64_t{256} << 10);
    for (int64_t m : {1, 2}) {
      std::vector<float> want(m * n);
      for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < n; ++c) want[r * n + c] = seq_dot(&x[r * k], &w[c * k], k);
      for (int mode : {0, 1, 2}) {
        IsaGuard g(mode == 0 ? Isa::kScalar : Isa::kAvx2);
        set_avx512_enabled(mode == 2);
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
          std::vector<float> y(m * n, NAN);
          seq_gemm_packed(x.data(), m, p, y.data(), pool);
          ASSERT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4))
              << "n=" << n << " m=" << m << " mode=" << mode;
        }
      }
    }
  }
}

// Many rows over few tiles (a prefill through the mHC mixes: 24 columns): the rows are split
// over the pool (odd row counts: ranges of any parity); the bits must not change.
TEST(SeqGemm, ManyRowsFewTilesSplitOverRowsBitExact) {
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ThreadPool pool2(2), pool3(3);
  const int64_t n = 24, k = 1024;
  std::vector<float> w(n * k);
  for (auto& v : w) v = nd(rng);
  PackedSeqWeight p = pack_seq_weight_f32(w.data(), n, k);
  for (int64_t m : {13, 64}) {
    std::vector<float> x(m * k);
    for (auto& v : x) v = nd(rng) * 4.0f;
    std::vector<float> want(m * n);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c) want[r * n + c] = seq_dot(&x[r * k], &w[c * k], k);
    for (int mode : {1, 2}) {
      IsaGuard g(Isa::kAvx2);
      set_avx512_enabled(mode == 2);
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
        std::vector<float> y(m * n, NAN);
        seq_gemm_packed(x.data(), m, p, y.data(), pool);
        ASSERT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4)) << "m=" << m << " mode=" << mode;
      }
    }
  }
}

TEST(SeqGemm, RowAloneEqualsRowInBatch) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t n = 77, k = 96, m = 9;
  std::vector<uint16_t> wb(n * k);
  for (auto& v : wb) v = to_bf16(nd(rng));
  std::vector<float> x(m * k);
  for (auto& v : x) v = nd(rng);
  PackedSeqWeight p = pack_seq_weight_bf16(wb.data(), n, k);
  std::vector<float> all(m * n);
  seq_gemm_packed(x.data(), m, p, all.data(), nullptr);
  for (int64_t r = 0; r < m; ++r) {
    std::vector<float> one(n);
    seq_gemm_packed(&x[r * k], 1, p, one.data(), nullptr);
    ASSERT_EQ(0, std::memcmp(one.data(), &all[r * n], n * 4)) << "row " << r;
  }
}

}  // namespace
}  // namespace strata::kernels
