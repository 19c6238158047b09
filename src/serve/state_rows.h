// The validation mode's view of one request's state (`serve --debug-state-digests`): every
// row the request's state export holds (state/handoff.h: growing, ring and fixed owners; not
// the kinds rebuilt from token ids, nor transients), as an XXH3-64 hash per row, so that a
// validator (`strata validate matrix`) can compare two deployments' states row by row and
// name the first state kind that differs.
//
// JSON, added as "strata_state" to each choice of a non-streaming response:
//   {"num_tokens": N,                      // positions [0, N) are in the state
//    "runs": [{"owner": "compressed_kv@L2", "kind": "compressed_kv", "layer": 2,
//              "granularity": "per_compressed_row", "row0": R, "positions_per_row": P,
//              "hashes": ["0123456789abcdef", ...]}, ...]}
// A row's first position is row * P for growing owners (P = the compression ratio), the row
// itself for a ring (P = 1: rows are absolute positions), and unknown for fixed owners
// (P = 0). On a failed export: {"error": "..."}.
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include "state/handoff.h"
#include "state/state_graph.h"

namespace strata {

nlohmann::json state_rows_json(const HandoffState& st, const StateGraph& graph);

}  // namespace strata
