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
#include <span>

#include "exec/sampler.h"
#include "sched/request.h"

namespace strata {

struct SampleResult {
  int32_t token = -1;
  TokenLogprob logprob;  // filled when params.logprobs >= 0
};

class RequestSampler {
 public:
  RequestSampler(const GenerationParams& params, uint64_t fallback_seed);
  SampleResult sample(std::span<const float> logits);

 private:
  static SamplingParams to_sampling_params(const GenerationParams& p, uint64_t fallback_seed);
  bool want_logprobs_;
  Sampler sampler_;
};

}  // namespace strata
