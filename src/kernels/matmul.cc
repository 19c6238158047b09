#include "kernels/matmul.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "base/thread_pool.h"
#include "kernels/cpu_features.h"

namespace strata::kernels {

void WeightMatrix::row_to_f32(int64_t n, float* out) const {
  if (type == WType::kF32) {
    const float* p = static_cast<const float*>(data) + n * cols;
    std::copy(p, p + cols, out);
  } else {
    const uint16_t* p = static_cast<const uint16_t*>(data) + n * cols;
    for (int64_t k = 0; k < cols; ++k) out[k] = bf16_bits_to_f32(p[k]);
  }
}

namespace ref {
namespace {
// Finishes the canonical order: horizontal reduce of the 8 lanes, then the tail.
inline float reduce8(const float a[8]) {
  float s0 = a[0] + a[4], s1 = a[1] + a[5], s2 = a[2] + a[6], s3 = a[3] + a[7];
  return (s0 + s2) + (s1 + s3);
}

template <typename WLoad>
float dot_generic(const float* x, int64_t K, WLoad w) {
  float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const int64_t k8 = K & ~int64_t{7};
  for (int64_t k = 0; k < k8; k += 8)
    for (int l = 0; l < 8; ++l) a[l] = std::fma(x[k + l], w(k + l), a[l]);
  float s = reduce8(a);
  for (int64_t k = k8; k < K; ++k) s = std::fma(x[k], w(k), s);
  return s;
}
}  // namespace

float dot(const float* a, const float* b, int64_t K) {
  return dot_generic(a, K, [b](int64_t k) { return b[k]; });
}

void matmul(const float* x, int64_t M, const WeightMatrix& w, float* y) {
  const int64_t N = w.rows, K = w.cols;
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * K;
    for (int64_t n = 0; n < N; ++n) {
      float v;
      if (w.type == WType::kF32) {
        const float* wr = static_cast<const float*>(w.data) + n * K;
        v = dot_generic(xr, K, [wr](int64_t k) { return wr[k]; });
      } else {
        const uint16_t* wr = static_cast<const uint16_t*>(w.data) + n * K;
        v = dot_generic(xr, K, [wr](int64_t k) { return bf16_bits_to_f32(wr[k]); });
      }
      y[m * N + n] = v;
    }
  }
}
}  // namespace ref

namespace {
// Products below this many multiply-adds (~10-20 µs of work) run on the calling thread:
// waking pool workers costs more than it saves, badly so on a busy machine.
constexpr int64_t kMinParallelMacs = int64_t{1} << 18;

// Scalar path over W rows [n0, n1), same order as ref::matmul.
void matmul_rows_scalar(const float* x, int64_t M, const WeightMatrix& w, float* y, int64_t n0,
                        int64_t n1) {
  WeightMatrix sub = w;
  const int64_t K = w.cols;
  const size_t esz = w.type == WType::kF32 ? 4 : 2;
  sub.data = static_cast<const uint8_t*>(w.data) + n0 * K * esz;
  sub.rows = n1 - n0;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = n0; n < n1; ++n) {
      WeightMatrix one = sub;
      one.data = static_cast<const uint8_t*>(w.data) + n * K * esz;
      one.rows = 1;
      ref::matmul(x + m * K, 1, one, y + m * w.rows + n);
    }
  }
}
}  // namespace

float dot(const float* a, const float* b, int64_t K) {
  if (active_isa() == Isa::kAvx2) return avx2::dot(a, b, K);
  return ref::dot(a, b, K);
}

void matmul(const float* x, int64_t M, const WeightMatrix& w, float* y, ThreadPool* pool) {
  const int64_t N = w.rows;
  if (M <= 0 || N <= 0) return;
  const bool use_avx2 = active_isa() == Isa::kAvx2;
  auto run = [&](int64_t n0, int64_t n1) {
    if (use_avx2) {
      avx2::matmul_rows(x, M, w, y, n0, n1);
    } else {
      matmul_rows_scalar(x, M, w, y, n0, n1);
    }
  };
  // Blocks of 16 W rows; skip threading when the whole product is tiny.
  constexpr int64_t kBlock = 16;
  const int64_t blocks = (N + kBlock - 1) / kBlock;
  const int64_t work = M * N * w.cols;
  if (pool == nullptr || pool->num_threads() <= 1 || work < kMinParallelMacs) {
    run(0, N);
    return;
  }
  pool->parallel_for_stealing(blocks, [&](int64_t b0, int64_t b1) {
    run(b0 * kBlock, std::min(N, b1 * kBlock));
  });
}

void matmul_multi(const float* x, int64_t M, std::initializer_list<const WeightMatrix*> ws,
                  std::initializer_list<float*> ys, ThreadPool* pool) {
  STRATA_CHECK(ws.size() == ys.size() && ws.size() <= 8);
  const WeightMatrix* wv[8];
  float* yv[8];
  int nw = 0;
  int64_t work = 0;
  for (const WeightMatrix* w : ws) {
    STRATA_CHECK(w->cols == (*ws.begin())->cols);
    wv[nw++] = w;
    work += M * w->rows * w->cols;
  }
  nw = 0;
  for (float* y : ys) yv[nw++] = y;
  const bool use_avx2 = active_isa() == Isa::kAvx2;
  auto run = [&](int i, int64_t n0, int64_t n1) {
    if (use_avx2) {
      avx2::matmul_rows(x, M, *wv[i], yv[i], n0, n1);
    } else {
      matmul_rows_scalar(x, M, *wv[i], yv[i], n0, n1);
    }
  };
  if (pool == nullptr || pool->num_threads() <= 1 || work < kMinParallelMacs) {
    for (int i = 0; i < nw; ++i) run(i, 0, wv[i]->rows);
    return;
  }
  constexpr int64_t kBlock = 16;
  int64_t first_block[9];
  first_block[0] = 0;
  for (int i = 0; i < nw; ++i) first_block[i + 1] = first_block[i] + (wv[i]->rows + kBlock - 1) / kBlock;
  pool->parallel_for_stealing(first_block[nw], [&](int64_t b0, int64_t b1) {
    for (int i = 0; i < nw; ++i) {
      const int64_t lo = std::max(b0, first_block[i]), hi = std::min(b1, first_block[i + 1]);
      if (lo >= hi) continue;
      run(i, (lo - first_block[i]) * kBlock, std::min(wv[i]->rows, (hi - first_block[i]) * kBlock));
    }
  });
}

}  // namespace strata::kernels
