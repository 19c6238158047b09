// Sampler: picks the next token from a row of logits.
//
// Modes: greedy (temperature == 0, or top_k == 1): argmax, ties to the lowest id (as
// llama2.c run.c). Otherwise p = softmax(logits / temperature) (in double), then the
// filters in this order: top-k (the k most likely), top-p / nucleus (the smallest prefix of
// the tokens sorted by p descending, ties by id, whose mass reaches top_p; Holtzman et al.
// 2019), min-p (keep p >= min_p * p_max; Nguyen et al. 2024); renormalize; draw u in [0, 1)
// from the request's own std::mt19937_64(seed) as (rng() >> 11) * 2^-53 and take the
// first candidate whose cumulative mass exceeds u (candidates in id order when no filter
// is active, else sorted by p descending). Same seed + same logits -> same tokens on
// every platform.
// Logprobs: log_softmax of the raw logits (temperature 1, before filters), for the chosen
// token and the top-n tokens (sorted by logprob descending, ties by id).
//
// Thread safety: a Sampler holds its RNG; use one per request, from one thread.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "base/status.h"

namespace strata {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  int32_t top_k = 0;         // 0 or -1: off (vLLM spells off -1)
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  uint64_t seed = 0;
  int32_t top_logprobs = 0;  // how many alternatives to report (0: none)
  bool logprobs = false;     // compute the chosen token's logprob
};

// InvalidArgument naming the field (negative temperature, top_p outside (0, 1], ...).
Status validate_sampling_params(const SamplingParams& p);

struct SampledToken {
  int32_t id = -1;
  float logprob = 0.0f;                            // when logprobs or top_logprobs > 0
  std::vector<std::pair<int32_t, float>> top;      // top_logprobs alternatives
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  SampledToken sample(std::span<const float> logits);
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<double, int32_t>> cand_;  // scratch
};

// argmax with ties to the lowest index.
int32_t argmax(std::span<const float> logits);

// Ok when every logit is a number below +inf (-inf is a legitimate mask); otherwise
// Internal naming the fault: a NaN or +inf logit comes from a numerical fault or corrupt
// weights, and a token drawn from it would be garbage. Callers end the request with it.
// O(V), thread-safe.
Status check_logits(std::span<const float> logits);

}  // namespace strata
