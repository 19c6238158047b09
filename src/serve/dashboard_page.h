// The dashboard page (GET /dashboard on `strata serve` and `strata router`): one
// self-contained HTML document (inline CSS and JS, no external assets; works offline).
//
// The page polls every ~1 s: GET /v1/dashboard/state (serve/dashboard_state.h) and
// GET /metrics (Prometheus text, parsed in the page; names are matched by their part after
// the state's "metrics_prefix", so --metrics-prefix vllm: works). It renders, per server
// (one section per backend when the state has the router shape):
//   * state graph: an SVG of owners -> consumer layers, an owner table and bytes per kind;
//   * occupancy: cache_used_bytes / cache_capacity_bytes per kind and tier, prefix-cache
//     tiers (kv_tier_*) and prefix-cache hits;
//   * requests: running and waiting, with phase, computed / prompt tokens, last step size,
//     generated, cached, imported (PD transfer), age;
//   * speculative decoding: drafts, draft / accepted tokens, acceptance per position;
//   * PD handoffs: the recent exports / imports (bytes per kind, latency, errors).
// Every rendered number sits in an element with data- attributes naming it (e.g.
// <td data-metric="cache_used_bytes" data-kind="window_kv" data-tier="host">1,024</td>; text
// is the exact integer with "," separators), <body data-refresh-count="N"> counts successful
// refreshes, and #last-updated shows when the latest one landed. With --api-key the state
// endpoint (/v1/...) needs the key: open /dashboard#key=KEY and the page sends it.
#pragma once

#include <string_view>

namespace strata {

// The whole HTML document (static; the page fetches everything live).
std::string_view dashboard_page_html();

}  // namespace strata
