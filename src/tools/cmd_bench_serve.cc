// `strata bench serve`: open-loop load against a running OpenAI-compatible server
// (serve/bench_client.h) from a Mooncake or Azure trace, random prompts, or shared-prefix
// groups. Prints a vLLM-style report, writes JSON with vLLM's field names (--out) and an
// SVG plot (--plot). Exit status 1 when the run could not be made or any request failed.
#include <fstream>
#include <memory>

#include <fmt/format.h>

#include "serve/bench_client.h"
#include "serve/bench_report.h"
#include "serve/bench_workload.h"
#include "tools/command_registry.h"

namespace strata::tools {
namespace {

struct BenchServeCli {
  std::string url = "http://127.0.0.1:8000";
  std::string model;
  std::string trace;            // mooncake:FILE | azure:FILE
  bool random = false;
  bool shared_prefix = false;
  double time_scale = 1.0;
  double length_scale = 1.0;
  int64_t num_requests = -1;
  int64_t block_tokens = 16;
  int64_t max_context = 0;      // 0: from the server's /v1/models
  int64_t vocab = 0;            // 0: from the server's /v1/models
  int64_t input_len = 64;
  int64_t output_len = 16;
  double range_ratio = 0.0;
  double request_rate = 0.0;
  int64_t num_groups = 4;
  int64_t prefix_len = 64;
  int64_t suffix_len = 16;
  int64_t max_concurrency = 0;
  uint64_t seed = 0;
  std::vector<std::string> goodput;
  std::string out;
  std::string plot;
  bool no_progress = false;
};

Status parse_goodput(const std::vector<std::string>& items, GoodputSlo* slo) {
  for (const std::string& it : items) {
    const size_t c = it.find(':');
    if (c == std::string::npos) return invalid_argument("--goodput expects NAME:MS, got '{}'", it);
    const std::string name = it.substr(0, c);
    double v = 0;
    try {
      v = std::stod(it.substr(c + 1));
    } catch (const std::exception&) {
      return invalid_argument("--goodput: bad number in '{}'", it);
    }
    if (name == "ttft") slo->ttft_ms = v;
    else if (name == "tpot") slo->tpot_ms = v;
    else if (name == "e2el") slo->e2el_ms = v;
    else return invalid_argument("--goodput: unknown metric '{}' (ttft, tpot, e2el)", name);
  }
  return ok_status();
}

int run_bench_serve(const BenchServeCli& o) {
  const int kinds = (o.trace.empty() ? 0 : 1) + (o.random ? 1 : 0) + (o.shared_prefix ? 1 : 0);
  if (kinds != 1) {
    fmt::print(stderr, "strata bench serve: give exactly one of --trace, --random, --shared-prefix\n");
    return 2;
  }
  GoodputSlo slo;
  if (Status st = parse_goodput(o.goodput, &slo); !st.ok()) {
    fmt::print(stderr, "strata bench serve: {}\n", st.message());
    return 2;
  }
  WorkloadOptions wo;
  wo.num_requests = o.num_requests;
  wo.time_scale = o.time_scale;
  wo.length_scale = o.length_scale;
  wo.block_tokens = o.block_tokens;
  wo.seed = o.seed;
  wo.max_context = o.max_context;
  wo.vocab = static_cast<int32_t>(o.vocab);
  std::string model = o.model;
  auto info = query_server_info(o.url);
  if (info.ok() && info->prefix_alignment > 0 && !o.trace.empty() &&
      o.block_tokens % info->prefix_alignment != 0) {
    fmt::print(stderr,
               "[bench] warning: --block-tokens {} is not a multiple of the server's prefix "
               "alignment ({} tokens); measured hits will fall below the oracle\n",
               o.block_tokens, info->prefix_alignment);
  }
  if (wo.max_context <= 0 || wo.vocab <= 0 || model.empty()) {
    if (!info.ok()) {
      fmt::print(stderr, "strata bench serve: {}\n", info.status().to_string());
      return 1;
    }
    if (model.empty()) model = info->model;
    if (wo.max_context <= 0) wo.max_context = info->max_model_len;
    if (wo.vocab <= 0) wo.vocab = static_cast<int32_t>(info->vocab_size);
    if (wo.max_context <= 0 || wo.vocab <= 0) {
      fmt::print(stderr, "strata bench serve: the server does not report max_model_len / "
                         "vocab_size; pass --max-context and --vocab\n");
      return 2;
    }
  }
  Workload w;
  if (!o.trace.empty()) {
    const size_t c = o.trace.find(':');
    const std::string kind = c == std::string::npos ? "" : o.trace.substr(0, c);
    const std::string file = c == std::string::npos ? "" : o.trace.substr(c + 1);
    StatusOr<Workload> loaded = Status(StatusCode::kInvalidArgument,
                                       "--trace expects mooncake:FILE or azure:FILE");
    if (kind == "mooncake") loaded = load_mooncake_trace(file, wo);
    if (kind == "azure") loaded = load_azure_trace(file, wo);
    if (!loaded.ok()) {
      fmt::print(stderr, "strata bench serve: {}\n", loaded.status().to_string());
      // 2 for a malformed argument, 1 for a trace file that is missing or does not parse
      // (as `validate golden` treats its cases file)
      return loaded.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
    }
    w = std::move(*loaded);
  } else if (o.random) {
    w = make_random_workload(wo, {o.input_len, o.output_len, o.range_ratio, o.request_rate});
  } else {
    w = make_shared_prefix_workload(wo, {o.num_groups, o.prefix_len, o.suffix_len, o.output_len,
                                         o.request_rate});
  }
  fmt::print(stderr, "[bench] {} requests ({} skipped: longer than the {}-token context) -> {}\n",
             w.requests.size(), w.skipped_too_long, wo.max_context, o.url);
  BenchClientOptions co;
  co.url = o.url;
  co.model = model;
  co.max_concurrency = o.max_concurrency;
  co.progress = !o.no_progress;
  auto run = run_benchmark(w, co);
  if (!run.ok()) {
    fmt::print(stderr, "strata bench serve: {}\n", run.status().to_string());
    return 1;
  }
  nlohmann::json summary = summarize_bench(w, *run, slo);
  summary["model_id"] = model;
  summary["max_concurrency"] = o.max_concurrency;
  summary["time_scale"] = o.time_scale;
  summary["length_scale"] = o.length_scale;
  summary["block_tokens"] = o.block_tokens;
  fmt::print("{}", render_bench_text(summary));
  if (!o.out.empty()) {
    std::ofstream f(o.out);
    f << summary.dump(2) << "\n";
    if (!f) {
      fmt::print(stderr, "strata bench serve: cannot write {}\n", o.out);
      return 1;
    }
  }
  if (!o.plot.empty()) {
    std::ofstream f(o.plot);
    f << render_bench_svg(*run, fmt::format("strata bench serve: {} ({} requests)", w.name,
                                            w.requests.size()));
    if (!f) {
      fmt::print(stderr, "strata bench serve: cannot write {}\n", o.plot);
      return 1;
    }
  }
  return summary["failed"].get<int64_t>() == 0 ? 0 : 1;
}

void setup_bench_serve(CLI::App& app) {
  CLI::App* bench = app.get_subcommand("bench");
  auto o = std::make_shared<BenchServeCli>();
  auto* cmd = bench->add_subcommand("serve", "Open-loop load test of an OpenAI-compatible server");
  cmd->add_option("--url", o->url, "Server base URL (http://host:port)");
  cmd->add_option("--model", o->model, "Model id (default: the server's first model)");
  cmd->add_option("--trace", o->trace, "Replay a trace: mooncake:FILE (JSONL) or azure:FILE (CSV)");
  cmd->add_flag("--random", o->random, "Random prompts (--input-len, --output-len, --range-ratio)");
  cmd->add_flag("--shared-prefix", o->shared_prefix, "Shared-prefix groups (--num-groups, --prefix-len, --suffix-len)");
  cmd->add_option("--time-scale", o->time_scale, "Multiply trace inter-arrival times (0.1 = 10x faster)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--length-scale", o->length_scale, "Multiply trace lengths (Mooncake: output only; input via --block-tokens)")->check(positive());
  cmd->add_option("--num-requests", o->num_requests, "Requests to send (traces: the first N that fit)");
  cmd->add_option("--block-tokens", o->block_tokens, "Mooncake: tokens per 512-token hash block")->check(positive());
  cmd->add_option("--max-context", o->max_context, "Model context (default: from /v1/models)");
  cmd->add_option("--vocab", o->vocab, "Vocabulary size for prompt token ids (default: from /v1/models)");
  cmd->add_option("--input-len", o->input_len, "Random/shared-prefix: input length")->check(positive());
  cmd->add_option("--output-len", o->output_len, "Random/shared-prefix: output length")->check(positive());
  cmd->add_option("--range-ratio", o->range_ratio, "Random: length spread ratio in [0, 1)")->check(CLI::Range(0.0, 0.999));
  cmd->add_option("--request-rate", o->request_rate, "Random/shared-prefix: Poisson rate (req/s; 0: all at once)");
  cmd->add_option("--num-groups", o->num_groups, "Shared-prefix: number of groups")->check(positive());
  cmd->add_option("--prefix-len", o->prefix_len, "Shared-prefix: shared prefix length")->check(positive());
  cmd->add_option("--suffix-len", o->suffix_len, "Shared-prefix: per-prompt suffix length")->check(positive());
  cmd->add_option("--max-concurrency", o->max_concurrency, "Cap on requests in flight (0: none)");
  cmd->add_option("--seed", o->seed, "Seed for prompt contents");
  cmd->add_option("--goodput", o->goodput, "SLOs for goodput, e.g. ttft:500 tpot:50 e2el:2000 (ms)");
  cmd->add_option("--out", o->out, "Write the result JSON here");
  cmd->add_option("--plot", o->plot, "Write an SVG plot here");
  cmd->add_flag("--no-progress", o->no_progress, "Do not print progress");
  cmd->callback([o] { set_exit_code(run_bench_serve(*o)); });
}

}  // namespace
STRATA_REGISTER_COMMAND("bench_serve", setup_bench_serve);
}  // namespace strata::tools
