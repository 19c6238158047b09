#include "base/huge_pages.h"

#if defined(__linux__)
#include <sys/auxv.h>
#include <unistd.h>
#endif

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#if defined(__GLIBC__)
#include <gnu/libc-version.h>
#endif

namespace strata {

bool want_malloc_huge_pages(bool reexecuted, bool secure, const char* strata_huge_pages,
                            const char* glibc_tunables, std::string_view thp_enabled,
                            std::string_view glibc_version) {
  if (reexecuted || secure) return false;
  if (strata_huge_pages != nullptr && std::strcmp(strata_huge_pages, "0") == 0) return false;
  if (glibc_tunables != nullptr && std::strstr(glibc_tunables, "glibc.malloc.hugetlb") != nullptr)
    return false;
  if (thp_enabled.find("[madvise]") == std::string_view::npos &&
      thp_enabled.find("[always]") == std::string_view::npos)
    return false;
  int major = 0, minor = 0;
  if (std::sscanf(std::string(glibc_version).c_str(), "%d.%d", &major, &minor) != 2) return false;
  return major > 2 || (major == 2 && minor >= 35);
}

std::string tunables_with_hugetlb(const char* existing) {
  std::string t = existing != nullptr ? existing : "";
  if (!t.empty()) t += ':';
  return t + "glibc.malloc.hugetlb=1";
}

void reexec_with_malloc_huge_pages(char** argv) {
#if defined(__linux__) && defined(__GLIBC__)
  constexpr const char* kMarker = "STRATA_HUGE_PAGES_REEXEC";
  const bool reexecuted = std::getenv(kMarker) != nullptr;
  if (reexecuted) unsetenv(kMarker);  // children of this process start clean
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::stringstream thp;
  thp << f.rdbuf();
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (!want_malloc_huge_pages(reexecuted, getauxval(AT_SECURE) != 0,
                              std::getenv("STRATA_HUGE_PAGES"), tunables, thp.str(),
                              gnu_get_libc_version()))
    return;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return;  // no /proc (a sandbox): go on as we are
  self[n] = '\0';
  const bool had = tunables != nullptr;
  const std::string before = had ? tunables : "";
  if (setenv("GLIBC_TUNABLES", tunables_with_hugetlb(tunables).c_str(), 1) != 0) return;
  setenv(kMarker, "1", 1);
  execv(self, argv);
  // The exec failed: go on as we are, with the environment as it was.
  unsetenv(kMarker);
  if (had) {
    setenv("GLIBC_TUNABLES", before.c_str(), 1);
  } else {
    unsetenv("GLIBC_TUNABLES");
  }
#else
  (void)argv;
#endif
}

AnonMemory anon_memory() {
  AnonMemory m;
  std::ifstream f("/proc/self/smaps_rollup");
  std::string line;
  while (std::getline(f, line)) {
    long long v = 0;
    if (std::sscanf(line.c_str(), "Anonymous: %lld kB", &v) == 1) m.anon_kib = v;
    if (std::sscanf(line.c_str(), "AnonHugePages: %lld kB", &v) == 1) m.huge_kib = v;
    if (std::sscanf(line.c_str(), "FilePmdMapped: %lld kB", &v) == 1) m.file_pmd_kib = v;
  }
  return m;
}

}  // namespace strata
