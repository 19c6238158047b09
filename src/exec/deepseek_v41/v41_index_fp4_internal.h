// Pieces shared by the indexer's FP4 kernels (v41_index_fp4.cc: reference and AVX2 dots;
// v41_index_vnni.cc: the fused AVX-512 VNNI scores). Internal header (exec/deepseek_v41 only).
#pragma once

#include <cstdint>

#include "exec/deepseek_v41/v41_ops.h"

namespace strata::v41::fp4_detail {

// 2 x E2M1 value of a nibble (an integer).
inline constexpr int8_t kE2m1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// UE8M0 byte -> 2^(e - 127 - shift) as f64 (255 -> NaN).
struct Pow2Table {
  double v[256];
  explicit Pow2Table(int shift);
};
const Pow2Table& key_pow2();    // shift 0
const Pow2Table& query_pow2();  // shift 2: the query side carries the 1/4 of the two doubled
                                // E2M1 integers

// The AVX-512 VNNI kernel of index_scores_fp4 (v41_index_vnni.cc): usable on this CPU and
// query shape (AVX-512 active, the CPU has VNNI, d = 64 or 128); then computes exactly what
// index_weighted_scores(ref::index_dots_fp4(...)) does.
bool scores_vnni_usable(const IndexQueryFp4& q);
void scores_vnni(const IndexQueryFp4& q, const uint8_t* const* keys, int64_t n_keys,
                 const float* w, float* score);

}  // namespace strata::v41::fp4_detail
