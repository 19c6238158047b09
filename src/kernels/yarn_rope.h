// RoPE with YaRN frequency scaling, as DeepSeek-V4 / V4.1 reference inference/model.py does
// it (precompute_freqs_cis, apply_rotary_emb); spec docs/v41-architecture.md §2.2.
//
// Frequencies (rope_dim = r, i in [0, r/2)), all in f32 like the reference's torch code:
//   f_i = 1 / (theta ^ f32(2i / r))                                    (f32 pow, f32 divide)
//   if original_seq_len > 0 (YaRN; the reference enables it only for layers with ratio > 0,
//   with theta = compress_rope_theta; ratio-0 layers use rope_theta and no YaRN):
//     cd(b) = r * ln(L0 / (b * 2π)) / (2 ln theta)                     (double)
//     lo = max(floor(cd(beta_fast)), 0), hi = min(ceil(cd(beta_slow)), r - 1)
//     ramp_i = clamp((i - lo) / max(hi - lo, 1e-3), 0, 1)              (f32)
//     f_i = (f_i / factor) * ramp_i + f_i * (1 - ramp_i)   (each op rounded to f32; the
//           reference writes smooth = 1 - ramp; freqs/factor*(1-smooth) + freqs*smooth)
//   No mscale / attention temperature.
// Angles: a = f32(pos * f_i) (torch.outer of int positions and f32 freqs), then
//   cos(a), sin(a) in f32 (cosf/sinf; torch.polar).
// Rotation: the LAST rope_dim channels of a vector; channel pairs (2i, 2i+1) are complex
//   numbers (interleaved, not half-split). y = x * e^{i a} with the products rounded
//   separately: re = x0*c - x1*s, im = x0*s + x1*c (no FMA, as torch's complex multiply),
//   then rounded to bf16 (the reference rotates bf16 tensors in place).
//   inverse = true conjugates: re = x0*c + x1*s, im = x1*c - x0*s (output de-rotation).
// Compressed row g of ratio m is rotated at position g*m (caller's business).
//
// Exactness: pow is f32 powf (glibc), which is what torch's scalar CPU loop calls for short
// rows (rope_dim/2 < 16 on AVX2, e.g. the tiny golden model); for longer rows torch uses a
// vectorized Sleef pow that may differ by one f32 ulp in rare cases. cos/sin are cosf/sinf
// as torch.polar's scalar kernel calls them. Everything else is bit-exact.
// Thread safety: RopeTable is immutable after construction; functions are pure.
#pragma once

#include <cstdint>
#include <vector>

namespace strata::kernels {

struct YarnParams {
  int rope_dim = 64;              // r (even)
  double theta = 10000.0;         // rope_theta or compress_rope_theta
  int64_t original_seq_len = 0;   // 0 disables YaRN
  double factor = 1.0;            // rope_factor
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};

// f_i for i in [0, rope_dim/2).
std::vector<float> yarn_inv_freqs(const YarnParams& p);

// cos/sin of f32(pos * f_i) for one position; out arrays have rope_dim/2 entries.
void rope_cos_sin(int64_t pos, const float* inv_freq, int half, float* cos_out, float* sin_out);

// Precomputed cos/sin for positions [0, max_pos).
class RopeTable {
 public:
  RopeTable() = default;
  RopeTable(const YarnParams& p, int64_t max_pos);
  int rope_dim() const { return rope_dim_; }
  int64_t max_pos() const { return max_pos_; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  // Row for `pos` (CHECK 0 <= pos < max_pos), rope_dim/2 entries each.
  const float* cos(int64_t pos) const;
  const float* sin(int64_t pos) const;

 private:
  int rope_dim_ = 0;
  int64_t max_pos_ = 0;
  std::vector<float> inv_freq_;
  std::vector<float> cos_, sin_;
};

// How the complex product is rounded. torch's vectorized complex multiply (AVX2 kernels,
// rows of >= 8 complex numbers) rounds both products: kSeparate. Its scalar fallback
// (c10::complex operator*, e.g. an AVX512 build with only 8 complex numbers per row) is
// compiled with FMA contraction, most likely re = fma(a, c, -(b*d)), im = fma(a, d, b*c):
// kFusedFirst. The golden per-layer dumps can tell which one the reference machine used.
enum class RopeMul : uint8_t { kSeparate, kFusedFirst };

// Rotates the last rope_dim channels of each of n_vec vectors of length dim (stride dim,
// contiguous), all at the same position (cos/sin rows of length rope_dim/2). Results rounded
// to bf16 when round_bf16 (the reference case). Inputs should be bf16-valued.
void rope_apply_tail(float* x, int64_t n_vec, int dim, int rope_dim, const float* cos,
                     const float* sin, bool inverse, bool round_bf16 = true,
                     RopeMul mul = RopeMul::kSeparate);

// Convenience: vectors of `n_tok` tokens × `n_vec_per_tok` vectors, token t at position
// pos0 + t*pos_step (pos_step = ratio for compressed rows), layout [n_tok, n_vec_per_tok, dim].
void rope_apply_positions(float* x, int64_t n_tok, int64_t n_vec_per_tok, int dim,
                          const RopeTable& table, int64_t pos0, int64_t pos_step, bool inverse,
                          bool round_bf16 = true, RopeMul mul = RopeMul::kSeparate);

}  // namespace strata::kernels
