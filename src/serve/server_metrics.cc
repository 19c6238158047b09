#include "serve/server_metrics.h"

#include <tuple>

#include <spdlog/spdlog.h>

#include <fmt/format.h>

namespace strata {

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  counts_[i]++;
  count_++;
  sum_ += v;
}

namespace {
std::string label_join(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + "," + b;
}
std::string escape_label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}
}  // namespace

void Histogram::render(const std::string& name, const std::string& help,
                       const std::string& labels, std::string* out) const {
  *out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  int64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    *out += fmt::format("{}_bucket{{{}}} {}\n", name, label_join(labels, fmt::format("le=\"{}\"", bounds_[i])), cum);
  }
  cum += counts_.back();
  *out += fmt::format("{}_bucket{{{}}} {}\n", name, label_join(labels, "le=\"+Inf\""), cum);
  *out += fmt::format("{}_sum{{{}}} {}\n", name, labels, sum_);
  *out += fmt::format("{}_count{{{}}} {}\n", name, labels, count_);
}

ServerMetrics::ServerMetrics(std::string model_name)
    : model_name_(std::move(model_name)),
      ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
             7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}),
      itl_({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
            10.0, 20.0, 40.0, 80.0}),
      e2e_({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
            120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}),
      queue_({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
              120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}) {
  for (const char* r : {"stop", "length", "abort", "error"}) finished_by_reason_[r] = 0;
}

void ServerMetrics::on_request_finished(const RequestTimings& t) {
  std::lock_guard lock(mu_);
  if (t.ttft_s >= 0) ttft_.observe(t.ttft_s);
  for (double v : t.itl_s) itl_.observe(v);
  e2e_.observe(t.e2e_s);
  queue_.observe(t.queue_s);
  finished_by_reason_[finish_reason_name(t.finish_reason)]++;
  if (log_requests_)
    spdlog::info("strata: request {} finished: prompt_tokens={} cached_tokens={} "
               "generation_tokens={} ttft_ms={:.1f} e2e_ms={:.1f} finish_reason={}{}{}",
               t.id, t.prompt_tokens, t.cached_tokens, t.generation_tokens,
               t.ttft_s >= 0 ? t.ttft_s * 1e3 : -1.0, t.e2e_s * 1e3,
               finish_reason_name(t.finish_reason), t.error.empty() ? "" : " error=",
               t.error);
}

namespace {
// Tiers below the working pool (state/unit_store.h TierStats), one series per tier.
void render_tiers(const std::vector<TierStats>& tiers, const std::string& model,
                  std::string* out) {
  struct Field {
    const char* name;
    const char* type;
    const char* help;
    double (*get)(const TierStats&);
  };
  static const Field kFields[] = {
      {"kv_tier_bytes", "gauge", "Bytes of prefix-cache units held per tier (-1: not known, a shared pool).",
       [](const TierStats& t) { return double(t.bytes); }},
      {"kv_tier_objects", "gauge", "Prefix-cache units held per tier (-1: not known).",
       [](const TierStats& t) { return double(t.objects); }},
      {"kv_tier_capacity_bytes", "gauge", "Byte budget per tier (0: not bounded here).",
       [](const TierStats& t) { return double(t.capacity_bytes); }},
      {"kv_tier_lookups_total", "counter", "Unit fetches asked of each tier.",
       [](const TierStats& t) { return double(t.lookups); }},
      {"kv_tier_hits_total", "counter", "Unit fetches each tier answered.",
       [](const TierStats& t) { return double(t.hits); }},
      {"kv_tier_stores_total", "counter", "Units written to each tier.",
       [](const TierStats& t) { return double(t.stores); }},
      {"kv_tier_store_bytes_total", "counter", "Bytes written to each tier.",
       [](const TierStats& t) { return double(t.store_bytes); }},
      {"kv_tier_load_bytes_total", "counter", "Bytes read from each tier.",
       [](const TierStats& t) { return double(t.load_bytes); }},
      {"kv_tier_evictions_total", "counter", "Units each tier dropped for its budget.",
       [](const TierStats& t) { return double(t.evictions); }},
      {"kv_tier_demotions_total", "counter", "Units each tier wrote to the next tier when evicting them.",
       [](const TierStats& t) { return double(t.demotions); }},
      {"kv_tier_promotions_total", "counter", "Units copied into each tier from a lower one on a hit.",
       [](const TierStats& t) { return double(t.promotions); }},
      {"kv_tier_rejected_total", "counter",
       "Units found corrupt (checksum) or foreign (another model / format) on load and dropped.",
       [](const TierStats& t) { return double(t.rejected); }},
      {"kv_tier_errors_total", "counter", "I/O or connection failures per tier.",
       [](const TierStats& t) { return double(t.errors); }},
      {"kv_tier_prefetched_total", "counter",
       "Units copied into each tier ahead of their request's admission.",
       [](const TierStats& t) { return double(t.prefetched); }},
  };
  // Latency histograms (Prometheus cumulative buckets).
  for (const auto& [name, help, load] :
       {std::tuple{"kv_tier_load_seconds", "Latency of unit loads per tier.", true},
        std::tuple{"kv_tier_store_seconds", "Latency of unit stores per tier.", false}}) {
    *out += fmt::format("# HELP strata:{} {}\n# TYPE strata:{} histogram\n", name, help, name);
    for (const TierStats& t : tiers) {
      const std::vector<int64_t>& h = load ? t.load_hist : t.store_hist;
      int64_t cum = 0;
      const size_t nb = std::size(kTierLatencyBounds);
      for (size_t b = 0; b <= nb; ++b) {
        cum += b < h.size() ? h[b] : 0;
        const std::string le = b < nb ? fmt::format("{}", kTierLatencyBounds[b]) : "+Inf";
        *out += fmt::format("strata:{}_bucket{{{},tier=\"{}\",le=\"{}\"}} {}\n", name, model,
                            t.tier, le, cum);
      }
      *out += fmt::format("strata:{}_sum{{{},tier=\"{}\"}} {}\n", name, model, t.tier,
                          load ? t.load_seconds : t.store_seconds);
      *out += fmt::format("strata:{}_count{{{},tier=\"{}\"}} {}\n", name, model, t.tier, cum);
    }
  }
  for (const Field& f : kFields) {
    *out += fmt::format("# HELP strata:{} {}\n# TYPE strata:{} {}\n", f.name, f.help, f.name,
                        f.type);
    for (const TierStats& t : tiers)
      *out += fmt::format("strata:{}{{{},tier=\"{}\"}} {}\n", f.name, model, t.tier, f.get(t));
  }
}
}  // namespace

std::string ServerMetrics::render(const EngineStats& s) const {
  const std::string model = fmt::format("model_name=\"{}\"", escape_label(model_name_));
  std::string out;
  auto gauge = [&](const char* name, const char* help, double v) {
    out += fmt::format("# HELP strata:{} {}\n# TYPE strata:{} gauge\nstrata:{}{{{}}} {}\n", name,
                       help, name, name, model, v);
  };
  auto counter = [&](const char* name, const char* help, double v) {
    out += fmt::format("# HELP strata:{} {}\n# TYPE strata:{} counter\nstrata:{}{{{}}} {}\n", name,
                       help, name, name, model, v);
  };
  gauge("num_requests_running", "Requests holding state in the model runner.",
        static_cast<double>(s.num_running));
  gauge("num_requests_waiting", "Requests waiting to be scheduled.",
        static_cast<double>(s.num_waiting));
  counter("prompt_tokens_total", "Prefill tokens processed.",
          static_cast<double>(s.prompt_tokens_total));
  counter("generation_tokens_total", "Generated tokens.",
          static_cast<double>(s.generation_tokens_total));
  counter("prefix_cache_queries_total", "Tokens looked up in the prefix cache.",
          static_cast<double>(s.prefix_cache_queries_total));
  counter("prefix_cache_hits_total", "Tokens found in the prefix cache.",
          static_cast<double>(s.prefix_cache_hits_total));
  counter("prefix_replayed_tokens_total",
          "Cached prefix positions recomputed to rebuild ring state (replay policies).",
          static_cast<double>(s.prefix_replayed_tokens_total));
  counter("prefix_approximate_restores_total",
          "Prefix hits restored approximately (--prefix-restore replay).",
          static_cast<double>(s.prefix_approximate_restores_total));
  counter("num_preemptions_total", "Preemptions (recompute) of running requests.",
          static_cast<double>(s.num_preemptions_total));
  struct Counter {
    const char* name;
    const char* help;
    int64_t value;
  };
  for (const Counter& c : {
           Counter{"kv_transfer_exports_total", "States exported for a decode server (prefill role).",
                   s.kv_transfer_exports_total},
           Counter{"kv_transfer_imports_total", "Received states imported at admission (decode role).",
                   s.kv_transfer_imports_total},
           Counter{"kv_transfer_imported_tokens_total", "Prompt positions whose state was imported.",
                   s.kv_transfer_imported_tokens_total},
           Counter{"kv_transfer_import_failures_total", "Imports that failed at admission.",
                   s.kv_transfer_import_failures_total},
           Counter{"kv_transfer_recomputed_tokens_total",
                   "Prompt tokens computed locally because a handoff failed (recompute policy).",
                   s.kv_transfer_recomputed_tokens_total},
           // Speculative decoding, vLLM's names.
           Counter{"spec_decode_num_drafts", "Verify passes that carried drafts.",
                   s.spec_decode_num_drafts},
           Counter{"spec_decode_num_draft_tokens", "Draft tokens proposed.",
                   s.spec_decode_num_draft_tokens},
           Counter{"spec_decode_num_accepted_tokens", "Draft tokens accepted.",
                   s.spec_decode_num_accepted_tokens},
           Counter{"spec_decode_rollback_recomputes_total",
                   "Rollbacks the runner could not cut back, recomputed from the prefix cache.",
                   s.spec_decode_rollback_recomputes},
           Counter{"spec_decode_rollback_recomputed_tokens_total",
                   "Positions recomputed by those rollbacks.",
                   s.spec_decode_rollback_recomputed_tokens}})
    counter(c.name, c.help, static_cast<double>(c.value));
  if (!s.spec_decode_num_accepted_tokens_per_pos.empty()) {
    out += "# HELP strata:spec_decode_num_accepted_tokens_per_pos Draft tokens accepted, per "
           "draft position (0 = first draft).\n"
           "# TYPE strata:spec_decode_num_accepted_tokens_per_pos counter\n";
    for (size_t i = 0; i < s.spec_decode_num_accepted_tokens_per_pos.size(); ++i)
      out += fmt::format("strata:spec_decode_num_accepted_tokens_per_pos{{{},position=\"{}\"}} {}\n",
                         model, i, s.spec_decode_num_accepted_tokens_per_pos[i]);
  }
  counter("engine_steps_total", "Engine steps (forward passes).",
          static_cast<double>(s.steps_total));
  counter("engine_schedule_seconds_total",
          "Engine time outside the forward pass: scheduling, cache planning, sampling.",
          s.schedule_seconds_total);
  counter("engine_forward_seconds_total", "Engine time in the model's forward pass.",
          s.forward_seconds_total);
  counter("moe_collective_seconds_total",
          "Time in the expert-parallel MoE dispatch and combine (MPI all-to-all, all-gather), on "
          "rank 0; 0 on one rank.",
          s.moe_collective_seconds_total);
  counter("dcp_exchange_seconds_total",
          "Time in the decode-context-parallel exchanges (index scores, selected rows), on "
          "rank 0; 0 on one rank.",
          s.dcp_exchange_seconds_total);
  counter("pp_boundary_seconds_total",
          "Time in the pipeline-parallel stage boundaries (receiving from the previous stage, "
          "sending to the next, the last stage's result to every rank), on rank 0; 0 on one "
          "rank.",
          s.pp_boundary_seconds_total);
  out += "# HELP strata:cache_used_bytes State bytes in use per kind and memory tier.\n"
         "# TYPE strata:cache_used_bytes gauge\n";
  for (const CacheUsage& u : s.cache_usage) {
    out += fmt::format("strata:cache_used_bytes{{{},kind=\"{}\",tier=\"{}\"}} {}\n", model,
                       escape_label(u.kind), escape_label(u.tier), u.used_bytes);
  }
  out += "# HELP strata:prefix_cache_bytes_per_unit Bytes one cached alignment unit holds "
         "(growing rows + boundary snapshot).\n"
         "# TYPE strata:prefix_cache_bytes_per_unit gauge\n";
  out += fmt::format("strata:prefix_cache_bytes_per_unit{{{}}} {}\n", model,
                     s.prefix_cache_bytes_per_unit);
  out += "# HELP strata:cache_capacity_bytes State capacity per kind and memory tier.\n"
         "# TYPE strata:cache_capacity_bytes gauge\n";
  for (const CacheUsage& u : s.cache_usage) {
    out += fmt::format("strata:cache_capacity_bytes{{{},kind=\"{}\",tier=\"{}\"}} {}\n", model,
                       escape_label(u.kind), escape_label(u.tier), u.capacity_bytes);
  }
  if (store_) render_tiers(store_->stats(), model, &out);
  if (!tier_plan_.tiers.empty()) {
    out += "# HELP strata:kv_tier_unit_load_seconds Seconds to load one prefix-cache unit from "
           "each tier, measured at startup.\n# TYPE strata:kv_tier_unit_load_seconds gauge\n";
    for (size_t i = 0; i < tier_plan_.tiers.size(); ++i)
      out += fmt::format("strata:kv_tier_unit_load_seconds{{{},tier=\"{}\"}} {}\n", model,
                         tier_plan_.tiers[i], tier_plan_.load_s[i]);
    out += "# HELP strata:kv_tier_store_decision 1 where units are stored (loading beats "
           "recomputing), 0 where recomputing wins.\n# TYPE strata:kv_tier_store_decision gauge\n";
    for (size_t i = 0; i < tier_plan_.tiers.size(); ++i)
      out += fmt::format("strata:kv_tier_store_decision{{{},tier=\"{}\"}} {}\n", model,
                         tier_plan_.tiers[i], tier_plan_.store[i] ? 1 : 0);
    out += fmt::format("# HELP strata:prefix_unit_recompute_seconds Seconds to recompute one "
                       "prefix-cache unit, measured at startup.\n# TYPE "
                       "strata:prefix_unit_recompute_seconds gauge\n"
                       "strata:prefix_unit_recompute_seconds{{{}}} {}\n",
                       model, tier_plan_.recompute_s);
  }
  if (engram_) {
    const EngramTableStats e = engram_->stats();
    const std::string pl = fmt::format("{},placement=\"{}\"", model,
                                       engram_placement_name(engram_->placement()));
    for (const auto& [name, type, help, v] : std::vector<std::tuple<const char*, const char*, const char*, double>>{
             {"engram_row_lookups_total", "counter", "Engram table rows read by layers.", double(e.lookups)},
             {"engram_row_hits_total", "counter", "Of those, rows resident (hot-row cache for disk).", double(e.hits)},
             {"engram_row_misses_total", "counter", "Rows read from the file when the layer needed them (disk).", double(e.misses)},
             {"engram_rows_prefetched_total", "counter", "Rows read ahead of their layer (disk).", double(e.prefetched)},
             {"engram_read_bytes_total", "counter", "Bytes of Engram rows read from the file (disk).", double(e.read_bytes)},
             {"engram_cache_bytes", "gauge", "Bytes in the Engram hot-row cache (disk).", double(e.cached_bytes)},
             {"engram_table_bytes", "gauge", "Bytes of all Engram tables and scales.", double(e.table_bytes)}})
      out += fmt::format("# HELP strata:{} {}\n# TYPE strata:{} {}\nstrata:{}{{{}}} {}\n", name, help,
                         name, type, name, pl, v);
  }
  std::lock_guard lock(mu_);
  out += "# HELP strata:request_success_total Finished requests by finish reason.\n"
         "# TYPE strata:request_success_total counter\n";
  for (const auto& [reason, n] : finished_by_reason_) {
    out += fmt::format("strata:request_success_total{{{},finished_reason=\"{}\"}} {}\n", model,
                       reason, n);
  }
  ttft_.render("strata:time_to_first_token_seconds", "Time to first token.", model, &out);
  itl_.render("strata:inter_token_latency_seconds", "Time between consecutive tokens.", model,
              &out);
  e2e_.render("strata:e2e_request_latency_seconds", "End-to-end request latency.", model, &out);
  queue_.render("strata:request_queue_time_seconds", "Time waiting before first scheduled.",
                model, &out);
  return out;
}

}  // namespace strata
