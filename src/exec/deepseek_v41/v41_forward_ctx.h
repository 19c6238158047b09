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

#include "exec/deepseek_forward_call.h"
#include "exec/deepseek_v41/deepseek_v41_model.h"

namespace strata {

struct DeepseekV41Model::Ctx : DeepseekForwardCall<V41SequenceState> {
  std::vector<int64_t> hashes;  // [S, n_engram_layers, n_cols]
  std::vector<float> h;         // [S, hc, D] residual streams (bf16 values)
  bool decode_step = false;  // reference only: the reference's decode call (index-key quirk)
  // Reference only: end position that sets list widths (see V41ForwardOptions); canonical:
  // s0 + S (the score rows' storage stride; each row uses its own (p+1)/m entries).
  int64_t width_end = 0;
  // Reference prefill list layout (window: min(L, W) entries, unreachable trailing); false:
  // the decode layout (W entries, unreachable leading), which the canonical form uses.
  bool prefill_layout() const { return !canonical && !decode_step; }

  struct TopK {
    int64_t width = 0;                        // list width k = min(index_topk, compress_len)
    std::vector<int32_t> row_width;           // canonical: per-row k (empty: `width` for all)
    std::vector<std::vector<int32_t>> rows;   // [S] kept compressed positions, ascending
    int64_t width_of(int64_t i) const { return row_width.empty() ? width : row_width[i]; }
  };
  std::vector<TopK> topk;                     // by layer id (index sources only)
  std::vector<std::vector<uint8_t>> candidates;  // by layer id: [S * compress_len] bool
  // By layer id: the compressed records a KV-source layer emitted in this call (pipeline
  // parallelism carries them, and their index keys, to the stages of their consumers).
  std::vector<std::vector<int64_t>> emitted;
};

}  // namespace strata
