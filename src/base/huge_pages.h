// Transparent huge pages for the heap, through glibc's malloc tunable.
//
// Decode streams ~1 GB of packed weights per token (the V4.1 bench model). With 4 KiB pages
// that is a TLB miss every 4 KiB, and in a VM each miss walks the guest's and the host's
// page tables; 2 MiB pages remove almost all of them. glibc (2.35+) puts its heap and mmap'd
// chunks in transparent huge pages when the process starts with
// GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (madvise(MADV_HUGEPAGE) on the memory it gets from
// the kernel); a tunable is read only at process start, so `strata` re-executes itself once
// with it set (reexec_with_malloc_huge_pages) when the kernel grants huge pages on request
// (/sys/kernel/mm/transparent_hugepage/enabled is "[madvise]", Debian's default, or
// "[always]"). Measured: 3-4 % more decode tok/s on the V4.1 bench model at 1 thread
// (2 threads: within noise; docs/PERFORMANCE.md, session 12). Opt out with
// STRATA_HUGE_PAGES=0 (do so under valgrind and other tools that do not follow an exec), or
// by setting glibc.malloc.hugetlb yourself in GLIBC_TUNABLES (any value: it is then left
// alone).
//
// Thread safety: call reexec_with_malloc_huge_pages first thing in main(), before any thread
// starts; the decision functions are pure.
#pragma once

#include <string>
#include <string_view>

namespace strata {

// Whether to re-execute with the tunable: this process is not itself the re-executed one
// (`reexecuted`: the private marker STRATA_HUGE_PAGES_REEXEC was set), does not run in
// secure mode (`secure`: getauxval(AT_SECURE), a setuid binary or one with file capabilities,
// where glibc drops the tunable and a re-exec would never see it set), `strata_huge_pages`
// (STRATA_HUGE_PAGES, or null) is not "0", `glibc_tunables` (GLIBC_TUNABLES, or null) does not
// mention glibc.malloc.hugetlb, `thp_enabled` (the sysfs file's text) selects madvise or
// always, and `glibc_version` ("2.36") is 2.35 or later.
bool want_malloc_huge_pages(bool reexecuted, bool secure, const char* strata_huge_pages,
                            const char* glibc_tunables, std::string_view thp_enabled,
                            std::string_view glibc_version);

// GLIBC_TUNABLES with glibc.malloc.hugetlb=1 added (`existing` may be null or empty).
std::string tunables_with_hugetlb(const char* existing);

// If want_malloc_huge_pages says so for this process, sets GLIBC_TUNABLES and the marker and
// execv()s this binary (the path /proc/self/exe links to, so the process keeps its name) with
// the same argv (same pid); returns only when it did not (not wanted, or the exec failed: the
// process then goes on as it is). The re-executed process removes the marker again.
void reexec_with_malloc_huge_pages(char** argv);

// This process's anonymous memory and how much of it is in huge pages, in KiB, from
// /proc/self/smaps_rollup (-1 each when unreadable); and the file pages it maps with 2 MiB
// entries (FilePmdMapped: a mapped packed-weight cache). For benchmark reports.
struct AnonMemory {
  long long anon_kib = -1, huge_kib = -1, file_pmd_kib = -1;
};
AnonMemory anon_memory();

}  // namespace strata
