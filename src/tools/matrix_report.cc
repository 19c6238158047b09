// report.html of `strata validate matrix` (see matrix_report.h).
#include "tools/matrix_report.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

namespace strata::tools {

using nlohmann::json;

namespace {

const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                         "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string esc(const std::string& s) {
  std::string o;
  for (char ch : s) {
    switch (ch) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += ch;
    }
  }
  return o;
}

std::string num(const json& v, const char* fmtspec = "{:.3g}") {
  if (v.is_null()) return "&ndash;";
  if (v.is_number()) {
    const double d = v.get<double>();
    if (std::abs(d) >= 1000) return fmt::format("{:.0f}", d);  // no 1.05e+03
    return fmt::format(fmt::runtime(fmtspec), d);
  }
  return esc(v.dump());
}

// "EP 2, DCP 1, PP 1, PD 1P1D" from a record's parallel object.
std::string layout(const json& p) {
  if (!p.is_object()) return "&ndash;";
  return esc(fmt::format("TP {} DP {} EP {} DCP {} PP {}, PD {}", p.value("tp", 1), p.value("dp", 1),
                         p.value("ep", 1), p.value("dcp", 1), p.value("pp", 1), p.value("pd", "")));
}

// 18900 -> "18.9k", 2.5e6 -> "2.5M", 0.0123 -> "0.0123".
std::string human(double v) {
  const double a = std::abs(v);
  if (a >= 1e9) return fmt::format("{:.3g}G", v / 1e9);
  if (a >= 1e6) return fmt::format("{:.3g}M", v / 1e6);
  if (a >= 1e4) return fmt::format("{:.3g}k", v / 1e3);
  return fmt::format("{:.4g}", v);
}

struct Series {
  std::string label;
  std::vector<std::pair<double, double>> pts;
};

// A line chart: axes, ticks at min / max, one polyline per series, a legend.
std::string line_chart(const std::string& title, const std::string& xlabel, const std::string& ylabel,
                       const std::vector<Series>& series, bool step_lines = false) {
  const double W = 520, H = 260, L = 60, R = 150, T = 28, B = 40;
  double x0 = 1e300, x1 = -1e300, y0 = 0, y1 = -1e300;
  for (const Series& s : series)
    for (auto [x, y] : s.pts) {
      x0 = std::min(x0, x), x1 = std::max(x1, x), y1 = std::max(y1, y);
    }
  std::string o = fmt::format(R"svg(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" class="chart">)svg"
                              R"svg(<text x="{}" y="16" font-weight="bold">{}</text>)svg",
                              W + R, H, L, esc(title));
  if (x1 < x0) return o + fmt::format(R"svg(<text x="{}" y="{}">no data</text></svg>)svg", L, H / 2);
  if (x1 == x0) x1 = x0 + 1;
  if (y1 <= y0) y1 = y0 + 1;
  auto X = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - 10); };
  auto Y = [&](double y) { return H - B - (y - y0) / (y1 - y0) * (H - B - T); };
  o += fmt::format(R"svg(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#000"/>)svg", L, H - B, W - 10, H - B);
  o += fmt::format(R"svg(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#000"/>)svg", L, T, L, H - B);
  o += fmt::format(R"svg(<text x="{}" y="{}" font-size="11">{}</text><text x="{}" y="{}" font-size="11" text-anchor="end">{}</text>)svg",
                   L, H - B + 14, human(x0), W - 10, H - B + 14, human(x1));
  o += fmt::format(R"svg(<text x="{}" y="{}" font-size="11" text-anchor="end">{}</text><text x="{}" y="{}" font-size="11" text-anchor="end">{}</text>)svg",
                   L - 4, H - B, human(y0), L - 4, T + 4, human(y1));
  o += fmt::format(R"svg(<text x="{}" y="{}" font-size="12" text-anchor="middle">{}</text>)svg", (L + W) / 2, H - 8, esc(xlabel));
  o += fmt::format(R"svg(<text x="12" y="{}" font-size="12" transform="rotate(-90 12 {})" text-anchor="middle">{}</text>)svg",
                   (T + H - B) / 2, (T + H - B) / 2, esc(ylabel));
  for (size_t i = 0; i < series.size(); ++i) {
    const Series& s = series[i];
    std::string pts;
    double py = 0;
    for (size_t k = 0; k < s.pts.size(); ++k) {
      auto [x, y] = s.pts[k];
      if (step_lines && k > 0) pts += fmt::format("{:.1f},{:.1f} ", X(x), Y(py));
      pts += fmt::format("{:.1f},{:.1f} ", X(x), Y(y));
      py = y;
    }
    const char* col = kColors[i % 10];
    o += fmt::format(R"svg(<polyline fill="none" stroke="{}" stroke-width="1.5" points="{}"/>)svg", col, pts);
    o += fmt::format(R"svg(<rect x="{}" y="{}" width="10" height="10" fill="{}"/><text x="{}" y="{}" font-size="11">{}</text>)svg",
                     W + 4, T + 14 * i, col, W + 18, T + 9 + 14 * i, esc(s.label));
  }
  return o + "</svg>";
}

// Horizontal bars: label -> value.
std::string bar_chart(const std::string& title, const std::string& unit,
                      const std::vector<std::pair<std::string, double>>& bars) {
  const double W = 520, L = 200, row = 18;
  const double H = 30 + row * std::max<size_t>(1, bars.size());
  double mx = 0;
  for (const auto& b : bars) mx = std::max(mx, b.second);
  if (mx <= 0) mx = 1;
  std::string o = fmt::format(R"svg(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" class="chart">)svg"
                              R"svg(<text x="4" y="16" font-weight="bold">{}</text>)svg",
                              W + 120, H, esc(title));
  if (bars.empty()) o += R"svg(<text x="4" y="40">no data</text>)svg";
  for (size_t i = 0; i < bars.size(); ++i) {
    const double y = 24 + row * i;
    o += fmt::format(R"svg(<text x="{}" y="{}" font-size="11" text-anchor="end">{}</text>)svg", L - 6, y + 12, esc(bars[i].first));
    o += fmt::format(R"svg(<rect x="{}" y="{}" width="{:.1f}" height="{}" fill="{}"/>)svg", L, y + 2,
                     std::max(1.0, bars[i].second / mx * (W - L)), row - 4, kColors[i % 10]);
    o += fmt::format(R"svg(<text x="{:.1f}" y="{}" font-size="11">{:.4g} {}</text>)svg",
                     L + bars[i].second / mx * (W - L) + 4, y + 12, bars[i].second, esc(unit));
  }
  return o + "</svg>";
}

Series cdf(const std::string& label, std::vector<double> v, double scale) {
  Series s{label, {}};
  std::sort(v.begin(), v.end());
  for (size_t i = 0; i < v.size(); ++i) s.pts.push_back({v[i] * scale, double(i + 1) / v.size()});
  return s;
}

}  // namespace

std::string render_matrix_html(const json& doc, const std::vector<StepRun>& runs) {
  std::string o = R"svg(<!DOCTYPE html><html><head><meta charset="utf-8"><title>Strata validation matrix</title>
<style>body{font-family:sans-serif;margin:20px;color:#222}table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #bbb;padding:3px 6px;text-align:left}th{background:#eee}
.pass{background:#d7f5d7}.fail{background:#f8d0d0}.skip{background:#eee;color:#666}
.chart{margin:8px 16px 8px 0;border:1px solid #ddd}section{margin-top:18px}</style></head><body>)svg";
  const json& steps = doc.at("steps");
  const json first = steps.empty() ? json::object() : steps[0];
  o += "<h1>Strata validation matrix</h1>";
  if (!steps.empty())
    o += fmt::format("<p>Model <b>{}</b> ({}), quantization <code>{}</code>; Strata {} ({}, {}); machine {}, {} cores; created {}.</p>",
                     esc(first["checkpoint"]["path"].get<std::string>()),
                     esc(first["checkpoint"]["architecture"].get<std::string>()),
                     esc(first["checkpoint"]["quantization"].dump()),
                     esc(first["strata"]["version"].get<std::string>()),
                     esc(first["strata"]["build"]["git"].is_string() ? first["strata"]["build"]["git"].get<std::string>() : "no git"),
                     esc(first["strata"]["build"]["type"].get<std::string>()),
                     esc(first["machine"]["cpu"].get<std::string>()), first["machine"]["cores"].get<int64_t>(),
                     esc(doc.value("created", "")));
  o += "<div style=\"overflow-x:auto\"><table id=\"steps\"><tr><th>step</th><th>status</th><th>deployment</th><th>compared to</th>"
       "<th>tokens equal</th><th>max |&Delta;logprob|</th><th>state rows</th><th>TTFT p50 / p99 ms</th>"
       "<th>TPOT p50 / p99 ms</th><th>out tok/s</th><th>prefix hit rate</th><th>transfer</th>"
       "<th>collectives s</th><th>reason / notes</th></tr>";
  for (const json& r : steps) {
    const std::string st = r["status"].get<std::string>();
    const char* cls = st == "pass" ? "pass" : st == "fail" ? "fail" : "skip";
    const json& acc = r["accuracy"];
    std::string state = "&ndash;";
    if (acc.is_object()) {
      const json& s = acc["state"];
      state = s["compared"].get<bool>()
                  ? (s["equal"].get<bool>() ? fmt::format("{} rows equal", s["rows_compared"].get<int64_t>())
                                            : fmt::format("first differs: {} at position {}",
                                                          esc(s["first_divergence"]["kinds"].dump()),
                                                          s["first_divergence"]["position"].get<int64_t>()))
                  : "not compared: " + esc(s.value("not_compared", ""));
    }
    std::string notes = r["reason"].is_string() ? esc(r["reason"].get<std::string>()) : "";
    for (const json& n : r["notes"]) notes += (notes.empty() ? "" : "<br>") + esc(n.get<std::string>());
    const json& lat = r["latency"];
    o += fmt::format(
        "<tr class=\"{}\" data-step=\"{}\"><td>{} {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{} / {}</td><td>{} / {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        cls, r["step"].get<int>(), r["step"].get<int>(), esc(r["name"].get<std::string>()), esc(st),
        layout(r["parallel"]),
        acc.is_object() ? num(acc["compared_to"], "{}") : "&ndash;",
        acc.is_object() ? (acc["tokens_equal"].get<bool>() ? "yes" : "<b>no</b>") : "&ndash;",
        acc.is_object() ? num(acc["max_abs_logprob_diff"]) : "&ndash;", state,
        lat.is_object() ? num(lat["ttft_ms"]["p50"]) : "&ndash;", lat.is_object() ? num(lat["ttft_ms"]["p99"]) : "&ndash;",
        lat.is_object() ? num(lat["tpot_ms"]["p50"]) : "&ndash;", lat.is_object() ? num(lat["tpot_ms"]["p99"]) : "&ndash;",
        lat.is_object() ? num(lat["output_throughput_tok_s"]) : "&ndash;",
        r["prefix_cache"].is_object() ? num(r["prefix_cache"]["hit_rate"]) : "&ndash;",
        r["transfer"].is_object() ? fmt::format("{} handoffs, {} B", num(r["transfer"]["handoffs"]), num(r["transfer"]["bytes"], "{:.0f}")) : "&ndash;",
        r["collectives"].is_object() ? fmt::format("MoE {} / DCP {} / PP {}", num(r["collectives"]["moe_collective_s"]), num(r["collectives"]["dcp_exchange_s"]), num(r["collectives"]["pp_boundary_s"])) : "&ndash;",
        notes);
  }
  o += "</table></div>";
  // Latency CDFs.
  std::vector<Series> ttft, tpot;
  for (const StepRun& run : runs) {
    if (!run.load) continue;
    const std::string label = fmt::format("step {}", run.step);
    ttft.push_back(cdf(label, run.load->ttft_s, 1000));
    tpot.push_back(cdf(label, run.load->tpot_s, 1000));
  }
  o += "<section><h2>Latency CDFs per step</h2>";
  o += line_chart("TTFT", "ms", "fraction of requests", ttft, true);
  o += line_chart("TPOT", "ms", "fraction of requests", tpot, true);
  o += "</section><section><h2>Occupancy over time per state kind (working pool and tiers)</h2>";
  for (const StepRun& run : runs) {
    if (!run.load) continue;
    std::map<std::string, Series> by;
    for (const json& p : run.load->occupancy_series) {
      const std::string k = p["kind"].get<std::string>() + "/" + p["tier"].get<std::string>();
      by[k].label = k;
      by[k].pts.push_back({p["t"].get<double>(), p["used_bytes"].get<double>()});
    }
    std::vector<Series> v;
    for (auto& [k, s] : by) v.push_back(std::move(s));
    o += line_chart(fmt::format("step {}: bytes in use", run.step), "s since the load began", "bytes", v);
  }
  o += "</section><section><h2>Bytes per state kind per handoff (PD)</h2>";
  bool any_handoff = false;
  for (const json& r : steps) {
    if (!r["transfer"].is_object() || !r["transfer"].contains("per_kind_bytes_per_handoff")) continue;
    any_handoff = true;
    std::vector<std::pair<std::string, double>> bars;
    for (const auto& [k, v] : r["transfer"]["per_kind_bytes_per_handoff"].items()) bars.push_back({k, v.get<double>()});
    o += bar_chart(fmt::format("step {}: mean bytes per handoff", r["step"].get<int>()), "B", bars);
  }
  if (!any_handoff) o += "<p>No step moved state between processes.</p>";
  o += "</section><section><h2>Prefix hit rate per tier</h2>";
  std::vector<std::pair<std::string, double>> bars;
  for (const json& r : steps) {
    if (!r["prefix_cache"].is_object()) continue;
    const json& pc = r["prefix_cache"];
    if (pc["hit_rate"].is_number())
      bars.push_back({fmt::format("step {} working pool", r["step"].get<int>()), pc["hit_rate"].get<double>()});
    for (const json& t : pc["tiers"])
      if (t["hit_rate"].is_number())
        bars.push_back({fmt::format("step {} {}", r["step"].get<int>(), t["tier"].get<std::string>()), t["hit_rate"].get<double>()});
  }
  o += bar_chart("hits / lookups", "", bars);
  o += "</section></body></html>\n";
  return o;
}

}  // namespace strata::tools
