// `strata validate golden --model DIR --cases FILE [--chunk-size N] [--stats stats.json]`:
// runs every golden case (prefill, then teacher-forced decode) through the model's forward
// pass and compares routes and logits with the reference (rules: exec/golden_validator.h).
// Prints one line per case and a last line
//   golden: N passed, M failed, max_abs_diff=X, route_divergent=R
// Exit status 1 on any failure, 2 on a setup error.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "exec/deepseek_v41/deepseek_v41_runner.h"
#include "exec/deepseek_v4/deepseek_v4_runner.h"
#include "exec/golden_validator.h"
#include "tools/rank_flags.h"
#include "tools/command_registry.h"

namespace strata::tools {
namespace {

struct GoldenArgs {
  std::string model;
  std::string cases;
  std::string stats;
  int64_t chunk_size = 0;
  int threads = 0;
  double logit_tol = 0.25;
  double gap_tol = 0.25;
  std::vector<std::string> only;
  std::string call_shape = "canonical";
  RankLayout ranks;
};

void run_validate_golden(const GoldenArgs& a) {
  std::string stats = a.stats;
  if (stats.empty()) {
    const auto guess = std::filesystem::path(a.cases).parent_path() / "stats.json";
    if (std::filesystem::exists(guess)) stats = guess.string();
  }
  auto cases = load_golden_cases(a.cases, stats);
  if (!cases.ok()) {
    fmt::print(stderr, "validate golden: {}\n", cases.status().to_string());
    set_exit_code(1);  // a file that does not load is a failure, not a usage error
    return;
  }
  // Ranks: under mpirun every rank runs this command; a layout says how they share the work.
  if (const int rc = setup_ranks("validate golden", a.ranks); rc != 0) {
    set_exit_code(rc);
    return;
  }
  const CallShape shape = *parse_call_shape(a.call_shape);  // validated by CLI11
  auto target = make_golden_target(a.model, a.threads, shape);
  if (!target.ok()) {
    fmt::print(stderr, "validate golden: {}\n", target.status().to_string());
    set_exit_code(1);  // a file that does not load is a failure, not a usage error
    return;
  }
  GoldenOptions opt;
  opt.chunk_size = a.chunk_size;
  opt.logit_tol = a.logit_tol;
  opt.gap_tol = a.gap_tol;
  opt.stats_path = stats;
  opt.only_cases = a.only;
  opt.allow_stable_divergence = shape == CallShape::kCanonical;
  const GoldenReport rep = run_golden(**target, *cases, opt, [](const GoldenCaseResult& r) {
    fmt::print("{}\n", r.summary());
    std::fflush(stdout);
  });
  if (const std::string d = rep.dspark_line(); !d.empty()) fmt::print("{}\n", d);
  fmt::print("{}\n", rep.digest_line());
  fmt::print("{}", collective_time_line());
  fmt::print("{}\n", rep.last_line());
  set_exit_code(rep.failed == 0 && !rep.cases.empty() ? 0 : 1);
}

void setup_validate_golden(CLI::App& app) {
  // The DeepSeek forward passes are the golden targets of this build (V4 or V4.1 by config).
  register_golden_target_factory(make_deepseek_golden_target);
  CLI::App* parent = app.get_subcommand("validate");
  auto args = std::make_shared<GoldenArgs>();
  auto* cmd = parent->add_subcommand("golden", "Compare a model with DeepSeek reference golden cases");
  cmd->add_option("--model", args->model, "Model directory")->required();
  cmd->add_option("--cases", args->cases, "cases.safetensors with the golden cases")->required();
  cmd->add_option("--stats", args->stats,
                  "stats.json marking fragile cases (default: next to --cases if present)");
  cmd->add_option("--chunk-size", args->chunk_size, "Prefill chunk size (0 = whole prompt)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--threads", args->threads, "Worker threads (0 = the CPUs this process may use)")->check(threads_range());
  cmd->add_option("--logit-tol", args->logit_tol, "Max |delta logit| per strictly compared row");
  cmd->add_option("--gap-tol", args->gap_tol,
                  "Argmax must agree where the golden top1-top2 gap exceeds this");
  cmd->add_option("--case", args->only, "Run only these cases (repeatable)");
  cmd->add_option("--call-shape", args->call_shape,
                  "Numeric form: canonical (what serving computes: every position as a "
                  "one-token decode step) or reference (the reference's whole-prompt / decode "
                  "call shapes, bit-exact)")
      ->check(CLI::IsMember({"canonical", "reference"}));
  add_rank_flags(cmd, &args->ranks);
  cmd->callback([args] { run_validate_golden(*args); });
}

}  // namespace
STRATA_REGISTER_COMMAND("validate_golden", setup_validate_golden);
}  // namespace strata::tools
