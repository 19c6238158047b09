// The sampling filters of exec/sampler.h stated plainly, with a full sort of every candidate:
// the reference that Sampler (which sorts only the head of the order) is tested and
// benchmarked against (sampler_test.cc, `strata bench sampler`). Same arithmetic as Sampler
// (softmax in double with logits scaled by 1/temperature, then normalized; u from
// mt19937_64 >> 11 times the kept mass), so both give the same token for the same rng state.
// Not for serving: O(V log V) per token.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "exec/sampler.h"

namespace strata {

// Draws one token from `logits` under p's temperature (> 0) and filters (top_k, top_p, min_p;
// no greedy shortcut, no logprobs), advancing `rng` by one draw.
inline int32_t sample_by_full_sort(const SamplingParams& p, std::span<const float> logits,
                                   std::mt19937_64& rng) {
  const int64_t n = static_cast<int64_t>(logits.size());
  double mx = logits[0];
  for (float v : logits) mx = std::max<double>(mx, v);
  const double inv_t = 1.0 / p.temperature;
  std::vector<std::pair<double, int32_t>> c(n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (c[i].first = std::exp((logits[i] - mx) * inv_t));
  for (int64_t i = 0; i < n; ++i) c[i] = {c[i].first / sum, static_cast<int32_t>(i)};
  // With a filter active: p descending, ties by id; else id order.
  if ((p.top_k > 0 && p.top_k < n) || p.top_p < 1.0f || p.min_p > 0.0f)
    std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
  int64_t keep = p.top_k > 0 ? std::min<int64_t>(n, p.top_k) : n;
  if (p.top_p < 1.0f) {  // the shortest prefix whose mass reaches top_p
    double cum = 0;
    int64_t k = 0;
    while (k < keep && cum < p.top_p) cum += c[k++].first;
    keep = k;
  }
  if (p.min_p > 0.0f) {  // p >= min_p * p_max
    int64_t k = 1;
    while (k < keep && c[k].first >= p.min_p * c[0].first) ++k;
    keep = k;
  }
  double mass = 0;
  for (int64_t i = 0; i < keep; ++i) mass += c[i].first;
  const double u = static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0) * mass;
  double cum = 0;
  for (int64_t i = 0; i < keep; ++i)
    if (u < (cum += c[i].first)) return c[i].second;
  return c[keep - 1].second;
}

}  // namespace strata
