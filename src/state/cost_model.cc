// Store-vs-recompute cost model; see cost_model.h.
#include "state/cost_model.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "state/cache_manager.h"

namespace strata {

StatusOr<Hardware> parse_hardware(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument("hardware file: not a JSON object");
  Hardware h;
  h.name = j.value("name", std::string("unnamed"));
  if (!j.contains("prefill_tokens_per_s") || !j["prefill_tokens_per_s"].is_number() ||
      j["prefill_tokens_per_s"].get<double>() <= 0)
    return invalid_argument("hardware file: prefill_tokens_per_s must be a positive number");
  h.prefill_tokens_per_s = j["prefill_tokens_per_s"].get<double>();
  h.running_requests = j.value("running_requests", int64_t{1});
  if (h.running_requests < 0) return invalid_argument("hardware file: running_requests < 0");
  if (!j.contains("tiers") || !j["tiers"].is_array() || j["tiers"].empty())
    return invalid_argument("hardware file: 'tiers' must be a non-empty array, fastest first");
  for (const auto& t : j["tiers"]) {
    if (!t.is_object()) return invalid_argument("hardware file: a tier is not an object");
    TierHardware th;
    th.name = t.value("name", std::string());
    if (th.name.empty()) return invalid_argument("hardware file: a tier without a name");
    if (!t.contains("bytes") || !t["bytes"].is_number() || t["bytes"].get<double>() < 0 ||
        !t.contains("gbps") || !t["gbps"].is_number() || t["gbps"].get<double>() <= 0)
      return invalid_argument("hardware file: tier '{}' needs bytes >= 0 and gbps > 0", th.name);
    th.bytes = static_cast<int64_t>(t["bytes"].get<double>());
    th.gbps = t["gbps"].get<double>();
    th.latency_us = t.value("latency_us", 0.0);
    h.tiers.push_back(th);
  }
  return h;
}

Plan make_plan(const StateGraph& g, int64_t unit, const Hardware& hw,
               const std::vector<int64_t>& contexts, int64_t engram_table_bytes) {
  Plan plan;
  const int64_t snapshot = [&] {
    int64_t b = 0;
    for (const auto& o : g.owners())
      if (o.spec.fixed() && !o.spec.transient()) b += o.spec.bytes_per_request();
    return b;
  }();
  double per_token = 0;
  for (const auto& o : g.owners())
    if (o.spec.grows()) per_token += o.spec.bytes_per_token();
  const int64_t unit_rows = static_cast<int64_t>(per_token * static_cast<double>(unit) + 0.5);
  const double rate = hw.prefill_tokens_per_s;
  // The Engram tables: the fastest tier with room after the running requests at the longest
  // context.
  plan.engram_table_bytes = engram_table_bytes;
  int engram_tier = -1;
  if (engram_table_bytes > 0) {
    int64_t longest = 0;
    for (int64_t L : contexts) longest = std::max(longest, L);
    const int64_t running = hw.running_requests *
        (static_cast<int64_t>(g.bytes_per_token() * static_cast<double>(longest)) +
         g.bytes_per_request_fixed());
    for (size_t t = 0; t < hw.tiers.size() && engram_tier < 0; ++t)
      if ((t == 0 ? hw.tiers[t].bytes - running : hw.tiers[t].bytes) >= engram_table_bytes)
        engram_tier = static_cast<int>(t);
    if (engram_tier >= 0) plan.engram_tier = hw.tiers[engram_tier].name;
  }
  for (int64_t L : contexts) {
    PlanAtContext c;
    c.context = L;
    for (int k = 0; k < kNumStateKinds; ++k) {
      const StateKind kind = static_cast<StateKind>(k);
      const int64_t b = static_cast<int64_t>(g.bytes_per_token(kind) * static_cast<double>(L)) +
                        g.bytes_per_request_fixed(kind);
      if (b > 0) c.per_request.push_back({state_kind_name(kind), b});
      c.request_bytes += b;
    }
    c.running_fit = hw.running_requests * c.request_bytes <= hw.tiers[0].bytes;
    c.unit_tokens = unit;
    c.unit_row_bytes = unit_rows;
    c.snapshot_bytes = snapshot;
    c.replay_exact_tokens = replay_exact_tokens(g);
    c.replay_window_tokens = replay_window_tokens(g);
    const int64_t unit_bytes = unit_rows + snapshot;
    int64_t left0 = std::max<int64_t>(0, hw.tiers[0].bytes - hw.running_requests * c.request_bytes);
    for (size_t t = 0; t < hw.tiers.size(); ++t) {
      const TierHardware& th = hw.tiers[t];
      int64_t room = t == 0 ? left0 : th.bytes;
      if (static_cast<int>(t) == engram_tier) room = std::max<int64_t>(0, room - engram_table_bytes);
      c.cached_tokens_per_tier.push_back(unit_bytes > 0 ? room / unit_bytes * unit : 0);
      c.cached_tokens_rows_only_per_tier.push_back(unit_rows > 0 ? room / unit_rows * unit : 0);
      const double lat = th.latency_us * 1e-6;
      c.load_s_per_tier.push_back(unit_bytes / (th.gbps * 1e9) + lat);
      c.snapshot_load_s_per_tier.push_back(snapshot / (th.gbps * 1e9) + lat);
    }
    c.recompute_unit_s = unit / rate;
    c.replay_exact_s = c.replay_exact_tokens / rate;
    c.replay_window_s = c.replay_window_tokens / rate;
    for (size_t t = 0; t < hw.tiers.size(); ++t) {
      // Store when loading the unit's rows beats recomputing them AND loading the snapshot
      // beats replaying the dependency cone (the exact alternatives).
      const bool store = c.load_s_per_tier[t] - c.snapshot_load_s_per_tier[t] < c.recompute_unit_s &&
                         c.snapshot_load_s_per_tier[t] <= c.replay_exact_s;
      c.decision_per_tier.push_back(store ? "store" : "recompute");
    }
    plan.contexts.push_back(c);
  }
  return plan;
}

namespace {
std::string gb(int64_t b) { return fmt::format("{:.2f} GB", b / 1e9); }
std::string ms(double s) { return fmt::format("{:.3f} ms", s * 1e3); }
}  // namespace

std::string format_plan(const Plan& p, const Hardware& hw, const std::string& model) {
  std::string s = fmt::format("plan: {} on {} ({} running requests, replay {:.0f} tokens/s)\n",
                              model, hw.name, hw.running_requests, hw.prefill_tokens_per_s);
  s += "tiers:";
  for (const auto& t : hw.tiers)
    s += fmt::format(" {} {} at {:g} GB/s +{:g} us;", t.name, gb(t.bytes), t.gbps, t.latency_us);
  s += "\n";
  if (p.engram_table_bytes > 0)
    s += fmt::format("Engram tables: {} -> {}\n", gb(p.engram_table_bytes),
                     p.engram_tier.empty() ? std::string("no tier has room (disk placement "
                                                         "needs the checkpoint file)")
                                           : p.engram_tier);
  for (const PlanAtContext& c : p.contexts) {
    s += fmt::format("\ncontext {} tokens: one request holds {}", c.context, gb(c.request_bytes));
    s += c.running_fit ? " (running requests fit the working pool)\n"
                       : fmt::format(" -- {} running requests do NOT fit {} ({})\n",
                                     hw.running_requests, hw.tiers[0].name,
                                     gb(hw.running_requests * c.request_bytes));
    for (const KindBytes& k : c.per_request)
      s += fmt::format("  {:<24} {:>16} B\n", k.kind, k.bytes);
    s += fmt::format("  unit {} tokens: rows {} B + boundary snapshot {} B; recompute {} | "
                     "replay-exact {} tokens {} | replay {} tokens {} (approximate)\n",
                     c.unit_tokens, c.unit_row_bytes, c.snapshot_bytes, ms(c.recompute_unit_s),
                     c.replay_exact_tokens, ms(c.replay_exact_s), c.replay_window_tokens,
                     ms(c.replay_window_s));
    for (size_t t = 0; t < hw.tiers.size(); ++t)
      s += fmt::format("  {:<8} holds {:>14} cached tokens ({:>15} rows only); load unit {} "
                       "(snapshot {}) -> {}\n",
                       hw.tiers[t].name, c.cached_tokens_per_tier[t],
                       c.cached_tokens_rows_only_per_tier[t], ms(c.load_s_per_tier[t]),
                       ms(c.snapshot_load_s_per_tier[t]), c.decision_per_tier[t]);
  }
  return s;
}

}  // namespace strata
