// WeightBuffer<T>: the storage of a packed weight's arrays (PackedFp8Weight, PackedFp4Weight,
// PackedSeqWeight). Either owned (a std::vector, filled by the packers) or a read-only view of
// memory someone else keeps alive (a mapped packed-weight cache file, model/packed_weight_cache.h):
// the kernels read both the same way through data() / size() / operator[].
//
// A view holds a shared_ptr `keeper` to whatever owns its bytes (the mapping), so a packed
// weight restored from a cache stays valid for as long as any copy of it lives.
// Mutating calls (assign, resize, clear, non-const data / operator[]) are for owned buffers:
// assign / resize / clear on a view first drop the view (the buffer becomes owned); writing
// through a view's non-const data() is a bug (the mapping is read-only: it faults).
// Thread safety: as std::vector (const calls concurrently; mutation exclusive).
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace strata::kernels {

template <class T>
class WeightBuffer {
 public:
  WeightBuffer() = default;
  // Owned: adopts `v`.
  explicit WeightBuffer(std::vector<T>&& v) : own_(std::move(v)) {}
  WeightBuffer& operator=(std::vector<T>&& v) {
    drop_view();
    own_ = std::move(v);
    return *this;
  }
  // A view of n elements at p (not copied); `keeper` keeps them alive.
  static WeightBuffer view(const T* p, size_t n, std::shared_ptr<const void> keeper) {
    WeightBuffer b;
    b.view_ = p;
    b.view_n_ = n;
    b.keeper_ = std::move(keeper);
    return b;
  }
  bool is_view() const { return keeper_ != nullptr; }

  const T* data() const { return is_view() ? view_ : own_.data(); }
  T* data() { return is_view() ? const_cast<T*>(view_) : own_.data(); }
  size_t size() const { return is_view() ? view_n_ : own_.size(); }
  bool empty() const { return size() == 0; }
  const T& operator[](size_t i) const { return data()[i]; }
  T& operator[](size_t i) { return data()[i]; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size(); }
  T* begin() { return data(); }
  T* end() { return data() + size(); }

  // Element-wise equality (owned or view alike), for tests.
  friend bool operator==(const WeightBuffer& a, const WeightBuffer& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const WeightBuffer& a, const std::vector<T>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

  void assign(size_t n, const T& v) {
    drop_view();
    own_.assign(n, v);
  }
  void resize(size_t n) {
    drop_view();
    own_.resize(n);
  }
  void clear() {
    drop_view();
    own_.clear();
    own_.shrink_to_fit();
  }

 private:
  void drop_view() {
    keeper_.reset();
    view_ = nullptr;
    view_n_ = 0;
  }
  std::vector<T> own_;
  const T* view_ = nullptr;
  size_t view_n_ = 0;
  std::shared_ptr<const void> keeper_;
};

}  // namespace strata::kernels
