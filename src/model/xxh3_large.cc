// Runtime dispatch of xxh3_64_large (see xxh3_large.h).
#include "model/xxh3_large.h"

#include <xxhash.h>

#include "kernels/cpu_features.h"

namespace strata {

namespace detail {
uint64_t xxh3_64_avx2(const void* p, size_t n);  // xxh3_avx2.cc
}

uint64_t xxh3_64_large(const void* p, size_t n) {
  static const bool avx2 = kernels::cpu_has_avx2_fma();
  return avx2 ? detail::xxh3_64_avx2(p, n) : XXH3_64bits(p, n);
}

}  // namespace strata
