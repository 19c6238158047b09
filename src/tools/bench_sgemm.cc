// See bench_sgemm.h.
#include "tools/bench_sgemm.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace strata {

double measure_sgemm_gflops(int threads, int n, int repeats) {
  openblas_set_num_threads(std::max(1, threads));
  const size_t nn = static_cast<size_t>(n) * static_cast<size_t>(n);
  std::vector<float> a(nn), b(nn), c(nn);
  for (size_t i = 0; i < nn; ++i) {
    a[i] = static_cast<float>(i % 7) * 0.125f;
    b[i] = static_cast<float>(i % 5) * 0.25f;
  }
  double best = 0;
  for (int r = 0; r <= repeats; ++r) {  // r == 0: warm-up (threads started, pages touched)
    const auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0 && s > 0) best = std::max(best, 2.0 * n * static_cast<double>(n) * n / s / 1e9);
  }
  return best;
}

}  // namespace strata
