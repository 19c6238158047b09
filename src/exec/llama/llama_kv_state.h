// LlamaKvState: the Llama runner's KV, kept by the state graph's CacheManager
// (state/cache_manager.h) with one plain_kv owner per layer (StateGraph::from_llama).
//
// Storage: plain_kv rows are [K kv_dim | V kv_dim] f32 (serving format f32 = the values the
// kernels read, written with encode_state_row, i.e. a memcpy). A block holds `unit` positions
// (the alignment unit, 16 by default) of one layer, so the attention kernels read the pool
// blocks in place through kernels::KvBlocks with row_stride = 2·kv_dim (no copies; the block
// pointers of a sequence are cached and only appended to as its table grows).
//
// Prefix cache: content-addressed per unit (XXH3 chain over token ids, rooted in the model
// identity string, the unit and the row formats; CacheManager). attach_prefix(seq, tokens)
// shares the cached blocks of the longest cached chain of full units that ends at or before
// tokens.size()-1 (a multiple of the unit, < tokens.size()); refcounts keep a block alive
// while a cache entry or any sequence holds it. Full blocks are published after every step.
//
// Capacity: one shared pool of `capacity_tokens + cache_tokens` positions (plus the
// CacheManager's per-sequence slack); running sequences may hold at most `capacity_tokens`
// (counted per holder), prefix-cache entries may fill the rest and any block no request
// holds; entries are evicted LRU only when a step would run short (CacheManager::plan_step).
// usage(): "kv" = blocks held by requests (0 when none runs), "kv_prefix_cache" = blocks held
// by cache entries (some may also be held by requests).
//
// Decode context parallelism (Options::dcp): the pool stores only this rank's records (runs of
// dcp::kPlainKvRecordTokens positions, dist/dcp.h), each block 1/D of the rows; the runner
// merges the ranks' chunk partials (kernels/attention.h). PD export is refused under DCP.
//
// Sequence ids are plain int64 (the state module's CacheSeqId; model_runner.h's SeqId wraps
// the same value).
// Errors: begin_step returns ResourceExhausted (pool short) / OutOfRange (context) /
// InvalidArgument (tokens that contradict tokens given to attach_prefix), changing no state.
// Thread safety: one thread drives it; KvBlocks views may be read concurrently during a step.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/attention.h"
#include "state/block_pool.h"

namespace strata {

class CacheManager;
class UnitStore;
class StateGraph;
struct HandoffState;

struct LlamaKvUsage {
  std::string kind;
  int64_t used_bytes = 0;
  int64_t capacity_bytes = 0;
};

class LlamaKvState {
 public:
  struct Options {
    int n_layers = 0, n_kv_heads = 0, head_dim = 0;
    int64_t max_context = 0;
    int64_t capacity_tokens = 0;  // for running sequences
    int64_t cache_tokens = 0;     // extra blocks for the prefix cache
    bool prefix_cache = true;
    std::string identity;         // model identity for the hash root (name, config, weights)
    uint64_t salt = 0;
    std::shared_ptr<UnitStore> unit_store;  // tiers below the working pool (null = none)
    // Decode context parallelism: this rank's share (interleave in records of
    // dcp::kPlainKvRecordTokens positions); size 1 = every position.
    RowShard dcp;
    // Pipeline parallelism: this rank's layers (other layers' KV has no storage here).
    StageLayers stage;
  };
  explicit LlamaKvState(const Options& o);
  ~LlamaKvState();

  int64_t unit() const;  // alignment unit = block size in positions
  bool has(int64_t seq) const { return seqs_.count(seq) != 0; }
  Status add(int64_t seq);
  void release(int64_t seq);
  int64_t length(int64_t seq) const;
  int64_t capacity_left(int64_t seq) const;
  // KV bytes one position takes on this rank (under DCP: the average share, 1/D of a row;
  // under PP: this stage's layers).
  int64_t bytes_per_token() const { return int64_t{layers_here()} * 2 * kv_dim_ * 4 / o_.dcp.size; }
  // Pipeline parallelism: whether this rank stores layer l's KV, and how many layers it stores.
  bool on_stage(int l) const {
    return !o_.stage.split() || (l >= o_.stage.begin && l < o_.stage.end);
  }
  int layers_here() const { return o_.stage.split() ? o_.stage.end - o_.stage.begin : o_.n_layers; }
  const RowShard& dcp() const { return o_.dcp; }
  // Whether this rank stores position pos (always without DCP).
  bool owns(int64_t pos) const;

  // Prefix hit for a sequence that has not stepped yet; returns the positions now in state.
  int64_t attach_prefix(int64_t seq, std::span<const int32_t> tokens);

  // Plans and commits one step: sequence seqs[i] appends tokens[i] at length(seqs[i]).
  // On error nothing changed. On success, write every new position with write_kv, read
  // with view(), then call end_step().
  Status begin_step(const std::vector<int64_t>& seqs,
                    const std::vector<std::span<const int32_t>>& tokens);
  // write_kv ignores a position another DCP rank owns. view() holds this rank's rows only,
  // densely (row dcp::local_index(pos / kPlainKvRecordTokens ...): the records it owns, in
  // order), so under DCP a chunk c this rank owns is rows [local_index(c) * 16, ...) of it.
  void write_kv(int64_t seq, int layer, int64_t pos, const float* k, const float* v);
  kernels::KvBlocks view(int64_t seq, int layer) const;
  void end_step();
  // Speculative rollback: keeps positions [0, new_len) (0 < new_len <= length(seq)), frees
  // the blocks past them, and copies the last kept block if it is shared (a prefix-cache
  // entry of the rolled-back tokens keeps its own). ResourceExhausted (nothing changed)
  // when no block is free for that copy. Not during a step.
  Status truncate(int64_t seq, int64_t new_len);

  // PD handoff (state/handoff.h): the graph the rows follow; export of `seq`'s rows as of
  // its length (== ids.size()); import of a verified state right after attach_prefix
  // (plans a step over [held, num_tokens), writes the rows raw, publishes full blocks).
  // Errors as ModelRunner::import_handoff.
  const StateGraph& graph() const { return *graph_; }
  int64_t peek_prefix(std::span<const int32_t> tokens) const;
  // Starts bringing the stored units of `tokens` into the fastest tier (CacheManager::prefetch).
  void prefetch_prefix(std::span<const int32_t> tokens) const;
  Status export_state(int64_t seq, int64_t from_pos, std::span<const int32_t> ids,
                      HandoffState* out) const;
  Status import_state(int64_t seq, std::span<const int32_t> tokens, const HandoffState& st,
                      int64_t* held);

  std::vector<LlamaKvUsage> usage() const;
  // Test helper: CacheManager::check_invariants (CHECK-fails on a broken refcount).
  void check_invariants() const;
  int64_t num_cache_entries() const;

 private:
  struct Seq {
    bool started = false;  // known to the CacheManager
    int64_t length = 0;
    std::vector<int32_t> pending;  // ids the CacheManager knows beyond `length`
    std::vector<std::vector<const float*>> k_ptrs, v_ptrs;  // [layer][block]
  };
  void start(int64_t seq, Seq& s, std::span<const int32_t> prompt, bool allow_hit);
  void refresh_ptrs(int64_t seq, Seq& s);
  int64_t running_blocks() const;

  Options o_;
  int64_t kv_dim_ = 0;
  std::unique_ptr<StateGraph> graph_;
  std::unique_ptr<CacheManager> cm_;
  std::vector<int> owner_of_layer_;
  std::map<int64_t, Seq> seqs_;
  struct Inflight;
  std::unique_ptr<Inflight> inflight_;
  std::vector<float> row_;  // [K|V] staging row
};

}  // namespace strata
