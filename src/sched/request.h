// Request-level types shared by the engine loop and the HTTP front end: generation
// parameters, the events a request produces, and RequestStream, the thread-safe channel
// through which the engine thread hands a request's output to the thread serving it.
//
// Units: token counts; times are steady_clock time points.
// Thread safety: RequestStream is safe for one producer (engine) and one consumer.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace strata {

using RequestId = int64_t;
struct HandoffState;  // state/handoff.h
class JsonSchema;    // sched/json_schema.h

struct GenerationParams {
  int64_t max_tokens = 16;           // generated tokens at most (>= 1)
  // Sampling. temperature 0 = greedy (argmax, lowest id on ties). Filters apply in the
  // order top-k, top-p, min-p to the temperature-scaled distribution.
  double temperature = 1.0;
  double top_p = 1.0;                // (0, 1]
  int32_t top_k = -1;                // -1 or 0 = off
  double min_p = 0.0;                // [0, 1]
  std::optional<uint64_t> seed;      // per-request RNG seed: same seed + prompt = same text
  std::vector<std::string> stop;     // stop strings (not included in the output)
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  // vLLM's min_tokens: until this many tokens are generated, the stop tokens (EOS and BOS
  // unless ignore_eos, and stop_token_ids) cannot be sampled (their logits are -inf). Stop
  // strings are not affected. Must be <= max_tokens.
  int64_t min_tokens = 0;
  // OpenAI's response_format {"type": "json_object"}: constrained decoding -- every sampled
  // token keeps the text a prefix of a JSON object (sched/json_constraint.h), and once the
  // object closes only EOS (or a stop_token_id) may follow. Needs a tokenizer.
  bool json_object = false;
  // OpenAI's response_format {"type": "json_schema"}: the same, with the text kept the
  // prefix of a JSON value valid under this compiled schema (sched/json_schema.h); the
  // request ends where the value does. Takes precedence over json_object.
  std::shared_ptr<const JsonSchema> json_schema;
  // Log-probabilities: -1 = none; k >= 0 = logprob of each chosen token plus the top k
  // alternatives, from the model's raw distribution (log_softmax of the logits).
  int32_t logprobs = -1;
  int32_t priority = 0;              // lower runs first (scheduler priority hook)
  // Logit processing before sampling (OpenAI / vLLM semantics; the reported logprobs stay
  // those of the raw distribution, as vLLM's default):
  //   logit[t] -= presence_penalty * (count[t] > 0) + frequency_penalty * count[t]
  //     (count = occurrences of t among the generated tokens; each in [-2, 2]);
  //   repetition_penalty r > 0 (1 = off) on every token seen in prompt or output:
  //     logit > 0 ? logit / r : logit * r;
  //   logit[t] += bias for each (t, bias) in logit_bias (bias in [-100, 100]).
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  double repetition_penalty = 1.0;
  std::vector<std::pair<int32_t, float>> logit_bias;
};

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "abort", "error"

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // (token, logprob), best first
};

// One event of a request: new tokens and/or the end. `text` is the newly completed UTF-8
// text (held back while it could still become a stop string). `tokens` are the sampled ids,
// the stop token (EOS, BOS or one of stop_token_ids) included: they add up to
// completion_tokens; the stop token adds no text.
struct RequestEvent {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;  // one per token when requested
  std::string text;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  Status error;                        // set when finish_reason == kError
  int64_t prompt_tokens = 0;           // filled on the final event
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;           // prompt tokens served from the prefix cache
  // Of the cached prefix: positions recomputed to rebuild ring state (replay policies), and
  // whether the restore was approximate (`--prefix-restore replay`): the answer is then not
  // bit-identical to a cold run.
  int64_t replayed_tokens = 0;
  bool approximate_prefix = false;
  // Final event of a request submitted with SubmitOptions::export_state: the exported state
  // of its prompt (prefill role of PD disaggregation); null otherwise.
  std::shared_ptr<const HandoffState> handoff;
  std::string state_error;  // export_final_state: why no state was exported
};

// How a request enters the engine beyond its prompt and parameters (PD disaggregation).
struct SubmitOptions {
  // Prefill role: compute the prompt, then end the request (finish reason stop, no token
  // sampled) with its state exported into the final event's `handoff`.
  bool export_state = false;
  // Decode role: a verified state of the prompt's first num_tokens positions
  // (state/handoff.h), imported at admission instead of computing them.
  std::shared_ptr<const HandoffState> import_state;
  // When the import fails at admission: true ends the request with the error
  // (--kv-load-failure-policy fail); false computes the prompt locally (recompute).
  bool fail_on_import_error = true;
  // Validation mode (`serve --debug-state-digests`): when the request ends (not with an
  // error), its state as of its last computed position is exported into the final event's
  // `handoff` (or `state_error` says why not), so a validator can compare it row by row.
  bool export_final_state = false;
};

class Engine;

// The consumer side of a request. Destroying the last reference does not cancel; call
// cancel() (e.g. on client disconnect).
class RequestStream {
 public:
  RequestStream(RequestId id, Engine* engine) : id_(id), engine_(engine) {}
  RequestId id() const { return id_; }

  // Waits up to `timeout` for events; returns all queued ones merged into one (tokens and
  // text concatenated), or nullopt on timeout. Once the final event was returned, every
  // later call returns a copy of its status (finished, reason, error, usage) without
  // tokens or text.
  std::optional<RequestEvent> next(std::chrono::milliseconds timeout);
  // Asks the engine to stop this request and free its state.
  void cancel();

  // Producer side (engine thread).
  void push(RequestEvent event);

 private:
  RequestId id_;
  Engine* engine_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestEvent> queue_;
  std::optional<RequestEvent> final_;
};

}  // namespace strata
