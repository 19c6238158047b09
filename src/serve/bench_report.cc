#include "serve/bench_report.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace strata {

using json = nlohmann::json;

namespace {

// Linear interpolation between closest ranks (numpy.percentile's default).
double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

void add_stats(json& j, const std::string& name, const std::vector<double>& seconds) {
  std::vector<double> ms;
  for (double s : seconds) ms.push_back(s * 1000.0);
  double mean = 0, var = 0;
  for (double x : ms) mean += x;
  if (!ms.empty()) mean /= static_cast<double>(ms.size());
  for (double x : ms) var += (x - mean) * (x - mean);
  if (!ms.empty()) var /= static_cast<double>(ms.size());
  j["mean_" + name + "_ms"] = mean;
  j["median_" + name + "_ms"] = percentile(ms, 50);
  j["std_" + name + "_ms"] = std::sqrt(var);
  for (int p : {90, 95, 99}) j[fmt::format("p{}_{}_ms", p, name)] = percentile(ms, p);
}

std::string xml_escape(const std::string& in) {
  std::string out;
  for (char c : in) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

}  // namespace

json summarize_bench(const Workload& w, const BenchRun& run, const GoodputSlo& slo) {
  std::vector<double> ttft, tpot, itl, e2el;
  int64_t completed = 0, failed = 0, in_tok = 0, out_tok = 0, good = 0;
  json errors = json::array();
  for (const RequestResult& r : run.results) {
    if (!r.success) {
      ++failed;
      if (errors.size() < 5) errors.push_back(r.error);
      continue;
    }
    ++completed;
    in_tok += r.prompt_len;
    out_tok += r.output_tokens;
    ttft.push_back(r.ttft_s);
    e2el.push_back(r.latency_s);
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
    double t = 0;
    if (r.output_tokens > 1) {
      t = (r.latency_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1);
      tpot.push_back(t);
    }
    const bool ok = (slo.ttft_ms < 0 || r.ttft_s * 1000 <= slo.ttft_ms) &&
                    (slo.tpot_ms < 0 || t * 1000 <= slo.tpot_ms) &&
                    (slo.e2el_ms < 0 || r.latency_s * 1000 <= slo.e2el_ms);
    good += ok ? 1 : 0;
  }
  const double dur = std::max(run.duration_s, 1e-9);
  json j;
  j["backend"] = "openai";
  j["workload"] = w.name;
  j["num_prompts"] = run.results.size();
  j["duration"] = run.duration_s;
  j["completed"] = completed;
  j["failed"] = failed;
  j["skipped_too_long"] = w.skipped_too_long;
  j["total_input_tokens"] = in_tok;
  j["total_output_tokens"] = out_tok;
  j["total_input"] = in_tok;
  j["total_output"] = out_tok;
  j["request_throughput"] = completed / dur;
  j["request_goodput"] = good / dur;
  j["output_throughput"] = out_tok / dur;
  j["total_token_throughput"] = (in_tok + out_tok) / dur;
  add_stats(j, "ttft", ttft);
  add_stats(j, "tpot", tpot);
  add_stats(j, "itl", itl);
  add_stats(j, "e2el", e2el);
  j["goodput_slo"] = {{"ttft_ms", slo.ttft_ms}, {"tpot_ms", slo.tpot_ms}, {"e2el_ms", slo.e2el_ms}};
  if (run.prefix_cache_queries > 0) {
    j["prefix_cache_hit_rate"] = run.prefix_cache_hits / run.prefix_cache_queries;
  } else {
    j["prefix_cache_hit_rate"] = nullptr;
  }
  j["prefix_cache_queries"] = run.prefix_cache_queries;
  j["prefix_cache_hits"] = run.prefix_cache_hits;
  j["oracle_prefix_hit_rate"] = w.oracle_prefix_hit_rate >= 0 ? json(w.oracle_prefix_hit_rate) : json(nullptr);
  // Speculative decoding: mean acceptance length = 1 + accepted / verify passes (vLLM's
  // definition), acceptance rate = accepted / proposed draft tokens; null without drafts.
  const bool spec = run.spec_drafts > 0 && run.spec_accepted_tokens >= 0;
  j["spec_decode_num_drafts"] = run.spec_drafts >= 0 ? json(run.spec_drafts) : json(nullptr);
  j["spec_decode_num_draft_tokens"] =
      run.spec_draft_tokens >= 0 ? json(run.spec_draft_tokens) : json(nullptr);
  j["spec_decode_num_accepted_tokens"] =
      run.spec_accepted_tokens >= 0 ? json(run.spec_accepted_tokens) : json(nullptr);
  j["spec_decode_mean_acceptance_length"] =
      spec ? json(1.0 + run.spec_accepted_tokens / run.spec_drafts) : json(nullptr);
  j["spec_decode_acceptance_rate"] = spec && run.spec_draft_tokens > 0
                                         ? json(run.spec_accepted_tokens / run.spec_draft_tokens)
                                         : json(nullptr);
  j["errors"] = errors;
  return j;
}

std::string render_bench_text(const json& j) {
  std::string s;
  auto line = [&](const std::string& k, const std::string& v) {
    s += fmt::format("{:<40}{:>16}\n", k, v);
  };
  auto num = [&](const char* key, int prec = 2) {
    return j.contains(key) && j[key].is_number() ? fmt::format("{:.{}f}", j[key].get<double>(), prec)
                                                 : std::string("n/a");
  };
  s += fmt::format("{:=^56}\n", " Serving Benchmark Result ");
  line("Workload:", j.value("workload", ""));
  line("Successful requests:", num("completed", 0));
  line("Failed requests:", num("failed", 0));
  line("Skipped (longer than the context):", num("skipped_too_long", 0));
  line("Benchmark duration (s):", num("duration"));
  line("Total input tokens:", num("total_input_tokens", 0));
  line("Total generated tokens:", num("total_output_tokens", 0));
  line("Request throughput (req/s):", num("request_throughput"));
  line("Request goodput (req/s):", num("request_goodput"));
  line("Output token throughput (tok/s):", num("output_throughput"));
  line("Total token throughput (tok/s):", num("total_token_throughput"));
  for (const char* m : {"ttft", "tpot", "itl", "e2el"}) {
    s += fmt::format("{:-^56}\n", fmt::format(" {} (ms) ", m));
    for (const char* st : {"mean", "median", "p90", "p95", "p99"}) {
      const std::string key = fmt::format("{}_{}_ms", st, m);
      line(fmt::format("{} {}:", st, m), num(key.c_str()));
    }
  }
  s += fmt::format("{:-^56}\n", " prefix cache ");
  line("Prefix cache hit rate (server):",
       j["prefix_cache_hit_rate"].is_number()
           ? fmt::format("{:.2f}%", 100 * j["prefix_cache_hit_rate"].get<double>())
           : std::string("n/a"));
  line("Prefix cache hit rate (trace oracle):",
       j["oracle_prefix_hit_rate"].is_number()
           ? fmt::format("{:.2f}%", 100 * j["oracle_prefix_hit_rate"].get<double>())
           : std::string("n/a"));
  if (j.value("spec_decode_mean_acceptance_length", json(nullptr)).is_number()) {
    s += fmt::format("{:-^56}\n", " speculative decoding ");
    line("Drafts (verify passes):", fmt::format("{:.0f}", j["spec_decode_num_drafts"].get<double>()));
    line("Draft tokens accepted:",
         fmt::format("{:.0f} of {:.0f} ({:.2f}%)", j["spec_decode_num_accepted_tokens"].get<double>(),
                     j["spec_decode_num_draft_tokens"].get<double>(),
                     100 * j.value("spec_decode_acceptance_rate", 0.0)));
    line("Mean acceptance length:",
         fmt::format("{:.2f}", j["spec_decode_mean_acceptance_length"].get<double>()));
  }
  s += fmt::format("{:=^56}\n", "");
  return s;
}

std::string render_bench_svg(const BenchRun& run, const std::string& title) {
  const double W = 800, H = 420, L = 70, R = 20, T = 40, B = 50;
  double tmax = 1e-3, vmin = 1e9, vmax = 1e-9;
  for (const auto& r : run.results) {
    if (!r.success) continue;
    tmax = std::max(tmax, r.start_s);
    vmin = std::min({vmin, r.ttft_s * 1000, r.latency_s * 1000});
    vmax = std::max({vmax, r.ttft_s * 1000, r.latency_s * 1000});
  }
  if (vmin > vmax) {
    vmin = 1;
    vmax = 10;
  }
  const double lo = std::floor(std::log10(std::max(vmin, 1e-3)));
  const double hi = std::max(lo + 1, std::ceil(std::log10(std::max(vmax, 1e-3))));
  auto x = [&](double t) { return L + (W - L - R) * t / tmax; };
  auto y = [&](double ms) {
    const double v = std::log10(std::max(ms, 1e-3));
    return H - B - (H - T - B) * (v - lo) / (hi - lo);
  };
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"white\"/>\n<text x=\"{}\" y=\"22\" font-size=\"15\">{}</text>\n",
      W, H, L, xml_escape(title));
  s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n", L, H - B, W - R, H - B);
  s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n", L, T, L, H - B);
  for (double d = lo; d <= hi; d += 1) {
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:g} ms</text>\n", L - 5, y(std::pow(10, d)) + 4, std::pow(10, d));
    s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#ddd\"/>\n", L, y(std::pow(10, d)), W - R, y(std::pow(10, d)));
  }
  for (int k = 0; k <= 4; ++k) {
    const double t = tmax * k / 4;
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{:.1f}</text>\n", x(t), H - B + 16, t);
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">request send time (s)</text>\n", (L + W - R) / 2, H - 12);
  for (const auto& r : run.results) {
    if (!r.success) continue;
    s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"#1f77b4\"/>\n", x(r.start_s), y(r.latency_s * 1000));
    s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"#d62728\"/>\n", x(r.start_s), y(r.ttft_s * 1000));
  }
  s += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"#d62728\"/><text x=\"{}\" y=\"{}\">TTFT</text>\n", W - 160, T, W - 150, T + 4);
  s += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"#1f77b4\"/><text x=\"{}\" y=\"{}\">E2E latency</text>\n", W - 100, T, W - 90, T + 4);
  s += "</svg>\n";
  return s;
}

}  // namespace strata
