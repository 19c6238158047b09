// StateGraph reports. See state_report.h.
#include "state/state_report.h"

#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dist/dcp.h"
#include "state/cache_manager.h"

namespace strata {
namespace {

int unit_of(const StateGraph& g, const StateReportOptions& o) {
  return o.block_tokens > 0 ? o.block_tokens : default_block_tokens(g);
}

int64_t snapshot_bytes(const StateGraph& g) {
  int64_t b = 0;
  for (const auto& o : g.owners())
    if (o.spec.fixed()) b += o.spec.bytes_per_request();
  return b;
}

std::string layer_list(const std::vector<int>& v) {
  // Compress runs: 3-7,9
  std::string s;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    if (!s.empty()) s += ",";
    s += j > i + 1 ? fmt::format("{}-{}", v[i], v[j])
                   : (j == i + 1 ? fmt::format("{},{}", v[i], v[j]) : fmt::format("{}", v[i]));
    i = j + 1;
  }
  return s.empty() ? "-" : s;
}

struct KindStage {
  StateKind kind;
  Stage stage;
  bool operator<(const KindStage& o) const {
    return std::tie(kind, stage) < std::tie(o.kind, o.stage);
  }
};

struct KindAgg {
  int owners = 0;
  std::vector<int> owner_layers;
  std::set<int> ratios;
  int64_t row_bytes = 0;
  double per_token = 0;
  int64_t fixed = 0;
  std::string format, granularity, layout, handoff, rollback;
};

std::map<KindStage, KindAgg> aggregate(const StateGraph& g) {
  std::map<KindStage, KindAgg> m;
  for (const auto& o : g.owners()) {
    if (o.spec.transient()) continue;
    KindAgg& a = m[{o.kind, o.stage}];
    ++a.owners;
    if (o.layer >= 0) a.owner_layers.push_back(o.layer);
    if (o.spec.grows()) a.ratios.insert(o.spec.ratio);
    a.row_bytes = o.spec.row_bytes;
    a.per_token += o.spec.bytes_per_token();
    a.fixed += o.spec.bytes_per_request();
    a.format = row_format_name(o.spec.format);
    a.granularity = granularity_name(o.spec.granularity);
    a.layout = o.spec.layout;
    a.handoff = handoff_policy_name(o.spec.handoff);
    a.rollback = o.spec.rollback;
  }
  return m;
}

std::string dot_id(const StateOwnerInfo& o) { return fmt::format("o{}", o.id); }

}  // namespace

std::string format_bytes(double b) {
  if (b >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.2f} MB", b / 1e6);
  if (b >= 1e3) return fmt::format("{:.2f} KB", b / 1e3);
  return fmt::format("{:.0f} B", b);
}

int64_t dcp_rank_bytes(const StateGraph& g, StateKind kind, Stage stage, int64_t n_tokens,
                       int rank, int dcp, int64_t S) {
  int64_t b = 0;
  for (const auto& o : g.owners()) {
    if (o.kind != kind || o.stage != stage) continue;
    if (o.spec.grows()) {
      const int64_t rows = n_tokens / o.spec.ratio;
      const RowShard sh = dcp_row_shard(kind, RowShard{rank, dcp, S});
      b += o.spec.row_bytes * (sh.sharded() ? dcp::owned_count(rows, rank, sh.interleave, dcp) : rows);
    } else if (o.spec.fixed()) {
      b += o.spec.bytes_per_request();
    }
  }
  return b;
}

namespace {
// The DCP section of the text report: per kind, one rank's bytes and each DCP rank's.
std::string dcp_text(const StateGraph& g, int D, int64_t S) {
  bool plain = false;
  for (const auto& o : g.owners()) plain |= o.kind == StateKind::kPlainKv;
  std::string s =
      plain ? fmt::format("decode context parallelism over {} ranks, interleave {}: plain_kv "
                          "owner-sharded by record of {} positions (rank (g / {}) mod {}); bytes "
                          "per request (rows, before block rounding):\n",
                          D, S, dcp::kPlainKvRecordTokens, S, D)
            : fmt::format("decode context parallelism over {} ranks, interleave {}: compressed_kv "
                          "and index_keys owner-sharded by record (rank (g / {}) mod {}), every "
                          "other kind replicated; bytes per request (rows, before block "
                          "rounding):\n", D, S, S, D);
  for (int64_t n : {int64_t{131072}, int64_t{1048576}}) {
    s += fmt::format("  at {} tokens:\n    {:<8} {:<22} {:>14}", n, "stage", "kind", "one rank");
    for (int r = 0; r < D; ++r) s += fmt::format(" {:>14}", fmt::format("rank {}", r));
    s += "\n";
    std::vector<int64_t> total(D + 1, 0);
    for (const auto& [ks, agg] : aggregate(g)) {
      (void)agg;
      if (ks.kind == StateKind::kTopk || ks.kind == StateKind::kCandidates) continue;
      const int64_t one = dcp_rank_bytes(g, ks.kind, ks.stage, n, 0, 1, 1);
      s += fmt::format("    {:<8} {:<22} {:>14}", stage_name(ks.stage), state_kind_name(ks.kind),
                       format_bytes(static_cast<double>(one)));
      total[D] += one;
      for (int r = 0; r < D; ++r) {
        const int64_t b = dcp_rank_bytes(g, ks.kind, ks.stage, n, r, D, S);
        total[r] += b;
        s += fmt::format(" {:>14}", format_bytes(static_cast<double>(b)));
      }
      s += "\n";
    }
    s += fmt::format("    {:<8} {:<22} {:>14}", "", "total", format_bytes(static_cast<double>(total[D])));
    for (int r = 0; r < D; ++r) s += fmt::format(" {:>14}", format_bytes(static_cast<double>(total[r])));
    s += "\n";
  }
  return s;
}
}  // namespace

std::string format_state_text(const StateGraph& g, const StateReportOptions& opt) {
  std::string s;
  const int unit = unit_of(g, opt);
  s += fmt::format("state graph of {}: {} owners\n", g.model_name(), g.owners().size());
  s += "owners -> consumers:\n";
  for (const auto& o : g.owners()) {
    std::string cons = layer_list(o.consumer_layers);
    std::string size;
    if (o.spec.grows())
      size = fmt::format("{} B/row, 1 row per {} token(s) = {:.2f} B/token", o.spec.row_bytes,
                         o.spec.ratio, o.spec.bytes_per_token());
    else if (o.spec.fixed())
      size = fmt::format("{} rows x {} B = {} B/request", o.spec.rows_fixed, o.spec.row_bytes,
                         o.spec.bytes_per_request());
    else
      size = fmt::format("transient, {} B per query token per step",
                         o.spec.transient_bytes_per_query);
    s += fmt::format("  [{:<8}] {:<28} -> L{:<14} {}\n", stage_name(o.stage), o.label, cons, size);
  }
  s += "per kind (owners counted once):\n";
  for (const auto& [ks, a] : aggregate(g)) {
    std::string ratios;
    for (int r : a.ratios) ratios += fmt::format("{}{}", ratios.empty() ? "" : ",", r);
    s += fmt::format(
        "  {:<8} {:<22} owners {:>2} (L{}){}  {} {} B/row  {:>9.2f} B/token  {:>12} B/request"
        "  handoff {}\n",
        stage_name(ks.stage), state_kind_name(ks.kind), a.owners, layer_list(a.owner_layers),
        ratios.empty() ? "" : " ratio " + ratios, a.format, a.row_bytes, a.per_token, a.fixed,
        a.handoff);
  }
  s += "transients (per forward, not persisted, not counted per token):\n";
  for (const auto& o : g.owners())
    if (o.spec.transient())
      s += fmt::format("  {:<28} -> L{}  {} B per query token\n", o.label,
                       layer_list(o.consumer_layers), o.spec.transient_bytes_per_query);
  for (Stage st : {Stage::kBackbone, Stage::kDraft}) {
    s += fmt::format("{:<8} stage: per-token growth {:.2f} B/token; fixed per request {} B ({})\n",
                     stage_name(st), g.bytes_per_token(st), g.bytes_per_request_fixed(st),
                     format_bytes(static_cast<double>(g.bytes_per_request_fixed(st))));
  }
  s += fmt::format("total:    per-token growth {:.2f} B/token; fixed per request {} B ({})\n",
                   g.bytes_per_token(), g.bytes_per_request_fixed(),
                   format_bytes(static_cast<double>(g.bytes_per_request_fixed())));
  s += fmt::format(
      "prefix cache: alignment unit {} tokens (multiple of every ratio); a prompt of >= 1 unit "
      "reuses floor((len-1)/unit)*unit tokens, and one sharing k whole units with any cached "
      "prompt hits k units; stored boundary state (windows, compressor tails, Engram history) "
      "{} B ({}) per cached boundary\n",
      unit, snapshot_bytes(g), format_bytes(static_cast<double>(snapshot_bytes(g))));
  const double unit_bytes = unit * g.bytes_per_token();
  s += fmt::format(
      "memory per cached unit: {:.0f} B ({}) under `stored` (a snapshot at every unit boundary "
      "+ the unit's growing rows), {:.0f} B under the replay policies\n",
      static_cast<double>(snapshot_bytes(g)) + unit_bytes,
      format_bytes(static_cast<double>(snapshot_bytes(g)) + unit_bytes), unit_bytes);
  s += fmt::format(
      "prefix restore policies (every unit entry shares {:.0f} B of growing rows):\n"
      "  stored        {} B per cached boundary (ring/fixed snapshot; exact; default)\n"
      "  replay        0 B per cached boundary; a hit replays {} tokens (one window; "
      "approximate)\n"
      "  replay-exact  0 B per cached boundary; a hit replays {} tokens (window dependency "
      "cone; exact)\n",
      unit_bytes, snapshot_bytes(g), replay_window_tokens(g), replay_exact_tokens(g));
  if (opt.dcp > 1) s += dcp_text(g, opt.dcp, opt.dcp_interleave);
  return s;
}

std::string format_state_dot(const StateGraph& g) {
  std::string s = fmt::format("digraph \"{}\" {{\n  rankdir=LR;\n", g.model_name());
  std::set<int> layers;
  for (const auto& o : g.owners()) {
    const char* color = o.spec.transient() ? "gray" : (o.spec.grows() ? "lightblue" : "khaki");
    s += fmt::format("  {} [shape=box style=filled fillcolor={} label=\"{}\\n{}\"];\n", dot_id(o),
                     color, o.label,
                     o.spec.grows() ? fmt::format("{:.1f} B/token", o.spec.bytes_per_token())
                     : o.spec.fixed() ? fmt::format("{} B/request", o.spec.bytes_per_request())
                                      : std::string("transient"));
    if (o.layer >= 0) layers.insert(o.layer);
    for (int c : o.consumer_layers) layers.insert(c);
  }
  for (const auto& la : g.layers())
    if (layers.count(la.layer))
      s += fmt::format("  L{} [shape=ellipse{}];\n", la.layer,
                       la.stage == Stage::kDraft ? " style=dashed" : "");
  for (const auto& la : g.layers()) {
    for (OwnerId w : la.writes) s += fmt::format("  L{} -> {} [color=red];\n", la.layer, dot_id(g.owner(w)));
    for (OwnerId r : la.reads)
      if (!(g.owner(r).layer == la.layer && g.owner(r).kind == StateKind::kWindowKv))
        s += fmt::format("  {} -> L{};\n", dot_id(g.owner(r)), la.layer);
  }
  s += "}\n";
  return s;
}

std::string format_state_json(const StateGraph& g, const StateReportOptions& opt) {
  using nlohmann::json;
  json j;
  j["model"] = g.model_name();
  j["alignment_unit_tokens"] = unit_of(g, opt);
  j["boundary_snapshot_bytes"] = snapshot_bytes(g);
  {
    const int unit = unit_of(g, opt);
    json pr;
    pr["unit_entry_bytes"] = unit * g.bytes_per_token();
    const double ub = unit * g.bytes_per_token();
    // bytes_per_cached_unit: a snapshot at every unit boundary (stored) + the unit's rows.
    pr["stored"] = {{"bytes_per_boundary", snapshot_bytes(g)}, {"replay_tokens", 0},
                    {"exact", true},
                    {"bytes_per_cached_unit", static_cast<double>(snapshot_bytes(g)) + ub}};
    pr["replay"] = {{"bytes_per_boundary", 0}, {"replay_tokens", replay_window_tokens(g)},
                    {"exact", false}, {"bytes_per_cached_unit", ub}};
    pr["replay_exact"] = {{"bytes_per_boundary", 0}, {"replay_tokens", replay_exact_tokens(g)},
                          {"exact", true}, {"bytes_per_cached_unit", ub}};
    j["prefix_restore"] = pr;
  }
  json kinds = json::array();
  for (const auto& [ks, a] : aggregate(g)) {
    json k;
    k["kind"] = state_kind_name(ks.kind);
    k["stage"] = stage_name(ks.stage);
    k["owners"] = a.owners;
    k["owner_layers"] = a.owner_layers;
    k["ratios"] = std::vector<int>(a.ratios.begin(), a.ratios.end());
    k["format"] = a.format;
    k["granularity"] = a.granularity;
    k["row_bytes"] = a.row_bytes;
    k["layout"] = a.layout;
    k["bytes_per_token"] = a.per_token;
    k["bytes_per_request_fixed"] = a.fixed;
    k["handoff"] = a.handoff;
    k["rollback"] = a.rollback;
    kinds.push_back(k);
  }
  j["kinds"] = kinds;
  json owners = json::array(), transients = json::array();
  for (const auto& o : g.owners()) {
    json e;
    e["id"] = o.id;
    e["label"] = o.label;
    e["kind"] = state_kind_name(o.kind);
    e["layer"] = o.layer;
    e["stage"] = stage_name(o.stage);
    e["consumers"] = o.consumer_layers;
    if (o.spec.transient()) {
      e["bytes_per_query_token"] = o.spec.transient_bytes_per_query;
      transients.push_back(e);
      continue;
    }
    e["row_bytes"] = o.spec.row_bytes;
    e["ratio"] = o.spec.ratio;
    e["bytes_per_token"] = o.spec.bytes_per_token();
    e["bytes_per_request_fixed"] = o.spec.bytes_per_request();
    owners.push_back(e);
  }
  j["owners"] = owners;
  j["transients"] = transients;
  for (Stage st : {Stage::kBackbone, Stage::kDraft})
    j["stages"][stage_name(st)] = {{"bytes_per_token", g.bytes_per_token(st)},
                                   {"bytes_per_request_fixed", g.bytes_per_request_fixed(st)}};
  j["totals"] = {{"bytes_per_token", g.bytes_per_token()},
                 {"bytes_per_request_fixed", g.bytes_per_request_fixed()}};
  return j.dump(2) + "\n";
}

}  // namespace strata
