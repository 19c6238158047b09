// Internal: per-call context of DeepseekV4Model::forward, shared by deepseek_v4_model.cc and
// v4_attention.cc. Not a public API.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "exec/deepseek_v4_model.h"

namespace strata {

struct DeepseekV4Model::Call {
  V4SequenceState* seq = nullptr;
  int64_t s0 = 0;  // position of the first token of the call
  int64_t S = 0;   // tokens in the call
  std::span<const int32_t> tokens;
  V41Routes* routes = nullptr;
  // The reference call this call's rows belong to (V4ForwardOptions::prompt_len): rows are
  // rows vbase.. of a vS-row call; vprefill = that call is a prefill at position 0.
  int64_t vbase = 0;
  int64_t vS = 0;
  bool vprefill = false;
};

}  // namespace strata
