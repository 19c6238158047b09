// Human / machine readable reports of a StateGraph, for `strata inspect --state`:
//   * format_state_text: owners -> consumers, bytes per token and per request per kind
//     (owners counted once), backbone and draft (MTP/DSpark) stages on separate lines, the
//     prefix-cache alignment unit and the bytes one cached boundary snapshot costs.
//   * format_state_dot: Graphviz DOT (owners as boxes, layers as ellipses, write/read edges).
//   * format_state_json: {"model", "alignment_unit_tokens", "boundary_snapshot_bytes",
//     "prefix_restore": {"unit_entry_bytes", "stored"|"replay"|"replay_exact":
//     {"bytes_per_boundary", "replay_tokens", "exact"}} (the policies of
//     V41RunnerCacheOptions::restore: stored snapshot vs bounded replay, cache_manager.h),
//     "kinds": [per (kind, stage) entry: owners, row_bytes, bytes_per_token,
//     bytes_per_request_fixed, ...], "owners": [...], "transients": [...],
//     "stages": {"backbone": {...}, "draft": {...}},
//     "totals": {"bytes_per_token", "bytes_per_request_fixed"}}.
// Byte totals are the StateGraph's owners-once sums (see state_graph.h).
// Thread safety: pure functions.
#pragma once

#include <string>

#include "state/state_graph.h"

namespace strata {

struct StateReportOptions {
  int block_tokens = 0;  // alignment unit; 0 = default_block_tokens(graph)
  // Decode context parallelism (dist/dcp.h): with dcp > 1 the text report adds each rank's
  // bytes per kind for one request at 128K and 1M tokens (dcp_rank_bytes).
  int dcp = 1;
  int64_t dcp_interleave = 1;
};

// Bytes one request of n_tokens holds on DCP rank `rank` of `dcp` (interleave S) for owner
// kind `kind` of `stage`: compressed-KV and index-key rows are owner-sharded (dist/dcp.h
// owned_count of n_tokens / ratio records per owner layer), every other kind is replicated
// whole. Rows only (the pools' block rounding not included). dcp = 1: one rank's bytes.
int64_t dcp_rank_bytes(const StateGraph& g, StateKind kind, Stage stage, int64_t n_tokens,
                       int rank, int dcp, int64_t S);

std::string format_state_text(const StateGraph& g, const StateReportOptions& o = {});
std::string format_state_dot(const StateGraph& g);
std::string format_state_json(const StateGraph& g, const StateReportOptions& o = {});

// "2.70 MB" style (decimal units) for reports.
std::string format_bytes(double bytes);

}  // namespace strata
