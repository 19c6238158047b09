// `strata plan --model DIR|CONFIG --hardware FILE [--contexts 4096,131072,1048576]`: where each
// state kind lives and what is stored vs recomputed for a stated machine (state/cost_model.h).
// DeepSeek V4 / V4.1 configs (the models with ring / fixed state to weigh).
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "model/deepseek_config.h"
#include "state/cache_manager.h"
#include "state/cost_model.h"
#include "state/state_graph.h"
#include "tools/command_registry.h"

namespace strata::tools {
namespace {

struct PlanArgs {
  std::string model, hardware;
  std::vector<int64_t> contexts = {4096, 131072, 1048576};
};

int run_plan(const PlanArgs& a) {
  std::string cfg_path = a.model;
  if (std::ifstream(cfg_path + "/config.json")) cfg_path += "/config.json";
  auto c = load_deepseek_config(cfg_path);
  if (!c.ok()) {
    fmt::print(stderr, "strata plan: {} (DeepSeek V4 / V4.1 configs only)\n", c.status().message());
    return 1;
  }
  std::ifstream in(a.hardware);
  if (!in) {
    fmt::print(stderr, "strata plan: cannot open --hardware {}\n", a.hardware);
    return 1;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  auto hw = parse_hardware(ss.str());
  if (!hw.ok()) {
    fmt::print(stderr, "strata plan: {}: {}\n", a.hardware, hw.status().message());
    return 1;
  }
  auto g = StateGraph::from_deepseek(*c);
  if (!g.ok()) {
    fmt::print(stderr, "strata plan: {}\n", g.status().to_string());
    return 1;
  }
  int64_t engram = 0;
  for (int64_t rows : c->engram_num_embeddings)
    engram += rows * (c->engram_head_dim + (c->engram_head_dim + 31) / 32);
  for (int64_t L : a.contexts)
    if (L <= 0) {
      fmt::print(stderr, "strata plan: contexts must be > 0\n");
      return 2;
    }
  const Plan p = make_plan(*g, default_block_tokens(*g), *hw, a.contexts, engram);
  fmt::print("{}", format_plan(p, *hw, g->model_name()));
  return 0;
}

void setup_plan(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  auto* cmd = app.add_subcommand(
      "plan", "Tier placement and store-vs-recompute decisions for a stated machine");
  cmd->add_option("--model", args->model, "Model directory or config.json (DeepSeek V4 / V4.1)")
      ->required();
  cmd->add_option("--hardware", args->hardware,
                  "Machine description (JSON; testdata/hardware/*.json)")
      ->required();
  cmd->add_option("--contexts", args->contexts, "Context lengths in tokens")
      ->delimiter(',')
      ->capture_default_str();
  cmd->callback([args] { set_exit_code(run_plan(*args)); });
}

}  // namespace
STRATA_REGISTER_COMMAND("plan", setup_plan);
}  // namespace strata::tools
