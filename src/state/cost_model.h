// Store-vs-recompute cost model and tier placement for a stated machine (issue 26 item 5;
// ../shared/docs/spec-tiers.md, tiers part). Pure arithmetic over the state graph's byte
// formulas (state_graph.h) and a hardware description; `strata plan` prints it.
//
// Per cached alignment unit of u tokens the choices are
//   store:    keep the unit's growing rows (and its boundary snapshot) on a tier and load
//             them: bytes / bandwidth + latency, per tier;
//   recompute: prefill the unit's u tokens again: u / prefill_tokens_per_s (the stated or
//             measured replay rate; the attention term's growth with context is folded into
//             that rate, which the hardware file states for the context it was measured at);
// and per boundary snapshot (window rings, compressor tails, Engram history)
//   stored (exact, snapshot bytes loaded), replay-exact (R = replay_exact_tokens(graph)
//   tokens recomputed, exact), replay (the last window, approximate: never chosen where
//   outputs must match; its cost is printed for comparison).
// The cheaper exact choice wins per tier. Placement: the running requests' state is in the
// working pool (HBM); what is left of it, then DRAM, then SSD hold cached units, in that
// order, after the Engram tables, which go to the fastest tier with room for them.
// Errors: InvalidArgument for a hardware file with a missing or non-positive field.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "state/state_graph.h"

namespace strata {

struct TierHardware {
  std::string name;          // "hbm", "dram", "ssd", "network"
  int64_t bytes = 0;         // capacity for state (after weights, for HBM)
  double gbps = 0;           // read bandwidth, GB/s (1e9 bytes)
  double latency_us = 0;     // per object
};

struct Hardware {
  std::string name;
  std::vector<TierHardware> tiers;   // fastest first; tiers[0] is the working pool
  double prefill_tokens_per_s = 0;   // replay rate of the model on this machine
  int64_t running_requests = 1;      // requests whose state must sit in the working pool
};

// JSON: {"name": ..., "prefill_tokens_per_s": ..., "running_requests": ...,
//        "tiers": [{"name": "hbm", "bytes": ..., "gbps": ..., "latency_us": ...}, ...]}.
StatusOr<Hardware> parse_hardware(const std::string& json_text);

struct KindBytes {
  std::string kind;
  int64_t bytes = 0;  // for one request at the context
};

struct PlanAtContext {
  int64_t context = 0;
  std::vector<KindBytes> per_request;   // state of one request of `context` tokens, per kind
  int64_t request_bytes = 0;
  bool running_fit = false;             // running_requests x request_bytes <= tiers[0].bytes
  int64_t unit_tokens = 0, unit_row_bytes = 0, snapshot_bytes = 0;
  int64_t replay_exact_tokens = 0, replay_window_tokens = 0;
  // Cached prefix tokens each tier holds (tier order), after the running requests and the
  // Engram tables: every unit with its boundary snapshot (policy `stored`), and rows only
  // (the replay policies, which recompute the ring / fixed state on a hit instead).
  std::vector<int64_t> cached_tokens_per_tier;
  std::vector<int64_t> cached_tokens_rows_only_per_tier;
  // Seconds to restore one unit (rows + snapshot) from each tier, and to recompute it.
  std::vector<double> load_s_per_tier;
  double recompute_unit_s = 0;
  // Seconds to restore a boundary: stored snapshot per tier, replay-exact, replay.
  std::vector<double> snapshot_load_s_per_tier;
  double replay_exact_s = 0, replay_window_s = 0;
  std::vector<std::string> decision_per_tier;  // "store" or "recompute" (units + boundary)
};

struct Plan {
  std::vector<PlanAtContext> contexts;
  int64_t engram_table_bytes = 0;
  std::string engram_tier;  // tier name with room for the tables ("" = none)
};

// engram_table_bytes: the model's Engram tables (0 = none).
Plan make_plan(const StateGraph& g, int64_t unit_tokens, const Hardware& hw,
               const std::vector<int64_t>& contexts, int64_t engram_table_bytes);

std::string format_plan(const Plan& p, const Hardware& hw, const std::string& model);

}  // namespace strata
