#include "base/cpu_count.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif

namespace strata {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) return {};
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

bool parse_int(std::string_view s, int64_t* v) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// The tighter of two quotas in CPUs, 0 meaning none.
int tighter_quota(int a, int b) {
  if (a <= 0) return std::max(b, 0);
  return b > 0 ? std::min(a, b) : a;
}

// The quota (CPUs) in one cgroup directory, v2 file first, then v1; 0 if none.
int quota_in(const std::string& dir) {
  if (const std::string max = read_file(dir + "/cpu.max"); !max.empty())
    return cpus_from_cgroup2_cpu_max(max);
  int64_t quota = 0, period = 0;
  if (parse_int(read_file(dir + "/cpu.cfs_quota_us"), &quota) &&
      parse_int(read_file(dir + "/cpu.cfs_period_us"), &period))
    return cpus_from_quota(quota, period);
  return 0;
}

// The smallest non-zero quota from `mount + path` up to `mount`.
int smallest_quota(const std::string& mount, std::string path) {
  int best = 0;  // 0: no limit yet
  auto take = [&best](int q) { best = tighter_quota(best, q); };
  for (;;) {
    take(quota_in(mount + path));
    if (path.empty() || path == "/") break;
    const size_t slash = path.find_last_of('/');
    path = slash == std::string::npos || slash == 0 ? std::string() : path.substr(0, slash);
  }
  return best;
}

int affinity_cpus() {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
#endif
  return 0;
}

}  // namespace

int cpus_from_quota(int64_t quota_us, int64_t period_us) {
  if (quota_us <= 0 || period_us <= 0) return 0;
  // Rounded up without forming quota + period (any value the file holds is parsed).
  const int64_t cpus = quota_us / period_us + (quota_us % period_us != 0 ? 1 : 0);
  return static_cast<int>(std::min<int64_t>(cpus, 1 << 20));
}

int cpus_from_cgroup2_cpu_max(std::string_view line) {
  while (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  const size_t sp = line.find(' ');
  if (sp == std::string_view::npos) return 0;
  int64_t quota = 0, period = 0;
  if (line.substr(0, sp) == "max" || !parse_int(line.substr(0, sp), &quota) ||
      !parse_int(line.substr(sp + 1), &period))
    return 0;
  return cpus_from_quota(quota, period);
}

int cgroup_cpu_quota(std::string_view proc_self_cgroup, const std::string& cgroup_root) {
  int best = 0;  // 0: no limit yet
  auto take = [&best](int q) { best = tighter_quota(best, q); };
  // Lines "id:controllers:path": v2 is "0::path"; v1's CPU controller is listed as "cpu"
  // (alone or with others, e.g. "cpu,cpuacct") and mounted under that name.
  size_t pos = 0;
  while (pos < proc_self_cgroup.size()) {
    size_t end = proc_self_cgroup.find('\n', pos);
    if (end == std::string_view::npos) end = proc_self_cgroup.size();
    const std::string_view line = proc_self_cgroup.substr(pos, end - pos);
    pos = end + 1;
    const size_t c1 = line.find(':');
    const size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    const std::string_view ctrls = line.substr(c1 + 1, c2 - c1 - 1);
    const std::string path(line.substr(c2 + 1));
    if (ctrls.empty()) {
      take(smallest_quota(cgroup_root, path));
      continue;
    }
    bool cpu = false;
    for (size_t b = 0; b <= ctrls.size();) {
      size_t e = ctrls.find(',', b);
      if (e == std::string_view::npos) e = ctrls.size();
      cpu = cpu || ctrls.substr(b, e - b) == "cpu";
      b = e + 1;
    }
    if (cpu) {
      take(smallest_quota(cgroup_root + "/" + std::string(ctrls), path));
      take(smallest_quota(cgroup_root + "/cpu", path));
    }
  }
  return best;
}

int available_cpus() {
  static const int n = [] {
    int cpus = affinity_cpus();
    if (cpus <= 0) cpus = static_cast<int>(std::thread::hardware_concurrency());
    const int quota = cgroup_cpu_quota(read_file("/proc/self/cgroup"), "/sys/fs/cgroup");
    cpus = tighter_quota(cpus, quota);
    return std::max(1, cpus);
  }();
  return n;
}

}  // namespace strata
