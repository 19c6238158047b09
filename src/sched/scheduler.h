// Scheduler: continuous batching of prefill and decode under a token budget.
//
// The scheduler owns the queue of requests and decides, every step, which sequences feed
// which tokens to the ModelRunner. It has no threads and does no sampling; the Engine
// (engine.h) drives it:
//
//   plan = scheduler.plan();          // admits, chunks, preempts; may fail hopeless requests
//   status = runner.step(plan.items); // one forward over the mixed batch
//   ResourceExhausted -> scheduler.preempt_for_retry(plan) and plan again (nothing advanced)
//   OK                -> scheduler.commit(plan); sample one token per logits row and
//                        scheduler.append_token(...) or scheduler.finish(...)
//
// Model of a request: `tokens` = prompt followed by every generated token. `num_computed`
// of them are in the runner's state; the rest are fed in later steps, at most
// `chunk_size` per step (chunked prefill). A decode step is the same thing with one token
// left. An item asks for logits only when it reaches the end of `tokens`, and then exactly
// one new token is sampled. Preemption (recompute) releases all of a sequence's state and
// sets num_computed = 0; when it is re-admitted, prompt + generated tokens are prefilled
// again (and may hit the prefix cache), then generation resumes where it stopped.
//
// Step composition (vLLM v1 style, one budget for everything): first the running
// requests in priority order (decodes cost 1 token, unfinished prefills a chunk), then
// waiting requests are admitted in priority order while the budget, max_num_seqs and the
// runner's capacity allow.
//
// Order / priority hook: requests are ordered by (priority, arrival) — lower `priority`
// first, FCFS among equals (all priorities 0 = plain FCFS). Admission never skips the head
// of the waiting queue (no starvation of big requests by small ones); the preemption
// victim is always the last request in that order, so the first request always makes
// progress (no livelock). A request that cannot fit even when it runs alone is failed
// with ResourceExhausted instead of waiting forever (field bugs 5, 14, 24).
//
// Thread safety: not thread-safe; the engine thread owns the scheduler and the runner.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "exec/model_runner.h"

namespace strata {

struct SchedulerOptions {
  int32_t max_num_seqs = 16;             // sequences holding runner state at once
  int64_t max_num_batched_tokens = 512;  // tokens fed per step, prefill + decode
  int64_t chunk_size = 256;              // max tokens one sequence feeds per step
};

struct ScheduledItem {
  SeqId seq;
  int64_t begin = 0;          // index into the request's tokens
  int64_t num_tokens = 0;
  bool want_logits = false;   // the item reaches the end of the request's tokens
  bool all_logits = false;    // a speculative verify: one row per token (set_drafts)
};

struct FailedRequest {
  SeqId seq;
  Status status;
};

struct SchedulePlan {
  std::vector<ScheduledItem> scheduled;
  std::vector<StepItem> items;       // views into the requests' tokens, same order
  std::vector<FailedRequest> failed; // removed from the scheduler (state released)
  std::vector<SeqId> preempted;      // preempted while planning (capacity)
  int64_t num_tokens = 0;
};

struct SchedulerCounters {
  // Tokens looked up in the prefix cache / found there, at each request's first admission
  // (a preempted request's recompute is not a new query).
  int64_t prefix_cache_queries = 0;
  int64_t prefix_cache_hits = 0;
  // Of those hits, positions recomputed to rebuild ring state (replay policies), and hits
  // restored approximately (the bounded `replay` policy).
  int64_t prefix_replayed_tokens = 0;
  int64_t prefix_approximate_restores = 0;
  int64_t preemptions = 0;
  // PD handoff imports at first admission (Scheduler::add with a state): successful ones
  // and the positions they covered; failed ones; prompt tokens then computed locally.
  int64_t handoff_imports = 0;
  int64_t handoff_imported_tokens = 0;
  int64_t handoff_import_failures = 0;
  int64_t handoff_recomputed_tokens = 0;
  // Speculative rollbacks the runner could not cut back, recomputed from the prefix cache
  // instead, and the positions recomputed.
  int64_t spec_rollback_recomputes = 0;
  int64_t spec_rollback_recomputed_tokens = 0;
};

class Scheduler {
 public:
  Scheduler(ModelRunner* runner, SchedulerOptions options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  const SchedulerOptions& options() const { return options_; }

  // Queues a new request. `seq` must be unused; `prompt` non-empty. Lower `priority`
  // runs first (the priority hook); equal priorities are FCFS.
  // `handoff` (PD decode role): a verified state of the prompt's first num_tokens positions,
  // imported at the first admission right after the prefix lookup
  // (ModelRunner::import_handoff); if that fails, `fail_on_import_error` fails the request
  // with the error, otherwise its prompt is computed locally. A re-admission after
  // preemption recomputes locally (the state is dropped after the first admission).
  void add(SeqId seq, std::vector<int32_t> prompt, int32_t priority = 0,
           std::shared_ptr<const HandoffState> handoff = nullptr,
           bool fail_on_import_error = true);
  // Removes a request wherever it is and releases every state kind it holds in the runner
  // right away. Unknown ids are ignored (idempotent).
  void remove(SeqId seq);
  // Appends a sampled token; it is fed in a later step. Precondition: the request's last
  // plan item wanted logits and was committed.
  void append_token(SeqId seq, int32_t token);

  // Speculative decoding (sched/spec_decode.h). `drafts` (non-empty) follow the request's
  // last token, which must be sampled and not yet fed (a decode); they are fed with it as
  // one item whose logits are all returned (all_logits), or dropped by plan() when the
  // step's budget or the runner's capacity cannot take them all. Returns false (nothing
  // changed) when the request is not in that state.
  bool set_drafts(SeqId seq, std::span<const int32_t> drafts);
  // After the verify step was committed: keeps the first `accepted` drafts as generated
  // tokens and rolls the runner's state back to them (ModelRunner::truncate_sequence; if the
  // runner cannot, its state is rebuilt from the prefix cache and the rest is fed again).
  // The engine then appends the target's next token with append_token. A runner that
  // cannot take the sequence back while rebuilding preempts it (recomputed when re-admitted).
  void resolve_drafts(SeqId seq, int64_t accepted);

  // Plans the next step. Performs admissions (runner.add_sequence + prefix lookup) and
  // capacity preemptions as side effects. The plan's spans stay valid until the next call
  // that changes requests.
  SchedulePlan plan();
  // The runner accepted the plan: advances every scheduled request's computed count.
  void commit(const SchedulePlan& plan);
  // The runner rejected the plan with ResourceExhausted (nothing advanced). Preempts the
  // last request of the plan in priority order (recompute). If the plan held a single
  // request that is already first in line, it can never run: it is removed and returned
  // as failed. Returns the requests that failed.
  std::vector<FailedRequest> preempt_for_retry(const SchedulePlan& plan);

  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  bool contains(SeqId seq) const { return requests_.count(seq.value) != 0; }
  bool is_running(SeqId seq) const;
  // All tokens of a request (prompt + generated). Precondition: contains(seq).
  const std::vector<int32_t>& tokens(SeqId seq) const;
  int64_t num_computed(SeqId seq) const;
  // Prefix-cache hit tokens at the request's first admission.
  int64_t cached_prompt_tokens(SeqId seq) const;
  // How that hit was restored (ModelRunner::prefix_restore_info at the first admission).
  PrefixRestoreInfo prefix_restore(SeqId seq) const;
  const SchedulerCounters& counters() const { return counters_; }

  // Verifies internal consistency (CHECK-fails on violation). For tests.
  void check_invariants() const;

 private:
  struct Request {
    SeqId seq;
    int32_t priority = 0;
    int64_t arrival = 0;
    std::vector<int32_t> tokens;
    int64_t prompt_len = 0;  // tokens[0, prompt_len) is the prompt; the rest were generated
    int64_t num_computed = 0;
    bool in_runner = false;
    bool admitted_once = false;
    int64_t cached_prompt_tokens = 0;
    PrefixRestoreInfo restore;
    std::shared_ptr<const HandoffState> handoff;
    bool fail_on_import_error = true;
    int64_t num_drafts = 0;     // the last num_drafts tokens are speculative drafts
    bool recomputing = false;   // rolled back by recompute: tokens past num_computed unfed
  };
  void drop_drafts(Request* r);
  static bool before(const Request& a, const Request& b);
  void insert_waiting(Request* r);
  void preempt(Request* r);
  void release(Request* r);
  Request* find(SeqId seq);
  const Request* find(SeqId seq) const;

  ModelRunner* runner_;
  SchedulerOptions options_;
  int64_t next_arrival_ = 0;
  std::map<int64_t, Request> requests_;  // by SeqId value
  std::vector<Request*> running_;        // sorted by before()
  std::deque<Request*> waiting_;         // sorted by before()
  SchedulerCounters counters_;
  bool hold_admission_ = false;  // set by preempt_for_retry for one plan
};

}  // namespace strata
