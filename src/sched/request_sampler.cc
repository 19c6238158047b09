#include "sched/request_sampler.h"

#include <algorithm>

namespace strata {

SamplingParams RequestSampler::to_sampling_params(const GenerationParams& p,
                                                  uint64_t fallback_seed) {
  SamplingParams s;
  s.temperature = static_cast<float>(p.temperature);
  s.top_k = std::max<int32_t>(0, p.top_k);  // -1 (off) -> 0 (off)
  s.top_p = static_cast<float>(p.top_p);
  s.min_p = static_cast<float>(p.min_p);
  s.seed = p.seed.value_or(fallback_seed);
  s.logprobs = p.logprobs >= 0;
  s.top_logprobs = std::max<int32_t>(0, p.logprobs);
  return s;
}

RequestSampler::RequestSampler(const GenerationParams& params, uint64_t fallback_seed)
    : want_logprobs_(params.logprobs >= 0), sampler_(to_sampling_params(params, fallback_seed)) {}

SampleResult RequestSampler::sample(std::span<const float> logits) {
  SampledToken t = sampler_.sample(logits);
  SampleResult r;
  r.token = t.id;
  if (want_logprobs_) {
    r.logprob.token = t.id;
    r.logprob.logprob = t.logprob;
    r.logprob.top = std::move(t.top);
  }
  return r;
}

}  // namespace strata
