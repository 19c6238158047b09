// DeepseekWeightLoader (internal to model/): the checkpoint reads both DeepSeek weight loaders
// (deepseek_v41_weights.cc, deepseek_v4_weights.cc) share. get() checks a tensor's dtype and
// shape (SafetensorsCheckpoint::get: errors name the tensor and file) and records it as used;
// the linear helpers build V41Linear views (zero-copy) in the released formats:
//   fp8_linear  `X.weight` F8_E4M3 [out, in] + `X.scale` F8_E8M0 [ceil(out/b), ceil(in/b)]
//               (or BF16 [out, in] when the file stores it so);
//   fp4_linear  `X.weight` I8/U8 [out, in/2] (two E2M1 per byte, even K low) + `X.scale`
//               F8_E8M0 [out, in/32]; FailedPrecondition when in % 32 != 0;
//   bf16_linear `X.weight` BF16 [out, in].
// Source: the V4 / V4.1 reference convert.py layouts (docs/models.md). Not thread-safe.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "model/deepseek_v41_weights.h"
#include "model/safetensors.h"

namespace strata {

class DeepseekWeightLoader {
 public:
  explicit DeepseekWeightLoader(const SafetensorsCheckpoint& ckpt) : ckpt_(ckpt) {}
  virtual ~DeepseekWeightLoader() = default;

  StatusOr<TensorView> get(const std::string& name, DType dt, std::vector<int64_t> shape) {
    STRATA_ASSIGN_OR_RETURN(TensorView v, ckpt_.get(name, dt, shape));
    if (used_.insert(v.name).second) on_first_use(v);
    return v;
  }
  StatusOr<V41Linear> fp8_linear(const std::string& base, int64_t out, int64_t in, int block) {
    V41Linear l;
    l.out = out;
    l.in = in;
    l.block = block;
    STRATA_ASSIGN_OR_RETURN(TensorView probe, ckpt_.get(base + ".weight"));
    if (probe.dtype == DType::kBF16) {
      l.kind = V41WeightKind::kBf16;
      STRATA_ASSIGN_OR_RETURN(l.weight, get(base + ".weight", DType::kBF16, {out, in}));
      return l;
    }
    l.kind = V41WeightKind::kFp8;
    STRATA_ASSIGN_OR_RETURN(l.weight, get(base + ".weight", DType::kF8_E4M3, {out, in}));
    STRATA_ASSIGN_OR_RETURN(l.scale, get(base + ".scale", DType::kF8_E8M0,
                                         {ceil_div(out, block), ceil_div(in, block)}));
    return l;
  }
  StatusOr<V41Linear> fp4_linear(const std::string& base, int64_t out, int64_t in) {
    V41Linear l;
    l.kind = V41WeightKind::kFp4;
    l.out = out;
    l.in = in;
    l.block = 32;
    if (in % 32 != 0)
      return failed_precondition("{}: FP4 in-features {} not a multiple of 32", base, in);
    STRATA_ASSIGN_OR_RETURN(TensorView probe, ckpt_.get(base + ".weight"));
    const DType dt = probe.dtype == DType::kU8 ? DType::kU8 : DType::kI8;
    STRATA_ASSIGN_OR_RETURN(l.weight, get(base + ".weight", dt, {out, in / 2}));
    STRATA_ASSIGN_OR_RETURN(l.scale, get(base + ".scale", DType::kF8_E8M0, {out, in / 32}));
    return l;
  }
  StatusOr<V41Linear> bf16_linear(const std::string& base, int64_t out, int64_t in) {
    V41Linear l;
    l.kind = V41WeightKind::kBf16;
    l.out = out;
    l.in = in;
    STRATA_ASSIGN_OR_RETURN(l.weight, get(base + ".weight", DType::kBF16, {out, in}));
    return l;
  }
  // Distinct tensors read so far.
  int64_t used() const { return static_cast<int64_t>(used_.size()); }

 protected:
  static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
  // Called once per tensor the first time get() returns it (byte accounting).
  virtual void on_first_use(const TensorView& v) {}
  const SafetensorsCheckpoint& ckpt_;
  std::set<std::string> used_;
};

}  // namespace strata
