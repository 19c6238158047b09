// Elementwise activations and softmax, with one canonical numeric definition shared by the
// scalar reference and the AVX2/FMA version (bit-identical results).
//
// exp: Cephes-style expf (S. Moshier, Cephes Math Library, expf.c): x clamped to
//   [-87.3, 88.0]; n = floor(fma(x, log2e, 0.5)); r = fma(n, -C1, x); r = fma(n, -C2, r)
//   with C1 + C2 = ln 2; y = P0..P5 Horner polynomial in r (fma steps); y = fma(y, r*r, r)
//   + 1; result y * 2^n (built from exponent bits). Relative error < 4e-7 (tested against
//   std::exp over [-87, 88]).
// softmax: m = max(x); e_i = exp(x_i - m); sum in the canonical 8-lane order of
//   kernels::dot (8 lane partial sums over the first 8*floor(n/8) elements, the fixed tree,
//   then the tail in order); x_i = e_i / sum.
// silu(x) = x * (1 / (1 + exp(-x))) (Elfwing et al. 2017).
// swiglu: gate[i] = silu(gate[i]) * up[i] (Shazeer 2020, "GLU Variants"; llama2.c run.c).
// Thread safety: pure functions.
#pragma once

#include <cstdint>

namespace strata::kernels {

float exp_canonical(float x);
void softmax(float* x, int64_t n);
float silu(float x);
void swiglu(float* gate, const float* up, int64_t n);

namespace ref {
void softmax(float* x, int64_t n);
void swiglu(float* gate, const float* up, int64_t n);
}  // namespace ref
namespace avx2 {
void softmax(float* x, int64_t n);
void swiglu(float* gate, const float* up, int64_t n);
void exp_inplace(float* x, int64_t n);
}  // namespace avx2

}  // namespace strata::kernels
