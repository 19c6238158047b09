// `strata bench state [--config PATH] [--requests N] [--context L] [--steps S]`: cost of the
// cache manager's per-step bookkeeping (plan_step + commit + finish_step + append_tokens) for
// N running decode requests of context L, metadata only (no row bytes are written: the rows are
// the forward pass's cost). Prints microseconds per step and per running request, and the
// prefix-match cost of admitting a request with an L-token cached prompt. Attaches to the
// `bench` parent (cmd_bench.cc).
#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "model/deepseek_config.h"
#include "state/cache_manager.h"
#include "state/state_graph.h"
#include "tools/command_registry.h"

namespace strata::tools {
namespace {

struct BenchStateArgs {
  std::string config = std::string(STRATA_SOURCE_DIR) + "/testdata/configs/deepseek-v4.1-flash.config.json";
  int requests = 64;
  int64_t context = 4096;
  int steps = 200;
};

int run_bench_state(const BenchStateArgs& a) {
  auto c = load_deepseek_config(a.config);
  if (!c.ok()) {
    fmt::print(stderr, "bench state: {}\n", c.status().to_string());
    return 1;
  }
  auto g = StateGraph::from_deepseek(*c);
  if (!g.ok()) {
    fmt::print(stderr, "bench state: {}\n", g.status().to_string());
    return 1;
  }
  CacheOptions o;
  o.max_seqs = a.requests + 1;
  o.snapshot_slots = a.requests + 8;
  o.max_tokens = (a.context + a.steps + 256) * (a.requests + 1);
  o.allocate_storage = false;
  CacheManager cm(*g, o);
  using clock = std::chrono::steady_clock;
  std::vector<CacheStepItem> items;
  for (int r = 0; r < a.requests; ++r) {
    std::vector<int32_t> prompt(a.context);
    for (int64_t i = 0; i < a.context; ++i) prompt[i] = static_cast<int32_t>((i * 31 + r * 7919) % 129280);
    cm.add_sequence(r, prompt);
    // Prefill as a scheduler is told to: one chunk ending on the last alignment boundary below
    // the prompt length (so a re-sent prompt can hit it), then the rest.
    const int64_t boundary = ((a.context - 1) / cm.block_tokens()) * cm.block_tokens();
    for (int64_t chunk : {boundary, a.context - boundary}) {
      if (chunk <= 0) continue;
      StepPlan p = cm.plan_step({{r, chunk}});
      if (p.outcome != PlanOutcome::kOk) {
        fmt::print(stderr, "bench state: prefill does not fit: {}\n", p.shortfall);
        return 1;
      }
      cm.commit(p);
      cm.finish_step(p);
    }
    items.push_back({r, 1});
  }
  // Admission with a prefix hit of the whole cached prompt (prefix match + share + copy).
  std::vector<int32_t> prompt(a.context);
  const int last = a.requests - 1;  // the most recently cached prompt (LRU keeps its snapshot)
  for (int64_t i = 0; i < a.context; ++i)
    prompt[i] = static_cast<int32_t>((i * 31 + last * 7919) % 129280);
  cm.add_sequence(1 << 30, prompt);
  auto t1 = clock::now();
  StepPlan adm = cm.plan_step({{1 << 30, a.context}});
  const double plan_us = std::chrono::duration<double, std::micro>(clock::now() - t1).count();
  cm.release(1 << 30);
  auto t0 = clock::now();
  for (int s = 0; s < a.steps; ++s) {
    for (auto& it : items) cm.append_tokens(it.seq, {static_cast<int32_t>(s % 1000)});
    StepPlan p = cm.plan_step(items);
    if (p.outcome != PlanOutcome::kOk) {
      fmt::print(stderr, "bench state: decode does not fit: {}\n", p.shortfall);
      return 1;
    }
    cm.commit(p);
    cm.finish_step(p);
  }
  const double us =
      std::chrono::duration<double, std::micro>(clock::now() - t0).count() / a.steps;
  cm.check_invariants();
  fmt::print("bench state: {} ({} owners), {} requests x {} context, {} decode steps\n",
             g->model_name(), g->owners().size(), a.requests, a.context, a.steps);
  fmt::print("  decode step bookkeeping: {:.1f} us/step, {:.3f} us per running request\n", us,
             us / a.requests);
  fmt::print("  admission plan with {}-token prompt (hit {} tokens): {:.1f} us\n", a.context,
             adm.seqs[0].hit_tokens, plan_us);
  fmt::print("  prefix-cache entries {}, pools {}\n", cm.num_cache_entries(), cm.pools().size());
  return 0;
}

void setup_bench_state(CLI::App& app) {
  CLI::App* parent = app.get_subcommand("bench");  // registered first (commands build in name order)
  auto args = std::make_shared<BenchStateArgs>();
  auto* cmd = parent->add_subcommand("state", "Cache-manager step cost (metadata only)");
  cmd->add_option("--config", args->config, "DeepSeek config (file or model dir)");
  cmd->add_option("--requests", args->requests, "Running decode requests");
  cmd->add_option("--context", args->context, "Prompt tokens per request");
  cmd->add_option("--steps", args->steps, "Decode steps to time");
  cmd->callback([args] { set_exit_code(run_bench_state(*args)); });
}

}  // namespace
STRATA_REGISTER_COMMAND("bench_state", setup_bench_state);
}  // namespace strata::tools
