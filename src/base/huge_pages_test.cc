// Tests for base/huge_pages: when strata re-executes itself with glibc's huge-page tunable.
#include "base/huge_pages.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

constexpr const char* kMadvise = "always [madvise] never\n";

// want(tunables, thp, glibc) with no marker, not secure, STRATA_HUGE_PAGES unset.
bool want(const char* tunables, const char* thp, const char* glibc) {
  return want_malloc_huge_pages(false, false, nullptr, tunables, thp, glibc);
}

TEST(HugePages, WantedOnMadviseOrAlwaysWithNewGlibc) {
  EXPECT_TRUE(want(nullptr, kMadvise, "2.36"));
  EXPECT_TRUE(want(nullptr, "[always] madvise never", "2.35"));
  EXPECT_TRUE(want(nullptr, kMadvise, "3.0"));
  EXPECT_TRUE(want_malloc_huge_pages(false, false, "1", "glibc.malloc.arena_max=2", kMadvise,
                                     "2.40"));
}

TEST(HugePages, NotWantedWhenOffOrAlreadySetOrUnsupported) {
  EXPECT_FALSE(want_malloc_huge_pages(false, false, "0", nullptr, kMadvise, "2.36"));  // opt-out
  EXPECT_FALSE(want("glibc.malloc.hugetlb=1", kMadvise, "2.36"));
  EXPECT_FALSE(want("glibc.malloc.hugetlb=0", kMadvise, "2.36"));
  EXPECT_FALSE(want(nullptr, "always madvise [never]", "2.36"));
  EXPECT_FALSE(want(nullptr, "", "2.36"));           // no sysfs file
  EXPECT_FALSE(want(nullptr, kMadvise, "2.34"));     // glibc too old
  EXPECT_FALSE(want(nullptr, kMadvise, "unknown"));
}

// The re-executed process, and a secure-mode one (setuid, file capabilities: glibc drops
// the tunable there, so a re-exec would repeat forever), never re-execute.
TEST(HugePages, NotWantedWhenReexecutedOrSecure) {
  EXPECT_FALSE(want_malloc_huge_pages(true, false, nullptr, nullptr, kMadvise, "2.36"));
  EXPECT_FALSE(want_malloc_huge_pages(false, true, nullptr, nullptr, kMadvise, "2.36"));
}

TEST(HugePages, TunablesKeepWhatWasThere) {
  EXPECT_EQ(tunables_with_hugetlb(nullptr), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(tunables_with_hugetlb(""), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(tunables_with_hugetlb("glibc.malloc.arena_max=2"),
            "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1");
}

TEST(HugePages, AnonMemoryReadsThisProcess) {
  const AnonMemory m = anon_memory();
  ASSERT_GT(m.anon_kib, 0);  // a running gtest binary has anonymous memory
  EXPECT_GE(m.huge_kib, 0);
  EXPECT_LE(m.huge_kib, m.anon_kib);
}

}  // namespace
}  // namespace strata
