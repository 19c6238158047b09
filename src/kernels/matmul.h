// Batch-invariant, thread-count-invariant matrix multiply: y[M,N] = x[M,K] · W[N,K]^T.
//
// Shapes/dtypes: x is f32 row-major [M, K]; W is row-major [N, K] (a Linear weight, out ×
// in) in F32 or BF16 (bf16 values are widened exactly to f32); y is f32 [M, N].
//
// Canonical reduction order (the same for every output element, whatever M, the tiling,
// the thread split or the ISA): eight lane accumulators a[l] (l = 0..7) start at +0 and take
// a[l] = fma(x[k], w[k], a[l]) for k = 8j + l, j = 0, 1, ... over the first 8*floor(K/8)
// elements; then s = ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)); then the K%8 tail elements in
// order: s = fma(x[k], w[k], s). The scalar reference implements exactly this order with
// std::fma, so the AVX2/FMA version is bit-identical to it. Work is tiled and split over M
// and N only (never over K), so a row's result is the same computed alone or in any batch.
//
// Threading: matmul() splits N (rows of W) across the pool in blocks; each W row is read
// once per call for all M rows (M inner, 4-row register blocking), which is what decode
// (M = 1..16) needs to run near memory bandwidth.
// Thread safety: pure functions of their inputs.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace strata {
class ThreadPool;
}

namespace strata::kernels {

enum class WType : uint8_t { kF32, kBF16 };

// A read-only weight matrix [rows = N, cols = K], row-major, not owned.
struct WeightMatrix {
  WType type = WType::kF32;
  const void* data = nullptr;
  int64_t rows = 0;  // N (output features)
  int64_t cols = 0;  // K (input features)

  int64_t bytes() const { return rows * cols * (type == WType::kF32 ? 4 : 2); }
  // Row n as f32 into out[0..cols).
  void row_to_f32(int64_t n, float* out) const;
};

inline float bf16_bits_to_f32(uint16_t h) {
  union {
    uint32_t u;
    float f;
  } v{static_cast<uint32_t>(h) << 16};
  return v.f;
}

// y = x · W^T using `pool` (nullptr: the calling thread only).
void matmul(const float* x, int64_t M, const WeightMatrix& w, float* y, ThreadPool* pool);

// Several products sharing x (e.g. q/k/v, or gate/up): ys[i] = x · ws[i]^T, every W with
// the same cols, split over their concatenated rows in one pool dispatch. Results are
// identical to separate matmul() calls.
void matmul_multi(const float* x, int64_t M, std::initializer_list<const WeightMatrix*> ws,
                  std::initializer_list<float*> ys, ThreadPool* pool);

// The canonical dot product (same reduction order as one matmul output element).
float dot(const float* a, const float* b, int64_t K);

namespace ref {
// Plain scalar reference (single thread).
void matmul(const float* x, int64_t M, const WeightMatrix& w, float* y);
float dot(const float* a, const float* b, int64_t K);
}  // namespace ref

namespace avx2 {
// AVX2/FMA version over W rows [n_begin, n_end) for all M rows. Requires cpu_has_avx2_fma().
void matmul_rows(const float* x, int64_t M, const WeightMatrix& w, float* y, int64_t n_begin,
                 int64_t n_end);
float dot(const float* a, const float* b, int64_t K);
}  // namespace avx2

}  // namespace strata::kernels
