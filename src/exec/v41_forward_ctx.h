// Internal: per-call scratch of DeepseekV41Model::forward, shared by the model's .cc files
// (deepseek_v41_model.cc, v41_attention.cc). Not a public API.
//
// Holds the per-forward transients of the state graph (spec §3.1 last row): the top-k list
// each index-source layer publishes and the candidate-block mask of the candidate source,
// both keyed by the producing layer id and read by consumers through the schedule's
// topk_owner / candidate_owner ids (nothing is copied per layer).
#pragma once

#include <cstdint>
#include <vector>

#include "exec/deepseek_v41_model.h"

namespace strata {

struct DeepseekV41Model::Ctx {
  V41SequenceState* seq = nullptr;
  int64_t s0 = 0;  // position of the first token of the call
  int64_t S = 0;   // tokens in the call
  std::vector<int64_t> hashes;  // [S, n_engram_layers, n_cols]
  std::vector<float> h;         // [S, hc, D] residual streams (bf16 values)
  V41Routes* routes = nullptr;
  bool decode_step = false;
  int64_t width_end = 0;  // end position that sets list widths (see V41ForwardOptions)
  // Token i of this call is token vbase + i of a reference call of vS tokens (whole prompt
  // at 0, or one decode token): torch's elementwise loops compute the last (n mod 16)
  // elements of an n-element fp32 tensor with libm instead of SLEEF (v41::torch_exp_at).
  int64_t vbase = 0, vS = 0;

  struct TopK {
    int64_t width = 0;                        // list width k = min(index_topk, compress_len)
    std::vector<std::vector<int32_t>> rows;   // [S] kept compressed positions, ascending
  };
  std::vector<TopK> topk;                     // by layer id (index sources only)
  std::vector<std::vector<uint8_t>> candidates;  // by layer id: [S * compress_len] bool
};

}  // namespace strata
