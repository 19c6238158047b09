// ThreadPool: a fixed set of worker threads for data-parallel kernels.
//
// parallel_for(n, fn) calls fn(begin, end) on disjoint ranges covering [0, n) and returns
// when all are done. The caller thread takes part. Kernels split work over output rows or
// columns (M, N), never over the reduction dimension K, so results do not depend on the
// number of threads (see DESIGN.md "Deterministic numerics").
//
// Waiting threads spin for ~200 us before sleeping on a condition variable, so the many
// small dispatches of a decode step (hundreds per token, with short serial gaps between
// them) do not each pay a futex sleep/wake; wakeups are only signalled to sleeping threads.
// A pool with more threads than the CPUs this process may use (base/cpu_count.h) yields the
// CPU on every spin turn instead, so a waiting thread does not hold the CPU that a thread
// it waits for needs.
//
// Thread safety: parallel_for may be called from one thread at a time per pool (calls from
// several threads are serialized by an internal mutex). Nested calls from inside fn run
// inline on the calling worker.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {

class ThreadPool {
 public:
  // num_threads >= 1 total threads including the caller; 0 means available_cpus() (the
  // CPUs this process may use: affinity mask and cgroup CPU quota, base/cpu_count.h).
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  // More threads than available_cpus(): waiting threads yield instead of spinning.
  bool oversubscribed() const { return oversubscribed_; }

  // Runs fn(begin, end) over [0, n) split into at most num_threads() contiguous ranges of
  // at least `min_grain` items each.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                    int64_t min_grain = 1);

  // Runs fn(begin, end) over [0, n) like parallel_for, with the units first cut into one
  // contiguous home range per thread: thread t owns [home[t], home[t+1]) (home: num_threads()+1
  // ascending offsets, home[0] = 0, home[num_threads()] = n; null: equal ranges). Each thread
  // runs its own range from the front, in calls of at most `max_run` units (reading on in
  // address order), then takes single units from the back of the others' ranges, so a
  // slower thread or a misjudged split costs little idle time. Every unit runs exactly once,
  // on one thread; which thread, and how calls are cut, depend on timing, so fn must give the
  // same result for any cut (as the kernels that split output rows do). `stolen` (optional)
  // receives the number of units taken from another thread's range. Same thread-safety and
  // nesting rules as parallel_for.
  void parallel_for_stealing(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                             int64_t max_run = 4, const int64_t* home = nullptr,
                             int64_t* stolen = nullptr);

  // Starts fn() on worker thread 1 and returns at once, so the caller can go on with other
  // work (e.g. a forward pass's mHC mixes while the sublayer's GEMMs start). The worker runs
  // fn before it takes part in later dispatches: meanwhile parallel_for_stealing's caller
  // takes the worker's units, and parallel_for waits for the worker to finish fn and then its
  // range. fn runs as a pool task (its own parallel_for calls run inline) and must not throw.
  // Runs fn inline when the pool has no worker or when called from inside a pool task.
  // One async task at a time per pool: call wait_async() before the next run_async(), and
  // from the thread that called run_async().
  void run_async(std::function<void()> fn);
  // Returns when the task of the last run_async() has finished (at once if there is none).
  void wait_async();

  // A process-wide default pool (size set by set_default_threads, default: available_cpus()).
  static ThreadPool& default_pool();
  static void set_default_threads(int num_threads);

 private:
  void worker_loop(int index);

  int num_threads_;
  bool oversubscribed_ = false;
  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // serializes parallel_for callers
  std::mutex mu_;
  std::condition_variable cv_work_;
  std::condition_variable cv_done_;
  // Published under mu_ before generation_ is bumped (release); read by workers after they
  // observe the new generation (acquire).
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  std::vector<std::pair<int64_t, int64_t>> ranges_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};  // workers that have not yet finished the current generation
  bool stop_ = false;
  // Threads blocked on cv_work_ / cv_done_ (changed and read under mu_): notify only when
  // someone sleeps, so the common spinning case costs no futex syscall.
  int work_sleepers_ = 0;
  bool caller_sleeping_ = false;
  // run_async: the task (written under mu_ before async_state_ becomes kAsyncPending, read by
  // worker 1 after it observes that state) and its state.
  static constexpr int kAsyncIdle = 0, kAsyncPending = 1, kAsyncDone = 2;
  std::function<void()> async_fn_;
  std::atomic<int> async_state_{kAsyncIdle};
  bool async_waiter_sleeping_ = false;  // under mu_
};

// Row-wise work over [0, n): fn(begin, end) on disjoint ranges over `pool` when it has more
// than one thread and n >= 2 * min_grain, otherwise fn(0, n) inline. For loops whose rows
// (tokens, heads) are independent and write disjoint outputs, so the split cannot change a
// bit. Same thread-safety rules as ThreadPool::parallel_for.
void parallel_rows(ThreadPool* pool, int64_t n, int64_t min_grain,
                   const std::function<void(int64_t, int64_t)>& fn);

}  // namespace strata
