// ModelRunner: the contract between the scheduler/server and a model's forward pass.
//
// A runner owns the model weights and, through the state graph's cache manager, every
// piece of per-sequence inference state. The scheduler decides what runs; the runner only
// executes. Implementations: LlamaRunner (GQA), DeepseekV41Runner (V4.1).
//
// Numerics: a sequence's logits must not depend on which other sequences share the step,
// nor on how its prompt was chunked (batch-invariant kernels; DESIGN.md).
//
// Thread safety: not thread-safe; one engine thread drives a runner.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace strata {

class EngramTableStore;

class StateGraph;
struct HandoffState;

struct SeqId {
  int64_t value = -1;
  friend bool operator==(SeqId a, SeqId b) { return a.value == b.value; }
  friend bool operator<(SeqId a, SeqId b) { return a.value < b.value; }
};

struct ModelInfo {
  std::string name;           // served model name (directory basename by default)
  std::string architecture;   // "llama", "deepseek_v41", "deepseek_v4"
  int32_t vocab_size = 0;
  int64_t max_context = 0;    // max positions per sequence
  int32_t bos_id = -1;
  int32_t eos_id = -1;
};

// One sequence's share of a step: `tokens` are appended at positions
// [sequence_length(seq), sequence_length(seq) + tokens.size()).
struct StepItem {
  SeqId seq;
  std::span<const int32_t> tokens;
  bool want_logits = true;  // return the logits of the last token of this item
  // The sequence's prompt length in tokens, when known (-1: unknown). Positions below it
  // are prompt tokens, positions at or past it generated tokens. Runners whose numerics
  // depend on the call shape (DeepSeek V4.1 reproduces reference behaviour that differs
  // between prompt chunks and decode steps) use it; others ignore it.
  int64_t prompt_len = -1;
  // Speculative verify (with want_logits): return one logits row per token of the item, in
  // order, each bit-identical to the row a one-token step at that position would give.
  bool all_logits = false;
};

// Per-kind cache usage, for /metrics and admission.
struct CacheUsage {
  std::string kind;     // state kind name, e.g. "kv", "window_kv", "compressed_kv"
  std::string tier;     // "host" on CPU
  int64_t used_bytes = 0;
  int64_t capacity_bytes = 0;
};

// How a sequence's prefix hit was restored (ModelRunner::prefix_restore_info).
struct PrefixRestoreInfo {
  int64_t replayed_tokens = 0;  // positions before the hit recomputed to rebuild ring state
  bool approximate = false;     // the bounded `replay` policy: not bit-identical to cold
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual const ModelInfo& info() const = 0;

  // Creates empty state for `seq`. ResourceExhausted if no capacity is left.
  virtual Status add_sequence(SeqId seq) = 0;
  // Frees every state kind `seq` holds. Idempotent.
  virtual void release_sequence(SeqId seq) = 0;
  virtual int64_t sequence_length(SeqId seq) const = 0;
  // How many more tokens the runner can take for `seq` (capacity and context permitting).
  virtual int64_t token_capacity_left(SeqId seq) const = 0;
  // True when token_capacity_left() counts a pool shared by all sequences (tokens planned
  // for one sequence in a step are then taken from every other's answer); false when it is
  // a per-sequence limit only (context, per-sequence state) and a short shared pool shows as
  // ResourceExhausted from step() instead, with nothing advanced.
  virtual bool token_capacity_is_shared() const { return true; }

  // Runs one step over `items` (each seq at most once). On success `logits` holds one row
  // of vocab_size floats per item with want_logits (tokens.size() rows for all_logits), in
  // item order. On error no sequence's state has advanced.
  virtual Status step(std::span<const StepItem> items, std::vector<float>* logits) = 0;

  virtual std::vector<CacheUsage> cache_usage() const = 0;

  // ---- Optional: speculative rollback (default: not supported). ----
  //
  // Rolls `seq` back to its first `new_len` positions (0 < new_len <= sequence_length): the
  // state of every kind becomes what feeding only those tokens would have given, rows past
  // new_len are freed (none stays published in a block the sequence will write again).
  // Unimplemented when the runner cannot (the scheduler then recomputes from the prefix
  // cache); ResourceExhausted when a copy-on-write block is not free (nothing changed).
  virtual Status truncate_sequence(SeqId seq, int64_t new_len) {
    return Status(StatusCode::kUnimplemented, "this runner cannot roll a sequence back");
  }

  // ---- Optional: a drafter inside the model (V4.1 DSpark, V4 MTP; default: none). ----
  //
  // The drafter's --speculative-config method name ("dspark", "mtp"; "" = none).
  virtual std::string drafter_method() const { return ""; }
  // Most draft tokens one draft_tokens call gives (DSpark: its block; MTP: the chain limit;
  // 0: the model has no drafter).
  virtual int draft_block_size() const { return 0; }
  // The drafter's tokens after `seq`'s state (every token fed so far) given `next`, the token
  // sampled from seq's last logits (not yet fed): min(max_k, draft_block_size()) tokens for
  // the positions after `next`. Reads state only. `confidence` (may be null) gets one value in
  // [0, 1] per draft: DSpark sigmoid(confidence head), MTP the softmax probability of the
  // drafted token. FailedPrecondition when the sequence is too short to draft from or has
  // tokens pending; Unimplemented without a drafter.
  virtual StatusOr<std::vector<int32_t>> draft_tokens(SeqId seq, int32_t next, int max_k,
                                                      std::vector<float>* confidence = nullptr) {
    (void)seq;
    (void)next;
    (void)max_k;
    (void)confidence;
    return Status(StatusCode::kUnimplemented, "this model has no drafter");
  }

  // ---- Optional: prefix caching (defaults: the runner has no prefix cache). ----
  //
  // Called by the scheduler right after a successful add_sequence(seq), with every token
  // the sequence is about to be fed (prompt, plus already generated tokens when a preempted
  // request is recomputed). The runner may fill `seq`'s state from its prefix cache and
  // returns how many leading tokens of `tokens` are now in state (sequence_length(seq)).
  // Contract: 0 <= result < tokens.size() (the last token is always computed, because the
  // scheduler needs its logits), and result is a multiple of prefix_alignment().
  // On a request's first admission the scheduler counts prefix_cache_queries +=
  // tokens.size() and prefix_cache_hits += result (re-admissions after preemption are
  // not counted again).
  virtual int64_t attach_cached_prefix(SeqId seq, std::span<const int32_t> tokens) {
    return 0;
  }
  // After attach_cached_prefix(seq, ...): how its hit was restored (replay policies recompute
  // positions before the hit; `replay` is approximate). Default: stored, nothing replayed.
  virtual PrefixRestoreInfo prefix_restore_info(SeqId seq) const {
    (void)seq;
    return {};
  }
  // The hit attach_cached_prefix would give a new sequence fed `tokens` right now (pure; the
  // cache may change before an admission).
  virtual int64_t peek_cached_prefix(std::span<const int32_t> tokens) const { return 0; }
  // A request with these tokens is waiting for admission: start moving its cached prefix
  // from slow tiers into the fastest one in the background (CacheManager::prefetch), so the
  // load at attach_cached_prefix overlaps other requests' steps. Default: nothing.
  virtual void prefetch_cached_prefix(std::span<const int32_t> tokens) { (void)tokens; }
  // Granularity of prefix-cache hits in tokens; 0 when the runner has no prefix cache.
  virtual int64_t prefix_alignment() const { return 0; }
  // Bytes one cached alignment unit holds in the prefix cache (its growing rows plus any
  // boundary snapshot of ring / fixed state stored with it); 0 = no prefix cache.
  virtual int64_t prefix_cache_bytes_per_unit() const { return 0; }

  // ---- Optional: prefill/decode handoff (state/handoff.h; defaults: not supported). ----
  //
  // The state graph the runner's cache follows (null: the runner cannot hand off state).
  virtual const StateGraph* state_graph() const { return nullptr; }
  // Copies the rows of every state owner of `seq` as of sequence_length(seq) (which must
  // equal ids.size(); `ids` are the tokens fed so far), growing rows from `from_pos` (a
  // multiple of prefix_alignment()), into *out with checksums. The sequence is unchanged.
  virtual Status export_handoff(SeqId seq, int64_t from_pos, std::span<const int32_t> ids,
                                HandoffState* out) const {
    return Status(StatusCode::kUnimplemented, "this runner cannot export state");
  }
  // Right after attach_cached_prefix(seq, tokens) returned *held: makes positions
  // [0, st.num_tokens) of `seq` the received state (a verified HandoffState whose token ids
  // are tokens' first num_tokens, num_tokens < tokens.size(), from_pos <= *held), writing
  // only rows the sequence does not hold, and rebuilding the kinds whose policy is rebuild
  // (Engram history) from the ids. On success *held = st.num_tokens. Errors (nothing
  // changed beyond the prefix hit): InvalidArgument (ids differ, bad lengths),
  // FailedPrecondition (from_pos > *held), ResourceExhausted (pool short).
  virtual Status import_handoff(SeqId seq, std::span<const int32_t> tokens,
                                const HandoffState& st, int64_t* held) {
    return Status(StatusCode::kUnimplemented, "this runner cannot import state");
  }

  // ---- Optional: Engram table placement (V4.1; default: none). ----
  // The model's Engram table store (its stats() are thread-safe, so the server's /metrics
  // may read them while steps run); null when the model has no Engram layers.
  virtual const EngramTableStore* engram_tables() const { return nullptr; }

  // ---- Optional: benchmarks. ----
  // Bytes of weights and state one decode step of a sequence of `len` tokens reads from
  // memory (the numerator of the decode roofline in `strata bench model`); 0 = unknown.
  virtual int64_t decode_bytes_read(int64_t len) const { return 0; }
  // Multiply-add FLOPs (2 per weight element) of the weight GEMMs one prompt token runs in a
  // prefill: every per-token linear layer (routed experts at their mean share, top-k / n
  // experts); not the LM head (a prefill computes the last position's logits only) nor the
  // attention scores. The numerator of prefill GFLOP/s in `strata bench model`; 0 = unknown.
  virtual int64_t prefill_flops_per_token() const { return 0; }
};

}  // namespace strata
