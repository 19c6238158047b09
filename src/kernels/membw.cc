#include "kernels/membw.h"

#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu_features.h"

namespace strata::kernels {
namespace {

__attribute__((target("avx2,fma"))) float sum_avx2(const float* p, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  alignas(32) float t[8];
  _mm256_store_ps(t, s);
  float r = 0;
  for (float v : t) r += v;
  for (; i < n; ++i) r += p[i];
  return r;
}

float sum_scalar(const float* p, int64_t n) {
  float a[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int l = 0; l < 4; ++l) a[l] += p[i + l];
  for (; i < n; ++i) a[0] += p[i];
  return a[0] + a[1] + a[2] + a[3];
}

// One buffer of n floats in 4 KiB or in huge pages, first touched by the thread that reads
// each slice; the best of `passes` timed reads after a warm-up.
double measure_in_pages(ThreadPool& pool, int64_t n, int passes, bool huge) {
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) throw std::bad_alloc();
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
  ::madvise(map, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#endif
  float* buf = static_cast<float*>(map);
  const int threads = pool.num_threads();
  const int64_t chunk = (n / threads) & ~int64_t{63};
  auto slice = [&](int64_t t, int64_t* b, int64_t* e) {
    *b = t * chunk;
    *e = t + 1 == threads ? n : (t + 1) * chunk;
  };
  pool.parallel_for(threads, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      int64_t b, e;
      slice(t, &b, &e);
      std::fill(buf + b, buf + e, 1.0f);
    }
  });
  const bool avx = active_isa() == Isa::kAvx2;
  std::atomic<uint32_t> sink{0};
  double best = 0;
  for (int p = 0; p <= passes; ++p) {
    auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(threads, [&](int64_t a, int64_t z) {
      float s = 0;
      for (int64_t t = a; t < z; ++t) {
        int64_t b, e;
        slice(t, &b, &e);
        s += avx ? sum_avx2(buf + b, e - b) : sum_scalar(buf + b, e - b);
      }
      sink.fetch_add(static_cast<uint32_t>(s), std::memory_order_relaxed);
    });
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (p > 0) best = std::max(best, static_cast<double>(bytes) / sec);
  }
  ::munmap(map, bytes);
  return best;
}

}  // namespace

double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int passes) {
  const int64_t n = static_cast<int64_t>(bytes / sizeof(float)) & ~int64_t{63};
  return std::max(measure_in_pages(pool, n, passes, /*huge=*/false),
                  measure_in_pages(pool, n, passes, /*huge=*/true));
}

}  // namespace strata::kernels
