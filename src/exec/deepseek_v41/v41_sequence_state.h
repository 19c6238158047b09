// V41SequenceState: the per-sequence state handle of one DeepSeek-V4.1 request -- a thin
// adapter over the state module (src/state/, docs/state.md): every read and write of
// inference state by DeepseekV41Model goes through the CacheManager storage API of the
// sequence, in the serving format, with owners from the StateGraph built from the config's
// LayerSchedule (spec v41-architecture.md §3.1):
//   window KV ring      every layer, W rows of head_dim (FP8 E4M3 + UE8M0), slot p mod W
//   compressed KV       kv-source layers only, one row per `ratio` tokens (FP4 + E4M3-16)
//   index keys          index-key owners only, one row per compressed row (FP4 + UE8M0-32)
//   compressor partial  ratio>1 kv sources: kv/score [ratio, head_dim] f32 (fresh: 0 / -inf)
//   engram history      the last max_ngram-1 mapped token ids (i32, -2 = before start)
// Consumers never copy: a Reuse/Reindex layer reads its owner's rows through the
// LayerSchedule owner ids (kv_owner, index_key_owner). Per-forward transients (top-k lists,
// candidate masks) live in the forward's scratch (v41_forward_ctx.h), keyed by producer.
// Reads return the reference's QDQ values (decode(encode(x)) == qdq(x) bit-exactly), and the
// forward writes rows it has already QDQ'd (idempotent), so results equal the f32 mirror.
//
// Backends:
//   * owned SequenceCache (DeepseekV41Model::new_sequence): capacity `max_tokens` positions;
//     begin_call/end_call plan, commit and finish one step.
//   * external CacheManager + sequence id (prefix-cache users, a scheduler): the caller
//     drives add_sequence/plan_step/commit/finish_step; begin_call/end_call only check and
//     advance length (start it at the plan's start_pos, e.g. after a prefix hit).
//   * legacy f32 mirror (the pre-port storage), kept behind a switch for A/B checks.
// The one value kept outside the state module is published_index_owner (reference decode
// quirk, V41ForwardOptions::decode_step): an owner-layer id, not inference data.
// Bounded replay (DeepseekV41Runner, V41PrefixRestore::kReplayWindow): after a prefix hit of H
// tokens the runner re-runs the tokens [H - R, H) through the normal forward on this state with
//   * shared_prefix_end = H: compressed-KV / index-key rows that cover only positions < H are
//     the prefix cache's (shared, immutable, exact); the forward's rewrites of them are
//     skipped, so the replay rebuilds only the window rings and compressor tails;
//   * window_floor = H - R: window rows of positions below it read as a fresh ring (zeros).
//     The forward still lists them as window keys (a zero key scores 0 and adds value 0).
//     Treating them as unreachable instead (a true sequence start at H - R) was tried and
//     drifts slightly more on the tiny model (mean max |dlogit| 7.45 vs 6.73 at R = W,
//     0.45 vs 0.39 at R = 128), so zeros are kept.
// Errors: begin_call past the capacity -> ResourceExhausted. Misuse (reads of rows never
// reserved) CHECKs in the cache manager.
// Thread safety: owned by one sequence; not thread-safe.
#pragma once

#include <cstdint>
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

class V41SequenceState : public SequenceCallState {
 public:
  // Legacy f32 mirror (no state module).
  explicit V41SequenceState(const DeepseekConfig& c);
  // Owned SequenceCache over `graph` (which must outlive the state), `max_tokens` positions;
  // `dcp`: this rank's share of the compressed rows / index keys (CacheOptions::dcp).
  static StatusOr<std::unique_ptr<V41SequenceState>> create(const DeepseekConfig& c,
                                                            const StateGraph& graph,
                                                            int64_t max_tokens, RowShard dcp = {},
                                                            StageLayers stage = {});
  // External manager: sequence `seq` of `cm` (already added), whose state is computed up to
  // `length` (the first plan's start_pos).
  V41SequenceState(const DeepseekConfig& c, CacheManager* cm, int64_t seq, int64_t length);
  ~V41SequenceState();
  // Window ring of `layer`: one head_dim row for position pos (slot pos mod W).
  void read_window_row(int layer, int64_t pos, float* out) const;
  // Positions [pos0, pos0 + n) (n <= W) into out [n, head_dim]: the values of n
  // read_window_row calls. Thread safety: concurrent reads into disjoint `out` are safe while
  // nothing writes the state.
  void read_window_rows(int layer, int64_t pos0, int64_t n, float* out) const;
  using SequenceCallState::write_window_row;
  // Compressed KV / index keys of OWNER layer (consumers pass kv_owner / index_key_owner).
  // Writes of rows inside the shared prefix (bounded replay) are skipped: they are exact.
  using SequenceCallState::read_compressed_rows;
  using SequenceCallState::read_index_keys;
  using SequenceCallState::index_key_codes;
  void write_compressed_row(int owner, int64_t g, const float* x);
  void write_index_key(int owner, int64_t g, const float* x);
  // Compressor partial group of `layer`: kv, score [ratio * head_dim] f32 each.
  void get_compressor_state(int layer, float* kv, float* score) const;
  void set_compressor_state(int layer, const float* kv, const float* score);
  // Engram history: mapped ids of the last min(length, max_ngram-1) positions, oldest first.
  std::vector<int64_t> engram_history() const;
  void set_engram_history(const std::vector<int64_t>& h);

  // The index-key owner that most recently emitted keys (the reference's module-global
  // shared_attn.index_k); -1 = none yet. See V41ForwardOptions::decode_step.
  int published_index_owner() const { return published_index_owner_; }
  void set_published_index_owner(int l) { published_index_owner_ = l; }

  // Bounded replay (see the file comment); 0 = off (the defaults).
  void set_shared_prefix_end(int64_t pos) { shared_prefix_end_ = pos; }
  int64_t shared_prefix_end() const { return shared_prefix_end_; }
  void set_window_floor(int64_t pos) { window_floor_ = pos; }
  int64_t window_floor() const { return window_floor_; }

 private:
  const DeepseekConfig* config_;
  int64_t max_tokens_ = 0;
  std::vector<int64_t> legacy_engram_history_;  // legacy backend
  int published_index_owner_ = -1;
  int64_t shared_prefix_end_ = 0;
  int64_t window_floor_ = 0;
};

}  // namespace strata
