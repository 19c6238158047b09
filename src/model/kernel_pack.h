// Internal to the model module: repacking checkpoint weights for the vector kernels, shared by
// DeepseekV41Weights::pack_for_kernels and DeepseekV4Weights::pack_for_kernels. Layouts and
// their bit-exactness are documented in kernels/block_gemm.h and kernels/seq_gemm.h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "model/deepseek_v41_weights.h"
#include "model/packed_weight_cache.h"

namespace strata {

// A BF16 or F32 weight [n, k] in the sequential-FMA layout (kernels/seq_gemm.h).
// Errors: STRATA_CHECK on another dtype.
std::shared_ptr<const kernels::PackedSeqWeight> pack_view(const TensorView& t, int64_t n, int64_t k);
// A linear layer in its kind's packed layout (FP8: square block tiles, UE8M0 scales; FP4:
// 32-wide groups; BF16/F32: sequential layout).
std::shared_ptr<const V41PackedLinear> pack_linear(const V41Linear& l);

}  // namespace strata
