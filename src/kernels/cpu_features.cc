#include "kernels/cpu_features.h"

#include <atomic>
#include <cstdlib>

namespace strata::kernels {
namespace {
bool detect() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}
std::atomic<int> g_isa{-1};
}  // namespace

bool cpu_has_avx2_fma() {
  static const bool has = detect();
  return has;
}

Isa active_isa() {
  int v = g_isa.load(std::memory_order_relaxed);
  if (v < 0) {
    v = cpu_has_avx2_fma() ? static_cast<int>(Isa::kAvx2) : static_cast<int>(Isa::kScalar);
    g_isa.store(v, std::memory_order_relaxed);
  }
  return static_cast<Isa>(v);
}

void force_isa(Isa isa) {
  if (isa == Isa::kAvx2 && !cpu_has_avx2_fma()) isa = Isa::kScalar;
  g_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
}

namespace {
// STRATA_AVX512=0 in the environment starts with the AVX-512 kernels off (A/B runs).
bool avx512_default() {
  const char* e = std::getenv("STRATA_AVX512");
  return !(e && e[0] == '0');
}
std::atomic<bool> g_avx512{avx512_default()};
}
bool cpu_has_avx512() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool v = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("f16c");
  return v;
#else
  return false;
#endif
}
bool avx512_active() {
  return active_isa() == Isa::kAvx2 && avx512_enabled() && cpu_has_avx512();
}
bool avx512_enabled() { return g_avx512.load(std::memory_order_relaxed); }
void set_avx512_enabled(bool on) { g_avx512.store(on, std::memory_order_relaxed); }

namespace {
bool ext_default() {
  const char* e = std::getenv("STRATA_AVX512_EXT");
  return !(e && e[0] == '0');
}
std::atomic<bool> g_ext{ext_default()};
}  // namespace
bool cpu_has_avx512_ext() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool v = cpu_has_avx512() && __builtin_cpu_supports("avx512bf16") &&
                        __builtin_cpu_supports("avx512vbmi");
  return v;
#else
  return false;
#endif
}
bool avx512_ext_active() {
  return avx512_active() && g_ext.load(std::memory_order_relaxed) && cpu_has_avx512_ext();
}
void set_avx512_ext_enabled(bool on) { g_ext.store(on, std::memory_order_relaxed); }

const char* isa_name(Isa isa) { return isa == Isa::kAvx2 ? "avx2" : "scalar"; }

}  // namespace strata::kernels
