// The fp32 GEMM peer of `strata bench model`'s prefill figure: OpenBLAS cblas_sgemm measured
// in the same run, with the same thread count (docs/PERFORMANCE.md, issue 29 goal 2).
#pragma once

namespace strata {

// GFLOP/s (2 n^3 / seconds) of C = A B, all n x n row-major f32 (A, B filled with small
// values), on `threads` OpenBLAS threads: the best of `repeats` calls after one warm-up.
// Sets OpenBLAS's thread count for the process. Errors: throws std::bad_alloc when the
// 3 n^2 floats cannot be allocated. Thread safety: call from one thread at a time.
double measure_sgemm_gflops(int threads, int n = 2048, int repeats = 3);

}  // namespace strata
