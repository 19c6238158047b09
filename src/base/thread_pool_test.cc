#include "base/thread_pool.h"

#include <atomic>
#include <vector>

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(ThreadPoolTest, CoversRangeExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 100, 1001}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
    }
  }
}

TEST(ThreadPoolTest, RespectsMinGrainAndRepeatedCalls) {
  ThreadPool pool(4);
  std::atomic<int> calls{0};
  pool.parallel_for(10, [&](int64_t b, int64_t e) { calls++; EXPECT_GE(e - b, 5); }, 5);
  EXPECT_LE(calls.load(), 2);
  int64_t sum = 0;
  std::mutex mu;
  for (int rep = 0; rep < 200; ++rep) {
    pool.parallel_for(64, [&](int64_t b, int64_t e) {
      std::lock_guard<std::mutex> lk(mu);
      for (int64_t i = b; i < e; ++i) sum += i;
    });
  }
  EXPECT_EQ(sum, 200 * (63 * 64 / 2));
}

}  // namespace
}  // namespace strata
