#include "serve/dashboard_state.h"

#include <chrono>
#include <utility>

namespace strata {

using Json = nlohmann::json;

namespace {

int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Json owner_json(const StateOwnerInfo& o) {
  const StateSpec& s = o.spec;
  return {{"id", o.id},
          {"label", o.label},
          {"kind", state_kind_name(o.kind)},
          {"layer", o.layer},
          {"stage", stage_name(o.stage)},
          {"granularity", granularity_name(s.granularity)},
          {"ratio", s.ratio},
          {"rows_fixed", s.rows_fixed},
          {"row_bytes", s.row_bytes},
          {"format", row_format_name(s.format)},
          {"handoff", handoff_policy_name(s.handoff)},
          {"bytes_per_token", s.bytes_per_token()},
          {"fixed_bytes", s.bytes_per_request()},
          {"transient_bytes_per_query", s.transient() ? s.transient_bytes_per_query : 0},
          {"consumer_layers", o.consumer_layers}};
}

Json request_json(const RequestSnapshot& r) {
  return {{"id", r.id},
          {"phase", r.phase},
          {"prompt_tokens", r.prompt_tokens},
          {"computed_tokens", r.computed_tokens},
          {"generated_tokens", r.generated_tokens},
          {"last_step_tokens", r.last_step_tokens},
          {"cached_tokens", r.cached_tokens},
          {"imported", r.imported},
          {"age_s", r.age_s}};
}

Json handoff_json(const HandoffRecord& h) {
  Json per_kind = Json::object();
  for (const auto& [kind, bytes] : h.bytes_per_kind) per_kind[kind] = bytes;
  return {{"seq", h.seq},
          {"direction", h.direction},
          {"unix_ms", h.unix_ms},
          {"num_tokens", h.num_tokens},
          {"from_pos", h.from_pos},
          {"payload_bytes", h.payload_bytes},
          {"bytes_per_kind", std::move(per_kind)},
          {"latency_ms", h.latency_ms},
          {"ok", h.ok},
          {"error", h.error},
          {"endpoint", h.endpoint}};
}

}  // namespace

Json state_graph_json(const StateGraph& g) {
  Json owners = Json::array();
  // (kind, stage) in first-seen owner order, owners counted once (StateGraph's totals).
  Json kinds = Json::array();
  for (const StateOwnerInfo& o : g.owners()) {
    owners.push_back(owner_json(o));
    const std::string kind = state_kind_name(o.kind), stage = stage_name(o.stage);
    Json* k = nullptr;
    for (Json& e : kinds)
      if (e["kind"] == kind && e["stage"] == stage) k = &e;
    if (k == nullptr) {
      kinds.push_back({{"kind", kind}, {"stage", stage}, {"owners", 0},
                       {"bytes_per_token", 0.0}, {"fixed_bytes_per_request", int64_t{0}}});
      k = &kinds.back();
    }
    (*k)["owners"] = (*k)["owners"].get<int>() + 1;
    (*k)["bytes_per_token"] = (*k)["bytes_per_token"].get<double>() + o.spec.bytes_per_token();
    (*k)["fixed_bytes_per_request"] =
        (*k)["fixed_bytes_per_request"].get<int64_t>() + o.spec.bytes_per_request();
  }
  return {{"model", g.model_name()},
          {"bytes_per_token", g.bytes_per_token()},
          {"fixed_bytes_per_request", g.bytes_per_request_fixed()},
          {"owners", std::move(owners)},
          {"kinds", std::move(kinds)}};
}

Json dashboard_state_json(const DashboardServerInfo& info, const EngineStats& stats,
                          const StateGraph* graph, const std::vector<HandoffRecord>& handoffs,
                          int64_t handoffs_total) {
  Json requests = Json::array();
  for (const RequestSnapshot& r : stats.requests) requests.push_back(request_json(r));
  Json usage = Json::array();
  for (const CacheUsage& u : stats.cache_usage)
    usage.push_back({{"kind", u.kind}, {"tier", u.tier}, {"used_bytes", u.used_bytes},
                     {"capacity_bytes", u.capacity_bytes}});
  Json recent = Json::array();
  for (const HandoffRecord& h : handoffs) recent.push_back(handoff_json(h));
  return {{"kind", "server"},
          {"model", info.model_name},
          {"role", info.role},
          {"metrics_prefix", info.metrics_prefix},
          {"time_unix_ms", now_unix_ms()},
          {"state_graph", graph != nullptr ? state_graph_json(*graph) : Json(nullptr)},
          {"requests", {{"running", stats.num_running}, {"waiting", stats.num_waiting},
                        {"list", std::move(requests)}}},
          {"cache_usage", std::move(usage)},
          {"handoffs", {{"total", handoffs_total}, {"recent", std::move(recent)}}}};
}

Json router_dashboard_json(const std::string& policy, const std::vector<DashboardBackend>& backends) {
  Json out = Json::array();
  for (const DashboardBackend& b : backends)
    out.push_back({{"url", b.url},
                   {"role", b.role},
                   {"state", b.state},
                   {"metrics", b.error.empty() ? Json(b.metrics) : Json(nullptr)},
                   {"error", b.error}});
  return {{"kind", "router"}, {"policy", policy}, {"time_unix_ms", now_unix_ms()},
          {"backends", std::move(out)}};
}

}  // namespace strata
