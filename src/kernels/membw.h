// Streaming read-bandwidth measurement: the denominator of the decode roofline in
// `strata bench model` and `strata bench gemv`.
//
// Reads a buffer of `bytes` (choose it well above the last-level cache) with `pool`'s
// threads, each summing a contiguous slice it first touched itself (AVX2 when available),
// `passes` times after one warm-up pass, and returns the best pass's bytes / second. The same
// thread count as the measured decode should be used.
//
// Page size: the buffer is read once in 4 KiB pages (MADV_NOHUGEPAGE) and once in transparent
// huge pages (MADV_HUGEPAGE), and the higher rate is returned: strata's heap, and so its
// packed weights, normally live in huge pages (base/huge_pages.h), and on the dev VM the two
// page sizes read at different rates (2 threads: sometimes 4 KiB pages read ~65 GB/s where
// huge pages read ~36; 1 thread: huge pages ~34 against ~27), so the roofline is the better
// of the two, never the flattering one.
// Errors: throws std::bad_alloc if the buffer cannot be mapped.
// Thread safety: uses the pool exclusively for the duration of the call.
#pragma once

#include <cstddef>

namespace strata {
class ThreadPool;
}

namespace strata::kernels {

double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int passes = 5);

}  // namespace strata::kernels
