#include "base/thread_pool.h"

#include <atomic>
#include <chrono>
#include <thread>
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

// parallel_rows: every row once; inline (one call of the whole range) without a pool, with a
// one-thread pool, or below two grains; split over a pool of several threads otherwise.
TEST(ThreadPoolTest, ParallelRowsCoversOnceAndRunsSmallWorkInline) {
  ThreadPool one(1), two(2);
  for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &one, &two}) {
    for (int64_t n : {0, 1, 7, 8, 100}) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<int> calls{0};
      parallel_rows(pool, n, 4, [&](int64_t b, int64_t e) {
        calls++;
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
      const bool split = pool == &two && n >= 8;
      EXPECT_EQ(calls.load(), n == 0 ? 0 : (split ? 2 : 1)) << "n=" << n;
    }
  }
}

// parallel_for_stealing: every unit runs exactly once, in calls of 1..max_run units, for
// equal and given home ranges; a thread with an empty home range takes units from the back
// of the others' (counted in `stolen`); nested calls run inline.
TEST(ThreadPoolTest, StealingRunsEveryUnitOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 100, 1001}) {
      for (int64_t max_run : {1, 4}) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<bool> too_long{false};
        int64_t stolen = -1;
        pool.parallel_for_stealing(
            n,
            [&](int64_t b, int64_t e) {
              if (e - b < 1 || e - b > max_run) too_long = true;
              for (int64_t i = b; i < e; ++i) hits[i]++;
            },
            max_run, nullptr, &stolen);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
        EXPECT_FALSE(too_long.load());
        EXPECT_GE(stolen, 0);
        EXPECT_LE(stolen, n);
      }
    }
  }
}

TEST(ThreadPoolTest, StealingTakesFromAnEmptyHandedThreadsNeighbours) {
  ThreadPool pool(2);
  const int64_t n = 64;
  // Everything starts in thread 1's range; the caller (thread 0) has nothing of its own, so
  // it takes units from thread 1's back. Thread 1 holds its first call until the caller has
  // run a unit (or 10 s pass), so the outcome does not hang on scheduling.
  const int64_t home[3] = {0, 0, n};
  std::vector<std::atomic<int>> hits(n);
  int64_t stolen = 0;
  const auto caller = std::this_thread::get_id();
  std::atomic<bool> caller_ran{false};
  pool.parallel_for_stealing(
      n,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i]++;
        if (std::this_thread::get_id() == caller) {
          caller_ran = true;
          return;
        }
        const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!caller_ran && std::chrono::steady_clock::now() < limit) std::this_thread::yield();
        caller_ran = true;  // wait at most once
      },
      4, home, &stolen);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
  EXPECT_GT(stolen, 0);
  // Nested inside a pool task: inline on that thread, still every unit once, nothing stolen.
  std::atomic<int> inner{0};
  pool.parallel_for(2, [&](int64_t, int64_t) {
    int64_t st = -1;
    pool.parallel_for_stealing(10, [&](int64_t b, int64_t e) { inner += static_cast<int>(e - b); },
                               4, nullptr, &st);
    EXPECT_EQ(st, 0);
  });
  EXPECT_EQ(inner.load(), 20);
}

TEST(ThreadPoolTest, RunAsyncOverlapsTheCallersDispatches) {
  ThreadPool pool(2);
  const auto caller = std::this_thread::get_id();
  // The task holds worker 1 until the caller has finished a whole stealing dispatch: that
  // dispatch can only complete if the caller takes the worker's units itself (10 s limit so
  // a failure does not hang).
  std::atomic<bool> dispatch_done{false}, task_ran{false};
  std::thread::id task_thread;
  pool.run_async([&] {
    task_thread = std::this_thread::get_id();
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!dispatch_done && std::chrono::steady_clock::now() < limit) std::this_thread::yield();
    task_ran = true;
  });
  const int64_t n = 32;
  std::vector<std::atomic<int>> hits(n);
  std::atomic<int> by_caller{0};
  // The caller may finish every unit while the worker is busy; the dispatch returns only
  // after the worker has acknowledged it, i.e. after the task.
  std::thread releaser([&] {
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (by_caller.load() < n && std::chrono::steady_clock::now() < limit) std::this_thread::yield();
    dispatch_done = true;
  });
  pool.parallel_for_stealing(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[i]++;
    if (std::this_thread::get_id() == caller) by_caller += static_cast<int>(e - b);
  });
  releaser.join();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
  EXPECT_EQ(by_caller.load(), n);  // the worker was busy with the task throughout
  pool.wait_async();
  EXPECT_TRUE(task_ran.load());
  EXPECT_NE(task_thread, caller);
  // Again, and a parallel_for issued while the task runs waits for it.
  std::atomic<int> order{0}, task_order{-1}, range_order{-1};
  pool.run_async([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    task_order = order++;
  });
  pool.parallel_for(2, [&](int64_t b, int64_t) {
    if (b == 1) range_order = order++;
  });
  pool.wait_async();
  EXPECT_EQ(task_order.load(), 0);
  EXPECT_EQ(range_order.load(), 1);
  pool.wait_async();  // nothing pending: returns at once
}

TEST(ThreadPoolTest, RunAsyncRunsInlineWithoutAWorkerOrInsideATask) {
  ThreadPool one(1);
  const auto caller = std::this_thread::get_id();
  std::thread::id ran_on;
  one.run_async([&] { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, caller);  // finished before run_async returned
  one.wait_async();
  ThreadPool two(2);
  std::atomic<int> inline_runs{0};
  two.parallel_for(2, [&](int64_t, int64_t) {
    const auto me = std::this_thread::get_id();
    std::thread::id t;
    two.run_async([&] { t = std::this_thread::get_id(); });
    if (t == me) ++inline_runs;
  });
  EXPECT_EQ(inline_runs.load(), 2);
  // A pool destroyed with a task in flight waits for it.
  std::atomic<bool> done{false};
  {
    ThreadPool p(2);
    p.run_async([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      done = true;
    });
  }
  EXPECT_TRUE(done.load());
}

}  // namespace
}  // namespace strata
