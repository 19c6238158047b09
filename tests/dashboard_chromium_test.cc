// The live dashboard (GET /dashboard) loaded in headless Chromium (Debian's `chromium`,
// installed by scripts/setup.sh; the tests skip without it) against real `strata serve` /
// `strata router` processes on the tiny DeepSeek-V4.1 checkpoint (a state graph with several
// kinds; DSpark speculative decoding on, so the acceptance counters move). The page's DOM
// (--dump-dom, after a 4 s virtual-time budget) is read through the data- attributes the
// page puts on every number, and compared with what the servers answer directly:
//   * under load: every section is there, refreshes happened (body data-refresh-count),
//     running requests are listed with their phase and prompt length;
//   * idle (numbers stable): occupancy = /metrics cache_used_bytes / cache_capacity_bytes for
//     every kind and tier (and no other rows); speculative counters = /metrics; the state
//     graph lists every owner of /v1/dashboard/state, with each kind's bytes per token and
//     fixed bytes per request;
//   * the router: one section per backend, each with its own occupancy (= that backend's
//     /metrics) and PD handoffs (= its /v1/dashboard/state: exports on P, imports on D).
// Screenshots are left in <build>/test-artifacts/dashboard.png (the server under load) and
// dashboard-router.png (paths printed), beside the dumped DOMs.
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "cli_runner.h"
#include "dom_tags.h"
#include "pd_process.h"
#include "runner_fixtures.h"
#include "serve/test_http_client.h"

namespace strata {
namespace {

using Json = nlohmann::json;
using testing::DomTag;
using testing::StrataProcess;
namespace fs = std::filesystem;

constexpr int kLoadPromptTokens = 100;
const char* kSpecConfig = R"({"method":"dspark","num_speculative_tokens":3})";

bool have_chromium() {
  std::string out;
  return tools::run_command("command -v chromium 2>/dev/null", &out) == 0 && !out.empty();
}

fs::path artifact_dir() {
  const fs::path build = fs::read_symlink("/proc/self/exe").parent_path().parent_path();
  fs::create_directories(build / "test-artifacts");
  return build / "test-artifacts";
}

// Headless Chromium on `url` with `mode` ("--dump-dom", or "--screenshot=PATH ..."); returns
// its stdout (the DOM for --dump-dom). A fresh profile each run.
std::string chromium(const std::string& url, const std::string& mode) {
  char dir[] = "/tmp/strata-chromium-XXXXXX";
  EXPECT_NE(mkdtemp(dir), nullptr);
  std::string out;
  const int rc = tools::run_command(
      fmt::format("timeout -s KILL 120 chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
                  "--no-first-run --hide-scrollbars --user-data-dir={} --virtual-time-budget=4000 "
                  "{} '{}' 2>/dev/null",
                  dir, mode, url),
      &out);
  EXPECT_EQ(rc, 0) << "chromium " << mode << " " << url;
  fs::remove_all(dir);
  return out;
}

std::vector<DomTag> load_dom(const std::string& url, const std::string& save_as) {
  const std::string dom = chromium(url, "--dump-dom");
  std::ofstream(artifact_dir() / save_as) << dom;
  return testing::parse_dom_tags(dom);
}

// The tags that have every attribute in `want` (and, when `backend` is set, sit in that
// backend's section).
std::vector<const DomTag*> select(const std::vector<DomTag>& tags,
                                  const std::map<std::string, std::string>& want,
                                  const std::string& backend = "") {
  std::vector<const DomTag*> out;
  for (const DomTag& t : tags) {
    bool ok = backend.empty() || t.section_attr("data-backend") == backend;
    for (const auto& [k, v] : want) ok = ok && (v == "*" ? t.attrs.count(k) > 0 : t.has(k, v));
    if (ok) out.push_back(&t);
  }
  return out;
}

// A rendered integer ("1,234" -> 1234); -1 when the text is not one.
int64_t number(const std::string& text) {
  std::string d;
  for (char c : text)
    if (c != ',') d += c;
  if (d.empty() || d.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(d);
}

// Samples of `name` (after the "strata:" prefix) in Prometheus text: labels -> value.
std::map<std::map<std::string, std::string>, double> samples(const std::string& text,
                                                             const std::string& name) {
  std::map<std::map<std::string, std::string>, double> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const std::string head = "strata:" + name + "{";
    if (line.rfind(head, 0) != 0) continue;
    const size_t close = line.rfind('}');
    std::map<std::string, std::string> labels;
    std::istringstream ls(line.substr(head.size(), close - head.size()));
    for (std::string kv; std::getline(ls, kv, ',');) {
      const size_t eq = kv.find('=');
      labels[kv.substr(0, eq)] = kv.substr(eq + 2, kv.size() - eq - 3);
    }
    labels.erase("model_name");
    out[labels] = std::stod(line.substr(close + 1));
  }
  return out;
}

// The texts of the cells of table row `row` (the tags after it up to the next <tr>), by
// their `key` attribute.
std::map<std::string, std::string> row_cells(const std::vector<DomTag>& tags, const DomTag* row,
                                             const std::string& key) {
  std::map<std::string, std::string> out;
  for (const DomTag* t = row + 1; t < tags.data() + tags.size() && t->name != "tr"; ++t)
    if (t->attrs.count(key)) out[t->attr(key)] = t->text;
  return out;
}

int refresh_count(const std::vector<DomTag>& tags) {
  auto body = select(tags, {{"data-refresh-count", "*"}});
  return body.empty() ? -1 : std::stoi(body[0]->attr("data-refresh-count"));
}

// Every cache_used_bytes / cache_capacity_bytes series of `metrics` has its cell (in
// `backend`'s section when set) showing the same integer, and there are no other cells.
// Returns how many series had used bytes > 0.
int expect_occupancy_matches(const std::vector<DomTag>& tags, const std::string& metrics,
                             const std::string& backend = "") {
  int nonzero = 0;
  for (const char* name : {"cache_used_bytes", "cache_capacity_bytes"}) {
    const auto series = samples(metrics, name);
    EXPECT_FALSE(series.empty()) << name;
    EXPECT_EQ(select(tags, {{"data-metric", name}}, backend).size(), series.size()) << name;
    for (const auto& [labels, value] : series) {
      const std::string kind = labels.at("kind"), tier = labels.at("tier");
      auto cells = select(tags, {{"data-metric", name}, {"data-kind", kind}, {"data-tier", tier}}, backend);
      EXPECT_EQ(cells.size(), 1u) << name << " " << kind << "/" << tier;
      if (cells.size() != 1) continue;
      EXPECT_EQ(number(cells[0]->text), static_cast<int64_t>(value))
          << name << " " << kind << "/" << tier << ": page shows '" << cells[0]->text << "'";
      nonzero += std::string(name) == "cache_used_bytes" && value > 0;
    }
  }
  return nonzero;
}

void expect_sections(const std::vector<DomTag>& tags, const std::string& backend = "") {
  for (const char* s : {"state-graph", "occupancy", "requests", "speculative", "handoffs"})
    EXPECT_EQ(select(tags, {{"data-section", s}}, backend).size(), 1u) << "section " << s << " " << backend;
}

std::vector<int32_t> prompt(int n, int seed) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((seed * 131 + i * 7) % 2000 + 3);
  return p;
}

int complete(int port, const std::vector<int32_t>& ids, int max_tokens) {
  const Json body = {{"prompt", ids}, {"max_tokens", max_tokens}, {"ignore_eos", true}};
  return testing::http_post(port, "/v1/completions", body.dump()).status;
}

std::string get(int port, const std::string& path) {
  const testing::HttpReply r = testing::http_get(port, path);
  EXPECT_EQ(r.status, 200) << path;
  return r.body;
}

// Polls until `port` holds no request (bounded: ~30 s).
void wait_idle(int port) {
  for (int i = 0; i < 300; ++i) {
    const std::string m = get(port, "/metrics");
    const auto run = samples(m, "num_requests_running"), wait = samples(m, "num_requests_waiting");
    if (!run.empty() && run.begin()->second == 0 && !wait.empty() && wait.begin()->second == 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "server did not become idle";
}

TEST(DashboardChromium, ServePageShowsLiveState) {
  if (!have_chromium())
    GTEST_SKIP() << "chromium is not installed: run scripts/setup.sh (installs chromium and "
                    "fonts-dejavu-core)";
  auto srv = StrataProcess::start({"serve", "--model", testing::model_dir("deepseek-v41-tiny"),
                                   "--port", "0", "--speculative-config", kSpecConfig},
                                  "dashboard-serve");
  ASSERT_NE(srv, nullptr);
  const int port = srv->port();
  ASSERT_EQ(complete(port, prompt(10, 1), 8), 200);
  ASSERT_EQ(complete(port, prompt(kLoadPromptTokens, 2), 8), 200);  // fills prefix-cache units
  ASSERT_EQ(complete(port, prompt(37, 3), 8), 200);

  // Load: two clients, each sending long requests back to back until told to stop.
  std::atomic<bool> stop{false};
  std::atomic<int> served{0};
  std::vector<std::thread> load;
  for (int c = 0; c < 2; ++c)
    load.emplace_back([&, c] {
      for (int k = 0; !stop; ++k)
        if (complete(port, prompt(kLoadPromptTokens, 100 + 2 * k + c), 200) == 200) ++served;
    });
  for (int i = 0; i < 100; ++i) {
    if (!Json::parse(get(port, "/v1/dashboard/state"))["requests"]["list"].empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string url = srv->url() + "/dashboard";
  const std::vector<DomTag> busy = load_dom(url, "dashboard-busy.html");
  const fs::path png = artifact_dir() / "dashboard.png";
  fs::remove(png);
  chromium(url, "--screenshot=" + png.string() + " --window-size=1280,1600");
  stop = true;
  for (auto& t : load) t.join();
  EXPECT_GT(served.load(), 0);

  // Under load.
  expect_sections(busy);
  EXPECT_GE(refresh_count(busy), 1) << "no refresh reached the page";
  auto updated = select(busy, {{"id", "last-updated"}});
  ASSERT_EQ(updated.size(), 1u);
  EXPECT_NE(updated[0]->text, "never");
  const auto rows = select(busy, {{"data-request-id", "*"}});
  EXPECT_GE(rows.size(), 1u) << "no running request rendered";
  const std::set<std::string> phases = {"waiting", "prefill", "verify", "decode"};
  for (const DomTag* r : rows) EXPECT_TRUE(phases.count(r->attr("data-phase"))) << r->attr("data-phase");
  for (const DomTag* c : select(busy, {{"data-field", "prompt_tokens"}}))
    EXPECT_EQ(number(c->text), kLoadPromptTokens);
  ASSERT_TRUE(fs::exists(png));
  EXPECT_GT(fs::file_size(png), 10000u);
  std::printf("dashboard screenshot: %s\n", png.c_str());

  // Idle: the page's numbers equal the server's own.
  wait_idle(port);
  const std::string before = get(port, "/metrics");
  const Json state = Json::parse(get(port, "/v1/dashboard/state"));
  const std::vector<DomTag> idle = load_dom(url, "dashboard-idle.html");
  const std::string after = get(port, "/metrics");
  ASSERT_EQ(samples(before, "cache_used_bytes"), samples(after, "cache_used_bytes"))
      << "occupancy changed while idle";
  EXPECT_GE(refresh_count(idle), 1);
  expect_sections(idle);
  EXPECT_GE(expect_occupancy_matches(idle, after), 1) << "all used bytes 0: nothing compared";
  EXPECT_TRUE(select(idle, {{"data-request-id", "*"}}).empty());
  auto running = select(idle, {{"data-metric", "num_requests_running"}});
  ASSERT_EQ(running.size(), 1u);
  EXPECT_EQ(running[0]->text, "0");
  // Finished requests: the sum over finish reasons of /metrics' request_success_total.
  auto finished = select(idle, {{"data-metric", "request_success_total"}});
  ASSERT_EQ(finished.size(), 1u);
  double finished_want = 0;
  for (const auto& [labels, value] : samples(after, "request_success_total")) finished_want += value;
  EXPECT_GT(finished_want, 0);
  EXPECT_EQ(number(finished[0]->text), static_cast<int64_t>(finished_want));

  for (const char* name : {"spec_decode_num_drafts", "spec_decode_num_draft_tokens",
                           "spec_decode_num_accepted_tokens"}) {
    auto cells = select(idle, {{"data-metric", name}});
    ASSERT_EQ(cells.size(), 1u) << name;
    const double want = samples(after, name).begin()->second;
    EXPECT_EQ(number(cells[0]->text), static_cast<int64_t>(want)) << name;
  }
  EXPECT_GT(samples(after, "spec_decode_num_draft_tokens").begin()->second, 0);
  for (const auto& [labels, value] : samples(after, "spec_decode_num_accepted_tokens_per_pos")) {
    auto cells = select(idle, {{"data-metric", "spec_decode_num_accepted_tokens_per_pos"},
                               {"data-position", labels.at("position")}});
    ASSERT_EQ(cells.size(), 1u) << labels.at("position");
    EXPECT_EQ(number(cells[0]->text), static_cast<int64_t>(value));
  }

  const Json& graph = state["state_graph"];
  ASSERT_TRUE(graph.is_object());
  ASSERT_GE(graph["owners"].size(), 10u);
  EXPECT_EQ(select(idle, {{"data-owner", "*"}, {"data-kind", "*"}}).size(), graph["owners"].size());
  for (const Json& o : graph["owners"]) {
    const std::string label = o["label"];
    EXPECT_EQ(select(idle, {{"data-owner", label}}).size(), 2u) << label << " (table row + SVG lane)";
  }
  for (const Json& k : graph["kinds"]) {
    auto row = select(idle, {{"data-kind", k["kind"]}, {"data-stage", k["stage"]}});
    ASSERT_EQ(row.size(), 1u) << k.dump();
    std::map<std::string, std::string> shown = row_cells(idle, row[0], "data-metric");
    EXPECT_EQ(shown["bytes_per_token"], fmt::format("{:.2f}", k["bytes_per_token"].get<double>())) << k.dump();
    EXPECT_EQ(number(shown["fixed_bytes_per_request"]), k["fixed_bytes_per_request"].get<int64_t>()) << k.dump();
    EXPECT_EQ(number(shown["owners"]), k["owners"].get<int64_t>()) << k.dump();
  }
}

TEST(DashboardChromium, RouterPageShowsEachBackend) {
  if (!have_chromium())
    GTEST_SKIP() << "chromium is not installed: run scripts/setup.sh (installs chromium and "
                    "fonts-dejavu-core)";
  const std::string model = testing::model_dir("deepseek-v41-tiny");
  auto p = StrataProcess::start({"serve", "--model", model, "--port", "0", "--threads", "1",
                                 "--disaggregation-mode", "prefill"}, "dashboard-p");
  ASSERT_NE(p, nullptr);
  auto d = StrataProcess::start({"serve", "--model", model, "--port", "0", "--threads", "1",
                                 "--disaggregation-mode", "decode"}, "dashboard-d");
  ASSERT_NE(d, nullptr);
  auto r = StrataProcess::start({"router", "--prefill", p->url(), "--decode", d->url(), "--port", "0"},
                                "dashboard-router");
  ASSERT_NE(r, nullptr);
  for (int k = 0; k < 2; ++k) ASSERT_EQ(complete(r->port(), prompt(40 + k, 7 + k), 8), 200);
  wait_idle(p->port());
  wait_idle(d->port());

  const std::vector<DomTag> tags = load_dom(r->url() + "/dashboard", "dashboard-router.html");
  const fs::path png = artifact_dir() / "dashboard-router.png";
  chromium(r->url() + "/dashboard", "--screenshot=" + png.string() + " --window-size=1280,2400");
  std::printf("router dashboard screenshot: %s\n", png.c_str());
  EXPECT_GE(refresh_count(tags), 1);
  EXPECT_EQ(select(tags, {{"data-section", "router"}}).size(), 1u);
  auto handled = select(tags, {{"data-metric", "router_requests_total"}});
  ASSERT_EQ(handled.size(), 1u);
  EXPECT_EQ(handled[0]->text, "2");
  const Json p_state = Json::parse(get(p->port(), "/v1/dashboard/state"));
  const Json d_state = Json::parse(get(d->port(), "/v1/dashboard/state"));
  std::vector<int64_t> exported;
  for (const auto& [srv, role, state] : {std::tuple{p.get(), "prefill", &p_state},
                                         std::tuple{d.get(), "decode", &d_state}}) {
    SCOPED_TRACE(role);
    const std::string url = srv->url();
    EXPECT_EQ(select(tags, {{"data-backend", url}, {"data-role", role}, {"class", "backend"}}).size(), 1u);
    expect_sections(tags, url);
    expect_occupancy_matches(tags, get(srv->port(), "/metrics"), url);
    // Handoffs: one row per record of the backend's own state, with its payload bytes and
    // the per-kind bytes adding up to it.
    const Json& recent = (*state)["handoffs"]["recent"];
    ASSERT_EQ(recent.size(), 2u);
    for (size_t i = 0; i < recent.size(); ++i) {
      const Json& h = recent[i];
      EXPECT_EQ(h["direction"], std::string(role) == "prefill" ? "export" : "import");
      EXPECT_TRUE(h["ok"].get<bool>()) << h.dump();
      EXPECT_GT(h["payload_bytes"].get<int64_t>(), 0);
      // Nothing cached on D: it fetched every row P exported.
      if (std::string(role) == "prefill") exported.push_back(h["payload_bytes"]);
      else EXPECT_EQ(h["payload_bytes"].get<int64_t>(), exported.at(i));
      auto row = select(tags, {{"data-handoff-seq", std::to_string(h["seq"].get<int64_t>())},
                               {"data-direction", h["direction"]}, {"data-ok", "true"}}, url);
      ASSERT_EQ(row.size(), 1u) << h.dump();
      const auto cells = row_cells(tags, row[0], "data-field");
      EXPECT_EQ(number(cells.at("payload_bytes")), h["payload_bytes"].get<int64_t>());
      EXPECT_EQ(number(cells.at("num_tokens")), h["num_tokens"].get<int64_t>());
      int64_t per_kind = 0;
      for (const DomTag* t = row[0] + 1; t < tags.data() + tags.size() && t->name != "tr"; ++t)
        if (t->attrs.count("data-bytes")) per_kind += std::stoll(t->attr("data-bytes"));
      EXPECT_EQ(per_kind, h["payload_bytes"].get<int64_t>());
    }
  }
}

}  // namespace
}  // namespace strata
