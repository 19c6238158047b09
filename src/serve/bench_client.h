// BenchClient: open-loop load generator against an OpenAI-compatible server.
//
// Each request is sent at its arrival time (whatever is still in flight), as a streaming
// POST /v1/completions with a token-id prompt, "max_tokens" = the request's output length,
// "ignore_eos": true, temperature 0 and stream_options.include_usage. Per request it
// records TTFT (send -> first content chunk), the gaps between content chunks (ITL), the
// end-to-end latency and the output token count (usage.completion_tokens, or the chunk
// count when the server sends no usage). A request fails on a transport error, a non-200
// status, an error event, or a stream without "data: [DONE]".
// Before and after the run it scrapes GET /metrics and reports the delta of
// *:prefix_cache_queries_total / *:prefix_cache_hits_total (Strata and vLLM names).
// Progress goes to stderr as a one-line \r status when `progress` is set.
//
// Only http:// URLs. Thread safety: run_benchmark spawns one thread per in-flight request
// and returns when all are done.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "serve/bench_workload.h"

namespace strata {

struct BenchClientOptions {
  std::string url = "http://127.0.0.1:8000";
  std::string model;             // empty: the first id of GET /v1/models
  int64_t max_concurrency = 0;   // 0: unlimited (pure open loop)
  double request_timeout_s = 600;
  bool progress = false;
};

struct RequestResult {
  bool success = false;
  std::string error;
  double start_s = 0;            // relative to the benchmark start
  double ttft_s = 0;
  double latency_s = 0;
  std::vector<double> itl_s;
  int64_t prompt_len = 0;
  int64_t output_tokens = 0;
};

struct ServerInfo {
  std::string model;
  int64_t max_model_len = 0;     // 0 when the server does not say
  int64_t vocab_size = 0;        // Strata's extension of the model card; 0 when absent
  int64_t prefix_alignment = 0;  // Strata's extension: prefix-cache granularity; 0 = none
};

struct BenchRun {
  std::vector<RequestResult> results;  // in workload order
  double duration_s = 0;
  // From the /metrics delta; -1 when the server exposes no such counters.
  double prefix_cache_queries = -1;
  double prefix_cache_hits = -1;
  // Speculative decoding (vLLM's spec_decode_* counters); -1 when absent.
  double spec_drafts = -1, spec_draft_tokens = -1, spec_accepted_tokens = -1;
};

// GET /v1/models: the served model id and its context length.
StatusOr<ServerInfo> query_server_info(const std::string& url);

StatusOr<BenchRun> run_benchmark(const Workload& workload, const BenchClientOptions& options);

// Sums every sample of a counter whose name ends with `suffix` (e.g.
// ":prefix_cache_hits_total") in a Prometheus text page; -1 if there is none.
double scrape_counter(const std::string& metrics_text, const std::string& suffix);

}  // namespace strata
