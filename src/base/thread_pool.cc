#include "base/thread_pool.h"

#include <algorithm>
#include <memory>

namespace strata {
namespace {
thread_local bool t_in_pool = false;
int g_default_threads = 0;
std::unique_ptr<ThreadPool> g_default_pool;
std::mutex g_default_mu;
}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = std::max(1u, std::thread::hardware_concurrency());
  num_threads_ = num_threads;
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
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
  for (;;) {
    std::pair<int64_t, int64_t> r;
    const std::function<void(int64_t, int64_t)>* fn;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_work_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= static_cast<int>(ranges_.size())) continue;
      r = ranges_[index];
      fn = fn_;
    }
    if (r.first < r.second) (*fn)(r.first, r.second);
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (--pending_ == 0) cv_done_.notify_one();
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
  std::vector<std::pair<int64_t, int64_t>> ranges(parts);
  int64_t base = n / parts, extra = n % parts, pos = 0;
  for (int64_t i = 0; i < parts; ++i) {
    int64_t len = base + (i < extra ? 1 : 0);
    ranges[i] = {pos, pos + len};
    pos += len;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    ranges_ = std::move(ranges);
    fn_ = &fn;
    pending_ = static_cast<int>(parts) - 1;
    ++generation_;
  }
  cv_work_.notify_all();
  t_in_pool = true;
  fn(ranges_[0].first, ranges_[0].second);
  t_in_pool = false;
  std::unique_lock<std::mutex> lk(mu_);
  cv_done_.wait(lk, [&] { return pending_ == 0; });
  fn_ = nullptr;
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

}  // namespace strata
