// Internal: per-call context of DeepseekV4Model::forward, shared by deepseek_v4_model.cc and
// v4_attention.cc. Not a public API.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "exec/deepseek_forward_call.h"
#include "exec/deepseek_v4/deepseek_v4_model.h"

namespace strata {

struct DeepseekV4Model::Call : DeepseekForwardCall<V4SequenceState> {
  std::span<const int32_t> tokens;
  // Reference: vrows is the call V4ForwardOptions::prompt_len names.
  // Reference only: that call is a prefill at position 0 (its list layouts and widths).
  bool vprefill = false;
};

}  // namespace strata
