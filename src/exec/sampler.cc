#include "exec/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace strata {

Status validate_sampling_params(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature))
    return invalid_argument("temperature must be >= 0, got {}", p.temperature);
  if (p.top_k < -1) return invalid_argument("top_k must be -1 or 0 (off) or positive, got {}", p.top_k);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    return invalid_argument("top_p must be in (0, 1], got {}", p.top_p);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
    return invalid_argument("min_p must be in [0, 1], got {}", p.min_p);
  if (p.top_logprobs < 0 || p.top_logprobs > 20)
    return invalid_argument("top_logprobs must be in [0, 20], got {}", p.top_logprobs);
  return ok_status();
}

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  return best;
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

SampledToken Sampler::sample(std::span<const float> logits) {
  SampledToken out;
  const int64_t n = static_cast<int64_t>(logits.size());
  if (n == 0) return out;
  if (params_.temperature == 0.0f || params_.top_k == 1) {
    out.id = argmax(logits);
  } else {
    const double inv_t = 1.0 / params_.temperature;
    double mx = logits[0];
    for (float v : logits) mx = std::max<double>(mx, v);
    cand_.resize(n);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double e = std::exp((logits[i] - mx) * inv_t);
      cand_[i] = {e, static_cast<int32_t>(i)};
      sum += e;
    }
    for (auto& c : cand_) c.first /= sum;
    const bool filter = (params_.top_k > 0 && params_.top_k < n) || params_.top_p < 1.0f ||
                        params_.min_p > 0.0f;
    int64_t keep = n;
    if (filter) {
      auto by_prob = [](const std::pair<double, int32_t>& a, const std::pair<double, int32_t>& b) {
        return a.first != b.first ? a.first > b.first : a.second < b.second;
      };
      // Only the head of the sorted order is ever used: sort the m most probable and widen
      // m (x8) until the filters' cut falls inside it. Each step moves the next most
      // probable ones to [sorted, m) with a selection (O(n)) and sorts just those; as
      // by_prob is a total order, [0, m) is then exactly a full sort's first m. A peaked
      // row's cut needs a few hundred tokens, not a full sort of the vocabulary per token.
      // A row already in order (every logit tied: candidates start in id order) needs no
      // selection, which would only scramble it before the sort.
      int64_t sorted = std::is_sorted(cand_.begin(), cand_.end(), by_prob) ? n : 0;
      for (int64_t m = std::min<int64_t>(n, 256);; m = std::min<int64_t>(n, m * 8)) {
        if (sorted < m) {
          if (m < n) std::nth_element(cand_.begin() + sorted, cand_.begin() + m, cand_.end(), by_prob);
          std::sort(cand_.begin() + sorted, cand_.begin() + m, by_prob);
          sorted = m;
        }
        keep = n;
        bool cut = false;  // the cut is decided inside [0, m)
        if (params_.top_k > 0 && params_.top_k <= m) {
          keep = params_.top_k;
          cut = true;
        }
        if (params_.top_p < 1.0f) {
          double cum = 0;
          int64_t k = 0;
          while (k < std::min(keep, m)) {
            cum += cand_[k].first;
            ++k;
            if (cum >= params_.top_p) {
              keep = k;
              cut = true;
              break;
            }
          }
        }
        if (params_.min_p > 0.0f) {
          const double thr = params_.min_p * cand_[0].first;
          int64_t k = 1;
          while (k < std::min(keep, m) && cand_[k].first >= thr) ++k;
          if (k < std::min(keep, m) || k == keep) {
            keep = k;
            cut = true;
          }
        }
        if (cut || m == n) break;
      }
    }
    double mass = 0;
    for (int64_t i = 0; i < keep; ++i) mass += cand_[i].first;
    const double u = static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0) * mass;
    double cum = 0;
    out.id = cand_[keep - 1].second;
    for (int64_t i = 0; i < keep; ++i) {
      cum += cand_[i].first;
      if (u < cum) {
        out.id = cand_[i].second;
        break;
      }
    }
  }
  if (params_.logprobs || params_.top_logprobs > 0) {
    double mx = logits[0];
    for (float v : logits) mx = std::max<double>(mx, v);
    double sum = 0;
    for (float v : logits) sum += std::exp(v - mx);
    const double lse = mx + std::log(sum);
    out.logprob = static_cast<float>(logits[out.id] - lse);
    if (params_.top_logprobs > 0) {
      std::vector<int32_t> idx(n);
      for (int64_t i = 0; i < n; ++i) idx[i] = static_cast<int32_t>(i);
      const int64_t k = std::min<int64_t>(params_.top_logprobs, n);
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
        return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
      });
      for (int64_t i = 0; i < k; ++i)
        out.top.emplace_back(idx[i], static_cast<float>(logits[idx[i]] - lse));
    }
  }
  return out;
}

Status check_logits(std::span<const float> logits) {
  bool faulty = false;
  for (float v : logits) faulty |= !(v < std::numeric_limits<float>::infinity());
  if (!faulty) return ok_status();
  int64_t nan = 0, inf = 0;
  for (float v : logits) {
    nan += std::isnan(v) ? 1 : 0;
    inf += v == std::numeric_limits<float>::infinity() ? 1 : 0;
  }
  return Status(StatusCode::kInternal,
                fmt::format("the model produced NaN or +inf logits ({} NaN, {} +inf of {}): a "
                            "numerical fault or corrupt weights",
                            nan, inf, logits.size()));
}

}  // namespace strata
