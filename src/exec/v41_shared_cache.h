// V41SharedCache: the one CacheManager (state/cache_manager.h) a DeepseekV41Runner keeps for
// all its sequences, behind an int64-id interface (the manager's CacheSeqId; the runner's
// SeqId.value).
//
// Sequences: start(seq, prompt, allow_hit) registers the ids and, with allow_hit, restores the
// longest cached prefix (whole units of unit() tokens, at most prompt.size()-1; docs/state.md
// §5); returns the positions now in state. What a hit restores depends on `restore`:
//   kStoredState (default, exact): shared compressed-KV / index-key blocks plus a copy of the
//     boundary snapshot (window rings, compressor tails, Engram history) stored where a step
//     ended on the boundary; boundary_snapshot_bytes() per cached boundary.
//   kReplayWindow (bounded replay, approximate): only the shared paged rows; no snapshots are
//     stored (0 B per boundary), a hit may end at any published unit, and ring / fixed state
//     starts fresh -- the caller (DeepseekV41Runner) rebuilds it by replaying replay_tokens()
//     tokens before the boundary (default: one window, replay_window_tokens()).
//   kReplayExact: the same with the default replay length replay_exact_tokens() (the layers'
//     window dependency cone), which makes the rebuilt rings bit-identical to a cold run. begin(seq, n) plans and commits one step of the
// next n known ids (one step in flight at a time); finish() publishes full blocks and, when
// the step ended on a unit boundary, the boundary snapshot. release(seq) drops everything.
// usage(lengths): bytes per state kind held by sequences of the given lengths, from the
// graph's per-kind formulas (fixed bytes per request + bytes per token x length), capacity
// = that kind's pool bytes; plus "v41_prefix_cache": allocated pool bytes beyond those.
// Errors: begin() -> ResourceExhausted when a pool is short (nothing changed). Misuse
// (unknown seq, two steps in flight) CHECKs. Thread safety: one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "state/block_pool.h"

namespace strata {

class CacheManager;
class UnitStore;
class StateGraph;

enum class V41PrefixRestore : uint8_t { kStoredState, kReplayWindow, kReplayExact };

// "stored" / "replay" / "replay-exact" (flag values of `strata serve --prefix-restore`).
const char* v41_prefix_restore_name(V41PrefixRestore r);
StatusOr<V41PrefixRestore> parse_v41_prefix_restore(const std::string& s);

struct V41RunnerCacheOptions {
  int block_tokens = 0;     // prefix alignment unit; 0 = the state module's default
  int max_seqs = 16;        // running sequences (ring / fixed blocks)
  int64_t max_tokens = 0;   // paged positions over all sequences; 0 = 16 x per-sequence max
  int snapshot_slots = 64;  // cached boundary snapshots (extra ring / fixed blocks per owner)
  bool prefix_cache = true;
  uint64_t salt = 0;        // tokenizer / checkpoint identity for the hash root
  V41PrefixRestore restore = V41PrefixRestore::kStoredState;
  // Replay policies: tokens replayed before the boundary; -1 = the policy's default
  // (kReplayWindow: replay_window_tokens(graph), the smallest multiple of every ratio covering
  // the window; kReplayExact: replay_exact_tokens(graph)); 0 = no replay, rings start empty
  // (a drift baseline for measurements, not for serving). A multiple of every ratio.
  int64_t replay_tokens = -1;
  // Tiers below the working pool (CacheOptions::unit_store); null = none.
  std::shared_ptr<UnitStore> unit_store;
  // This rank's share of the compressed rows / index keys under DCP (CacheOptions::dcp).
  RowShard dcp;
  // This rank's pipeline stage (CacheOptions::stage; set by the runner from its model).
  StageLayers stage;
  int debug_perturb_restore_kind = -1;  // CacheOptions::debug_perturb_restore_kind (test hook)
};

struct V41KindUsage {
  std::string kind;
  int64_t used_bytes = 0;
  int64_t capacity_bytes = 0;
};

class V41SharedCache {
 public:
  V41SharedCache(const StateGraph& graph, const V41RunnerCacheOptions& o,
                 int64_t per_seq_max_tokens);
  ~V41SharedCache();

  CacheManager* manager() { return cm_.get(); }
  int64_t unit() const;
  int max_seqs() const { return o_.max_seqs; }
  bool prefix_cache() const { return o_.prefix_cache; }
  V41PrefixRestore restore() const { return o_.restore; }
  // Tokens a kReplayWindow hit recomputes before its boundary (the whole hit if shorter).
  int64_t replay_tokens() const { return o_.replay_tokens; }
  // Ring / fixed bytes stored per cached boundary (0 under kReplayWindow); every unit entry
  // also shares unit() x bytes_per_token of paged rows under either policy.
  int64_t boundary_snapshot_bytes() const;

  int64_t start(int64_t seq, std::span<const int32_t> prompt, bool allow_hit);
  void append(int64_t seq, std::span<const int32_t> ids);
  int64_t num_known(int64_t seq) const;
  int64_t num_computed(int64_t seq) const;
  // Largest chunk <= n that does not step over the last cacheable boundary without ending
  // on it (CacheManager::suggest_chunk).
  int64_t suggest_chunk(int64_t seq, int64_t n) const;
  // Plans + commits positions [num_computed, num_computed + n); *start_pos = num_computed.
  Status begin(int64_t seq, int64_t n, int64_t* start_pos);
  // Whether one step computing n known ids of each (seq, n) fits the pools together (a pure
  // plan; nothing changes): ResourceExhausted naming the short pool otherwise. A runner
  // checks a whole batch with it before advancing any sequence (all-or-nothing step()).
  Status check_fits(const std::vector<std::pair<int64_t, int64_t>>& items) const;
  void finish();
  void release(int64_t seq);

  std::vector<V41KindUsage> usage(const std::vector<int64_t>& lengths) const;

  // Tests.
  void check_invariants() const;
  void clear_prefix_cache();
  int64_t num_cache_entries() const;
  int64_t total_free_blocks() const;
  int64_t total_blocks() const;

 private:
  struct Inflight;
  V41RunnerCacheOptions o_;
  std::unique_ptr<CacheManager> cm_;
  std::unique_ptr<Inflight> inflight_;
};

}  // namespace strata
