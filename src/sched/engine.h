// Engine: the engine loop. One thread drives Scheduler + ModelRunner: each iteration it
// takes new requests and cancellations, plans a mixed prefill/decode step, runs it,
// samples one token per finished item, detokenizes, checks stop conditions and pushes
// events to each request's RequestStream.
//
// Lifecycle of a request: submit() validates and queues it (errors: InvalidArgument for a
// bad prompt or parameters, OutOfRange when the prompt does not leave room for one
// generated token in the context, Unavailable after shutdown()). It ends exactly once with
// a final event: finish reason stop (EOS or BOS sampled — unless ignore_eos —, a stop
// token, a stop string; the stop token ends the event's ids but adds no text), length (max_tokens or
// the context is full: prompt + generated <= max_context), cancelled (cancel(), client
// gone), or error (the runner failed, it can never fit, shutdown). On every end the
// scheduler releases all of the sequence's state in the runner before the next step.
// max_tokens larger than the room left in the context is clipped (finish reason length).
//
// Timing (for /metrics, vLLM definitions): queue time = arrival -> first scheduled;
// TTFT = arrival -> first token; ITL = gaps between consecutive tokens; e2e = arrival ->
// end. The observer is called on the engine thread; keep it cheap. Stats and the observer
// are updated before a request's final event is pushed, so a client that saw its request
// end and then reads /metrics sees its state released and its latencies recorded.
//
// Thread safety: submit/cancel/stats/shutdown are safe from any thread. step_once() is for
// tests that drive the engine without its thread (do not mix with start()).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/status.h"
#include "exec/model_runner.h"
#include "model/tokenizer.h"
#include "sched/request.h"
#include "sched/scheduler.h"
#include "sched/spec_decode.h"

namespace strata {

struct EngineOptions {
  SchedulerOptions scheduler;
  uint64_t seed = 0;            // base seed for requests without their own
  int64_t max_waiting = 4096;   // submit() fails with ResourceExhausted beyond this
  // Speculative decoding (sched/spec_decode.h; off by default): decoding requests get drafts
  // from the proposer, verified in one pass; the output equals non-speculative decoding.
  SpeculativeConfig speculative{};
};

struct RequestTimings {
  RequestId id = 0;
  int64_t cached_tokens = 0;    // prompt tokens served from the prefix cache
  std::string error;            // finish reason error: the message
  double queue_s = 0;           // arrival -> first scheduled (0 if never scheduled)
  double ttft_s = -1;           // -1 when no token was produced
  double e2e_s = 0;
  std::vector<double> itl_s;    // one per token after the first
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  FinishReason finish_reason = FinishReason::kNone;
};

class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  virtual void on_request_finished(const RequestTimings& timings) = 0;
};

// One request the engine holds, as of the latest step (EngineStats::requests; the dashboard).
// phase: "waiting" (queued or preempted), "prefill" (prompt positions left), "verify" (its
// latest step verified speculative drafts), "decode".
struct RequestSnapshot {
  RequestId id = 0;
  std::string phase;
  int64_t prompt_tokens = 0;
  int64_t computed_tokens = 0;   // positions whose state the runner holds
  int64_t generated_tokens = 0;
  int64_t last_step_tokens = 0;  // positions its latest step computed (a prefill chunk, 1 + drafts)
  int64_t cached_tokens = 0;     // prompt positions from the prefix cache or an import
  bool imported = false;         // admitted with a PD handoff state
  double age_s = 0;              // since arrival
};

struct EngineStats {
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  int64_t prompt_tokens_total = 0;       // prompt tokens of requests whose prefill finished
  int64_t generation_tokens_total = 0;
  int64_t prefix_cache_queries_total = 0;
  int64_t prefix_cache_hits_total = 0;
  int64_t prefix_replayed_tokens_total = 0;       // scheduler counters (replay policies)
  int64_t prefix_approximate_restores_total = 0;
  int64_t num_preemptions_total = 0;
  int64_t requests_finished_total = 0;
  int64_t requests_failed_total = 0;     // finish reason error
  int64_t steps_total = 0;
  double schedule_seconds_total = 0;     // planning + sampling/detokenizing
  double forward_seconds_total = 0;      // runner.step
  // Multi-rank collectives inside the forwards (this rank's view, rank 0 in a server): the
  // expert-parallel MoE dispatch / combine and the DCP exchanges (dist/expert_comm.h, dcp_comm.h).
  double moe_collective_seconds_total = 0;
  double dcp_exchange_seconds_total = 0;
  double pp_boundary_seconds_total = 0;  // pipeline stage boundaries (dist/pipe_comm.h)
  std::vector<CacheUsage> cache_usage;   // after the latest step
  int64_t prefix_cache_bytes_per_unit = 0;  // ModelRunner::prefix_cache_bytes_per_unit()
  // PD handoff (SubmitOptions): states exported (prefill role); states imported at
  // admission, the positions they covered, imports that failed (by the policy: the request
  // ended with the error, or its prompt was computed locally) and the prompt tokens computed
  // locally after a failed import (recompute policy).
  int64_t kv_transfer_exports_total = 0;
  int64_t kv_transfer_imports_total = 0;
  int64_t kv_transfer_imported_tokens_total = 0;
  int64_t kv_transfer_import_failures_total = 0;
  int64_t kv_transfer_recomputed_tokens_total = 0;
  // Speculative decoding (vLLM's spec_decode_* counters): verify passes with drafts, drafts
  // proposed, drafts accepted, accepted drafts per draft position (index 0 = first draft);
  // rollbacks the runner could not cut back and the positions then recomputed.
  int64_t spec_decode_num_drafts = 0;
  int64_t spec_decode_num_draft_tokens = 0;
  int64_t spec_decode_num_accepted_tokens = 0;
  std::vector<int64_t> spec_decode_num_accepted_tokens_per_pos;
  int64_t spec_decode_rollback_recomputes = 0;
  int64_t spec_decode_rollback_recomputed_tokens = 0;
  // The requests the engine held at the end of the latest step (at most kMaxRequestSnapshots,
  // by request id).
  std::vector<RequestSnapshot> requests;
  static constexpr size_t kMaxRequestSnapshots = 256;
};

class Engine {
 public:
  // `runner` must outlive the engine. `tokenizer` may be null (no text, no stop strings).
  Engine(ModelRunner* runner, const Tokenizer* tokenizer, EngineOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const ModelInfo& model_info() const { return runner_->info(); }
  // The runner's prefix-cache hit granularity in tokens (0: no prefix cache), read once.
  int64_t prefix_alignment() const { return prefix_alignment_; }
  const Tokenizer* tokenizer() const { return tokenizer_; }
  // The runner's state graph (null: the runner has none; immutable, share freely).
  const StateGraph* state_graph() const { return runner_->state_graph(); }
  void set_observer(EngineObserver* observer);  // call before start()

  void start();
  // Stops the loop; unfinished requests end with Unavailable. Idempotent.
  void shutdown();
  // False once shutdown() began.
  bool serving() const;

  // `opts`: PD disaggregation roles (request.h SubmitOptions); an import_state must be a
  // verified state (state/handoff.h verify_handoff) whose ids are the prompt's first
  // num_tokens (checked again at admission).
  StatusOr<std::shared_ptr<RequestStream>> submit(std::vector<int32_t> prompt,
                                                  GenerationParams params,
                                                  SubmitOptions opts = {});
  void cancel(RequestId id);
  EngineStats stats() const;
  // The prefix-cache hit a request with `prompt` would get if admitted now
  // (ModelRunner::peek_cached_prefix), asked on the engine thread between steps: the call
  // waits for the current step. 0 once shutdown() began. A decode server uses it to fetch
  // only the rows it does not hold (the cache may still change before the admission).
  int64_t peek_cached_prefix(std::vector<int32_t> prompt);
  // Tests: replaces the proposer of options.speculative (before start(); not null).
  void set_proposer(std::unique_ptr<DraftProposer> p) { proposer_ = std::move(p); }

  // Test hook: runs one iteration on the calling thread; false when there was no work.
  bool step_once();
  // Test hook (engine thread / step_once callers only): CHECK-fails on inconsistency.
  void check_invariants() const;

 private:
  // Every token's bytes for constrained decoding (built on first use; engine thread).
  std::shared_ptr<const std::vector<std::string>> json_token_bytes();
  std::shared_ptr<const std::vector<std::string>> json_token_bytes_;
  struct Active;
  void loop();
  bool iterate();
  // `appended`: the token is already in the scheduler's tokens (an accepted draft).
  // `value_closed`: whether a response_format value closed with this token (-1: ask the
  // sampler, whose constraint state is this token's unless drafts were sampled past it).
  void handle_token(Active& a, int32_t token, const TokenLogprob* logprob, bool appended = false,
                    int value_closed = -1);
  // Speculative decoding: proposes drafts for decoding requests before planning; samples a
  // verify item's rows and commits what was accepted (returns false if the request ended).
  void propose_drafts();
  void accept_drafts(Active& a, std::span<const float> rows, int64_t k);
  void finish(Active& a, FinishReason reason, Status error = Status(),
              std::shared_ptr<const HandoffState> handoff = nullptr);
  // with_requests = false keeps the request snapshots of the last full publish (a finished
  // request stays listed until the step's end).
  void publish_stats(bool with_requests = true);
  std::string decode_piece(Active& a, int32_t token);

  ModelRunner* runner_;
  const Tokenizer* tokenizer_;
  EngineOptions options_;
  Scheduler scheduler_;
  EngineObserver* observer_ = nullptr;
  std::unique_ptr<DraftProposer> proposer_;
  int64_t prefix_alignment_ = 0;

  struct Incoming {
    RequestId id;
    std::vector<int32_t> prompt;
    GenerationParams params;
    SubmitOptions opts;
    std::shared_ptr<RequestStream> stream;
    std::chrono::steady_clock::time_point arrival;
  };
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Incoming> incoming_;
  std::vector<RequestId> cancels_;
  struct Probe {
    std::vector<int32_t> tokens;
    std::shared_ptr<std::promise<int64_t>> result;
  };
  std::vector<Probe> probes_;
  bool stopping_ = false;
  bool stopped_ = false;
  RequestId next_id_ = 1;
  std::thread thread_;

  std::map<RequestId, std::unique_ptr<Active>> active_;  // engine thread only

  mutable std::mutex stats_mu_;
  EngineStats stats_;
  EngineStats counters_;  // engine thread's running totals
};

}  // namespace strata
