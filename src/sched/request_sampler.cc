#include "sched/request_sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace strata {

SamplingParams RequestSampler::to_sampling_params(const GenerationParams& p,
                                                  uint64_t fallback_seed) {
  SamplingParams s;
  s.temperature = static_cast<float>(p.temperature);
  s.top_k = p.top_k;  // -1 and 0 both mean off
  s.top_p = static_cast<float>(p.top_p);
  s.min_p = static_cast<float>(p.min_p);
  s.seed = p.seed.value_or(fallback_seed);
  s.logprobs = p.logprobs >= 0;
  s.top_logprobs = std::max<int32_t>(0, p.logprobs);
  return s;
}

RequestSampler::RequestSampler(const GenerationParams& params, uint64_t fallback_seed,
                               std::span<const int32_t> prompt, std::vector<int32_t> stop_ids)
    : want_logprobs_(params.logprobs >= 0),
      sampler_(to_sampling_params(params, fallback_seed)),
      presence_(params.presence_penalty),
      frequency_(params.frequency_penalty),
      repetition_(params.repetition_penalty),
      bias_(params.logit_bias),
      min_tokens_(params.min_tokens),
      stop_ids_(std::move(stop_ids)) {
  if (repetition_ != 1.0) {
    for (int32_t t : prompt) {
      if (t < 0) continue;
      if (static_cast<size_t>(t) >= seen_.size()) seen_.resize(t + 1, 0);
      seen_[t] = 1;
    }
  }
}

bool RequestSampler::processes() const {
  return presence_ != 0.0 || frequency_ != 0.0 || repetition_ != 1.0 || !bias_.empty() ||
         (sampled_ < min_tokens_ && !stop_ids_.empty()) || json_ != nullptr;
}

SampleResult RequestSampler::sample(std::span<const float> logits) {
  SampledToken t;
  if (!processes()) {
    t = sampler_.sample(logits);
  } else {
    work_.assign(logits.begin(), logits.end());
    const int64_t V = static_cast<int64_t>(work_.size());
    if (repetition_ != 1.0) {
      const float r = static_cast<float>(repetition_);
      for (int64_t i = 0; i < std::min<int64_t>(V, static_cast<int64_t>(seen_.size())); ++i)
        if (seen_[i]) work_[i] = work_[i] > 0.0f ? work_[i] / r : work_[i] * r;
    }
    if (presence_ != 0.0 || frequency_ != 0.0) {
      for (int64_t i = 0; i < std::min<int64_t>(V, static_cast<int64_t>(out_count_.size())); ++i) {
        const int32_t c = out_count_[i];
        if (c > 0) work_[i] -= static_cast<float>(presence_ + frequency_ * c);
      }
    }
    for (const auto& [id, b] : bias_)
      if (id >= 0 && id < V) work_[id] += b;
    // min_tokens holds back the stop ids -- unless a JSON constraint is complete, when they
    // are all that may follow.
    if (sampled_ < min_tokens_ && !(json_ && json_->complete()))
      for (int32_t id : stop_ids_)
        if (id >= 0 && id < V) work_[id] = -std::numeric_limits<float>::infinity();
    if (json_) json_->apply(work_);
    t = sampler_.sample(work_);
    if (want_logprobs_) {
      // Logprobs of the raw distribution (vLLM's default "raw_logprobs").
      double mx = -1e300;
      for (float v : logits) mx = std::max<double>(mx, v);
      double z = 0.0;
      for (float v : logits) z += std::exp(static_cast<double>(v) - mx);
      const double lz = mx + std::log(z);
      t.logprob = static_cast<float>(logits[t.id] - lz);
      // the alternatives: the top `logprobs` of the raw distribution, ties to the lower id
      const int64_t k = std::min<int64_t>(static_cast<int64_t>(t.top.size()), V);
      std::vector<int32_t> idx(V);
      for (int64_t i = 0; i < V; ++i) idx[i] = static_cast<int32_t>(i);
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
      });
      t.top.clear();
      for (int64_t i = 0; i < k; ++i) t.top.emplace_back(idx[i], static_cast<float>(logits[idx[i]] - lz));
    }
  }
  if (t.id >= 0) {
    if (json_) json_->accept(t.id);
    if (presence_ != 0.0 || frequency_ != 0.0) {
      if (static_cast<size_t>(t.id) >= out_count_.size()) out_count_.resize(t.id + 1, 0);
      ++out_count_[t.id];
    }
    if (repetition_ != 1.0) {
      if (static_cast<size_t>(t.id) >= seen_.size()) seen_.resize(t.id + 1, 0);
      seen_[t.id] = 1;
    }
  }
  ++sampled_;
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
