// `strata bench sampler [--vocab V] [--spread S] [--temperature T] [--top-p P] [--top-k K]
// [--min-p M] [--samples N]`: the cost of one sampled token (Sampler::sample) on a row of V
// logits drawn from N(0, S^2), against the full-sort reference (exec/sampler_reference.h)
// timed in the same run on the same logits and seed. Checks that both pick the same tokens
// (exit 1 otherwise). S sets how peaked the row is: the larger, the fewer tokens a top-p cut
// keeps. Attaches to the `bench` parent (cmd_bench.cc).
#include <chrono>
#include <random>

#include <fmt/format.h>

#include "exec/sampler.h"
#include "exec/sampler_reference.h"
#include "tools/command_registry.h"

namespace strata::tools {
namespace {

struct BenchSamplerArgs {
  int64_t vocab = 129280;
  float spread = 4.0f;
  SamplingParams params;
  int samples = 200;
};

int run_bench_sampler(BenchSamplerArgs a) {
  a.params.seed = 1;
  if (Status st = validate_sampling_params(a.params); !st.ok()) {
    fmt::print(stderr, "strata bench sampler: {}\n", st.to_string());
    return 2;
  }
  if (!(a.spread >= 0.0f && a.spread <= 1e4f)) {  // NaN passes CLI11's range check
    fmt::print(stderr, "strata bench sampler: --spread must be in [0, 10000], got {}\n", a.spread);
    return 2;
  }
  if (a.params.temperature == 0.0f || a.params.top_k == 1) {
    fmt::print(stderr, "strata bench sampler: greedy (temperature 0 or top-k 1) has no filters to time\n");
    return 2;
  }
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, a.spread);
  std::vector<float> logits(a.vocab);
  for (float& v : logits) v = normal(gen);
  using clock = std::chrono::steady_clock;
  Sampler sampler(a.params);
  std::vector<int32_t> ids(a.samples), ref_ids(a.samples);
  auto t0 = clock::now();
  for (int i = 0; i < a.samples; ++i) ids[i] = sampler.sample(logits).id;
  const double us = std::chrono::duration<double, std::micro>(clock::now() - t0).count() / a.samples;
  std::mt19937_64 rng(a.params.seed);
  t0 = clock::now();
  for (int i = 0; i < a.samples; ++i) ref_ids[i] = sample_by_full_sort(a.params, logits, rng);
  const double ref_us =
      std::chrono::duration<double, std::micro>(clock::now() - t0).count() / a.samples;
  int differ = 0;
  for (int i = 0; i < a.samples; ++i) differ += ids[i] != ref_ids[i];
  fmt::print("bench sampler: vocab {}, logits N(0, {}^2), temperature {}, top-p {}, top-k {}, "
             "min-p {}, {} samples\n",
             a.vocab, a.spread, a.params.temperature, a.params.top_p, a.params.top_k,
             a.params.min_p, a.samples);
  fmt::print("  Sampler::sample      {:9.1f} us/token\n", us);
  fmt::print("  full-sort reference  {:9.1f} us/token  ({:.2f}x the Sampler's time)\n", ref_us,
             ref_us / us);
  fmt::print("  same tokens          {}\n", differ == 0 ? "yes" : fmt::format("NO ({} differ)", differ));
  return differ == 0 ? 0 : 1;
}

void setup_bench_sampler(CLI::App& app) {
  CLI::App* parent = app.get_subcommand("bench");  // registered first (commands build in name order)
  auto args = std::make_shared<BenchSamplerArgs>();
  args->params.top_p = 0.9f;
  auto* cmd = parent->add_subcommand("sampler", "Sampling cost per token against a full sort");
  cmd->add_option("--vocab", args->vocab, "Logits per row")->check(CLI::Range(int64_t{1}, int64_t{1} << 24))->capture_default_str();
  cmd->add_option("--spread", args->spread, "Standard deviation of the random logits")->check(CLI::Range(0.0f, 1e4f))->capture_default_str();
  cmd->add_option("--temperature", args->params.temperature, "Sampling temperature (> 0)")->capture_default_str();
  cmd->add_option("--top-p", args->params.top_p, "Nucleus mass (1: off)")->capture_default_str();
  cmd->add_option("--top-k", args->params.top_k, "Top-k (0: off)")->capture_default_str();
  cmd->add_option("--min-p", args->params.min_p, "Min-p (0: off)")->capture_default_str();
  cmd->add_option("--samples", args->samples, "Tokens to time")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd->callback([args] { set_exit_code(run_bench_sampler(*args)); });
}

}  // namespace
STRATA_REGISTER_COMMAND("bench_sampler", setup_bench_sampler);
}  // namespace strata::tools
