// The short load of one `strata validate matrix` step: a workload (a trace slice) replayed
// against the deployment with the bench client (serve/bench_client.h), while a sampler
// thread reads GET /metrics every 100 ms for the state bytes in use per kind and tier (the
// working pool's cache_used_bytes, and the tiers' kv_tier_bytes as kind "prefix_units").
// Thread safety: run_load blocks; it owns its threads.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "serve/bench_workload.h"

namespace strata::tools {

struct LoadResult {
  nlohmann::json summary;    // summarize_bench (vLLM `bench serve` fields)
  // [{"t": seconds since the load began, "kind", "tier", "used_bytes"}], every 100 ms.
  nlohmann::json occupancy_series = nlohmann::json::array();
  // [{"kind", "tier", "peak_used_bytes", "capacity_bytes"}]
  nlohmann::json occupancy_peak = nlohmann::json::array();
  std::vector<double> ttft_s;  // per successful request (latency CDFs of the report)
  std::vector<double> tpot_s;  // per successful request with more than one output token
};

// `metrics_url`: where /metrics is read (the decode server under PD; "" = url).
StatusOr<LoadResult> run_load(const std::string& url, const std::string& metrics_url,
                              const Workload& workload, int64_t max_concurrency);

}  // namespace strata::tools
