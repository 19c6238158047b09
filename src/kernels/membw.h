// Streaming read-bandwidth measurement: the denominator of the decode roofline in
// `strata bench model`.
//
// Reads a buffer of `bytes` (choose it well above the last-level cache) with `pool`'s
// threads, each summing a contiguous slice (AVX2 when available), `passes` times after one
// warm-up pass, and returns the best pass's bytes / second. The same thread count as the
// measured decode should be used.
// Thread safety: uses the pool exclusively for the duration of the call.
#pragma once

#include <cstddef>

namespace strata {
class ThreadPool;
}

namespace strata::kernels {

double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int passes = 5);

}  // namespace strata::kernels
