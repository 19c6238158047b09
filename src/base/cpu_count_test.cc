#include "base/cpu_count.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <filesystem>
#include <fstream>
#include <thread>

#include "base/thread_pool.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

TEST(CpuCount, QuotaRoundsUpAndUnlimitedIsZero) {
  EXPECT_EQ(cpus_from_quota(200000, 100000), 2);
  EXPECT_EQ(cpus_from_quota(150000, 100000), 2);  // 1.5 CPUs: both may run
  EXPECT_EQ(cpus_from_quota(50000, 100000), 1);
  EXPECT_EQ(cpus_from_quota(-1, 100000), 0);  // v1's "no limit"
  EXPECT_EQ(cpus_from_quota(100000, 0), 0);
  EXPECT_EQ(cpus_from_quota(INT64_MAX, 2), 1 << 20);  // capped, no overflow
  EXPECT_EQ(cpus_from_cgroup2_cpu_max("9223372036854775807 100000"), 1 << 20);
  EXPECT_EQ(cpus_from_cgroup2_cpu_max("200000 100000\n"), 2);
  EXPECT_EQ(cpus_from_cgroup2_cpu_max("350000 100000"), 4);
  EXPECT_EQ(cpus_from_cgroup2_cpu_max("max 100000\n"), 0);
  EXPECT_EQ(cpus_from_cgroup2_cpu_max(""), 0);
  EXPECT_EQ(cpus_from_cgroup2_cpu_max("abc 100000"), 0);
  EXPECT_EQ(cpus_from_cgroup2_cpu_max("100000"), 0);
}

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// A fake cgroup filesystem: v2 (the process's own cgroup and a parent with a smaller limit;
// a container that sees its limit at the mount point), v1 "cpu,cpuacct", and none.
TEST(CpuCount, CgroupQuotaV2AndV1) {
  const fs::path root =
      fs::temp_directory_path() / ("strata_cgroup_test_" + std::to_string(::getpid()));
  fs::remove_all(root);
  write(root / "v2/kubepods/pod1/ctr/cpu.max", "max 100000\n");
  write(root / "v2/kubepods/pod1/cpu.max", "300000 100000\n");
  write(root / "v2/kubepods/cpu.max", "max 100000\n");
  EXPECT_EQ(cgroup_cpu_quota("0::/kubepods/pod1/ctr\n", (root / "v2").string()), 3);
  write(root / "v2/cpu.max", "200000 100000\n");  // the container's own view
  EXPECT_EQ(cgroup_cpu_quota("0::/kubepods/pod1/ctr\n", (root / "v2").string()), 2);
  EXPECT_EQ(cgroup_cpu_quota("0::/\n", (root / "v2").string()), 2);

  write(root / "v1/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "150000\n");
  write(root / "v1/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  write(root / "v1/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  write(root / "v1/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  const std::string v1 = "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n";
  EXPECT_EQ(cgroup_cpu_quota(v1, (root / "v1").string()), 2);
  EXPECT_EQ(cgroup_cpu_quota("4:cpuacct:/docker/abc\n", (root / "v1").string()), 0);  // not cpu
  EXPECT_EQ(cgroup_cpu_quota("garbage\n0::/none\n", (root / "none").string()), 0);
  fs::remove_all(root);
}

TEST(CpuCount, AvailableCpusIsAtLeastOneAndAtMostTheMachine) {
  const int n = available_cpus();
  EXPECT_GE(n, 1);
  const unsigned hw = std::thread::hardware_concurrency();
  if (hw > 0) {
    EXPECT_LE(n, static_cast<int>(hw));
  }
  EXPECT_EQ(ThreadPool(0).num_threads(), n);
  EXPECT_FALSE(ThreadPool(0).oversubscribed());
  EXPECT_TRUE(ThreadPool(n + 1).oversubscribed());
}

// An oversubscribed pool (4 threads per CPU) still runs every unit once, through many
// dispatches, with plain and stealing splits.
TEST(CpuCount, OversubscribedPoolIsCorrect) {
  ThreadPool pool(4 * available_cpus() + 1);
  ASSERT_TRUE(pool.oversubscribed());
  int64_t sum = 0;
  for (int rep = 0; rep < 300; ++rep) {
    std::atomic<int64_t> part{0};
    pool.parallel_for(100, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) part += i;
    });
    pool.parallel_for_stealing(100, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) part += i;
    });
    sum += part.load();
  }
  EXPECT_EQ(sum, 300 * 2 * (99 * 100 / 2));
}

}  // namespace
}  // namespace strata
