// Scratch<T>: a buffer reused across calls, for hot paths that run once per layer and token
// (decode) and would otherwise allocate, zero and free a std::vector on every call. On the
// 2-core bench VM those allocations and memsets took ~4 % of the calling thread's decode
// samples (perf, docs/PERFORMANCE.md "Session 14"), time in which the pool's other threads
// wait.
//
// Usage: one `thread_local Scratch<float> s;` per buffer and call site, then
// `float* p = s.get(n);` each call. The contents of the n elements are unspecified (whatever
// an earlier call left there): the caller must write every element before it reads it, or
// clear it (get_zeroed). A request larger than kKeepBytes is served too; the buffer shrinks
// back on the next request at or under kKeepBytes, so a long prefill does not pin its
// buffers for the rest of the thread's life.
//
// Thread safety: none; use one instance per thread (thread_local). Not re-entrant: a buffer
// must not be requested again while a pointer from an earlier get() is still in use.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace strata {

template <typename T>
class Scratch {
 public:
  static constexpr size_t kKeepBytes = size_t{4} << 20;

  // At least n elements (n = 0: a valid pointer to none); unspecified contents.
  T* get(size_t n) {
    const size_t keep = kKeepBytes / sizeof(T);
    if (n <= keep && buf_.size() > keep) {
      buf_.clear();
      buf_.shrink_to_fit();
    }
    if (buf_.size() < n) buf_.resize(n);
    return buf_.data();
  }
  // get(n) with the n elements set to T{}.
  T* get_zeroed(size_t n) {
    T* p = get(n);
    std::fill_n(p, n, T{});
    return p;
  }
  // Elements allocated now (for tests).
  size_t capacity() const { return buf_.capacity(); }

 private:
  std::vector<T> buf_;
};

}  // namespace strata
