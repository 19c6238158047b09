// Byte accounting of `strata bench gemv` (cmd_bench_gemv.cc): the checkpoint bytes one
// decode GEMV over a weight matrix [N, K] must stream in each stored weight format, the
// numerator of its bandwidth and of its fraction of the read-bandwidth roofline.
//
// Checkpoint bytes are counted in the format the weight is stored in on disk (the minimum a
// kernel must read; a packed in-memory layout that widens scales reads more, which the
// bench reports separately as resident bytes):
//   * FP8 E4M3 + UE8M0 block scales (block_n x block_k, DeepSeek V4.1-tiny: 32x32):
//       N*K bytes of codes + ceil(N/block_n) * ceil(K/block_k) scale bytes;
//   * FP4 E2M1 (two codes per byte) + one UE8M0 per row per `group` (32) along K:
//       ceil(N*K/2) bytes of codes + N * ceil(K/group) scale bytes;
//   * BF16: 2*N*K bytes;
//   * the wo_a-style f64 einsum (kernels/fp8_einsum.h) reads an FP8 weight: as FP8.
// Units: bytes (int64). Errors: none (callers validate N, K >= 1). Thread safety: pure.
#pragma once

#include <cstdint>
#include <string_view>

namespace strata::tools {

enum class GemvFormat { kFp8, kFp4, kBf16, kF64Einsum };

inline std::string_view gemv_format_name(GemvFormat f) {
  switch (f) {
    case GemvFormat::kFp8: return "fp8";
    case GemvFormat::kFp4: return "fp4";
    case GemvFormat::kBf16: return "bf16";
    case GemvFormat::kF64Einsum: return "f64-einsum";
  }
  return "?";
}

inline int64_t gemv_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Checkpoint bytes of one [n, k] matrix. FP8 blocks are block x block; FP4 groups are
// `block` along K.
inline int64_t gemv_checkpoint_bytes(GemvFormat f, int64_t n, int64_t k, int64_t block = 32) {
  switch (f) {
    case GemvFormat::kFp8:
    case GemvFormat::kF64Einsum:
      return n * k + gemv_ceil_div(n, block) * gemv_ceil_div(k, block);
    case GemvFormat::kFp4:
      return gemv_ceil_div(n * k, 2) + n * gemv_ceil_div(k, block);
    case GemvFormat::kBf16:
      return 2 * n * k;
  }
  return 0;
}

// Number of matrices whose checkpoint bytes reach `budget_bytes` (at least 1).
inline int64_t gemv_matrices_for_budget(double budget_bytes, int64_t bytes_per_matrix) {
  if (bytes_per_matrix <= 0) return 1;
  const double m = budget_bytes / static_cast<double>(bytes_per_matrix);
  int64_t c = static_cast<int64_t>(m);
  if (static_cast<double>(c) < m) ++c;
  return c < 1 ? 1 : c;
}

}  // namespace strata::tools
