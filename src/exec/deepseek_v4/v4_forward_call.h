// Internal: per-call context of DeepseekV4Model::forward, shared by deepseek_v4_model.cc and
// v4_attention.cc. Not a public API.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "exec/deepseek_v4/deepseek_v4_model.h"

namespace strata {

struct DeepseekV4Model::Call {
  V4SequenceState* seq = nullptr;
  int64_t s0 = 0;  // position of the first token of the call
  int64_t S = 0;   // tokens in the call
  std::span<const int32_t> tokens;
  V41Routes* routes = nullptr;
  // Canonical form (exec/call_shape.h): every row laid out as a one-token decode step at its
  // own position (vrows = token 0 of 1, vprefill false).
  bool canonical = true;
  // Where row i sits in torch's elementwise tensors: token vrows.tok(i) of a vrows.n-row
  // call (reference: the call V4ForwardOptions::prompt_len names).
  v41::CallRows vrows;
  // Reference only: that call is a prefill at position 0 (its list layouts and widths).
  bool vprefill = false;
};

}  // namespace strata
