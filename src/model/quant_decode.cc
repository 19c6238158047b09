// Scalar reference dequantization (see quant_decode.h).
#include "model/quant_decode.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace strata {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string shape_str(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

bool is_scale_dtype(DType t) { return t == DType::kF8_E8M0 || t == DType::kF32; }

float scale_at(const TensorView& s, int64_t idx) {
  if (s.dtype == DType::kF32) {
    float v;
    std::memcpy(&v, s.data + idx * 4, 4);
    return v;
  }
  return ue8m0_to_f32(s.data[idx]);
}

// Checks the scale tensor against the logical shape and block size.
Status check_scale(const TensorView& w, const TensorView& s, LogicalShape ls, BlockSize bs) {
  if (bs.out <= 0 || bs.in <= 0)
    return invalid_argument("{}: tensor '{}': bad block size [{}, {}]", w.file, w.name, bs.out,
                            bs.in);
  if (!is_scale_dtype(s.dtype))
    return invalid_argument("{}: scale '{}' is {}, expected F8_E8M0 or F32", s.file, s.name,
                            dtype_name(s.dtype));
  const std::vector<int64_t> want = {ceil_div(ls.rows, bs.out), ceil_div(ls.cols, bs.in)};
  std::vector<int64_t> got = s.shape;
  if (got.size() == 1) got.insert(got.begin(), 1);  // 1-D weight with 1-D scale
  if (got != want)
    return invalid_argument(
        "{}: scale '{}' has shape {}, expected {} for weight '{}' (logical [{}, {}]) with block "
        "[{}, {}]", s.file, s.name, shape_str(s.shape), shape_str(want), w.name, ls.rows,
        ls.cols, bs.out, bs.in);
  if (s.num_bytes != static_cast<size_t>(want[0] * want[1]) * dtype_size(s.dtype))
    return invalid_argument("{}: scale '{}' has {} bytes for shape {}", s.file, s.name,
                            s.num_bytes, shape_str(s.shape));
  return ok_status();
}

}  // namespace

bool is_packed_fp4(const TensorView& w, const TensorView* scale) {
  return (w.dtype == DType::kI8 || w.dtype == DType::kU8) && scale != nullptr;
}

StatusOr<LogicalShape> logical_shape(const TensorView& w, const TensorView* scale) {
  if (w.shape.empty() || w.shape.size() > 2)
    return invalid_argument("{}: tensor '{}' has rank {}; only 1-D and 2-D weights decode",
                            w.file, w.name, w.shape.size());
  LogicalShape ls;
  ls.rows = w.shape.size() == 2 ? w.shape[0] : 1;
  ls.cols = w.shape.back();
  if (is_packed_fp4(w, scale)) {
    // Stored packed ([rows, cols/2], one byte per element) or logical ([rows, cols], half
    // the bytes).
    const size_t stored = static_cast<size_t>(ls.rows * ls.cols);
    if (w.num_bytes == stored) {
      ls.cols *= 2;
    } else if (w.num_bytes * 2 != stored) {
      return invalid_argument("{}: FP4 tensor '{}' {} has {} bytes", w.file, w.name,
                              shape_str(w.shape), w.num_bytes);
    }
  }
  return ls;
}

Status dequantize_row(const TensorView& w, const TensorView* scale, int64_t row, BlockSize bs,
                      float* out) {
  STRATA_ASSIGN_OR_RETURN(LogicalShape ls, logical_shape(w, scale));
  if (row < 0 || row >= ls.rows)
    return invalid_argument("{}: tensor '{}': row {} out of range [0, {})", w.file, w.name, row,
                            ls.rows);
  const int64_t cols = ls.cols;
  switch (w.dtype) {
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16: {
      if (scale)
        return invalid_argument("{}: tensor '{}' is {} and takes no scale (got '{}')", w.file,
                                w.name, dtype_name(w.dtype), scale->name);
      if (w.num_bytes != static_cast<size_t>(ls.rows * cols) * dtype_size(w.dtype))
        return invalid_argument("{}: tensor '{}' has {} bytes for shape {}", w.file, w.name,
                                w.num_bytes, shape_str(w.shape));
      const uint8_t* p = w.data + row * cols * static_cast<int64_t>(dtype_size(w.dtype));
      for (int64_t c = 0; c < cols; ++c) {
        if (w.dtype == DType::kF32) {
          std::memcpy(&out[c], p + 4 * c, 4);
        } else {
          uint16_t h;
          std::memcpy(&h, p + 2 * c, 2);
          out[c] = w.dtype == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
        }
      }
      return ok_status();
    }
    case DType::kF8_E4M3: {
      if (w.num_bytes != static_cast<size_t>(ls.rows * cols))
        return invalid_argument("{}: tensor '{}' has {} bytes for shape {}", w.file, w.name,
                                w.num_bytes, shape_str(w.shape));
      if (scale) STRATA_RETURN_IF_ERROR(check_scale(w, *scale, ls, bs));
      const uint8_t* p = w.data + row * cols;
      const int64_t scale_cols = scale ? ceil_div(cols, bs.in) : 0;
      const int64_t srow = scale ? row / bs.out : 0;
      for (int64_t c = 0; c < cols; ++c) {
        const float v = fp8_e4m3_to_f32(p[c]);
        out[c] = scale ? v * scale_at(*scale, srow * scale_cols + c / bs.in) : v;
      }
      return ok_status();
    }
    case DType::kI8:
    case DType::kU8: {
      if (!scale)
        return invalid_argument("{}: tensor '{}' is {} without a scale; only packed FP4 (with a "
                                "UE8M0 scale) decodes", w.file, w.name, dtype_name(w.dtype));
      STRATA_RETURN_IF_ERROR(check_scale(w, *scale, ls, bs));
      const int64_t row_bytes = (cols + 1) / 2;
      const uint8_t* p = w.data + row * row_bytes;
      const int64_t scale_cols = ceil_div(cols, bs.in);
      const int64_t srow = row / bs.out;
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t byte = p[c / 2];
        const uint8_t nib = (c % 2 == 0) ? (byte & 0xf) : (byte >> 4);
        out[c] = fp4_e2m1_to_f32(nib) * scale_at(*scale, srow * scale_cols + c / bs.in);
      }
      return ok_status();
    }
    default:
      return invalid_argument("{}: tensor '{}' has dtype {}, which dequantize does not handle",
                              w.file, w.name, dtype_name(w.dtype));
  }
}

StatusOr<std::vector<float>> dequantize(const TensorView& w, const TensorView* scale,
                                        BlockSize bs) {
  STRATA_ASSIGN_OR_RETURN(LogicalShape ls, logical_shape(w, scale));
  std::vector<float> out(static_cast<size_t>(ls.rows * ls.cols));
  for (int64_t r = 0; r < ls.rows; ++r)
    STRATA_RETURN_IF_ERROR(dequantize_row(w, scale, r, bs, out.data() + r * ls.cols));
  return out;
}

}  // namespace strata
