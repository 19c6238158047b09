// `strata bench gemv`: kernel-level decode benchmark. How close do the decode GEMV kernels
// (M = 1..4 activation rows) get to the memory-bandwidth roofline, per weight format, in the
// same run?
//
// For each format it allocates random weights well beyond the last-level cache (default
// ~512 MiB of checkpoint bytes, as several [N, K] matrices), packs them the way the model
// loaders do, and runs the decode kernel over all matrices, `repeats` passes after one
// warm-up pass:
//   fp8        E4M3 + UE8M0 32x32 block scales: pack_fp8_weight + linear_fp8_packed
//   fp4        E2M1 + UE8M0 per row per 32:     pack_fp4_weight + linear_fp4_packed (act 32)
//   bf16       pack_seq_weight_bf16 + seq_gemm_packed
//   f64-einsum fp8_dequant_gemm_f64 (wo_a) on the same packed FP8 weights as fp8
// It reports GB/s of checkpoint bytes (tools/bench_gemv_bytes.h), weights/s, and the
// fraction of the streaming read bandwidth (kernels::measure_read_bandwidth) measured in
// the same run with the same thread pool, right before that format's passes. Resident
// bytes (the packed in-memory layout: scales as one UE8M0 byte per row per K block, or f32
// with --packed-scales f32, the earlier layout) are reported too.
// --avx512 on|off switches the AVX-512 decode paths (kernels::set_avx512_enabled; default:
// as the process started, see kernels/cpu_features.h) and --avx512-ext on|off their
// VBMI/BF16/GFNI extension paths (kernels::set_avx512_ext_enabled), so they can be compared.
// Random codes avoid E4M3 NaN (0x7F/0xFF) and keep subnormal codes at a checkpoint-like
// rate (fill_e4m3); UE8M0 scales are drawn from 115..130.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/thread_pool.h"
#include "kernels/block_gemm.h"
#include "kernels/cpu_features.h"
#include "kernels/fp8_einsum.h"
#include "kernels/membw.h"
#include "kernels/seq_gemm.h"
#include "tools/bench_gemv_bytes.h"
#include "tools/command_registry.h"

namespace strata::tools {
namespace {

struct BenchGemvCli {
  int64_t n = 4096;
  int64_t k = 4096;
  int64_t m = 1;
  double mib = 512;
  int64_t matrices = 0;  // 0: derived from mib
  int threads = 0;
  int repeats = 5;
  int64_t bw_mib = 1024;
  std::string avx512;  // "on" / "off"; empty: as started (STRATA_AVX512 env, default on)
  std::string ext;     // "on" / "off"; empty: as started (STRATA_AVX512_EXT env, default on)
  std::string scales = "e8m0";  // packed scale form: "e8m0" (PackedScales::kAuto) or "f32"
  std::vector<std::string> formats = {"fp8", "fp4", "bf16", "f64-einsum"};
  uint64_t seed = 1;
  bool json = false;
};

// splitmix64: fast, reproducible filler for hundreds of MiB of codes.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

void fill_bytes(Rng& r, uint8_t* p, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = r.next();
    for (int b = 0; b < 8; ++b) p[i + b] = static_cast<uint8_t>(v >> (8 * b));
  }
  const uint64_t v = r.next();
  for (int b = 0; i < n; ++i, ++b) p[i] = static_cast<uint8_t>(v >> (8 * b));
}
// E4M3 codes without the NaN codes 0x7F / 0xFF (mapped to 0x7E / 0xFE, ±448), uniform over
// the other codes except the subnormal ones (exponent 0, mantissa != 0): 1 in 512 of those is
// kept, the rest get exponent 1, so subnormal codes occur at 1/8192 (1.2e-4, about the
// rate of the golden tiny checkpoint quantized by DeepSeek's tools: 1.1e-4), as in a real
// checkpoint rather than at 1/16. The FP8 decode's fast path skips K blocks holding one.
void fill_e4m3(Rng& r, uint8_t* p, int64_t n) {
  fill_bytes(r, p, n);
  for (int64_t i = 0; i < n; ++i) {
    if ((p[i] & 0x7F) == 0x7F) p[i] ^= 0x01;
    if ((p[i] & 0x78) == 0 && (p[i] & 0x07) != 0 && r.next() % 512 != 0) p[i] |= 0x08;
  }
}
// UE8M0 scales 2^(e-127) with e in 115..130.
void fill_ue8m0(Rng& r, uint8_t* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(115 + r.next() % 16);
}
// BF16 weights of magnitude 2^-7..2^0: random sign and mantissa, exponent 120..126.
void fill_bf16(Rng& r, uint16_t* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t v = r.next();
    p[i] = static_cast<uint16_t>(((v & 1) << 15) | ((120 + (v >> 1) % 7) << 7) | ((v >> 8) & 0x7F));
  }
}

using Clock = std::chrono::steady_clock;

struct Result {
  GemvFormat format;
  std::string kernel;
  int64_t matrices = 0;
  int64_t checkpoint_bytes = 0;  // all matrices
  int64_t resident_bytes = 0;    // all matrices, packed in memory
  double bw = 0;                 // read bandwidth (B/s) measured just before the passes
  std::vector<double> pass_s;    // sorted
};

// Warm-up + `repeats` timed passes of `one_pass` (which runs the kernel on every matrix).
template <class Fn>
std::vector<double> time_passes(int repeats, Fn&& one_pass) {
  std::vector<double> out;
  for (int p = 0; p <= repeats; ++p) {
    const auto t0 = Clock::now();
    one_pass();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (p > 0) out.push_back(s);
  }
  std::sort(out.begin(), out.end());
  return out;
}

int run_bench_gemv(const BenchGemvCli& o) {
  if (o.m < 1 || o.m > 4) {
    fmt::print(stderr, "strata bench gemv: --m must be in 1..4 (decode)\n");
    return 2;
  }
  if (o.n < 1 || o.k < 32 || o.k % 32 != 0) {
    fmt::print(stderr, "strata bench gemv: need --n >= 1 and --k a positive multiple of 32\n");
    return 2;
  }
  bool want[4] = {false, false, false, false};
  for (const auto& f : o.formats) {
    bool found = false;
    for (int i = 0; i < 4; ++i)
      if (f == gemv_format_name(static_cast<GemvFormat>(i))) want[i] = found = true;
    if (!found) {
      fmt::print(stderr, "strata bench gemv: unknown format '{}' (fp8, fp4, bf16, f64-einsum)\n",
                 f);
      return 2;
    }
  }
  if (!o.avx512.empty()) kernels::set_avx512_enabled(o.avx512 == "on");
  if (!o.ext.empty()) kernels::set_avx512_ext_enabled(o.ext == "on");
  const bool avx2 = kernels::active_isa() == kernels::Isa::kAvx2;
  const bool use512 = kernels::avx512_active();
  const std::string path = !avx2     ? "scalar"
                           : !use512 ? "avx2"
                           : kernels::avx512_ext_active() ? "avx512 + extensions (vbmi, bf16, gfni)"
                                                          : "avx512";

  const kernels::PackedScales form =
      o.scales == "f32" ? kernels::PackedScales::kF32 : kernels::PackedScales::kAuto;
  ThreadPool pool(o.threads);
  const int threads = pool.num_threads();
  // Measured once up front and again right before each format's passes (the fractions use
  // the latter, so a load change on a shared machine between formats skews them less).
  auto measure_bw = [&] { return kernels::measure_read_bandwidth(pool, size_t(o.bw_mib) << 20); };
  const double bw = measure_bw();

  const int64_t n = o.n, k = o.k, m = o.m;
  const double budget = o.mib * 1024.0 * 1024.0;
  Rng rng{o.seed};
  std::vector<float> x(m * k);
  for (auto& v : x) {  // bf16-valued activations in (-1, 1)
    const float f = static_cast<float>(static_cast<double>(rng.next() >> 11) * 0x1.0p-53) * 2 - 1;
    uint32_t b;
    std::memcpy(&b, &f, 4);
    b &= 0xFFFF0000u;
    std::memcpy(&v, &b, 4);
  }
  std::vector<float> y(m * n);
  std::vector<Result> results;
  auto count = [&](GemvFormat f) {
    return o.matrices > 0 ? o.matrices
                          : gemv_matrices_for_budget(budget, gemv_checkpoint_bytes(f, n, k));
  };

  // FP8 (and the f64 einsum on the same packed weights).
  if (want[0] || want[3]) {
    const int64_t count8 = count(GemvFormat::kFp8);
    std::vector<kernels::PackedFp8Weight> w8;
    std::vector<uint8_t> codes(n * k), scales(gemv_ceil_div(n, 32) * gemv_ceil_div(k, 32));
    int64_t resident = 0;
    for (int64_t i = 0; i < count8; ++i) {
      fill_e4m3(rng, codes.data(), static_cast<int64_t>(codes.size()));
      fill_ue8m0(rng, scales.data(), static_cast<int64_t>(scales.size()));
      kernels::Fp8BlockWeight raw;
      raw.codes = codes.data();
      raw.scales_e8m0 = scales.data();
      raw.n = n;
      raw.k = k;
      raw.block_n = raw.block_k = 32;
      w8.push_back(kernels::pack_fp8_weight(raw, form));
      resident += w8.back().bytes();
    }
    codes = {};
    scales = {};
    for (GemvFormat f : {GemvFormat::kFp8, GemvFormat::kF64Einsum}) {
      if (!want[static_cast<int>(f)]) continue;
      Result r{f, f == GemvFormat::kFp8 ? "linear_fp8_packed" : "fp8_dequant_gemm_f64", count8,
               count8 * gemv_checkpoint_bytes(f, n, k), resident, 0, {}};
      r.bw = measure_bw();
      r.pass_s = time_passes(o.repeats, [&] {
        for (const auto& w : w8) {
          if (f == GemvFormat::kFp8)
            kernels::linear_fp8_packed(x.data(), m, w, y.data(), &pool);
          else
            kernels::fp8_dequant_gemm_f64(x.data(), m, k, w, 0, n, y.data(), n, &pool);
        }
      });
      results.push_back(std::move(r));
    }
  }
  if (want[1]) {
    const int64_t count4 = count(GemvFormat::kFp4);
    std::vector<kernels::PackedFp4Weight> w4;
    std::vector<uint8_t> codes(gemv_ceil_div(n * k, 2)), scales(n * gemv_ceil_div(k, 32));
    int64_t resident = 0;
    for (int64_t i = 0; i < count4; ++i) {
      fill_bytes(rng, codes.data(), static_cast<int64_t>(codes.size()));  // every E2M1 is finite
      fill_ue8m0(rng, scales.data(), static_cast<int64_t>(scales.size()));
      kernels::Fp4Weight raw;
      raw.packed = codes.data();
      raw.scales_e8m0 = scales.data();
      raw.n = n;
      raw.k = k;
      raw.group = 32;
      w4.push_back(kernels::pack_fp4_weight(raw, form));
      resident += w4.back().bytes();
    }
    codes = {};
    scales = {};
    Result r{GemvFormat::kFp4, "linear_fp4_packed", count4,
             count4 * gemv_checkpoint_bytes(GemvFormat::kFp4, n, k), resident, 0, {}};
    r.bw = measure_bw();
    r.pass_s = time_passes(o.repeats, [&] {
      for (const auto& w : w4) kernels::linear_fp4_packed(x.data(), m, w, 32, y.data(), &pool);
    });
    results.push_back(std::move(r));
  }
  if (want[2]) {
    const int64_t count16 = count(GemvFormat::kBf16);
    std::vector<kernels::PackedSeqWeight> w16;
    std::vector<uint16_t> raw(n * k);
    int64_t resident = 0;
    for (int64_t i = 0; i < count16; ++i) {
      fill_bf16(rng, raw.data(), static_cast<int64_t>(raw.size()));
      w16.push_back(kernels::pack_seq_weight_bf16(raw.data(), n, k));
      resident += w16.back().bytes();
    }
    raw = {};
    Result r{GemvFormat::kBf16, "seq_gemm_packed", count16,
             count16 * gemv_checkpoint_bytes(GemvFormat::kBf16, n, k), resident, 0, {}};
    r.bw = measure_bw();
    r.pass_s = time_passes(o.repeats, [&] {
      for (const auto& w : w16) kernels::seq_gemm_packed(x.data(), m, w, y.data(), &pool);
    });
    results.push_back(std::move(r));
  }

  if (o.json) {
    nlohmann::json j = {{"threads", threads},
                        {"isa", kernels::isa_name(kernels::active_isa())},
                        {"avx512_enabled", kernels::avx512_enabled()},
                        {"avx512_cpu", kernels::cpu_has_avx512()},
                        {"avx512_active", use512},
                        {"avx512_ext_active", kernels::avx512_ext_active()},
                        {"path", path},
                        {"fp8_multiply", kernels::fp8_decode_multiply()},
                        {"packed_scales", o.scales},
                        {"read_bandwidth_gbs", bw / 1e9},
                        {"m", m},
                        {"n", n},
                        {"k", k},
                        {"repeats", o.repeats},
                        {"formats", nlohmann::json::array()}};
    for (const auto& r : results) {
      const double best = r.pass_s.front(), med = r.pass_s[r.pass_s.size() / 2];
      const double weights = static_cast<double>(r.matrices) * n * k;
      j["formats"].push_back({{"format", gemv_format_name(r.format)},
                              {"kernel", r.kernel},
                              {"matrices", r.matrices},
                              {"checkpoint_bytes_per_matrix", r.checkpoint_bytes / r.matrices},
                              {"checkpoint_bytes", r.checkpoint_bytes},
                              {"resident_bytes", r.resident_bytes},
                              {"weights", static_cast<int64_t>(weights)},
                              {"best_s", best},
                              {"median_s", med},
                              {"checkpoint_gbs_best", r.checkpoint_bytes / best / 1e9},
                              {"checkpoint_gbs_median", r.checkpoint_bytes / med / 1e9},
                              {"resident_gbs_best", r.resident_bytes / best / 1e9},
                              {"gweights_per_s_best", weights / best / 1e9},
                              {"read_bandwidth_gbs", r.bw / 1e9},
                              {"roofline_fraction_best", r.checkpoint_bytes / best / r.bw},
                              {"roofline_fraction_median", r.checkpoint_bytes / med / r.bw},
                              {"resident_roofline_fraction_best", r.resident_bytes / best / r.bw}});
    }
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("threads        {} (kernels: {}, decode path: {}; avx512 {}, cpu avx512: {}; fp8 "
             "multiply: {})\n",
             threads, kernels::isa_name(kernels::active_isa()), path,
             kernels::avx512_enabled() ? "enabled" : "disabled",
             kernels::cpu_has_avx512() ? "yes" : "no", kernels::fp8_decode_multiply());
  fmt::print("read bandwidth {:.2f} GB/s at start (streaming read of {} MiB, same threads; "
             "remeasured before each format: BW column)\n",
             bw / 1e9, o.bw_mib);
  fmt::print("shape          M={} N={} K={}; best (median) of {} passes after a warm-up; packed "
             "scales: {}\n",
             m, n, k, o.repeats, o.scales);
  if (o.matrices == 0)
    fmt::print("weights        --mib {} rounded up to whole [N, K] matrices (ckpt MiB column); "
               "below the last-level cache the kernels read from cache, not memory\n",
               o.mib);
  fmt::print("{:<11} {:>4} {:>9} {:>7} {:>16} {:>10} {:>16} {:>14}\n", "format", "mats",
             "ckpt MiB", "BW GB/s", "ckpt GB/s", "Gweight/s", "of roofline", "resident GB/s");
  for (const auto& r : results) {
    const double best = r.pass_s.front(), med = r.pass_s[r.pass_s.size() / 2];
    const double weights = static_cast<double>(r.matrices) * n * k;
    fmt::print("{:<11} {:>4} {:>9.1f} {:>7.2f} {:>7.2f} ({:>6.2f}) {:>10.2f} {:>6.1f}% ({:>5.1f}%) "
               "{:>14.2f}\n",
               gemv_format_name(r.format), r.matrices, r.checkpoint_bytes / 1048576.0, r.bw / 1e9,
               r.checkpoint_bytes / best / 1e9, r.checkpoint_bytes / med / 1e9,
               weights / best / 1e9, 100.0 * r.checkpoint_bytes / best / r.bw,
               100.0 * r.checkpoint_bytes / med / r.bw, r.resident_bytes / best / 1e9);
  }
  return 0;
}

void setup_bench_gemv(CLI::App& app) {
  CLI::App* bench = app.get_subcommand("bench");
  auto* cmd = bench->add_subcommand(
      "gemv", "Decode GEMV kernels (fp8, fp4, bf16, f64 einsum) as a fraction of the read-"
              "bandwidth roofline measured in the same run");
  auto o = std::make_shared<BenchGemvCli>();
  cmd->add_option("--n", o->n, "Output features per matrix (N)")->capture_default_str();
  cmd->add_option("--k", o->k, "Input features per matrix (K, multiple of 32)")
      ->capture_default_str();
  cmd->add_option("--m", o->m, "Activation rows (1..4)")->capture_default_str();
  cmd->add_option("--mib", o->mib, "Checkpoint MiB of weights per format (well above the LLC)")
      ->capture_default_str()
      ->check(CLI::Range(1e-6, 1048576.0));
  cmd->add_option("--matrices", o->matrices, "Matrices per format (0: from --mib)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--threads", o->threads, "Compute threads (0: the CPUs this process may use)")
      ->capture_default_str()
      ->check(threads_range());
  cmd->add_option("--repeats", o->repeats, "Timed passes over all matrices (after one warm-up)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--bandwidth-mib", o->bw_mib, "Buffer size of the bandwidth measurement")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--avx512", o->avx512,
                  "AVX-512 decode kernels on|off (default: as started, STRATA_AVX512=0 is off)")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--avx512-ext", o->ext,
                  "AVX-512 extension paths (VBMI/BF16/GFNI) on|off (default: as started, "
                  "STRATA_AVX512_EXT=0 is off)")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--packed-scales", o->scales,
                  "Scale form of the packed fp8/fp4 layouts: e8m0 (1 byte, the default) or f32")
      ->capture_default_str()
      ->check(CLI::IsMember({"e8m0", "f32"}));
  cmd->add_option("--format", o->formats, "Formats to run: fp8 fp4 bf16 f64-einsum")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Random seed of weights and activations")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o] { set_exit_code_of("bench gemv", [&] { return run_bench_gemv(*o); }); });
}
}  // namespace
STRATA_REGISTER_COMMAND("bench_gemv", setup_bench_gemv);
}  // namespace strata::tools
