// CacheManager: the POLICY + PLAN layer over a StateGraph. It keeps, per sequence, a block
// table per state owner (paged pools for growing kinds, one block per ring/fixed owner), the
// prefix cache, and the per-sequence storage API the forward passes use to read/write rows.
//
// Lifecycle of one step (single-threaded; the scheduler drives it):
//   add_sequence(seq, prompt)        registers token ids (no memory yet)
//   plan = plan_step(items)          PURE: prefix match for new sequences, blocks needed,
//                                    evictions, copies; or outcome kOutOfBlocks (typed, with
//                                    the pool and the shortfall) -- the scheduler preempts or
//                                    waits. Admission reserves only what the next step needs:
//                                    compressor state is O(ratio) per request (field bug 5).
//   commit(plan)                     the only mutator of a plan: evicts, allocates, shares hit
//                                    blocks, copies boundary state, advances positions, and
//                                    takes an in-flight lease on every block the step touches.
//   ... forward pass writes rows via write_*/read_* for seq positions in the plan ...
//   finish_step(plan)                releases the leases; publishes newly full blocks (and,
//                                    when the step ended on an alignment boundary, the
//                                    boundary window/compressor state) to the prefix cache.
//   append_tokens(seq, ids)          decode: token ids become known after sampling.
//   release(seq)                     finish / cancel / preempt: drops every table reference
//                                    (blocks of an in-flight step stay leased until
//                                    finish_step: no slot is reused before its last user).
//
// Prefix cache: content-addressed per alignment unit of `block_tokens` tokens (explicit,
// stated by `inspect --state`; a multiple of every compression ratio). Key = XXH64 chain over
// the unit's token ids, seeded by the parent key; the root seed hashes the model name, the
// cache formats and CacheOptions::prefix_salt (tokenizer/checkpoint identity). A hit restores
// compressed KV and index-key rows up to the boundary by sharing blocks, and the window rings,
// compressor tails and Engram history by copying the boundary snapshot (exact; its size is
// boundary_snapshot_bytes()). Hit length = the largest boundary k*unit with a snapshot (if
// the model has ring/fixed state and CacheOptions::boundary_snapshots is on; with it off, the
// largest published one, ring/fixed state starting fresh) and k*unit <= len-1 (at least one
// token is computed so the step produces logits). Eviction, only when a free list is short (so freed transient blocks
// are reused before cached blocks are evicted, field bug 4): first LRU boundary snapshots (no
// dependents), then LRU leaf entries that actually free a block of a short pool.
//
// Errors: misuse (unknown seq, write outside allocated rows, stale plan) is a CHECK; running
// out of blocks is StepPlan::outcome == kOutOfBlocks, never an exception.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "state/block_pool.h"
#include "state/state_graph.h"
#include "state/unit_store.h"

namespace strata {

// Sequence id and step item of the state module. Named apart from exec/model_runner.h's
// SeqId / StepItem (the scheduler's view) so both headers can be included together; a
// runner passes SeqId::value as the CacheSeqId.
using CacheSeqId = int64_t;

struct CacheOptions {
  int block_tokens = 0;          // alignment unit; 0 = default (see default_block_tokens)
  int max_seqs = 8;              // ring/fixed blocks for this many running sequences
  int64_t max_tokens = 1 << 16;  // paged capacity: tokens across all sequences, per owner
  int snapshot_slots = 8;        // extra ring/fixed blocks per owner for boundary snapshots
  bool allocate_storage = true;  // false = metadata only (tests, benchmarks, inspect)
  bool prefix_cache = true;
  uint64_t prefix_salt = 0;      // tokenizer / checkpoint identity
  // Prefix-hit restore policy for ring / fixed state (windows, compressor tails, Engram
  // history). true (default, exact): a boundary snapshot of them is stored with the block at
  // which a step ended, and a hit needs one. false (bounded replay, approximate): nothing
  // beyond the paged rows is stored (boundary_snapshot_bytes() == 0, no snapshot_slots
  // blocks); a hit may end at ANY published unit and starts ring / fixed owners fresh
  // (zeros, compressor score -inf, Engram history -2); the caller rebuilds them (for V4.1:
  // DeepseekV41Runner replays replay_window_tokens() tokens before the boundary).
  bool boundary_snapshots = true;
  // Tiers below the working pool (src/tiers; null = none). Every unit the prefix cache
  // publishes (its paged rows, plus its boundary snapshot when it has one) is written to the
  // store as one object (unit_store.h), so evicting it from the working pool loses nothing;
  // a prefix match that runs out of working-pool units goes on in the store, and plan_step
  // fetches and verifies the objects it would restore (a corrupt or foreign one is rejected
  // and the match stops there: those positions are recomputed).
  std::shared_ptr<UnitStore> unit_store;
  // Decode context parallelism (dist/dcp_comm.h): with size D > 1 the compressed-KV,
  // index-key and plain-KV pools store only this rank's records (BlockPool's RowShard: record
  // g of a sequence is rank (g / S) mod D's; a plain-KV record is a run of
  // dcp::kPlainKvRecordTokens positions, dcp_row_shard), so their blocks hold 1/D of the rows. The default
  // block_tokens then also makes every such pool's rows per block a multiple of S * D
  // (dcp_block_tokens); an explicit block_tokens that does not is a CHECK failure.
  RowShard dcp;
  // Pipeline parallelism (dist/pipe_comm.h): this rank computes backbone layers
  // [stage.begin, stage.end) of stage.backbone_layers. An owner none of those layers writes
  // or reads gets no storage (another stage's layer; access CHECK-fails "has no storage"),
  // except request-global and drafter owners (every stage runs the epilogue) and index keys
  // (the reference call shape's decode quirk lets any index source read any owner's keys;
  // 68 B per record). backbone_layers 0 = every owner has storage.
  StageLayers stage;
  // Test hook for validators (`serve --debug-perturb-restore KIND`): when a prefix hit is
  // restored, one byte of each owner of this kind is changed (ring / fixed owners: the
  // sequence's copy, in the row of the hit's last position or row 0; paged owners: row 0 of
  // the hit's first block, once per block). A deliberately broken restore; -1 = off.
  int debug_perturb_restore_kind = -1;
};

// The row-level shard of an owner kind's pool under `dcp` (interleave S in records): compressed
// KV and index keys S rows per run, plain KV S * dcp::kPlainKvRecordTokens rows; every other
// kind (windows, compressor state, Engram history...) replicated: RowShard{}.
RowShard dcp_row_shard(StateKind kind, const RowShard& dcp);

// The default block_tokens under DCP: default_block_tokens(g), raised to a multiple of
// ratio * S * D for every compressed-KV / index-key ratio (so each block starts an ownership
// period). Equals default_block_tokens(g) when dcp.size == 1.
int dcp_block_tokens(const StateGraph& g, const RowShard& dcp);

// Tokens a bounded-replay restore recomputes before a prefix-hit boundary: the smallest
// multiple of every growth ratio that covers the widest window ring (0 if the graph has no
// window). Starting the replay at such a position starts every non-overlapping compressor on
// a group boundary, where its partial state (kv 0 / score -inf) is exactly fresh.
int64_t replay_window_tokens(const StateGraph& g);
// Tokens after which a replay is EXACT for a stack of N backbone layers that each attend over
// a window of W positions and read everything else (compressed rows, index keys) from the
// cache: the ring of layer l at position p depends on tokens back to p - l*(W-1), so the
// rings at a boundary H depend on tokens [H - W - (N-1)(W-1), H) only. W + (N-1)(W-1), rounded
// up to a multiple of every growth ratio (0 without windows). V4.1-Flash: 128 + 39*127 = 5081
// -> 5082; tiny V4.1: 16 + 11*15 = 181 -> 182.
int64_t replay_exact_tokens(const StateGraph& g);

// Smallest multiple of every growth ratio that is >= 64 tokens (16 for plain KV models).
int default_block_tokens(const StateGraph& g);

enum class PlanOutcome : uint8_t { kOk, kOutOfBlocks };

struct CacheStepItem {
  CacheSeqId seq = 0;
  int64_t max_tokens = 0;  // process up to this many tokens of the sequence's known ids
};

struct SeqStepPlan {
  CacheSeqId seq = 0;
  int64_t start_pos = 0;   // first position computed this step (after any prefix hit)
  int64_t num_tokens = 0;  // positions [start_pos, start_pos + num_tokens)
  int64_t hit_tokens = 0;  // > 0 only on a sequence's first step
  bool first_step = false;
};

struct StepPlan {
  PlanOutcome outcome = PlanOutcome::kOk;
  std::string shortfall;            // kOutOfBlocks: which pool, needed vs available
  int short_pool = -1;
  int64_t blocks_needed = 0, blocks_available = 0;
  std::vector<SeqStepPlan> seqs;
  std::vector<uint64_t> drop_snapshots;  // entries whose boundary snapshot is dropped (keys)
  std::vector<uint64_t> evict;      // prefix-cache entries to evict (keys), leaves first
  std::vector<int64_t> new_blocks;  // per pool
  int64_t copies = 0;               // boundary-snapshot block copies
  uint64_t generation = 0;          // commit() CHECKs the manager did not change since
  uint64_t id = 0;
};

struct PoolInfo {
  StateKind kind;
  int ratio;
  int64_t rows_per_block, row_bytes, num_blocks, num_free;
  std::vector<OwnerId> owners;
  int64_t stored_rows = 0;  // rows a block stores: rows_per_block, or 1/D of them under DCP
  int64_t block_bytes() const { return stored_rows * row_bytes; }
};

class CacheManager {
 public:
  CacheManager(const StateGraph& graph, CacheOptions opts);
  ~CacheManager();
  CacheManager(const CacheManager&) = delete;
  CacheManager& operator=(const CacheManager&) = delete;

  const StateGraph& graph() const { return graph_; }
  int block_tokens() const { return block_tokens_; }
  // Bytes of ring / fixed state stored per cached boundary (0 with boundary_snapshots off);
  // on top of the paged rows every unit entry shares (block_tokens x bytes_per_token).
  int64_t boundary_snapshot_bytes() const;

  // ---- sequences ----
  void add_sequence(CacheSeqId seq, const std::vector<int32_t>& prompt);
  void append_tokens(CacheSeqId seq, const std::vector<int32_t>& ids);
  bool has_sequence(CacheSeqId seq) const;
  int64_t num_computed(CacheSeqId seq) const;  // positions whose state is written (after commit)
  int64_t num_known(CacheSeqId seq) const;     // token ids known
  // Drops everything the sequence holds (finish, cancel, preempt). A preempted request is
  // re-added with add_sequence and may hit its own published prefix.
  void release(CacheSeqId seq);
  // Speculative rollback: the sequence keeps positions [0, new_len) (0 < new_len <=
  // num_computed; its known ids are cut there too). Growing owners: blocks past them are
  // unreferenced; a kept last block that is partly past new_len and shared (published by the
  // step that wrote the rejected rows) is replaced by a copy, so the cache entry -- valid
  // state for the ids it was keyed by -- is never overwritten. Units published past new_len
  // stay in the cache; the sequence republishes from new_len. Ring / fixed owners (window
  // rings, compressor tails, Engram history): their rows are put back from the undo record
  // (record_undo) of the steps that computed positions >= new_len, newest first, so every
  // row holds what it held after position new_len - 1 was computed.
  // Errors (nothing changed): Unimplemented when ring / fixed rows were written past new_len
  // without an undo record (not recording, recording started after new_len, or a recorded
  // step straddles new_len), ResourceExhausted (no free block for a copy). Not during a step.
  Status truncate(CacheSeqId seq, int64_t new_len);
  // Undo record of ring / fixed state for truncate(): on = from now (num_computed) on, every
  // step of `seq` keeps the previous bytes of each ring / fixed row it changes; off = stop and
  // drop the record. Turning it on again starts a fresh record. Costs one row copy per changed
  // row (a speculative verify of k+1 one-token steps: about k+1 rows per ring owner plus the
  // fixed rows each step rewrites). Released with the sequence.
  void record_undo(CacheSeqId seq, bool on);
  // Bytes held by `seq`'s undo record (tests, metrics).
  int64_t undo_bytes(CacheSeqId seq) const;

  // Tokens a new sequence with these ids would get from the prefix cache right now (the hit
  // plan_step would plan for its first step: whole units, at most tokens.size()-1). Pure.
  int64_t cached_prefix_tokens(const std::vector<int32_t>& tokens) const;

  // ---- plan / commit ----
  StepPlan plan_step(const std::vector<CacheStepItem>& items) const;
  // Scheduler helper: the largest chunk <= max_tokens for an idle sequence that does not step
  // over its last cacheable boundary floor((len-1)/unit)*unit without ending on it, so the
  // boundary snapshot is stored and a re-sent prompt hits that many tokens (field bug 1).
  // With boundary snapshots on (ring/fixed state), it also ends a chunk at every unit
  // boundary below that one, so every boundary of the prompt has its snapshot and a prompt
  // sharing any k whole units with it hits k units (issue 22).
  int64_t suggest_chunk(CacheSeqId seq, int64_t max_tokens) const;
  void commit(const StepPlan& plan);
  void finish_step(const StepPlan& plan);

  // ---- storage API (rows in serving format; reads return the QDQ values) ----
  // Generic: owner-level row access. For ring owners `row` is the absolute position (slot =
  // pos mod W); for growing owners the compressed row index g (position g*ratio); for fixed
  // owners the slot index. CHECKs the row is allocated to `seq`.
  void write_row(CacheSeqId seq, OwnerId owner, int64_t row, const float* x);
  void read_row(CacheSeqId seq, OwnerId owner, int64_t row, float* out) const;
  // Rows [row0, row0 + n) into out [n, row_elems]: the same values as n read_row calls, with
  // one sequence and owner lookup. Thread safety: concurrent reads (of any rows, into
  // disjoint `out`) are safe while no thread mutates the manager.
  void read_rows(CacheSeqId seq, OwnerId owner, int64_t row0, int64_t n, float* out) const;
  // Serving-format bytes of one row (row_bytes of the owner's spec), for kernels that consume
  // the packed format directly. Valid until the sequence is released.
  const uint8_t* raw_row(CacheSeqId seq, OwnerId owner, int64_t row) const;
  // Rows [row0, row0 + n): out[i] = raw_row(seq, owner, row0 + i), with one sequence and owner
  // lookup (as read_rows). Thread safety: as read_rows.
  void raw_rows(CacheSeqId seq, OwnerId owner, int64_t row0, int64_t n, const uint8_t** out) const;
  // Stores row_bytes serving-format bytes as-is (a handoff's rows, state/handoff.h). The same
  // addressing and CHECKs as write_row (allocated, not in a shared block).
  void write_raw_row(CacheSeqId seq, OwnerId owner, int64_t row, const uint8_t* bytes);
  // Window KV of `layer` (its own ring): slot pos mod W.
  void write_window_row(CacheSeqId seq, int layer, int64_t pos, const float* x);
  void read_window_row(CacheSeqId seq, int layer, int64_t pos, float* out) const;
  // Positions [pos0, pos0 + n) (n <= W) into out [n, head_dim], as read_rows.
  void read_window_rows(CacheSeqId seq, int layer, int64_t pos0, int64_t n, float* out) const;
  // The whole ring of `layer` in slot order, out[W * head_dim] (slot s holds the latest
  // position p with p mod W == s; never-written slots read 0).
  void read_window(CacheSeqId seq, int layer, float* out) const;
  // Compressed KV / index keys of OWNER layer `owner_layer` (consumers pass their kv_owner /
  // index_key_owner from LayerSchedule). Rows [g0, g0+n) into out[n * row_elems].
  void write_compressed_row(CacheSeqId seq, int owner_layer, int64_t g, const float* x);
  void read_compressed_rows(CacheSeqId seq, int owner_layer, int64_t g0, int64_t n, float* out) const;
  void write_index_key(CacheSeqId seq, int owner_layer, int64_t g, const float* x);
  void read_index_keys(CacheSeqId seq, int owner_layer, int64_t g0, int64_t n, float* out) const;
  // Compressor partial state of `layer` (index=true: V4 indexer compressor): kv and score are
  // [rows_fixed, width] f32 each. Fresh sequences read kv = 0, score = -inf.
  void get_compressor_state(CacheSeqId seq, int layer, bool index, float* kv, float* score) const;
  void set_compressor_state(CacheSeqId seq, int layer, bool index, const float* kv, const float* score);
  // Engram history: (max_ngram-1) int32, newest last; fresh = all -2 (before start).
  void get_engram_history(CacheSeqId seq, int32_t* ids) const;
  void set_engram_history(CacheSeqId seq, const int32_t* ids);

  // ---- unit store (CacheOptions::unit_store) ----
  // Identity stamped on every stored object: the hash root (model, unit, formats, salt) and
  // every pool's rows per block and row bytes. Objects with another identity are refused.
  uint64_t store_identity() const;
  // Asks the store to bring the units of `tokens` that the working pool does not hold into
  // its fastest tier, in the background (UnitStore::prefetch); a request waiting for
  // admission. Cheap (hashes only); nothing without a store.
  void prefetch(const std::vector<int32_t>& tokens) const;
  // Units restored from the store into the working pool / written to it, since construction.
  int64_t units_loaded() const;
  int64_t units_stored() const;

  // ---- introspection ----
  std::vector<PoolInfo> pools() const;
  int64_t num_cache_entries() const;
  // Recomputes every refcount from tables + cache entries + leases and compares; checks
  // free lists, row capacity of every sequence, hash-chain parents. Aborts (CHECK) on error.
  void check_invariants() const;
  // Drops every prefix-cache entry (tests: "zero leaked blocks at the end").
  void clear_prefix_cache();
  int64_t total_free_blocks() const;
  int64_t total_blocks() const;

 private:
  // write_row (x: encoded in place) / write_raw_row (bytes: copied): CHECKs, the undo
  // record, the serving-format bytes. Exactly one of x / bytes is non-null.
  void store_row(CacheSeqId seq, OwnerId owner, int64_t row, const float* x,
                 const uint8_t* bytes);
  struct Seq;
  struct Entry;
  // Prefix match of `tokens` (whole units inside [0, len-1]) through the working pool and
  // then the store: the hit in units. load=false only asks the store whether it holds each
  // key (peek); load=true fetches, verifies and stages every object the hit restores.
  int64_t match_units(const std::vector<int32_t>& tokens, bool load) const;
  // Whether the store has unit k (key under parent, ids) -- staged when load -- and whether
  // the object carries a boundary snapshot.
  // want_snapshot: a staged object whose snapshot bytes were dropped is fetched again.
  bool probe_store(uint64_t key, uint64_t parent, int64_t k, const int32_t* ids, bool load,
                   bool* snapshot, bool want_snapshot = false) const;
  // Creates the working-pool entry of a staged unit (blocks allocated and filled).
  Entry& materialize(uint64_t key);
  // Writes the entry (with its snapshot, if any) to the store.
  void store_entry(const Entry& e);
  // CacheOptions::debug_perturb_restore_kind: changes the restored rows of a hit (test hook).
  void perturb_restore(Seq& s, const std::vector<const Entry*>& chain);
  struct Lease;
  struct Impl;
  StateGraph graph_;
  CacheOptions opts_;
  int block_tokens_ = 0;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata
