// Records of `strata validate matrix` (see matrix_record.h).
#include "tools/matrix_record.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "model/safetensors.h"
#include "tools/command_registry.h"

namespace strata::tools {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// stdout of a shell command (its exit status in *rc).
std::string capture(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    *rc = -1;
    return out;
  }
  char buf[65536];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int st = pclose(p);
  *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

std::string first_line_of(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);)
    if (l.rfind(key, 0) == 0) {
      const size_t colon = l.find(':');
      std::string v = colon == std::string::npos ? l : l.substr(colon + 1);
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.erase(0, 1);
      return v;
    }
  return "";
}

double counter(const std::vector<MetricSample>& m, const std::string& base,
               const std::map<std::string, std::string>& where = {}) {
  return metric_sum(m, ":" + base, where) + metric_sum(m, ":" + base + "_total", where);
}

// The support matrix's words for a checkpoint's quantization (as the multi-rank tests write).
// fp4_experts: the checkpoint stores the routed experts as packed FP4 (V4-Flash's config does
// not say so; V4.1's says expert_dtype "fp4").
std::string quantization_label(const json& q, bool fp4_experts) {
  if (!q.is_object()) return "none (checkpoint dtype)";
  const std::string m = q.value("quant_method", "");
  if (m == "fp8")
    return fp4_experts || q.value("expert_dtype", "") == "fp4"
               ? "checkpoint formats (FP8 weights, FP4 experts)"
               : "checkpoint formats (FP8 weights)";
  return m.empty() ? "checkpoint formats" : m;
}

json percentiles_ms(const json& s, const std::string& what) {
  auto get = [&](const std::string& k) { return s.contains(k) ? s[k] : json(nullptr); };
  return {{"mean", get("mean_" + what + "_ms")},
          {"p50", get("median_" + what + "_ms")},
          {"p95", get("p95_" + what + "_ms")},
          {"p99", get("p99_" + what + "_ms")}};
}

}  // namespace

StatusOr<ModelFacts> model_facts(const MatrixContext& c) {
  int rc = 0;
  const std::string text =
      capture(fmt::format("{} inspect {} --state --json 2>/dev/null", quote(c.strata_bin), quote(c.model_dir)), &rc);
  const json j = json::parse(text, nullptr, false);
  if (rc != 0 || j.is_discarded())
    return invalid_argument("{}: `strata inspect --state --json` failed (exit {}); is it a model directory?",
                            c.model_dir, rc);
  ModelFacts f;
  const json& arch = j.at("architecture");
  f.family = arch.value("family", "");
  f.architecture = f.family == "deepseek" ? fmt::format("DeepSeek {}", arch.value("version", "V4"))
                                          : std::string("Llama");
  f.alignment = j.value("alignment_unit_tokens", int64_t{0});
  f.parameters = j.contains("parameters") ? j["parameters"] : json(nullptr);
  std::ifstream cin(fs::path(c.model_dir) / "config.json");
  const json cfg = json::parse(cin, nullptr, false);
  if (cfg.is_discarded()) return invalid_argument("{}/config.json does not parse", c.model_dir);
  const json& tc = cfg.contains("text_config") ? cfg["text_config"] : cfg;
  auto num = [&](const char* k, int64_t d) {
    if (tc.contains(k) && tc[k].is_number()) return tc[k].get<int64_t>();
    if (cfg.contains(k) && cfg[k].is_number()) return cfg[k].get<int64_t>();
    return d;
  };
  f.vocab_size = num("vocab_size", 0);
  f.max_context = num("max_position_embeddings", 0);
  if (f.vocab_size <= 3 || f.max_context <= 16)
    return invalid_argument("{}: config.json lacks vocab_size / max_position_embeddings", c.model_dir);
  f.has_experts = f.family == "deepseek" || num("n_routed_experts", 0) > 0 || num("num_local_experts", 0) > 0;
  f.quantization = cfg.contains("quantization_config") ? cfg["quantization_config"] : json("none");
  // The header only (the file is mapped, not read): the first routed expert weight's dtype.
  if (auto ck = SafetensorsCheckpoint::open(c.model_dir); ck.ok()) {
    for (const std::string& n : (*ck)->names()) {
      if (n.find(".experts.") == std::string::npos || !n.ends_with(".weight")) continue;
      auto t = (*ck)->get(n);
      f.fp4_experts = t.ok() && t->dtype == DType::kI8;  // two E2M1 codes per byte
      break;
    }
  }
  json formats = json::object();
  std::set<int> ratios;
  for (const json& k : j.at("kinds")) {
    formats[k.at("kind").get<std::string>()] = k.value("format", "");
    for (const json& r : k.value("ratios", json::array())) ratios.insert(r.get<int>());
  }
  f.cache = {{"block_size_tokens", f.alignment},
             {"compression_ratios", std::vector<int>(ratios.begin(), ratios.end())},
             {"formats", formats}};
  return f;
}

json common_fields(const MatrixContext& c, const ModelFacts& f) {
  int rc = 0;
  std::string git = capture(fmt::format("git -C {} rev-parse --short HEAD 2>/dev/null",
                                        quote(STRATA_SOURCE_DIR)), &rc);
  while (!git.empty() && (git.back() == '\n' || git.back() == '\r')) git.pop_back();
  utsname u{};
  uname(&u);
  const std::string mem = first_line_of("/proc/meminfo", "MemTotal");
  return {
      {"checkpoint",
       {{"path", c.model_dir},
        {"architecture", f.architecture},
        {"quantization", f.quantization},
        {"parameters", f.parameters.is_object() && f.parameters.contains("total_params")
                           ? f.parameters["total_params"] : json(nullptr)}}},
      {"strata",
       {{"version", kVersion},
        {"build",
         {{"git", rc == 0 && !git.empty() ? json(git) : json(nullptr)},
          {"compiler", __VERSION__},
#ifdef NDEBUG
          {"type", "release"},
#else
          {"type", "debug"},
#endif
         }}}},
      {"machine",
       {{"cpu", first_line_of("/proc/cpuinfo", "model name")},
        {"cores", static_cast<int64_t>(std::thread::hardware_concurrency())},
        {"memory", mem},
        {"kernel", fmt::format("{} {}", u.sysname, u.release)},
        {"hostname", u.nodename}}},
      {"cache", f.cache},
  };
}

StatusOr<Workload> matrix_workload(const std::string& trace, const ModelFacts& f, int64_t n) {
  WorkloadOptions o;
  o.vocab = static_cast<int32_t>(f.vocab_size);
  o.max_context = f.max_context;
  o.num_requests = n;
  o.time_scale = 0.01;
  std::string spec = trace;
  if (spec.empty()) {
    const fs::path head = fs::path(STRATA_SOURCE_DIR) / "testdata/traces/mooncake_conversation_head50.jsonl";
    if (fs::exists(head)) spec = "mooncake:" + head.string();
  }
  if (spec.rfind("mooncake:", 0) == 0) return load_mooncake_trace(spec.substr(9), o);
  if (spec.rfind("azure:", 0) == 0) return load_azure_trace(spec.substr(6), o);
  if (!spec.empty()) return invalid_argument("--trace: '{}' is not mooncake:FILE or azure:FILE", spec);
  RandomLoadOptions r;
  r.input_len = std::min<int64_t>(64, f.max_context / 4);
  r.output_len = 8;
  return make_random_workload(o, r);
}

StepRun run_step(const MatrixContext& c, const StepInfo& info,
                 const std::vector<MatrixPrompt>& prompts, int64_t max_tokens,
                 const Workload& load, const std::vector<PromptOutput>& below, int below_step,
                 const std::vector<PromptOutput>& below_state, int below_state_step,
                 const std::string& golden_cases) {
  StepRun run;
  run.step = info.id;
  run.reason = step_skip_reason(c, info.id, &run.status);
  if (!run.reason.empty()) return run;
  StatusOr<Deployment> dep = start_step(c, info.id);
  if (!dep.ok()) {
    run.status = "fail";
    run.reason = fmt::format("the deployment did not start: {}", dep.status().message());
    return run;
  }
  run.dep = std::move(*dep);
  Deployment& d = run.dep;
  const auto m0 = fetch_metrics(d.metrics_url);
  const auto p0 = d.prefill_metrics_url.empty() ? std::vector<MetricSample>{} : fetch_metrics(d.prefill_metrics_url);
  run.outputs = run_prompts(d.url, prompts, max_tokens, d.concurrent, d.repeat);
  std::vector<MetricSample> m_first;  // step 6: server A's counters before it stops
  std::vector<MetricSample> m_b0 = m0;  // step 6: server B's counters when it started
  if (info.id == 6) {
    m_first = fetch_metrics(d.metrics_url);
    if (Status st = restart_pool_server(c, &d); !st.ok()) {
      run.status = "fail";
      run.reason = fmt::format("the second pool server did not start: {}", st.message());
      d.stop();
      return run;
    }
    m_b0 = fetch_metrics(d.metrics_url);  // server B before its round
    auto second = run_prompts(d.url, prompts, max_tokens, false, 1);
    run.outputs.insert(run.outputs.end(), second.begin(), second.end());
  }
  // Compare with the step below (prompt i of every round against prompt i below).
  std::vector<PromptOutput> ref;
  if (below_step > 0)
    for (size_t i = 0; i < run.outputs.size(); ++i) {
      ref.push_back(below[i % below.size()]);
      // The step below carries no state (DCP): the rows are compared with the nearest lower
      // step that passed with them.
      if (ref.back().state.is_null() && !below_state.empty())
        ref.back().state = below_state[i % below_state.size()].state;
    }
  run.compared_to = below_step;
  run.state_compared_to = below_step > 0 && !below.empty() && below[0].state.is_null() ? below_state_step : below_step;
  if (below_step > 0) {
    run.cmp = compare_outputs(ref, run.outputs, 0.0);
    if (!d.state_digests && !run.cmp.state.compared)
      run.cmp.state.not_compared = "this deployment exports no state: under decode context "
                                   "parallelism each rank holds only its share of the rows";
  } else {  // the reference step: every prompt must be answered
    run.cmp.prompts = static_cast<int64_t>(run.outputs.size());
    for (const PromptOutput& o : run.outputs)
      if (!o.error.empty() && run.cmp.failure.empty())
        run.cmp.failure = fmt::format("prompt '{}': {}", o.name, o.error);
    run.cmp.state.not_compared = "no lower step: this step is the reference";
    run.cmp.pass = run.cmp.failure.empty();
  }
  if (!golden_cases.empty()) {
    int rc = 0;
    const std::string out = capture(fmt::format("{} validate golden --model {} --cases {} --threads {} 2>&1",
                                                quote(c.strata_bin), quote(c.model_dir),
                                                quote(golden_cases), c.threads), &rc);
    const size_t at = out.rfind("golden:");
    std::string line = at == std::string::npos ? out.substr(0, 300) : out.substr(at);
    while (!line.empty() && (line.back() == '\n')) line.pop_back();
    run.golden = {{"cases", golden_cases}, {"result", rc == 0 ? "pass" : "fail"}, {"summary", line}};
  }
  // The load, then the /metrics deltas over the whole step.
  StatusOr<LoadResult> lr = run_load(d.url, d.metrics_url, load, d.concurrent ? 0 : 4);
  const auto m1 = fetch_metrics(d.metrics_url);
  const auto p1 = d.prefill_metrics_url.empty() ? std::vector<MetricSample>{} : fetch_metrics(d.prefill_metrics_url);
  auto delta = [&](const std::string& base, const std::map<std::string, std::string>& w = {}) {
    // Step 6 counts both servers: A's totals, plus B's growth.
    const double a = info.id == 6 ? counter(m_first, base, w) - counter(m0, base, w) : 0.0;
    return a + counter(m1, base, w) - counter(m_b0, base, w);
  };
  json& x = run.deltas;
  for (const char* k : {"prefix_cache_queries", "prefix_cache_hits", "prefix_replayed_tokens",
                        "num_preemptions", "kv_transfer_imports", "kv_transfer_imported_tokens",
                        "kv_transfer_import_failures", "kv_transfer_received_bytes",
                        "spec_decode_num_drafts", "spec_decode_num_draft_tokens",
                        "spec_decode_num_accepted_tokens", "moe_collective_seconds",
                        "dcp_exchange_seconds", "pp_boundary_seconds", "request_success", "prompt_tokens", "generation_tokens"})
    x[k] = delta(k);
  x["kv_transfer_exports"] = counter(p1, "kv_transfer_exports") - counter(p0, "kv_transfer_exports");
  // The decode side's transfer receiver: bytes received per state kind, fetch latency.
  x["kv_transfer_fetch_seconds"] = metric_sum(m1, ":kv_transfer_fetch_seconds_sum") -
                                   metric_sum(m0, ":kv_transfer_fetch_seconds_sum");
  x["kv_transfer_fetches"] = metric_sum(m1, ":kv_transfer_fetch_seconds_count") -
                             metric_sum(m0, ":kv_transfer_fetch_seconds_count");
  json per_kind = json::object();
  for (const MetricSample& s : m1)
    if (s.name.ends_with(":kv_transfer_received_bytes_total") && s.labels.count("kind")) {
      const std::string& k = s.labels.at("kind");
      per_kind[k] = delta("kv_transfer_received_bytes", {{"kind", k}});
    }
  x["kv_transfer_received_bytes_per_kind"] = per_kind;
  json tiers = json::array();
  std::set<std::string> names;
  for (const MetricSample& s : m1)
    if (s.name.ends_with(":kv_tier_lookups_total") && s.labels.count("tier")) names.insert(s.labels.at("tier"));
  for (const std::string& t : names) {
    const double look = delta("kv_tier_lookups", {{"tier", t}}), hits = delta("kv_tier_hits", {{"tier", t}});
    tiers.push_back({{"tier", t}, {"lookups", look}, {"hits", hits},
                     {"hit_rate", look > 0 ? json(hits / look) : json(nullptr)}});
  }
  x["tiers"] = tiers;
  d.stop();
  if (!lr.ok()) {
    run.status = "fail";
    run.reason = fmt::format("the load failed: {}", lr.status().message());
    return run;
  }
  run.load = std::move(*lr);
  const int64_t failed_load = run.load->summary.value("failed", int64_t{0});
  if (!run.cmp.pass) {
    run.status = "fail";
    run.reason = fmt::format("step {} ({}): {}", info.id, info.name, run.cmp.failure);
  } else if (failed_load > 0) {
    run.status = "fail";
    run.reason = fmt::format("step {} ({}): {} load requests failed", info.id, info.name, failed_load);
  } else if (run.golden.is_object() && run.golden["result"] == "fail") {
    run.status = "fail";
    run.reason = fmt::format("step {} ({}): golden cases failed: {}", info.id, info.name,
                             run.golden["summary"].get<std::string>());
  } else {
    run.status = "pass";
  }
  return run;
}

void fill_record(json* rec, const MatrixContext& c, const ModelFacts& f, const StepInfo& info,
                 const StepRun& run) {
  json& r = *rec;
  const bool ran = run.status == "pass" || run.status == "fail";
  const Deployment& d = run.dep;
  const json& x = run.deltas;
  r["step"] = info.id;
  r["name"] = info.name;
  r["title"] = info.title;
  r["status"] = run.status;
  r["reason"] = run.reason.empty() ? json(nullptr) : json(run.reason);
  r["notes"] = d.notes;
  r["topology"] = {{"nodes", 1}, {"processes", ran ? d.processes : 0}, {"ranks", ran ? d.ranks : 0},
                   {"redis", d.redis != nullptr}};
  // A deployment that did not start has no configuration (parallel null).
  const bool layout = ran && d.parallel.is_object();
  r["parallel"] = layout ? d.parallel : json(nullptr);
  const bool measured = ran && run.load.has_value();
  if (measured) {
    const json& s = run.load->summary;
    r["latency"] = {{"requests", s.value("num_prompts", 0)},
                    {"completed", s.value("completed", 0)},
                    {"failed", s.value("failed", 0)},
                    {"duration_s", s.value("duration", 0.0)},
                    {"ttft_ms", percentiles_ms(s, "ttft")},
                    {"tpot_ms", percentiles_ms(s, "tpot")},
                    {"output_throughput_tok_s", s.value("output_throughput", 0.0)},
                    {"request_throughput_per_s", s.value("request_throughput", 0.0)}};
    r["occupancy"] = {{"peak", run.load->occupancy_peak}, {"series", run.load->occupancy_series}};
  } else {
    r["latency"] = nullptr;
    r["occupancy"] = nullptr;
  }
  if (layout && d.parallel.value("pd", "") != "colocated") {
    const double imports = x.value("kv_transfer_imports", 0.0);
    const double fetches = x.value("kv_transfer_fetches", 0.0);
    const double secs = x.value("kv_transfer_fetch_seconds", 0.0);
    json per_handoff = json::object();
    const json received = x.value("kv_transfer_received_bytes_per_kind", json::object());
    for (const auto& [k, v] : received.items())
      per_handoff[k] = fetches > 0 ? v.get<double>() / fetches : 0.0;
    r["transfer"] = {{"handoffs", imports},
                     {"exports", x.value("kv_transfer_exports", 0.0)},
                     {"imported_tokens", x.value("kv_transfer_imported_tokens", 0.0)},
                     {"failures", x.value("kv_transfer_import_failures", 0.0)},
                     {"fetches", fetches},
                     {"bytes", x.value("kv_transfer_received_bytes", 0.0)},
                     {"mean_latency_ms", fetches > 0 ? json(1000 * secs / fetches) : json(nullptr)},
                     {"per_kind_bytes_per_handoff", per_handoff}};
  } else {
    r["transfer"] = nullptr;
  }
  if (ran) {
    const double q = x.value("prefix_cache_queries", 0.0), h = x.value("prefix_cache_hits", 0.0);
    r["prefix_cache"] = {{"queries_tokens", q},
                         {"hits_tokens", h},
                         {"hit_rate", q > 0 ? json(h / q) : json(nullptr)},
                         {"replayed_tokens", x.value("prefix_replayed_tokens", 0.0)},
                         {"tiers", x.value("tiers", json::array())}};
    r["collectives"] = {{"moe_collective_s", x.value("moe_collective_seconds", 0.0)},
                        {"dcp_exchange_s", x.value("dcp_exchange_seconds", 0.0)},
                        {"pp_boundary_s", x.value("pp_boundary_seconds", 0.0)}};
    r["preemptions"] = x.value("num_preemptions", 0.0);
  } else {
    r["prefix_cache"] = nullptr;
    r["collectives"] = nullptr;
    r["preemptions"] = nullptr;
  }
  if (ran && !d.spec_method.empty()) {
    const double dt = x.value("spec_decode_num_draft_tokens", 0.0), acc = x.value("spec_decode_num_accepted_tokens", 0.0);
    r["speculative"] = {{"method", d.spec_method},
                        {"verify_passes", x.value("spec_decode_num_drafts", 0.0)},
                        {"draft_tokens", dt},
                        {"accepted_tokens", acc},
                        {"acceptance_rate", dt > 0 ? json(acc / dt) : json(nullptr)}};
  } else {
    r["speculative"] = nullptr;
  }
  if (ran) {
    json acc = run.cmp.to_json();
    acc["compared_to"] = run.compared_to > 0 ? json(run.compared_to) : json(nullptr);
    acc["state"]["compared_to"] =
        acc["state"]["compared"].get<bool>() ? json(run.state_compared_to) : json(nullptr);
    acc["tolerance"] = 0.0;
    acc["tolerance_reason"] =
        "none allowed: a position's logits and state are a function of the model, the cache "
        "formats and the token ids before it, whatever the deployment (the runtime's first "
        "invariant: chunking, prefix hits, handoff, sharding and verify change no bit)";
    acc["golden"] = run.golden.is_object() ? run.golden : json(nullptr);
    r["accuracy"] = acc;
  } else {
    r["accuracy"] = nullptr;
  }
  const json p = layout ? d.parallel : json{{"ep", 1}, {"dcp", 1}, {"pp", 1}};
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  r["support_matrix"] = {{"model", fs::path(c.model_dir).filename().string()},
                         {"quantization", quantization_label(f.quantization, f.fp4_experts)},
                         {"ranks", std::max(1, d.ranks)},
                         {"dcp", p.value("dcp", 1)},
                         {"ep", p.value("ep", 1)},
                         {"pp", p.value("pp", 1)},
                         {"backend", d.ranks > 1 ? "Open MPI (mpirun, one node)" : "one process"},
                         {"features", fmt::format("validate matrix step {} ({})", info.id, info.name)},
                         {"result", run.status == "pass" && run.compared_to > 0
                                        ? fmt::format("pass: answers equal step {}'s", run.compared_to)
                                        : run.status},
                         {"date", date}};
}

json matrix_document(const std::vector<json>& records) {
  char ts[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return {{"schema", "strata.validate_matrix/1"}, {"created", ts}, {"steps", records}};
}

}  // namespace strata::tools
