// ProcessSlot<T>: one process-wide shared object set at startup and read by loaders (the
// multi-rank communicators: dist/expert_comm.h, dist/dcp_comm.h). Null until set.
// Thread safety: set and get may be called from any thread (a mutex guards the pointer).
#pragma once

#include <memory>
#include <mutex>

namespace strata {

template <class T>
class ProcessSlot {
 public:
  void set(std::shared_ptr<T> v) {
    std::lock_guard<std::mutex> l(mu_);
    v_ = std::move(v);
  }
  std::shared_ptr<T> get() const {
    std::lock_guard<std::mutex> l(mu_);
    return v_;
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<T> v_;
};

}  // namespace strata
