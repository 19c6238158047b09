#include "base/phase_profile.h"

#include <chrono>
#include <cstring>
#include <mutex>

namespace strata::profile {
namespace detail {
std::atomic<bool> g_enabled{false};
thread_local int t_depth = 0;

namespace {
struct Phase {
  std::atomic<const char*> name{nullptr};
  std::atomic<int64_t> calls{0}, ns{0};
  std::atomic<double> bytes{0};
};
Phase g_phases[kMaxPhases + 1];  // the last slot: "(overflow)"
std::atomic<int> g_count{0};
std::mutex g_register_mu;
}  // namespace

int phase_id(const char* name) {
  const int n = g_count.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    const char* p = g_phases[i].name.load(std::memory_order_relaxed);
    if (p == name || std::strcmp(p, name) == 0) return i;
  }
  std::lock_guard<std::mutex> lk(g_register_mu);
  const int m = g_count.load(std::memory_order_relaxed);
  for (int i = 0; i < m; ++i)
    if (std::strcmp(g_phases[i].name.load(std::memory_order_relaxed), name) == 0) return i;
  if (m == kMaxPhases) {
    g_phases[kMaxPhases].name.store("(overflow)", std::memory_order_relaxed);
    return kMaxPhases;
  }
  g_phases[m].name.store(name, std::memory_order_relaxed);
  g_count.store(m + 1, std::memory_order_release);
  return m;
}

void add(int id, int64_t ns, double bytes) {
  Phase& p = g_phases[id];
  p.calls.fetch_add(1, std::memory_order_relaxed);
  p.ns.fetch_add(ns, std::memory_order_relaxed);
  double b = p.bytes.load(std::memory_order_relaxed);
  while (!p.bytes.compare_exchange_weak(b, b + bytes, std::memory_order_relaxed)) {
  }
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace detail

void set_enabled(bool on) { detail::g_enabled.store(on, std::memory_order_relaxed); }

std::vector<PhaseTotals> snapshot() {
  std::vector<PhaseTotals> out;
  const int n = detail::g_count.load(std::memory_order_acquire);
  for (int i = 0; i <= kMaxPhases; ++i) {
    if (i >= n && i != kMaxPhases) continue;
    const auto& p = detail::g_phases[i];
    const char* name = p.name.load(std::memory_order_relaxed);
    if (name == nullptr) continue;
    PhaseTotals t;
    t.name = name;
    t.calls = p.calls.load(std::memory_order_relaxed);
    t.seconds = 1e-9 * static_cast<double>(p.ns.load(std::memory_order_relaxed));
    t.bytes = p.bytes.load(std::memory_order_relaxed);
    out.push_back(std::move(t));
  }
  return out;
}

void reset() {
  for (auto& p : detail::g_phases) {
    p.calls.store(0, std::memory_order_relaxed);
    p.ns.store(0, std::memory_order_relaxed);
    p.bytes.store(0, std::memory_order_relaxed);
  }
}

}  // namespace strata::profile
