// What crosses a pipeline stage boundary in a DeepSeek forward (issue 25 item 4; the list per
// model family is docs/parallel.md "Pipeline parallelism"): the residual streams, V4.1's
// lagged mHC mix, the per-forward transients produced before the boundary and read after it
// (top-k lists, candidate blocks), DSpark's tapped block inputs, and in validation the routes
// recorded so far. Positions and token ids are not carried: every stage runs the same call.
// Per-layer state never crosses (it belongs to the layer's stage).
// Thread safety: plain values.
#pragma once

#include <cstdint>
#include <vector>

#include "base/byte_msg.h"
#include "dist/pipe_comm.h"
#include "exec/deepseek_v41/deepseek_v41_model.h"

namespace strata {

struct StageCarry {
  int64_t s0 = 0, S = 0;  // the call (checked on receipt: the stages ran the same call)
  int next_layer = 0;     // the first layer the receiver runs
  std::vector<float> h;    // [S, hc, dim] residual streams (bf16 values)
  std::vector<float> pre;  // V4.1: the last FFN sublayer's pre mix [S, hc] (lagged mHC)
  std::vector<float> taps;  // V4.1 DSpark: tapped block inputs [S, n_taps, dim] (or empty)
  int32_t tap_slot = 0;     // taps written so far
  struct TopK {
    int64_t width = 0;
    std::vector<int32_t> row_width;
    std::vector<std::vector<int32_t>> rows;
  };
  std::vector<TopK> topk;                        // by layer id (V4.1 index sources)
  std::vector<std::vector<uint8_t>> candidates;  // by layer id (V4.1 candidate blocks)
  // V4.1: rows of the persistent state a later stage reads but an earlier stage owns (a
  // KV source's compressed rows / index keys whose consumers sit past the boundary), as the
  // QDQ f32 values the owner wrote; the receiver writes them into its copy of the owner's
  // rows (bit-identical in the stored format: the writes are idempotent).
  struct Rows {
    int32_t layer = 0;
    int32_t kind = 0;  // 0: compressed KV (head_dim wide), 1: index keys (index_head_dim)
    std::vector<int64_t> records;
    std::vector<float> values;  // [records, width]
  };
  std::vector<Rows> rows;
  int32_t published_index_owner = -1;  // V4.1 reference decode quirk (V41SequenceState)
  bool has_routes = false;
  V41Routes routes;  // validation: what the layers before the boundary recorded

  void encode(ByteMsg* m) const;
  // Parses a message encode() wrote (CHECK-fails on a malformed one: a bug between ranks).
  static StageCarry decode(ByteMsg* m);
};

// The boundary exchange of one forward on this rank's stage, around its layers:
//   receive(): stages after the first get the previous stage's carry;
//   pass(): stages before the last send theirs on; then the last stage's carry reaches every
//   rank (returned), which runs the epilogue on it.
StageCarry pipe_receive(PipeComm& comm);
// A microbatch's recorded routes (rows [row0, row0 + its rows) of the call) into the call's:
// MoE rows appended per layer (microbatches merge in order), index rows placed at row0.
void merge_routes(const V41Routes& part, int64_t row0, V41Routes* call);
StageCarry pipe_pass(PipeComm& comm, const PipeStage& st, const StageCarry& mine);

}  // namespace strata
