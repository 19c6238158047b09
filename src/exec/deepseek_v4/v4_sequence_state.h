// V4SequenceState: the per-sequence state handle of one DeepSeek-V4 request -- a thin adapter
// over the state module (src/state/, docs/state.md): every read and write of inference state
// by DeepseekV4Model goes through the CacheManager storage API of the sequence, in the
// serving format, with owners from StateGraph::from_deepseek (V4: one owner per layer, no
// sharing; spec v41-architecture.md §3.2):
//   window KV ring      every layer, W rows of head_dim: (d-64) FP8 E4M3 + UE8M0 per 64, then
//                       the 64-dim RoPE tail as BF16 (583 B/row for d = 512); slot p mod W
//   compressed KV       ratio > 0 layers, one row per `ratio` tokens (same format as window)
//   index keys          CSA layers, one row per `ratio` tokens, Hadamard-rotated (FP4 + UE8M0/32)
//   compressor partial  main (and CSA indexer) compressor: kv / score f32
//                       [coff*ratio, coff*width] (coff = 2 for the overlapping ratio-4
//                       compressor: rows 0..m-1 previous group, m..2m-1 current group;
//                       coff = 1 otherwise); fresh: kv 0, score -inf
// Reads return the reference's QDQ values (decode(encode(x)) == qdq(x) bit-exactly) and the
// forward writes rows it has already QDQ'd (idempotent), so results equal the f32 mirror.
//
// Backends:
//   * owned SequenceCache (DeepseekV4Model::new_sequence): capacity `max_tokens` positions;
//     begin_call/end_call plan, commit and finish one step.
//   * external CacheManager + sequence id (a scheduler drives plan/commit/finish);
//     begin_call/end_call only check and advance length.
//   * legacy f32 mirror (the pre-port storage), kept behind a switch for A/B checks
//     (DeepseekV4Model::new_legacy_sequence, or load(..., legacy_state = true)).
// Errors: begin_call past the capacity -> ResourceExhausted. Misuse (reads of rows never
// written) CHECKs here or in the cache manager.
// Thread safety: owned by one sequence; not thread-safe.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "exec/sequence_call_state.h"
#include "model/deepseek_config.h"

namespace strata {

class CacheManager;
class SequenceCache;
class StateGraph;

// Working copy of one compressor's partial state during a forward call (loaded from and
// stored back to the V4SequenceState). `rows` holds the rows emitted in this call; row k of
// it is compressed row base + k.
struct V4CompressorState {
  int ratio = 0;
  bool overlap = false;
  int64_t width = 0;          // d_c
  int64_t base = 0;           // compressed rows that existed before this call
  std::vector<float> kv;      // [coff*ratio, coff*width]
  std::vector<float> score;   // same
  std::vector<float> rows;    // emitted rows [n, width]
  int64_t cols() const { return (overlap ? 2 : 1) * width; }
  int64_t n_rows() const { return width ? static_cast<int64_t>(rows.size()) / width : 0; }
  void init(int r, bool ov, int64_t w) {
    ratio = r;
    overlap = ov;
    width = w;
    base = 0;
    const size_t n = static_cast<size_t>((ov ? 2 : 1) * r) * static_cast<size_t>(cols());
    kv.assign(n, 0.0f);
    score.assign(n, -std::numeric_limits<float>::infinity());
    rows.clear();
  }
};

class V4SequenceState : public SequenceCallState {
 public:
  // Legacy f32 mirror (no state module).
  explicit V4SequenceState(const DeepseekConfig& c);
  // Owned SequenceCache over `graph` (which must outlive the state), `max_tokens` positions;
  // `dcp`: this rank's share of the compressed rows / index keys (CacheOptions::dcp).
  static StatusOr<std::unique_ptr<V4SequenceState>> create(const DeepseekConfig& c,
                                                           const StateGraph& graph,
                                                           int64_t max_tokens, RowShard dcp = {},
                                                           StageLayers stage = {});
  // External manager: sequence `seq` of `cm` (already added), computed up to `length`.
  V4SequenceState(const DeepseekConfig& c, CacheManager* cm, int64_t seq, int64_t length);
  ~V4SequenceState();
  // Window ring of `layer`: one head_dim row for position pos (slot pos mod W); compressed KV
  // rows [g0, g0+n) of `layer` (head_dim each); index keys of CSA `layer` (index_head_dim).
  using SequenceCallState::read_compressed_rows;
  using SequenceCallState::read_index_keys;
  using SequenceCallState::index_key_codes;
  using SequenceCallState::read_window_row;
  using SequenceCallState::write_compressed_row;
  using SequenceCallState::write_index_key;
  using SequenceCallState::write_window_row;
  // Compressor partial state (index = the CSA indexer's compressor): load initialises `st`
  // for the layer (ratio, overlap, width) with the stored kv/score and no rows; store writes
  // kv/score back (rows are written with write_compressed_row / write_index_key).
  void load_compressor(int layer, bool index, V4CompressorState* st) const;
  void store_compressor(int layer, bool index, const V4CompressorState& st);
  // MTP carry (the graph's draft_state owner; state-module backends only, CHECKed): the
  // hidden streams [hc_mult, dim] after the last backbone block at position length()-1,
  // stored as BF16 (values read back are the bf16-rounded ones).
  bool has_mtp_carry() const;
  void read_mtp_carry(float* out) const;
  void write_mtp_carry(const float* x);

 private:
  const DeepseekConfig* config_;
};

}  // namespace strata
