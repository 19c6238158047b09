// How many CPUs this process may use, for default thread counts.
//
// std::thread::hardware_concurrency() counts the machine's CPUs, not the ones a process may
// run on: in a container limited to 2 CPUs on a 64-core host it says 64, and a pool of 64
// spinning threads then runs far slower than one of 2. available_cpus() takes the CPUs in
// the process's affinity mask (sched_getaffinity: taskset, cpusets, Docker --cpuset-cpus)
// and caps them by the CPU quota of its cgroup (cgroup v2 cpu.max, or v1
// cpu.cfs_quota_us / cpu.cfs_period_us: Docker --cpus, Kubernetes CPU limits), rounded up.
//
// Thread safety: all functions may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace strata {

// The CPUs this process may use (>= 1), as described above; computed once per process.
int available_cpus();

// The pieces, for tests. A quota of `quota_us` per `period_us` as whole CPUs, rounded up; 0
// when unlimited (quota <= 0) or the period is not positive.
int cpus_from_quota(int64_t quota_us, int64_t period_us);
// A cgroup v2 cpu.max line ("200000 100000" -> 2, "150000 100000" -> 2, "max 100000" -> 0);
// 0 when unlimited or unparsable.
int cpus_from_cgroup2_cpu_max(std::string_view line);
// The smallest quota (in CPUs, as above) on the path from the process's cgroup to the root,
// given the text of /proc/self/cgroup and the cgroup filesystem's mount point (normally
// /sys/fs/cgroup; v2 unified or v1 "cpu" hierarchies). A container usually sees its own
// cgroup at the mount point, so the mount point itself is read too. 0 when none is set.
int cgroup_cpu_quota(std::string_view proc_self_cgroup, const std::string& cgroup_root);

}  // namespace strata
