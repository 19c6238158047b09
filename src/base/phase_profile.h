// Wall-time accounting of named phases of a forward pass (the GEMM families, attention steps),
// for `strata bench model --breakdown`: where a decode token's time goes, measured in the
// benchmark itself instead of with temporary timers.
//
// Off by default: a PhaseScope then costs one relaxed atomic load. When enabled, each scope
// reads the steady clock twice and adds its wall time (ns), one call and `bytes` to its phase.
// Only the outermost open scope of a thread counts (a phase inside another is part of the
// outer one's time), so the phases never overlap on one thread and their sum is at most the
// wall time of the code they cover. Scopes are opened on the thread that calls the kernel,
// around the whole call including its thread-pool dispatch, so a phase's time is the
// caller's wall time for it, not CPU time summed over threads.
//
// Phase names are string literals; at most kMaxPhases distinct names per process (further
// names are counted under "(overflow)").
//
// Thread safety: PhaseScope, enabled() and snapshot() may run on any thread concurrently;
// set_enabled() and reset() should be called while no scope is open (e.g. between steps),
// otherwise a scope open across the call is counted or dropped as a whole.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::profile {

inline constexpr int kMaxPhases = 48;

namespace detail {
extern std::atomic<bool> g_enabled;
int phase_id(const char* name);  // registers `name` on first use
void add(int id, int64_t ns, double bytes);
int64_t now_ns();
extern thread_local int t_depth;
}  // namespace detail

// Process-wide switch (default off).
void set_enabled(bool on);
inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }

// Totals since the last reset(), in first-use order of the names.
struct PhaseTotals {
  std::string name;
  int64_t calls = 0;
  double seconds = 0;
  double bytes = 0;  // as passed by the scopes (e.g. weight bytes streamed)
};
std::vector<PhaseTotals> snapshot();
// Zeroes every phase's totals (names stay registered).
void reset();

// Marks work that must not count as a phase of the thread it runs on: scopes opened inside
// it are nested and so not timed. For work a pool worker runs beside the caller's phases
// (ThreadPool::run_async), whose wall time is not part of the caller's.
class Untimed {
 public:
  Untimed() : active_(enabled()) {
    if (active_) ++detail::t_depth;
  }
  ~Untimed() {
    if (active_) --detail::t_depth;
  }
  Untimed(const Untimed&) = delete;
  Untimed& operator=(const Untimed&) = delete;

 private:
  bool active_;
};

// Times its own lifetime as phase `name` (a string literal) when profiling is enabled and no
// other scope is open on this thread. `bytes`: what the phase reads, for a GB/s column (0 if
// not meaningful).
class PhaseScope {
 public:
  explicit PhaseScope(const char* name, double bytes = 0) {
    if (!enabled()) return;
    active_ = true;
    if (detail::t_depth++ > 0) return;  // nested: part of the outer phase
    name_ = name;
    bytes_ = bytes;
    t0_ = detail::now_ns();
  }
  ~PhaseScope() {
    if (!active_) return;
    --detail::t_depth;
    if (name_ != nullptr) detail::add(detail::phase_id(name_), detail::now_ns() - t0_, bytes_);
  }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  const char* name_ = nullptr;  // set when this scope is timed (outermost)
  double bytes_ = 0;
  int64_t t0_ = 0;
  bool active_ = false;  // profiling was on at construction (depth was counted)
};

}  // namespace strata::profile
