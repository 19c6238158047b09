// Parameter / byte counts of a safetensors checkpoint, by storage type (for `strata inspect`).
//
// Counting rules:
//   * Every tensor counts its bytes (num_bytes) under its storage category.
//   * Parameters are numel() of the stored shape, except packed FP4: an I8/U8 tensor `X.weight`
//     whose sibling `X.scale` is F8_E8M0 with the same row count and ceil(2*cols/32) columns
//     (one ue8m0 scale per 32 logical inputs, DeepSeek's expert layout) holds two FP4 E2M1
//     values per byte, so it counts 2 parameters per byte and goes under the "FP4_E2M1"
//     category instead of "I8"/"U8". (A sibling scale with ceil(cols/32) columns and half
//     the bytes of numel, i.e. FP4 stored with its logical shape, counts numel params too.)
//   * Scale tensors (F8_E8M0) are counted like any other tensor, under "F8_E8M0".
// Categories are dtype_name() strings plus "FP4_E2M1".
// Thread safety: pure function of a const checkpoint.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "model/safetensors.h"

namespace strata {

struct DTypeCount {
  int64_t tensors = 0;
  int64_t params = 0;
  uint64_t bytes = 0;
};

struct CheckpointSummary {
  int64_t num_tensors = 0;
  int64_t total_params = 0;
  uint64_t total_bytes = 0;
  std::map<std::string, DTypeCount> by_category;  // "BF16", "F8_E4M3", "FP4_E2M1", ...
  // Tensors holding NaN/Inf values (count_nonfinite), by name: a corrupt checkpoint, which
  // the model loaders refuse.
  std::map<std::string, int64_t> nonfinite;
};

// True if `w` (by name and dtype) is packed FP4 per the rule above, given its checkpoint.
bool is_fp4_packed_weight(const SafetensorsCheckpoint& ckpt, const TensorView& w);

CheckpointSummary summarize_checkpoint(const SafetensorsCheckpoint& ckpt);

// Human-readable multi-line table (category, tensors, params, bytes) plus totals, then a
// line per tensor with NaN/Inf values (at most 20, then a count).
std::string format_checkpoint_summary(const CheckpointSummary& s);

}  // namespace strata
