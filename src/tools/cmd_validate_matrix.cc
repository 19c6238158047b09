// `strata validate matrix --model DIR [--steps 1-10] [--out DIR]`: the validation ladder
// (issue 27; docs/validation-matrix.md). Each step starts its own deployment (strata serve,
// the PD router, mpirun, redis-server), sends a fixed set of token-id prompts (greedy,
// logprobs, the state row hashes of the validation mode), compares the answers with the
// nearest lower step that passed (tolerance 0: a position's logits and state are a function
// of its prefix alone), replays a trace slice for latency and occupancy, reads /metrics, and
// stops what it started. Writes OUT/matrix.json (one record per step), OUT/report.html and
// OUT/support-matrix.jsonl. Exit 1 when a step that was built fails, 2 on a usage error.
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "serve/bench_workload.h"
#include "state/state_spec.h"
#include "tools/command_registry.h"
#include "tools/matrix_check.h"
#include "tools/matrix_load.h"
#include "tools/matrix_process.h"
#include "tools/matrix_record.h"
#include "tools/matrix_report.h"
#include "tools/matrix_steps.h"

namespace strata::tools {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct MatrixArgs {
  std::string model;
  std::string steps = "1-10";
  std::string out = "validate-matrix";
  int64_t max_tokens = 12;
  int64_t load_requests = 12;
  std::string trace;
  std::string golden_cases;
  bool no_golden = false;
  int threads = 1;
  std::string perturb_kind;
  int perturb_step = 3;
};

StatusOr<std::vector<int>> parse_steps(const std::string& s) {
  std::vector<int> out;
  size_t p = 0;
  while (p <= s.size()) {
    const size_t comma = std::min(s.find(',', p), s.size());
    const std::string part = s.substr(p, comma - p);
    const size_t dash = part.find('-');
    try {
      const int a = std::stoi(part.substr(0, dash));
      const int b = dash == std::string::npos ? a : std::stoi(part.substr(dash + 1));
      if (a < 1 || b > 10 || a > b) throw std::out_of_range("range");
      for (int i = a; i <= b; ++i)
        if (std::find(out.begin(), out.end(), i) == out.end()) out.push_back(i);
    } catch (const std::exception&) {
      return invalid_argument("--steps: '{}' is not a step list like 1-10 or 1,3,5 (steps 1-10)", s);
    }
    p = comma + 1;
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The repo's golden cases whose config.json is byte-identical to the model's ("" = none): the
// golden sets in testdata/golden/ were made from those checkpoints (their READMEs).
std::string auto_golden_cases(const std::string& model_dir) {
  auto read = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return in ? std::string(std::istreambuf_iterator<char>(in), {}) : std::string();
  };
  const std::string cfg = read(fs::path(model_dir) / "config.json");
  std::error_code ec;
  const fs::path root = fs::path(STRATA_SOURCE_DIR) / "testdata" / "golden";
  if (cfg.empty() || !fs::is_directory(root, ec)) return "";
  for (const auto& e : fs::directory_iterator(root, ec))
    if (fs::exists(e.path() / "cases.safetensors") && read(e.path() / "config.json") == cfg)
      return (e.path() / "cases.safetensors").string();
  return "";
}

int run_matrix(MatrixArgs a) {
  if (a.golden_cases.empty() && !a.no_golden) a.golden_cases = auto_golden_cases(a.model);
  auto steps = parse_steps(a.steps);
  if (!steps.ok()) {
    fmt::print(stderr, "validate matrix: {}\n", steps.status().message());
    return 2;
  }
  MatrixContext c;
  c.strata_bin = self_binary();
  c.model_dir = fs::absolute(a.model).string();
  c.out_dir = fs::absolute(a.out).string();
  c.threads = a.threads;
  c.perturb_kind = a.perturb_kind;
  c.perturb_step = a.perturb_step;
  StatusOr<ModelFacts> facts = model_facts(c);
  if (!facts.ok()) {
    fmt::print(stderr, "validate matrix: {}\n", facts.status().message());
    return 1;
  }
  c.architecture = facts->family;
  c.has_experts = facts->has_experts;
  if (!a.perturb_kind.empty()) {
    if (StatusOr<StateKind> k = parse_state_kind(a.perturb_kind); !k.ok()) {
      fmt::print(stderr, "validate matrix: --debug-perturb-restore: {}\n", k.status().message());
      return 2;
    }
    if (c.architecture != "deepseek") {
      fmt::print(stderr, "validate matrix: --debug-perturb-restore is built for the DeepSeek V4 / "
                 "V4.1 runners only\n");
      return 2;
    }
  }
  const json common = common_fields(c, *facts);
  StatusOr<Workload> load = matrix_workload(a.trace, *facts, a.load_requests);
  if (!load.ok()) {
    fmt::print(stderr, "validate matrix: {}\n", load.status().message());
    return 2;
  }
  // The output directory: created, its logs/ emptied (no logs of an earlier run's steps), and
  // checked writable before any server starts.
  std::error_code ec;
  const fs::path out(a.out), logs = out / "logs";
  fs::create_directories(out, ec);
  if (!ec) fs::remove_all(logs, ec);
  if (!ec) fs::create_directories(logs, ec);
  const bool writable = !ec && std::ofstream(logs / ".probe").good();
  std::error_code ignored;
  fs::remove(logs / ".probe", ignored);
  if (!writable) {
    fmt::print(stderr, "validate matrix: cannot write into {}: {}\n", a.out,
               ec ? ec.message() : std::string("permission denied"));
    return 2;
  }
  const std::vector<MatrixPrompt> prompts =
      matrix_prompts(facts->vocab_size, facts->max_context, facts->alignment, a.max_tokens, 0x5eed);
  fmt::print("validate matrix: {} ({}), steps {}, {} prompts x {} tokens, load {} requests, out {}\n",
             c.model_dir, facts->architecture, a.steps, prompts.size(), a.max_tokens,
             load->requests.size(), c.out_dir);
  std::fflush(stdout);
  stop_children_on_signals();

  std::vector<json> records;
  std::vector<StepRun> runs;  // for the report
  std::vector<PromptOutput> below, below_state;
  int below_step = 0, below_state_step = 0;
  bool failed = false;
  for (int id : *steps) {
    const StepInfo& info = matrix_steps().at(static_cast<size_t>(id - 1));
    StepRun run = run_step(c, info, prompts, a.max_tokens, *load, below, below_step, below_state,
                           below_state_step, id == 1 ? a.golden_cases : "");
    json rec = common;
    fill_record(&rec, c, *facts, info, run);
    const std::string status = rec["status"].get<std::string>();
    fmt::print("step {:<2} {:<17} {:<15} {}\n", id, info.name, status,
               rec["reason"].is_string() ? rec["reason"].get<std::string>() : "");
    std::fflush(stdout);
    if (status == "fail") failed = true;
    if (status == "pass") {
      below = run.outputs;
      below_step = id;
      if (!below.empty() && !below[0].state.is_null()) {
        below_state = run.outputs;
        below_state_step = id;
      }
    }
    records.push_back(std::move(rec));
    runs.push_back(std::move(run));
  }
  const json doc = matrix_document(records);
  std::ofstream mj(out / "matrix.json");
  mj << doc.dump(2) << "\n";
  std::ofstream sm(out / "support-matrix.jsonl");
  for (const json& r : records)
    if (r["status"] == "pass" || r["status"] == "fail") sm << r["support_matrix"].dump() << "\n";
  std::ofstream html(out / "report.html");
  html << render_matrix_html(doc, runs);
  mj.close(), sm.close(), html.close();
  if (!mj || !sm || !html) {
    fmt::print(stderr, "validate matrix: cannot write the results into {}\n", c.out_dir);
    return 2;
  }
  fmt::print("validate matrix: wrote {}/matrix.json, {}/report.html, {}/support-matrix.jsonl\n",
             c.out_dir, c.out_dir, c.out_dir);
  if (failed) fmt::print("validate matrix: FAILED (a built step did not pass)\n");
  return failed ? 1 : 0;
}

void setup_validate_matrix(CLI::App& app) {
  auto* parent = app.get_subcommand("validate");
  auto a = std::make_shared<MatrixArgs>();
  auto* cmd = parent->add_subcommand(
      "matrix", "Climb the validation ladder on a model: each step's deployment, equality with "
                "the step below, latency, occupancy, transfers, hit rates (matrix.json, report.html)");
  cmd->add_option("--model", a->model, "Model directory")->required();
  cmd->add_option("--steps", a->steps, "Steps to run: 1-10, or a list such as 1,3,4 (1 baseline, "
                  "2 chunked prefill, 3 prefix cache, 4 PD, 5 DCP, 6 KV pool, 7 EP, "
                  "8 speculative decoding, 9 high concurrency, 10 PP)")->capture_default_str();
  cmd->add_option("--out", a->out, "Output directory")->capture_default_str();
  cmd->add_option("--max-tokens", a->max_tokens, "Tokens generated per check prompt")
      ->check(CLI::Range(1, 4096))->capture_default_str();
  cmd->add_option("--load-requests", a->load_requests, "Requests of each step's load (a trace slice)")
      ->check(CLI::Range(1, 100000))->capture_default_str();
  cmd->add_option("--trace", a->trace, "Load trace: mooncake:FILE or azure:FILE (default: the "
                  "repo's Mooncake head, else random prompts)");
  cmd->add_option("--golden-cases", a->golden_cases, "Golden cases for step 1's accuracy "
                  "(`validate golden --cases`; DeepSeek models; default: the repo's set whose "
                  "config.json equals the model's, if any)");
  cmd->add_flag("--no-golden", a->no_golden, "Do not look for golden cases");
  cmd->add_option("--threads", a->threads, "Compute threads of each server process")
      ->check(CLI::Range(1, 1024))->capture_default_str();
  cmd->add_option("--debug-perturb-restore", a->perturb_kind,
                  "Test hook: the servers of --debug-perturb-step change one byte of this state "
                  "kind on every prefix-hit restore (the step must fail, naming the kind)");
  cmd->add_option("--debug-perturb-step", a->perturb_step, "Step the hook applies to")
      ->check(CLI::Range(1, 10))->capture_default_str();
  cmd->callback([a] { set_exit_code(run_matrix(*a)); });
}

}  // namespace
STRATA_REGISTER_COMMAND("validate_matrix", setup_validate_matrix);
}  // namespace strata::tools
