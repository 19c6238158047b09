// RMSNorm: out[i] = w[i] * (x[i] * r), r = 1 / sqrtf(sum(x^2) / n + eps).
//
// Source: Zhang & Sennrich 2019 (RMSNorm); same operation order as llama2.c run.c rmsnorm()
// and HF LlamaRMSNorm (weight applied after normalization). sum(x^2) uses the canonical
// 8-lane reduction order of kernels::dot (matmul.h), so it is ISA- and batch-invariant.
// Shapes: x, out [rows, n] f32 (out may alias x); w [n] f32.
// Thread safety: pure functions.
#pragma once

#include <cstdint>

namespace strata::kernels {

void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* out);
void rmsnorm_rows(const float* x, int64_t rows, const float* w, int64_t n, float eps, float* out);

namespace ref {
void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* out);
}

}  // namespace strata::kernels
