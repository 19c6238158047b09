// `strata bench indexer [--heads H] [--dim D] [--keys N] [--reps R]`: the indexer's per-key
// scoring cost (DeepSeek V4 / V4.1 lightning indexer, FP4 query x FP4 keys): the fused
// v41::index_scores_fp4 (16 keys per AVX-512 VNNI pass where the CPU has it) against the
// per-key dots then weighting (index_dots_fp4 + index_weighted_scores), timed in the same run
// on the same random FP4 keys. Checks that both give the same bits (exit 1 otherwise).
// Defaults: V4.1-Flash's indexer (64 heads of 128); the tiny test model is --heads 4 --dim 64.
// Attaches to the `bench` parent (cmd_bench.cc).
#include <chrono>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "exec/deepseek_v41/v41_ops.h"
#include "kernels/cpu_features.h"
#include "kernels/quant_formats.h"
#include "tools/command_registry.h"

namespace strata::tools {
namespace {

struct BenchIndexerArgs {
  int64_t heads = 64, dim = 128, keys = 8192;
  int reps = 20;
};

int run_bench_indexer(const BenchIndexerArgs& a) {
  if (a.dim % 32 != 0) {
    fmt::print(stderr, "strata bench indexer: --dim must be a multiple of 32, got {}\n", a.dim);
    return 2;
  }
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<float> q(a.heads * a.dim);
  for (float& v : q) v = nd(rng);
  for (int64_t h = 0; h < a.heads; ++h)
    quant::fp4_ue8m0_qdq(&q[h * a.dim], static_cast<int>(a.dim), 32);
  v41::IndexQueryFp4 iq;
  iq.set(q.data(), a.heads, a.dim);
  const int64_t rb = a.dim / 2 + a.dim / 32;
  std::vector<uint8_t> rows(a.keys * rb);
  std::vector<float> kf(a.dim);
  for (int64_t r = 0; r < a.keys; ++r) {
    for (float& v : kf) v = nd(rng);
    quant::fp4_ue8m0_quantize(kf.data(), static_cast<int>(a.dim), 32, &rows[r * rb], &rows[r * rb] + a.dim / 2);
  }
  std::vector<const uint8_t*> kp(a.keys);
  for (int64_t r = 0; r < a.keys; ++r) kp[r] = &rows[r * rb];
  std::vector<float> w(a.heads), fused(a.keys), split(a.keys);
  for (float& v : w) v = nd(rng);
  std::vector<double> dots(a.keys * a.heads);
  using clock = std::chrono::steady_clock;
  double best_fused = 1e300, best_split = 1e300;
  for (int rep = 0; rep < a.reps; ++rep) {  // alternating, best of reps
    auto t0 = clock::now();
    v41::index_scores_fp4(iq, kp.data(), a.keys, w.data(), fused.data());
    auto t1 = clock::now();
    v41::index_dots_fp4(iq, kp.data(), a.keys, dots.data());
    v41::index_weighted_scores(dots.data(), a.keys, a.heads, w.data(), split.data());
    auto t2 = clock::now();
    best_fused = std::min(best_fused, std::chrono::duration<double, std::nano>(t1 - t0).count());
    best_split = std::min(best_split, std::chrono::duration<double, std::nano>(t2 - t1).count());
  }
  const bool same = std::memcmp(fused.data(), split.data(), fused.size() * sizeof(float)) == 0;
  fmt::print("bench indexer: {} heads x {} dims, {} FP4 keys, best of {} (kernels: {})\n", a.heads,
             a.dim, a.keys, a.reps, kernels::avx512_active() ? "avx2 + avx512" : "portable / avx2");
  fmt::print("  index_scores_fp4 (fused)           {:9.2f} ns/key\n", best_fused / a.keys);
  fmt::print("  index_dots_fp4 + weighted_scores   {:9.2f} ns/key  ({:.2f}x the fused time)\n",
             best_split / a.keys, best_split / best_fused);
  fmt::print("  same bits                          {}\n", same ? "yes" : "NO");
  return same ? 0 : 1;
}

void setup_bench_indexer(CLI::App& app) {
  CLI::App* parent = app.get_subcommand("bench");
  auto a = std::make_shared<BenchIndexerArgs>();
  auto* cmd = parent->add_subcommand("indexer", "Indexer key-scoring cost: fused FP4 kernel vs dots then weighting");
  cmd->add_option("--heads", a->heads, "Index heads")->check(CLI::Range(int64_t{1}, int64_t{1024}))->capture_default_str();
  cmd->add_option("--dim", a->dim, "Index head dim (multiple of 32)")->check(CLI::Range(int64_t{32}, int64_t{1024}))->capture_default_str();
  cmd->add_option("--keys", a->keys, "Keys scored per call")->check(CLI::Range(int64_t{1}, int64_t{1} << 22))->capture_default_str();
  cmd->add_option("--reps", a->reps, "Timed calls of each (best kept)")->check(CLI::Range(1, 100000))->capture_default_str();
  cmd->callback([a] { set_exit_code(run_bench_indexer(*a)); });
}

}  // namespace
STRATA_REGISTER_COMMAND("bench_indexer", setup_bench_indexer);
}  // namespace strata::tools
