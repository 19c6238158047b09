#include "kernels/activation.h"

#include <cmath>
#include <cstring>

#include "kernels/cpu_features.h"

namespace strata::kernels {
namespace {
// Cephes expf constants.
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kC1 = 0.693359375f;
constexpr float kC2 = -2.12194440e-4f;
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;
constexpr float kExpHi = 88.0f, kExpLo = -87.3f;
}  // namespace

float exp_canonical(float x) {
  x = x < kExpLo ? kExpLo : (x > kExpHi ? kExpHi : x);
  const float n = std::floor(std::fma(x, kLog2e, 0.5f));
  float r = std::fma(n, -kC1, x);
  r = std::fma(n, -kC2, r);
  float y = kP0;
  y = std::fma(y, r, kP1);
  y = std::fma(y, r, kP2);
  y = std::fma(y, r, kP3);
  y = std::fma(y, r, kP4);
  y = std::fma(y, r, kP5);
  const float r2 = r * r;
  y = std::fma(y, r2, r);
  y = y + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return y * scale;
}

float silu(float x) { return x * (1.0f / (1.0f + exp_canonical(-x))); }

namespace ref {
void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const int64_t n8 = n & ~int64_t{7};
  for (int64_t i = 0; i < n; ++i) x[i] = exp_canonical(x[i] - mx);
  for (int64_t i = 0; i < n8; i += 8)
    for (int l = 0; l < 8; ++l) a[l] += x[i + l];
  float sum = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
  for (int64_t i = n8; i < n; ++i) sum += x[i];
  for (int64_t i = 0; i < n; ++i) x[i] /= sum;
}

void swiglu(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = silu(gate[i]) * up[i];
}
}  // namespace ref

void softmax(float* x, int64_t n) {
  if (active_isa() == Isa::kAvx2) {
    avx2::softmax(x, n);
  } else {
    ref::softmax(x, n);
  }
}

void swiglu(float* gate, const float* up, int64_t n) {
  if (active_isa() == Isa::kAvx2) {
    avx2::swiglu(gate, up, n);
  } else {
    ref::swiglu(gate, up, n);
  }
}

}  // namespace strata::kernels
