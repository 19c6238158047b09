// A flat byte message: appends PODs and spans, reads them back in the same order. What the
// multi-rank code sends between ranks (mirrored calls, pipeline stage boundaries).
// Errors: reading past the end or a negative length is a CHECK failure (a message that does
// not parse is a bug between ranks of one build, not user input).
// Thread safety: none; one owner at a time.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include "base/check.h"

namespace strata {

struct ByteMsg {
  std::vector<uint8_t> b;
  size_t at = 0;  // read position

  template <typename T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const size_t n = b.size();
    b.resize(n + sizeof(T));
    std::memcpy(b.data() + n, &v, sizeof(T));
  }
  // A length (int64) then the elements.
  template <typename T>
  void put_span(std::span<const T> v) {
    static_assert(std::is_trivially_copyable_v<T>);
    put<int64_t>(static_cast<int64_t>(v.size()));
    const size_t n = b.size();
    b.resize(n + v.size_bytes());
    if (!v.empty()) std::memcpy(b.data() + n, v.data(), v.size_bytes());
  }
  template <typename T>
  void put_vec(const std::vector<T>& v) {
    put_span<T>(std::span<const T>(v));
  }
  void put_ids(std::span<const int32_t> ids) { put_span<int32_t>(ids); }

  template <typename T>
  T get() {
    STRATA_CHECK(at + sizeof(T) <= b.size());
    T v;
    std::memcpy(&v, b.data() + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
  template <typename T>
  std::vector<T> get_vec() {
    const int64_t n = get<int64_t>();
    STRATA_CHECK(n >= 0 && static_cast<uint64_t>(n) <= (b.size() - at) / sizeof(T));
    std::vector<T> v(static_cast<size_t>(n));
    if (n) std::memcpy(v.data(), b.data() + at, n * sizeof(T));
    at += n * sizeof(T);
    return v;
  }
  std::vector<int32_t> get_ids() { return get_vec<int32_t>(); }
  bool done() const { return at == b.size(); }
};

}  // namespace strata
