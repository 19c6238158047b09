// Bench report: statistics over a BenchRun, as JSON with vLLM `bench serve` field names,
// a text table, and an SVG plot.
//
// Definitions (vLLM benchmark_serving): TTFT = time to the first content chunk; TPOT =
// (latency - TTFT) / (output_tokens - 1) per request with more than one output token; ITL =
// every gap between content chunks; E2EL = request latency. Each gets mean_, median_, std_,
// p90_, p95_, p99_ *_ms over successful requests. Throughputs divide by the benchmark
// duration: request_throughput (completed/s), output_throughput (output tokens/s),
// total_token_throughput ((input + output)/s). Goodput: requests meeting every given SLO
// (ttft, tpot, e2el in ms) per second. Fields also written: completed, failed,
// total_input_tokens / total_output_tokens (vLLM) and total_input / total_output (same
// values), duration, num_prompts, skipped_too_long, prefix_cache_hit_rate (server
// /metrics delta: hits / queries; null when unavailable) and oracle_prefix_hit_rate
// (Mooncake; null otherwise), errors (first few messages).
//
// Thread safety: pure functions.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "serve/bench_client.h"
#include "serve/bench_workload.h"

namespace strata {

struct GoodputSlo {
  double ttft_ms = -1;  // < 0: not constrained
  double tpot_ms = -1;
  double e2el_ms = -1;
};

nlohmann::json summarize_bench(const Workload& workload, const BenchRun& run,
                               const GoodputSlo& slo);
std::string render_bench_text(const nlohmann::json& summary);
// Per-request TTFT and E2E latency (ms, log scale) against send time (s).
std::string render_bench_svg(const BenchRun& run, const std::string& title);

}  // namespace strata
