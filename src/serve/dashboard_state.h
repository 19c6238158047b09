// Dashboard state: the JSON behind GET /v1/dashboard/state, which the dashboard page
// (serve/dashboard_page.h) polls beside /metrics. Built from one EngineStats snapshot, the
// runner's StateGraph and the server's recent PD handoffs (serve/handoff_log.h).
//
// Server shape (HttpServer):
//   {"kind": "server", "model": NAME, "role": "colocated"|"prefill"|"decode",
//    "metrics_prefix": "strata:", "time_unix_ms": INT,
//    "state_graph": null | {
//        "model": NAME, "bytes_per_token": F, "fixed_bytes_per_request": INT,
//        "owners": [{"id", "label", "kind", "layer" (-1: request-global), "stage",
//                    "granularity", "ratio", "rows_fixed", "row_bytes", "format", "handoff",
//                    "bytes_per_token" (F, growing owners), "fixed_bytes" (INT, ring/fixed),
//                    "transient_bytes_per_query" (INT), "consumer_layers": [INT]}],
//        "kinds": [{"kind", "stage", "owners" (count), "bytes_per_token" (F),
//                   "fixed_bytes_per_request" (INT)}]},     one entry per (kind, stage)
//    "requests": {"running": INT, "waiting": INT, "list": [{"id", "phase", "prompt_tokens",
//                 "computed_tokens", "generated_tokens", "last_step_tokens", "cached_tokens",
//                 "imported", "age_s"}]},                   oldest first (EngineStats::requests)
//    "cache_usage": [{"kind", "tier", "used_bytes", "capacity_bytes"}],
//    "handoffs": {"total": INT, "recent": [{"seq", "direction", "unix_ms", "num_tokens",
//                 "from_pos", "payload_bytes", "bytes_per_kind": {KIND: INT}, "latency_ms",
//                 "ok", "error", "endpoint"}]}}            oldest first
// Router shape (Router): {"kind": "router", "policy": P, "time_unix_ms": INT,
//    "backends": [{"url", "role": "prefill"|"decode", "state": SERVER-SHAPE | null,
//                  "metrics": "PROMETHEUS TEXT" | null, "error": "" | MESSAGE}]}
// Bytes are bytes; "bytes_per_token" is bytes per prompt position (fractional when ratio > 1).
// Thread safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sched/engine.h"
#include "serve/handoff_log.h"
#include "state/state_graph.h"

namespace strata {

struct DashboardServerInfo {
  std::string model_name;
  std::string role = "colocated";
  std::string metrics_prefix = "strata:";
};

// The "state_graph" object above.
nlohmann::json state_graph_json(const StateGraph& g);
// The server shape above; `graph` may be null (the runner has none).
nlohmann::json dashboard_state_json(const DashboardServerInfo& info, const EngineStats& stats,
                                    const StateGraph* graph,
                                    const std::vector<HandoffRecord>& handoffs,
                                    int64_t handoffs_total);

// One router backend as fetched for the router shape: `state` null and `error` set when the
// backend did not answer.
struct DashboardBackend {
  std::string url;
  std::string role;
  nlohmann::json state;  // the backend's server shape, or null
  std::string metrics;   // its /metrics text ("" when not fetched)
  std::string error;
};
nlohmann::json router_dashboard_json(const std::string& policy,
                                     const std::vector<DashboardBackend>& backends);

}  // namespace strata
