// DeepseekCacheRunner<Model, State, Options>: the ModelRunner (exec/model_runner.h) both
// DeepSeek families share (DeepseekV41Runner, DeepseekV4Runner): one CacheManager
// (state/cache_manager.h, through V41SharedCache) over the model's StateGraph for all
// sequences, with the prefix cache; each sequence is a State (V41SequenceState /
// V4SequenceState) on the external-manager backend.
//
// truncate_sequence(seq, n) rolls a speculative verify back (see its comment).
// step() computes every item's tokens in the canonical numeric form (exec/call_shape.h) at
// the sequence's current length; items are independent, so a sequence's logits depend on its
// own tokens only (not its batch neighbours, chunking, prefix hits or recompute). An item is
// split at each unit boundary up to its last cacheable one (CacheManager::suggest_chunk), so
// every boundary gets its snapshot and a later prompt sharing k whole units hits k units.
// step() is all-or-nothing for what it can foresee: ids, context and the batch's joint pool
// need are checked before any sequence advances (a short pool: ResourceExhausted, nothing
// advanced, the scheduler preempts and retries); an unforeseen forward error after some items
// advanced is Internal.
// attach_cached_prefix(seq, tokens) restores the longest cached prefix (whole units,
// < tokens.size()): shared paged blocks plus the boundary snapshot (rings, compressor tails,
// Engram history). A replay policy (V41RunnerCacheOptions::restore) stores no snapshots; the
// family's replay() rebuilds ring/fixed state instead (V4.1 only; its failure restarts the
// sequence cold).
// cache_usage(): bytes per state kind held by running sequences (graph formulas), capacity =
// that kind's pool bytes, plus "<family>_prefix_cache" (pool bytes held only by the cache).
// Errors: add_sequence on a live id -> InvalidArgument, past max_seqs -> ResourceExhausted;
// step on an unknown id, a repeated id, empty tokens, ids other than the ones given at
// admission or out of the vocabulary -> InvalidArgument; past the per-sequence capacity or
// a short pool -> ResourceExhausted (nothing advanced).
// Thread safety: not thread-safe (one engine thread drives a runner).
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "exec/deepseek_v41/deepseek_v41_model.h"
#include "exec/deepseek_v4/deepseek_v4_model.h"
#include "exec/model_runner.h"
#include "exec/v41_shared_cache.h"

namespace strata {

template <class Model, class State, class Options>
class DeepseekCacheRunner : public ModelRunner {
 public:
  ~DeepseekCacheRunner() override;

  const ModelInfo& info() const override { return info_; }
  Status add_sequence(SeqId seq) override;
  void release_sequence(SeqId seq) override;
  int64_t sequence_length(SeqId seq) const override;
  int64_t token_capacity_left(SeqId seq) const override;
  bool token_capacity_is_shared() const override { return false; }  // per-sequence limit
  Status step(std::span<const StepItem> items, std::vector<float>* logits) override;
  std::vector<CacheUsage> cache_usage() const override;
  int64_t attach_cached_prefix(SeqId seq, std::span<const int32_t> tokens) override;
  // Speculative rollback without recompute: a verify item (all_logits) is computed with the
  // manager's undo record on (CacheManager::record_undo), so the rings, compressor tails and
  // Engram history go back to position new_len - 1 exactly (CacheManager::truncate) and the
  // paged rows past new_len are cut. Unimplemented when no verify record covers new_len (the
  // scheduler then recomputes from the prefix cache); FailedPrecondition with tokens pending.
  Status truncate_sequence(SeqId seq, int64_t new_len) override;
  int64_t prefix_alignment() const override;
  int64_t peek_cached_prefix(std::span<const int32_t> tokens) const override;
  PrefixRestoreInfo prefix_restore_info(SeqId seq) const override {
    auto it = seqs_.find(seq);
    return it == seqs_.end() ? PrefixRestoreInfo{} : it->second.restore;
  }
  void prefetch_cached_prefix(std::span<const int32_t> tokens) override;
  // Paged rows of one unit (graph formulas) + the boundary snapshot stored at every unit
  // boundary under the stored-snapshot policy.
  int64_t prefix_cache_bytes_per_unit() const override;
  // PD handoff (state/handoff.h) over the shared manager: export copies the owners' rows;
  // import plans one step over [held, num_tokens), writes the rows raw, rebuilds Engram
  // history (rebuild_from_ids) and publishes full blocks to this runner's prefix cache.
  const StateGraph* state_graph() const override;
  Status export_handoff(SeqId seq, int64_t from_pos, std::span<const int32_t> ids,
                        HandoffState* out) const override;
  Status import_handoff(SeqId seq, std::span<const int32_t> tokens, const HandoffState& st,
                        int64_t* held) override;

  const Model& model() const { return *model_; }
  // The shared manager (tests: check_invariants, clear_prefix_cache, free blocks).
  V41SharedCache& shared_cache() { return *cm_; }

 protected:
  struct Seq {
    std::unique_ptr<State> state;  // null until started in the manager
    std::vector<int32_t> pending;  // ids the manager knows beyond length
    PrefixRestoreInfo restore;     // how its prefix hit was restored (replay policies)
  };
  DeepseekCacheRunner() = default;
  // After model_ is set: fills info_ (name from `name` or the directory, `arch`) and builds
  // the shared cache over the model's graph.
  void init(const std::string& dir, std::string name, const char* arch,
            const V41RunnerCacheOptions& cache);
  // Rebuilds ring / fixed state after a hit of `hit` tokens of `prompt` under a replay
  // policy. Default: Unimplemented (the sequence restarts cold).
  virtual Status replay(SeqId seq, Seq& s, std::span<const int32_t> prompt, int64_t hit);
  // After an import of positions [0, n) of `ids`: rebuilds the state kinds whose handoff
  // policy is rebuild (V4.1: Engram history). Default: nothing to rebuild.
  virtual Status rebuild_from_ids(State& st, std::span<const int32_t> ids, int64_t n) {
    return ok_status();
  }
  void start(SeqId seq, Seq& s, std::span<const int32_t> prompt, bool allow_hit);
  int64_t length(const Seq& s) const { return s.state ? s.state->length() : 0; }

  std::unique_ptr<Model> model_;
  ModelInfo info_;
  V41RunnerCacheOptions cache_opts_;
  std::unique_ptr<V41SharedCache> cm_;
  std::map<SeqId, Seq> seqs_;
};

extern template class DeepseekCacheRunner<DeepseekV41Model, V41SequenceState, V41ForwardOptions>;
extern template class DeepseekCacheRunner<DeepseekV4Model, V4SequenceState, V4ForwardOptions>;

}  // namespace strata
