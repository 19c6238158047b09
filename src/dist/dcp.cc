// DCP building blocks; see dcp.h.
#include "dist/dcp.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace strata::dcp {

int owner(int64_t g, int64_t S, int Wd) {
  STRATA_CHECK(S >= 1 && Wd >= 1 && g >= 0);
  return static_cast<int>((g / S) % Wd);
}

int64_t local_index(int64_t g, int64_t S, int Wd) {
  STRATA_CHECK(S >= 1 && Wd >= 1 && g >= 0);
  return (g / (S * Wd)) * S + g % S;
}

int64_t global_index(int rank, int64_t local, int64_t S, int Wd) {
  STRATA_CHECK(S >= 1 && Wd >= 1 && rank >= 0 && rank < Wd && local >= 0);
  return (local / S) * S * Wd + static_cast<int64_t>(rank) * S + local % S;
}

int64_t owned_count(int64_t n, int rank, int64_t S, int Wd) {
  STRATA_CHECK(n >= 0);
  const int64_t period = S * Wd;
  const int64_t full = n / period, rest = n % period;
  return full * S + std::clamp<int64_t>(rest - rank * S, 0, S);
}

std::vector<Candidate> local_topk(std::vector<Candidate> c, int64_t k) {
  STRATA_CHECK(k >= 0);
  const int64_t m = std::min<int64_t>(k, static_cast<int64_t>(c.size()));
  std::partial_sort(c.begin(), c.begin() + m, c.end(), ranks_before);
  c.resize(static_cast<size_t>(m));
  c.resize(static_cast<size_t>(k), Candidate{});
  return c;
}

std::vector<int64_t> merge_topk(const std::vector<std::vector<Candidate>>& per_rank, int64_t k) {
  std::vector<Candidate> all;
  for (const auto& r : per_rank) all.insert(all.end(), r.begin(), r.end());
  all = local_topk(std::move(all), k);
  std::vector<int64_t> out;
  for (const Candidate& c : all)
    if (c.pos >= 0 && c.score != -std::numeric_limits<float>::infinity()) out.push_back(c.pos);
  std::sort(out.begin(), out.end());
  return out;
}

Partial partial_attention(std::span<const float> q, std::span<const float> keys,
                          std::span<const float> values, int64_t n, int64_t dim, float scale) {
  Partial p;
  p.o.assign(static_cast<size_t>(dim), 0.f);
  if (n == 0) return p;
  std::vector<double> z(static_cast<size_t>(n));
  double zmax = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    double d = 0;
    for (int64_t i = 0; i < dim; ++i) d += double(q[i]) * keys[j * dim + i];
    z[j] = d * scale;
    zmax = std::max(zmax, z[j]);
  }
  double sum = 0;
  std::vector<double> acc(static_cast<size_t>(dim), 0.0);
  for (int64_t j = 0; j < n; ++j) {
    const double w = std::exp(z[j] - zmax);
    sum += w;
    for (int64_t i = 0; i < dim; ++i) acc[i] += w * values[j * dim + i];
  }
  for (int64_t i = 0; i < dim; ++i) p.o[i] = static_cast<float>(acc[i] / sum);
  p.lse = static_cast<float>(zmax + std::log(sum));
  return p;
}

void merge_partials(std::span<const Partial> parts, int64_t dim, float sink, float* out) {
  double m = -INFINITY;
  for (const Partial& p : parts) m = std::max(m, double(p.lse));
  std::fill(out, out + dim, 0.f);
  if (m == -INFINITY) return;  // every shard empty: nothing attended, the sink takes it all
  double sum = 0;
  for (const Partial& p : parts)
    if (p.lse != -INFINITY) sum += std::exp(double(p.lse) - m);
  const double L = m + std::log(sum);
  std::vector<double> acc(static_cast<size_t>(dim), 0.0);
  for (const Partial& p : parts) {
    if (p.lse == -INFINITY) continue;  // an empty shard (its o is 0; 0 * NaN never happens)
    const double w = std::exp(double(p.lse) - L);
    for (int64_t i = 0; i < dim; ++i) acc[i] += w * p.o[i];
  }
  // sigmoid(L - sink) = e^L / (e^L + e^sink), the reference's denominator with the sink.
  const double g = 1.0 / (1.0 + std::exp(double(sink) - L));
  for (int64_t i = 0; i < dim; ++i) out[i] = static_cast<float>(acc[i] * g);
}

}  // namespace strata::dcp
