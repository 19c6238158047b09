#include "kernels/norm.h"

#include <cmath>

#include "kernels/matmul.h"

namespace strata::kernels {
namespace {
inline void finish(const float* x, const float* w, int64_t n, float eps, float ss, float* out) {
  ss = ss / static_cast<float>(n) + eps;
  const float r = 1.0f / std::sqrt(ss);
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] * (r * x[i]);
}
}  // namespace

void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* out) {
  finish(x, w, n, eps, dot(x, x, n), out);
}

void rmsnorm_rows(const float* x, int64_t rows, const float* w, int64_t n, float eps,
                  float* out) {
  for (int64_t r = 0; r < rows; ++r) rmsnorm(x + r * n, w, n, eps, out + r * n);
}

namespace ref {
void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* out) {
  finish(x, w, n, eps, ref::dot(x, x, n), out);
}
}  // namespace ref

}  // namespace strata::kernels
