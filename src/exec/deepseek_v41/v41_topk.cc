// v41::torch_topk (see v41_ops.h): torch.topk's CPU tie order. libstdc++'s std::partial_sort
// is a heap select (make_heap of the first k entries; every later entry that compares better
// than the heap's top replaces it: __pop_heap(first, middle, i)) followed by sort_heap. The
// heap's top only improves, so an entry that does not beat the top when the scan reaches its
// group of 8 cannot beat it later: a vector compare skips those, and the rest run the same
// heap steps in the same order -- the same heap, hence the same result.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "exec/deepseek_v41/v41_ops.h"
#include "kernels/cpu_features.h"

namespace strata::v41 {

namespace {

using Entry = std::pair<float, int64_t>;

// torch's comparator for largest=True: NaN first, then by value; ties keep no order. (A
// function object, so the heap steps inline it.)
struct Better {
  bool operator()(const Entry& x, const Entry& y) const {
    return (std::isnan(x.first) && !std::isnan(y.first)) || (x.first > y.first);
  }
};
constexpr Better better{};

// heap[0, k) is a max-heap under `better` (its top the worst kept entry); heap[k] is scratch.
// Offers entry (v, j): when it beats the top, std::pop_heap over [0, k] with the entry at k
// moves the top out to k and sifts the entry in from the root -- exactly libstdc++'s
// __pop_heap(first, middle, i) as __heap_select calls it.
inline void offer(std::vector<Entry>& heap, int64_t k, float v, int64_t j) {
  const Entry e{v, j};
  if (!better(e, heap[0])) return;
  heap[k] = e;
  std::pop_heap(heap.begin(), heap.begin() + k + 1, better);
}

void scan_scalar(const float* v, int64_t j, int64_t n, std::vector<Entry>& heap, int64_t k) {
  for (; j < n; ++j) offer(heap, k, v[j], j);
}

#if defined(__x86_64__)
// The same scan, 8 entries per compare: an entry that is <= the top (ordered compare) cannot
// beat it now or later; the others are offered one by one in index order.
__attribute__((target("avx2"))) void scan_avx2(const float* v, int64_t n,
                                               std::vector<Entry>& heap, int64_t k) {
  int64_t j = k;
  for (; j + 8 <= n; j += 8) {
    const float top = heap[0].first;
    if (std::isnan(top)) return;  // nothing beats a NaN top
    const __m256 x = _mm256_loadu_ps(v + j);
    unsigned m = static_cast<unsigned>(
        _mm256_movemask_ps(_mm256_cmp_ps(x, _mm256_set1_ps(top), _CMP_NLE_UQ)));
    while (m != 0) {
      const int lane = __builtin_ctz(m);
      offer(heap, k, v[j + lane], j + lane);
      m &= m - 1;
    }
  }
  scan_scalar(v, j, n, heap, k);
}
#endif

}  // namespace

std::vector<int32_t> torch_topk(const float* v, int64_t n, int64_t k, bool sorted) {
  k = std::min(k, n);
  std::vector<int32_t> out;
  if (k <= 0) return out;
  std::vector<Entry> q;
  if (k * 64 <= n) {
    // std::partial_sort(q, q + k, q + n, better) without materializing the n entries.
    q.resize(k + 1);
    for (int64_t j = 0; j < k; ++j) q[j] = {v[j], j};
    std::make_heap(q.begin(), q.begin() + k, better);
#if defined(__x86_64__)
    if (kernels::active_isa() == kernels::Isa::kAvx2) {
      scan_avx2(v, n, q, k);
    } else {
      scan_scalar(v, k, n, q, k);
    }
#else
    scan_scalar(v, k, n, q, k);
#endif
    std::sort_heap(q.begin(), q.begin() + k, better);
  } else {
    q.resize(n);
    for (int64_t j = 0; j < n; ++j) q[j] = {v[j], j};
    std::nth_element(q.begin(), q.begin() + k - 1, q.end(), better);
    if (sorted) std::sort(q.begin(), q.begin() + k - 1, better);
  }
  out.reserve(k);
  for (int64_t j = 0; j < k; ++j) out.push_back(static_cast<int32_t>(q[j].second));
  return out;
}

std::vector<int32_t> torch_topk_sparse(int64_t n, const int32_t* idx, const float* val, int64_t m,
                                       int64_t k, bool sorted) {
  k = std::min(k, n);
  if (k <= 0) return {};
  if (k * 64 > n) {  // nth_element reads every entry: the dense row
    std::vector<float> row(n, -std::numeric_limits<float>::infinity());
    for (int64_t j = 0; j < m; ++j) row[idx[j]] = val[j];
    return torch_topk(row.data(), n, k, sorted);
  }
  // The heap select of torch_topk: the first k entries (-inf where none is listed), then the
  // listed entries past them in index order; an unlisted (-inf) entry never beats the top.
  std::vector<Entry> q(k + 1);
  for (int64_t j = 0; j < k; ++j) q[j] = {-std::numeric_limits<float>::infinity(), j};
  int64_t j = 0;
  for (; j < m && idx[j] < k; ++j) q[idx[j]].first = val[j];
  std::make_heap(q.begin(), q.begin() + k, better);
  for (; j < m; ++j) offer(q, k, val[j], idx[j]);
  std::sort_heap(q.begin(), q.begin() + k, better);
  std::vector<int32_t> out;
  out.reserve(k);
  for (int64_t t = 0; t < k; ++t) out.push_back(static_cast<int32_t>(q[t].second));
  return out;
}

}  // namespace strata::v41
