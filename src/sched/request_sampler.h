// RequestSampler: one request's token sampler — an adapter from GenerationParams to the
// model-side Sampler (exec/sampler.h, which defines the sampling math: greedy at
// temperature 0, top-k -> top-p -> min-p filters, per-request std::mt19937_64, logprobs =
// log_softmax of the raw logits).
//
// Seeding: params.seed when given, else the fallback seed the engine derives from its own
// seed and the request id. One RNG per request, so a request's tokens do not depend on
// which other requests share its batch.
//
// Thread safety: one instance per request, used by the engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "exec/sampler.h"
#include "sched/token_mask.h"
#include "sched/request.h"

namespace strata {

struct SampleResult {
  int32_t token = -1;
  TokenLogprob logprob;  // filled when params.logprobs >= 0
};

class RequestSampler {
 public:
  // `prompt`: the request's prompt ids (repetition_penalty applies to them too);
  // `stop_ids`: the ids params.min_tokens holds back (EOS/BOS and stop_token_ids).
  RequestSampler(const GenerationParams& params, uint64_t fallback_seed,
                 std::span<const int32_t> prompt = {}, std::vector<int32_t> stop_ids = {});
  // Applies the penalties / logit_bias of GenerationParams to a copy of `logits` (when any
  // is set), samples, and records the sampled token for the penalties of later steps.
  // Logprobs are those of the unprocessed logits.
  SampleResult sample(std::span<const float> logits);
  // Constrained decoding (params.json_object / json_schema): every later sample() keeps to
  // `mask`.
  void set_json_constraint(std::unique_ptr<TokenConstraint> mask) { json_ = std::move(mask); }
  // The constrained JSON value has closed (the request ends there, whatever ignore_eos says).
  bool json_complete() const { return json_ && json_->complete(); }

 private:
  static SamplingParams to_sampling_params(const GenerationParams& p, uint64_t fallback_seed);
  bool processes() const;
  bool want_logprobs_;
  Sampler sampler_;
  double presence_ = 0.0, frequency_ = 0.0, repetition_ = 1.0;
  std::vector<std::pair<int32_t, float>> bias_;
  int64_t min_tokens_ = 0;
  std::vector<int32_t> stop_ids_;   // masked while fewer than min_tokens_ were sampled
  int64_t sampled_ = 0;
  std::unique_ptr<TokenConstraint> json_;
  std::vector<int32_t> out_count_;  // occurrences among generated tokens, by id (grown lazily)
  std::vector<uint8_t> seen_;       // prompt or output contains the id (repetition penalty)
  std::vector<float> work_;         // processed logits
};

}  // namespace strata
