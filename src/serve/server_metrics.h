// ServerMetrics: Prometheus text exposition (format 0.0.4) of the engine's metrics.
//
// Names use the prefix "strata:" and vLLM's names after it: histograms
// time_to_first_token_seconds, inter_token_latency_seconds, e2e_request_latency_seconds,
// request_queue_time_seconds (seconds); gauges num_requests_running, num_requests_waiting;
// counters prompt_tokens_total, generation_tokens_total, prefix_cache_queries_total,
// prefix_cache_hits_total (tokens), num_preemptions_total, request_success_total
// {finished_reason}. Strata's own: cache_used_bytes / cache_capacity_bytes {kind, tier}
// from ModelRunner::cache_usage(), engine_steps_total, engine_schedule_seconds_total and
// engine_forward_seconds_total (engine overhead vs forward time). Every series carries
// model_name="...". Histogram buckets follow vLLM's defaults for the same metrics.
//
// Thread safety: on_request_finished (engine thread) and render (HTTP threads) may run
// concurrently; an internal mutex guards the histograms.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "sched/engine.h"
#include "state/unit_store.h"
#include "exec/deepseek_v41/v41_engram_table.h"

namespace strata {

// A cumulative Prometheus histogram over fixed upper bounds (+Inf implied).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}
  void observe(double v);
  // Appends "# HELP/# TYPE" and the _bucket/_sum/_count lines.
  void render(const std::string& name, const std::string& help, const std::string& labels,
              std::string* out) const;
  int64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket, non-cumulative; last = above all bounds
  int64_t count_ = 0;
  double sum_ = 0;
};

class ServerMetrics : public EngineObserver {
 public:
  explicit ServerMetrics(std::string model_name);
  // One stderr line per finished request (vLLM's request log; off with
  // --disable-log-requests): id, prompt / output / cached tokens, TTFT, E2E, finish reason.
  void set_log_requests(bool on) { log_requests_ = on; }
  // Tiers below the working pool whose stats() /metrics reports (null: none). Call before
  // the server starts.
  void set_unit_store(std::shared_ptr<UnitStore> store) { store_ = std::move(store); }
  // The model's Engram table store (null: none); its counters go to /metrics.
  void set_engram_tables(const EngramTableStore* t) { engram_ = t; }
  // The store-vs-recompute decision measured at startup (ServingStack): per tier the seconds
  // to load one unit and whether units are stored there; the seconds to recompute one.
  struct TierPlan {
    std::vector<std::string> tiers;
    std::vector<double> load_s;
    std::vector<bool> store;
    double recompute_s = 0;
  };
  void set_tier_plan(TierPlan p) { tier_plan_ = std::move(p); }
  void on_request_finished(const RequestTimings& t) override;
  // The whole /metrics page for the given engine snapshot.
  std::string render(const EngineStats& stats) const;

 private:
  std::string model_name_;
  mutable std::mutex mu_;
  Histogram ttft_, itl_, e2e_, queue_;
  std::map<std::string, int64_t> finished_by_reason_;
  bool log_requests_ = false;
  std::shared_ptr<UnitStore> store_;
  const EngramTableStore* engram_ = nullptr;
  TierPlan tier_plan_;
};

}  // namespace strata
