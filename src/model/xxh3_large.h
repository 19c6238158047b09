// XXH3-64 of a large buffer through xxHash's AVX2 loop where the CPU has AVX2 (runtime
// dispatch), else libxxhash's: the same value either way (xxHash's vector paths compute the
// same function). About twice libxxhash's speed on the packed-weight cache's 64 MiB chunks.
// Thread safety: a pure function.
#pragma once

#include <cstddef>
#include <cstdint>

namespace strata {

uint64_t xxh3_64_large(const void* p, size_t n);

}  // namespace strata
