// Tests for v41::torch_topk (v41_topk.cc): the scan that skips entries which cannot enter the
// heap gives what std::partial_sort / std::nth_element over all (value, index) pairs give, in
// the same order, on both ISAs -- rows full of ties, -inf and NaN, and sorted rows (every
// entry replaces the top).
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "exec/deepseek_v41/v41_ops.h"
#include "kernels/cpu_features.h"

namespace strata::v41 {
namespace {

// torch's CPU topk as SortingKernel.cpp writes it: every pair, then the library call.
std::vector<int32_t> topk_by_library(const std::vector<float>& v, int64_t k, bool sorted) {
  const int64_t n = static_cast<int64_t>(v.size());
  k = std::min(k, n);
  std::vector<std::pair<float, int64_t>> q(n);
  for (int64_t j = 0; j < n; ++j) q[j] = {v[j], j};
  auto cmp = [](const std::pair<float, int64_t>& x, const std::pair<float, int64_t>& y) {
    return (std::isnan(x.first) && !std::isnan(y.first)) || (x.first > y.first);
  };
  if (k * 64 <= n) {
    std::partial_sort(q.begin(), q.begin() + k, q.end(), cmp);
  } else {
    std::nth_element(q.begin(), q.begin() + k - 1, q.end(), cmp);
    if (sorted) std::sort(q.begin(), q.begin() + k - 1, cmp);
  }
  std::vector<int32_t> out;
  for (int64_t j = 0; j < k; ++j) out.push_back(static_cast<int32_t>(q[j].second));
  return out;
}

std::vector<float> row(std::mt19937& rng, int64_t n, int kind) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::uniform_int_distribution<int> small(0, 5), pct(0, 99);
  std::normal_distribution<float> nd;
  std::vector<float> v(n);
  for (int64_t j = 0; j < n; ++j) {
    const int p = pct(rng);
    switch (kind) {
      case 0:  // few distinct values: ties at the cut everywhere
        v[j] = static_cast<float>(small(rng));
        break;
      case 1:  // mostly -inf with a few candidates (an index row masked to its candidates)
        v[j] = p < 3 ? static_cast<float>(small(rng)) : -inf;
        break;
      case 2:  // NaN, +-inf, -0 / +0 and normal values
        v[j] = p < 2 ? nan : p < 4 ? inf : p < 10 ? -inf : p < 20 ? (p & 1 ? -0.0f : 0.0f) : nd(rng);
        break;
      case 3:  // ascending: every entry beats the top
        v[j] = static_cast<float>(j / 3);
        break;
      default:  // descending: none after the first k does
        v[j] = static_cast<float>(n - j);
    }
  }
  return v;
}

TEST(V41Topk, SameOrderAsTheLibraryCallOverAllPairs) {
  std::mt19937 rng(11);
  const kernels::Isa old = kernels::active_isa();
  int compared = 0, partial = 0;
  for (kernels::Isa isa : {kernels::Isa::kScalar, kernels::Isa::kAvx2}) {
    kernels::force_isa(isa);
    for (int64_t n : {1, 7, 64, 65, 100, 511, 512, 513, 4096, 16387}) {
      for (int64_t k : {1, 2, 8, 9, 64, 512}) {
        for (int kind = 0; kind < 5; ++kind) {
          for (bool sorted : {false, true}) {
            const std::vector<float> v = row(rng, n, kind);
            EXPECT_EQ(torch_topk(v.data(), n, k, sorted), topk_by_library(v, k, sorted))
                << "isa " << kernels::isa_name(isa) << " n " << n << " k " << k << " kind "
                << kind << " sorted " << sorted;
            ++compared;
            partial += std::min(k, n) * 64 <= n;
          }
        }
      }
    }
  }
  kernels::force_isa(old);
  EXPECT_GT(partial, 100);  // the scan path is what most of these cases take
  EXPECT_EQ(compared, 2 * 10 * 6 * 5 * 2);
}

TEST(V41Topk, SparseRowSameAsTheDenseRow) {
  std::mt19937 rng(12);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::uniform_int_distribution<int> small(0, 4), pct(0, 99);
  int sparse_path = 0;
  for (int64_t n : {1, 8, 100, 511, 512, 600, 4096, 16384}) {
    for (int64_t k : {1, 8, 9, 64}) {
      for (int per_mille : {0, 2, 20, 300}) {
        std::vector<int32_t> idx;
        std::vector<float> val, row(n, -inf);
        for (int64_t g = 0; g < n; ++g) {
          if (static_cast<int>(rng() % 1000) >= per_mille && !(g < 3 && per_mille == 2)) continue;
          const int p = pct(rng);  // ties, NaN, +-inf among the listed values
          const float v = p < 5 ? nan : p < 10 ? inf : p < 15 ? -inf : static_cast<float>(small(rng));
          idx.push_back(static_cast<int32_t>(g));
          val.push_back(v);
          row[g] = v;
        }
        for (bool sorted : {false, true}) {
          EXPECT_EQ(torch_topk_sparse(n, idx.data(), val.data(), static_cast<int64_t>(idx.size()),
                                      k, sorted),
                    torch_topk(row.data(), n, k, sorted))
              << "n " << n << " k " << k << " listed " << idx.size() << " sorted " << sorted;
        }
        sparse_path += std::min(k, n) * 64 <= n;
      }
    }
  }
  EXPECT_GT(sparse_path, 20);
}

}  // namespace
}  // namespace strata::v41
