// run_load (see matrix_load.h).
#include "tools/matrix_load.h"

#include <atomic>
#include <chrono>
#include <map>
#include <thread>

#include "serve/bench_client.h"
#include "serve/bench_report.h"
#include "tools/matrix_check.h"

namespace strata::tools {

using nlohmann::json;

StatusOr<LoadResult> run_load(const std::string& url, const std::string& metrics_url,
                              const Workload& workload, int64_t max_concurrency) {
  LoadResult r;
  const std::string murl = metrics_url.empty() ? url : metrics_url;
  std::atomic<bool> done{false};
  std::map<std::pair<std::string, std::string>, std::pair<double, double>> peak;  // used, cap
  const auto t0 = std::chrono::steady_clock::now();
  auto sample = [&] {
    const auto m = fetch_metrics(murl);
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const MetricSample& s : m) {
      // The working pool per kind (cache_*_bytes) and the prefix-cache tiers below it
      // (kv_tier_*: whole units, kind "prefix_units"; a shared pool reports -1 = unknown).
      const bool tier = s.name.ends_with(":kv_tier_bytes") || s.name.ends_with(":kv_tier_capacity_bytes");
      const bool used = s.name.ends_with(":cache_used_bytes") || s.name.ends_with(":kv_tier_bytes");
      const bool cap = s.name.ends_with(":cache_capacity_bytes") || s.name.ends_with(":kv_tier_capacity_bytes");
      if ((!used && !cap) || (tier && s.value < 0)) continue;
      const auto key = std::make_pair(tier ? std::string("prefix_units")
                                           : (s.labels.count("kind") ? s.labels.at("kind") : ""),
                                      s.labels.count("tier") ? s.labels.at("tier") : "");
      auto& p = peak[key];
      if (used) {
        p.first = std::max(p.first, s.value);
        r.occupancy_series.push_back(
            {{"t", t}, {"kind", key.first}, {"tier", key.second}, {"used_bytes", s.value}});
      } else {
        p.second = s.value;
      }
    }
  };
  std::thread sampler([&] {
    while (!done.load()) {
      sample();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  BenchClientOptions o;
  o.url = url;
  o.max_concurrency = max_concurrency;
  o.request_timeout_s = 300;
  StatusOr<BenchRun> run = run_benchmark(workload, o);
  done = true;
  sampler.join();
  sample();  // the state after the load (released)
  if (!run.ok()) return run.status();
  r.summary = summarize_bench(workload, *run, GoodputSlo{});
  for (const RequestResult& q : run->results) {
    if (!q.success) continue;
    r.ttft_s.push_back(q.ttft_s);
    if (q.output_tokens > 1) r.tpot_s.push_back((q.latency_s - q.ttft_s) / (q.output_tokens - 1));
  }
  for (const auto& [k, v] : peak)
    r.occupancy_peak.push_back(
        {{"kind", k.first}, {"tier", k.second}, {"peak_used_bytes", v.first}, {"capacity_bytes", v.second}});
  return r;
}

}  // namespace strata::tools
