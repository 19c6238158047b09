// YaRN RoPE (see yarn_rope.h for the formulas and their source).
#include "kernels/yarn_rope.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "base/check.h"

namespace strata::kernels {
namespace {

inline float bf16_round(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    u = (u | 0x00400000u) & 0xffff0000u;
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
  }
  std::memcpy(&f, &u, 4);
  return f;
}

// Keeps a product from being fused into an FMA by the compiler (torch rounds each product).
inline float mul_rounded(float a, float b) {
  volatile float p = a * b;
  return p;
}

}  // namespace

std::vector<float> yarn_inv_freqs(const YarnParams& p) {
  STRATA_CHECK(p.rope_dim > 0 && p.rope_dim % 2 == 0);
  const int dim = p.rope_dim, half = dim / 2;
  std::vector<float> f(half);
  for (int i = 0; i < half; ++i) {
    // torch: arange(0, dim, 2, f32) / dim -> f32; base ** t -> f32 pow with the base cast to
    // f32; 1.0 / x -> f32. For short rows torch's CPU loop runs the scalar std::pow(float,
    // float) (glibc powf), which is what we call; its vectorized path (rows of >= 16 on AVX2)
    // uses Sleef_powf8_u10, which may differ by one f32 ulp in rare cases.
    const float t = static_cast<float>(2 * i) / static_cast<float>(dim);
    const float pw = std::pow(static_cast<float>(p.theta), t);
    f[i] = 1.0f / pw;
  }
  if (p.original_seq_len > 0) {
    const double two_ln_base = 2.0 * std::log(p.theta);
    auto corrected_dim = [&](double rotations) {
      return dim * std::log(static_cast<double>(p.original_seq_len) /
                            (rotations * 2.0 * std::numbers::pi)) /
             two_ln_base;
    };
    const int64_t low = std::max<int64_t>(static_cast<int64_t>(std::floor(corrected_dim(p.beta_fast))), 0);
    const int64_t high =
        std::min<int64_t>(static_cast<int64_t>(std::ceil(corrected_dim(p.beta_slow))), dim - 1);
    // max(high - low, 1e-3): an int when high - low >= 1, else 1e-3 (a Python float)
    const float denom = (high - low) > 0 ? static_cast<float>(high - low) : 1e-3f;
    const float factor = static_cast<float>(p.factor);
    for (int i = 0; i < half; ++i) {
      float ramp = (static_cast<float>(i) - static_cast<float>(low)) / denom;
      ramp = std::clamp(ramp, 0.0f, 1.0f);
      const float smooth = 1.0f - ramp;
      const float a = mul_rounded(f[i] / factor, 1.0f - smooth);
      const float b = mul_rounded(f[i], smooth);
      f[i] = a + b;
    }
  }
  return f;
}

void rope_cos_sin(int64_t pos, const float* inv_freq, int half, float* cos_out, float* sin_out) {
  const float fp = static_cast<float>(pos);
  for (int i = 0; i < half; ++i) {
    const float ang = mul_rounded(fp, inv_freq[i]);
    cos_out[i] = std::cos(ang);
    sin_out[i] = std::sin(ang);
  }
}

RopeTable::RopeTable(const YarnParams& p, int64_t max_pos)
    : rope_dim_(p.rope_dim), max_pos_(max_pos), inv_freq_(yarn_inv_freqs(p)) {
  const int half = rope_dim_ / 2;
  cos_.resize(static_cast<size_t>(max_pos * half));
  sin_.resize(static_cast<size_t>(max_pos * half));
  for (int64_t pos = 0; pos < max_pos; ++pos) {
    rope_cos_sin(pos, inv_freq_.data(), half, cos_.data() + pos * half, sin_.data() + pos * half);
  }
}

const float* RopeTable::cos(int64_t pos) const {
  STRATA_CHECK(pos >= 0 && pos < max_pos_);
  return cos_.data() + pos * (rope_dim_ / 2);
}
const float* RopeTable::sin(int64_t pos) const {
  STRATA_CHECK(pos >= 0 && pos < max_pos_);
  return sin_.data() + pos * (rope_dim_ / 2);
}

void rope_apply_tail(float* x, int64_t n_vec, int dim, int rope_dim, const float* cos,
                     const float* sin, bool inverse, bool round_bf16, RopeMul mul) {
  STRATA_CHECK(rope_dim % 2 == 0 && rope_dim <= dim);
  const int half = rope_dim / 2;
  for (int64_t v = 0; v < n_vec; ++v) {
    float* t = x + v * dim + (dim - rope_dim);
    for (int i = 0; i < half; ++i) {
      const float a = t[2 * i], b = t[2 * i + 1];
      const float c = cos[i];
      const float d = inverse ? -sin[i] : sin[i];
      // (a + bi)(c + di) = (ac - bd) + (ad + bc)i
      float re, im;
      if (mul == RopeMul::kSeparate) {
        re = mul_rounded(a, c) - mul_rounded(b, d);
        im = mul_rounded(a, d) + mul_rounded(b, c);
      } else {
        re = std::fma(a, c, -mul_rounded(b, d));
        im = std::fma(a, d, mul_rounded(b, c));
      }
      if (round_bf16) {
        re = bf16_round(re);
        im = bf16_round(im);
      }
      t[2 * i] = re;
      t[2 * i + 1] = im;
    }
  }
}

void rope_apply_positions(float* x, int64_t n_tok, int64_t n_vec_per_tok, int dim,
                          const RopeTable& table, int64_t pos0, int64_t pos_step, bool inverse,
                          bool round_bf16, RopeMul mul) {
  for (int64_t t = 0; t < n_tok; ++t) {
    const int64_t pos = pos0 + t * pos_step;
    rope_apply_tail(x + t * n_vec_per_tok * dim, n_vec_per_tok, dim, table.rope_dim(),
                    table.cos(pos), table.sin(pos), inverse, round_bf16, mul);
  }
}

}  // namespace strata::kernels
