// xxHash's XXH3-64 compiled for AVX2 (xxh3_large.h dispatches to it): Debian's libxxhash is
// built for baseline x86-64 (SSE2). Call only where the CPU has AVX2.
#include <cstddef>
#include <cstdint>

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx2")
#define XXH_INLINE_ALL
#define XXH_VECTOR 2  // XXH_AVX2
#include <xxhash.h>
#pragma GCC pop_options

namespace strata::detail {

__attribute__((target("avx2"))) uint64_t xxh3_64_avx2(const void* p, size_t n) {
  return XXH3_64bits(p, n);
}

}  // namespace strata::detail
