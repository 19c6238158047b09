#include "base/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "base/check.h"
#include "base/cpu_count.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define STRATA_CPU_RELAX() _mm_pause()
#else
#define STRATA_CPU_RELAX() ((void)0)
#endif

namespace strata {
namespace {
thread_local bool t_in_pool = false;
int g_default_threads = 0;
std::unique_ptr<ThreadPool> g_default_pool;
std::mutex g_default_mu;

// How long a waiting thread spins before it sleeps on a condition variable. Decode steps
// dispatch dozens of small parallel_for calls per token; a short spin avoids a futex sleep
// and wake-up for each of them, while still yielding the core quickly on a loaded machine.
constexpr auto kSpin = std::chrono::microseconds(200);

// With more threads than CPUs (`yield`), a spinning thread would hold the CPU that the
// thread it waits for needs: it gives it up on every turn instead of pausing.
template <typename Pred>
bool spin_until(Pred pred, bool yield) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (pred()) return true;
    if (yield) {
      std::this_thread::yield();
    } else {
      STRATA_CPU_RELAX();
    }
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return false;
  }
}
}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = available_cpus();
  num_threads_ = num_threads;
  oversubscribed_ = num_threads_ > available_cpus();
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  wait_async();
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  t_in_pool = true;
  uint64_t seen = 0;
  // Worker 1 also takes run_async() tasks.
  auto async_ready = [&] {
    return index == 1 && async_state_.load(std::memory_order_acquire) == kAsyncPending;
  };
  for (;;) {
    // Fast path: spin briefly for the next generation (or task), then sleep.
    if (!spin_until([&] { return generation_.load(std::memory_order_acquire) != seen || async_ready(); },
                    oversubscribed_)) {
      std::unique_lock<std::mutex> lk(mu_);
      ++work_sleepers_;
      cv_work_.wait(lk, [&] {
        return stop_ || generation_.load(std::memory_order_acquire) != seen || async_ready();
      });
      --work_sleepers_;
      if (stop_) return;
    }
    if (async_ready()) {
      async_fn_();
      std::lock_guard<std::mutex> lk(mu_);
      async_state_.store(kAsyncDone, std::memory_order_release);
      if (async_waiter_sleeping_) cv_done_.notify_all();
      continue;
    }
    seen = generation_.load(std::memory_order_acquire);
    // ranges_ and fn_ were published before the release store of generation_.
    // Every worker acknowledges every generation (idle ones too), so the caller never
    // rewrites ranges_ while a worker may still read it.
    if (index < static_cast<int>(ranges_.size())) {
      const auto r = ranges_[index];
      if (r.first < r.second) (*fn_)(r.first, r.second);
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lk(mu_);
      if (caller_sleeping_) cv_done_.notify_all();  // cv_done_ also serves wait_async()
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                              int64_t min_grain) {
  if (n <= 0) return;
  min_grain = std::max<int64_t>(1, min_grain);
  int64_t parts = std::min<int64_t>(num_threads_, (n + min_grain - 1) / min_grain);
  if (parts <= 1 || t_in_pool) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  bool wake = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    // Rewritten in place (no allocation once it has held num_threads_ ranges): every worker
    // acknowledged the previous generation before the last call returned.
    ranges_.resize(static_cast<size_t>(parts));
    int64_t base = n / parts, extra = n % parts, pos = 0;
    for (int64_t i = 0; i < parts; ++i) {
      int64_t len = base + (i < extra ? 1 : 0);
      ranges_[i] = {pos, pos + len};
      pos += len;
    }
    fn_ = &fn;
    pending_.store(num_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    wake = work_sleepers_ > 0;
  }
  if (wake) cv_work_.notify_all();
  t_in_pool = true;
  fn(ranges_[0].first, ranges_[0].second);
  t_in_pool = false;
  if (!spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; },
                  oversubscribed_)) {
    std::unique_lock<std::mutex> lk(mu_);
    caller_sleeping_ = true;
    cv_done_.wait(lk, [&] { return pending_.load(std::memory_order_acquire) == 0; });
    caller_sleeping_ = false;
  }
}

void ThreadPool::run_async(std::function<void()> fn) {
  STRATA_CHECK_MSG(async_state_.load(std::memory_order_acquire) != kAsyncPending,
                   "ThreadPool::run_async: the previous task was not waited for");
  if (num_threads_ <= 1 || t_in_pool) {
    fn();
    return;
  }
  bool wake = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    async_fn_ = std::move(fn);
    async_state_.store(kAsyncPending, std::memory_order_release);
    wake = work_sleepers_ > 0;
  }
  if (wake) cv_work_.notify_all();
}

void ThreadPool::wait_async() {
  if (async_state_.load(std::memory_order_acquire) == kAsyncIdle) return;
  if (!spin_until([&] { return async_state_.load(std::memory_order_acquire) == kAsyncDone; },
                  oversubscribed_)) {
    std::unique_lock<std::mutex> lk(mu_);
    async_waiter_sleeping_ = true;
    cv_done_.wait(lk, [&] { return async_state_.load(std::memory_order_acquire) == kAsyncDone; });
    async_waiter_sleeping_ = false;
  }
  std::lock_guard<std::mutex> lk(mu_);
  async_fn_ = nullptr;  // the task's captures die here, on the caller's thread
  async_state_.store(kAsyncIdle, std::memory_order_release);
}

void ThreadPool::parallel_for_stealing(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                                       int64_t max_run, const int64_t* home, int64_t* stolen) {
  if (stolen != nullptr) *stolen = 0;
  if (n <= 0) return;
  STRATA_CHECK(max_run >= 1 && n < (int64_t{1} << 32));
  // Without given home ranges, no more threads than units (as parallel_for: one unit runs
  // inline, without a dispatch).
  const int threads = home ? num_threads_ : static_cast<int>(std::min<int64_t>(num_threads_, n));
  if (threads <= 1 || t_in_pool) {
    for (int64_t u = 0; u < n; u += max_run) fn(u, std::min(n, u + max_run));
    return;
  }
  // Range t: [front, back) packed in one atomic word, front in the low half.
  struct alignas(64) Range {
    std::atomic<uint64_t> fb{0};
  };
  // The calling thread's ranges, kept across calls (a nested call runs inline above, so one
  // thread never has two calls in flight here).
  thread_local std::unique_ptr<Range[]> t_ranges;
  thread_local int t_capacity = 0;
  if (t_capacity < threads) {
    t_ranges = std::make_unique<Range[]>(static_cast<size_t>(threads));
    t_capacity = threads;
  }
  Range* const ranges = t_ranges.get();
  for (int t = 0; t < threads; ++t) {
    const int64_t b = home ? home[t] : n * t / threads, e = home ? home[t + 1] : n * (t + 1) / threads;
    STRATA_CHECK(b >= 0 && b <= e && e <= n);
    ranges[t].fb.store(static_cast<uint64_t>(b) | (static_cast<uint64_t>(e) << 32),
                       std::memory_order_relaxed);
  }
  if (home) STRATA_CHECK(home[0] == 0 && home[threads] == n);
  // Takes up to `want` units from the front, or one from the back; returns [*b, *e) or false.
  auto take = [](Range& r, bool front, int64_t want, int64_t* b, int64_t* e) {
    uint64_t v = r.fb.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t f = v & 0xffffffffu, k = v >> 32;
      if (f >= k) return false;
      const uint64_t got = front ? std::min<uint64_t>(want, k - f) : 1;
      const uint64_t nv = front ? v + got : (f | ((k - 1) << 32));
      if (r.fb.compare_exchange_weak(v, nv, std::memory_order_relaxed)) {
        *b = static_cast<int64_t>(front ? f : k - 1);
        *e = *b + static_cast<int64_t>(got);
        return true;
      }
    }
  };
  std::atomic<int64_t> taken{0};
  parallel_for(threads, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      int64_t b, e;
      while (take(ranges[t], true, max_run, &b, &e)) fn(b, e);
      for (int k = 1; k < threads; ++k)
        while (take(ranges[(t + k) % threads], false, 1, &b, &e)) {
          fn(b, e);
          taken.fetch_add(1, std::memory_order_relaxed);
        }
    }
  });
  if (stolen != nullptr) *stolen = taken.load();
}

ThreadPool& ThreadPool::default_pool() {
  std::lock_guard<std::mutex> lk(g_default_mu);
  if (!g_default_pool) g_default_pool = std::make_unique<ThreadPool>(g_default_threads);
  return *g_default_pool;
}

void ThreadPool::set_default_threads(int num_threads) {
  std::lock_guard<std::mutex> lk(g_default_mu);
  g_default_threads = num_threads;
  g_default_pool = std::make_unique<ThreadPool>(num_threads);
}

void parallel_rows(ThreadPool* pool, int64_t n, int64_t min_grain,
                   const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (pool == nullptr || pool->num_threads() < 2 || n < 2 * std::max<int64_t>(1, min_grain)) {
    fn(0, n);
    return;
  }
  pool->parallel_for(n, fn, min_grain);
}

}  // namespace strata
