// Scalar reference dequantization of DeepSeek-format checkpoint weights to f32.
//
// These are slow, simple references for tests and for building reference outputs; the fast
// fused kernels live in kernels/. Supported weight layouts (w is [rows, cols] or 1-D [cols]):
//
//   F32 / BF16 / F16   no scale (scale must be null).
//   F8_E4M3 [out, in]  optional block scale [ceil(out/bs.out), ceil(in/bs.in)]:
//                      w[r][c] = fp8(w) * scale[r / bs.out][c / bs.in]. Dense FP8 weights use
//                      quantization_config.weight_block_size (e.g. {128,128}; the v41-tiny
//                      golden model uses {32,32}). Engram tables use {1, 32} (per row, per 32).
//                      Without a scale the FP8 values are returned unscaled.
//   I8 / U8 packed FP4 E2M1 [out, in/2] (two values per byte, even column in the low nibble;
//                      a tensor stored with its logical shape [out, in] and in/2 bytes per row
//                      is accepted too), with a required scale [ceil(out/bs.out),
//                      ceil(in/bs.in)]. Routed experts use bs = kFp4ExpertBlock = {1, 32}.
//
// Scales are F8_E8M0 (ue8m0, 2^(b-127)) or F32 (DeepSeek-V3 style `weight_scale_inv`).
// Source of the rules: DeepSeek V3/V4 inference/model.py + kernel.py (weight_dequant: per
// block multiply), and the V4.1 tiny golden README (layouts); validated against
// testdata/quant/deepseek-v4.1-flash.quant-golden-vectors.json.
//
// Errors: InvalidArgument for an unsupported dtype/rank, a missing or extra scale, a scale
// shape that disagrees with the block size, or a row out of range. Never reads past a
// tensor's num_bytes. Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "model/safetensors.h"

namespace strata {

// Rows / columns of the weight covered by one scale entry.
struct BlockSize {
  int64_t out = 1;
  int64_t in = 1;
};

inline constexpr BlockSize kFp4ExpertBlock{1, 32};

// True if `w` is an I8/U8 tensor that should be read as packed FP4 (i.e. it has a scale).
bool is_packed_fp4(const TensorView& w, const TensorView* scale);

// Logical [rows, cols] of a weight: for packed FP4 cols is 2 x the stored last dimension
// (unless stored with its logical shape). 1-D tensors are one row.
struct LogicalShape {
  int64_t rows = 0;
  int64_t cols = 0;
};
StatusOr<LogicalShape> logical_shape(const TensorView& w, const TensorView* scale);

// Writes the `cols` f32 values of row `row` of `w` to out[0..cols).
Status dequantize_row(const TensorView& w, const TensorView* scale, int64_t row, BlockSize bs,
                      float* out);

// The whole weight, row-major [rows * cols].
StatusOr<std::vector<float>> dequantize(const TensorView& w, const TensorView* scale,
                                        BlockSize bs);

}  // namespace strata
