#include "kernels/rope.h"

#include <cmath>

namespace strata::kernels {

void rope_table(int64_t pos, int head_dim, double theta, float* cos_out, float* sin_out) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double inv_freq = 1.0 / std::pow(theta, (2.0 * i) / head_dim);
    const double angle = static_cast<double>(pos) * inv_freq;
    cos_out[i] = static_cast<float>(std::cos(angle));
    sin_out[i] = static_cast<float>(std::sin(angle));
  }
}

void rope_apply(float* v, int n_heads, int head_dim, const float* cos, const float* sin,
                RopeStyle style) {
  const int half = head_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* p = v + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      float* a;
      float* b;
      if (style == RopeStyle::kInterleaved) {
        a = p + 2 * i;
        b = p + 2 * i + 1;
      } else {
        a = p + i;
        b = p + i + half;
      }
      const float x0 = *a, x1 = *b, c = cos[i], s = sin[i];
      *a = x0 * c - x1 * s;
      *b = x0 * s + x1 * c;
    }
  }
}

}  // namespace strata::kernels
