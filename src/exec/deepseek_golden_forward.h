// deepseek_golden_forward: one GoldenTarget::forward call (exec/golden_validator.h) of a
// DeepSeek model, V4.1 or V4 alike: checks that the call continues the sequence
// (InvalidArgument otherwise), records the MoE and indexer routes through opt.routes, and
// returns the logits with them. The caller fills the family's call-shape options.
// Thread safety: as the model's forward (one sequence per call).
#pragma once

#include <cstdint>
#include <span>
#include <utility>

#include "base/status.h"
#include "exec/deepseek_v41/deepseek_v41_model.h"
#include "exec/golden_validator.h"

namespace strata {

template <class Model, class State, class Options>
StatusOr<GoldenStepOutput> deepseek_golden_forward(Model& model, State& seq,
                                                   std::span<const int32_t> tokens,
                                                   int64_t start_pos, Options opt) {
  if (start_pos != seq.length())
    return invalid_argument("golden forward at {} but the sequence holds {} tokens", start_pos,
                            seq.length());
  GoldenStepOutput out;
  V41Routes routes;
  opt.routes = &routes;
  STRATA_RETURN_IF_ERROR(model.forward(&seq, tokens, opt, &out.logits));
  out.moe = std::move(routes.moe);
  out.index = std::move(routes.index);
  return out;
}

}  // namespace strata
