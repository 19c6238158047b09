// Prompts, HTTP calls and comparisons of `strata validate matrix` (see matrix_check.h).
#include "tools/matrix_check.h"

#include <httplib.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include <fmt/format.h>

namespace strata::tools {

using nlohmann::json;

std::vector<MatrixPrompt> matrix_prompts(int64_t vocab, int64_t max_context, int64_t unit,
                                         int64_t max_tokens, uint64_t seed) {
  if (unit <= 0) unit = 16;
  std::mt19937_64 rng(seed);
  const int32_t lo = std::min<int32_t>(3, static_cast<int32_t>(vocab) - 1);
  std::uniform_int_distribution<int32_t> tok(lo, static_cast<int32_t>(vocab) - 1);
  auto random_ids = [&](int64_t n) {
    std::vector<int32_t> v(static_cast<size_t>(std::max<int64_t>(n, 1)));
    for (auto& t : v) t = tok(rng);
    return v;
  };
  const int64_t room = max_context - max_tokens - 1;  // longest prompt that fits
  auto fit = [&](int64_t n) { return std::max<int64_t>(1, std::min(n, room)); };
  auto extend = [&](const std::vector<int32_t>& base, int64_t keep, int64_t extra) {
    std::vector<int32_t> v(base.begin(), base.begin() + std::min<int64_t>(keep, base.size()));
    for (int32_t t : random_ids(extra)) v.push_back(t);
    if (static_cast<int64_t>(v.size()) > room) v.resize(static_cast<size_t>(room));
    return v;
  };
  std::vector<MatrixPrompt> p;
  const std::vector<int32_t> a = random_ids(fit(2 * unit + 5));
  p.push_back({"root", a});
  p.push_back({"root[:2u]+7", extend(a, 2 * unit, 7)});
  p.push_back({"root+3", extend(a, static_cast<int64_t>(a.size()), 3)});
  p.push_back({"short", random_ids(fit(unit - 1))});
  p.push_back({"one", random_ids(1)});
  const std::vector<int32_t> lng = random_ids(fit(6 * unit + 17));
  p.push_back({"long", lng});
  p.push_back({"long[:5u]+9", extend(lng, 5 * unit, 9)});
  p.push_back({"long[:1u]+1", extend(lng, unit, 1)});
  return p;
}

namespace {

PromptOutput post_prompt(const std::string& url, const MatrixPrompt& p, int64_t max_tokens) {
  PromptOutput o;
  o.name = p.name;
  httplib::Client cli(url);
  cli.set_read_timeout(600, 0);
  cli.set_connection_timeout(10, 0);
  const json body = {{"prompt", p.ids},        {"max_tokens", max_tokens}, {"temperature", 0},
                     {"ignore_eos", true},     {"logprobs", 5},            {"return_token_ids", true}};
  auto res = cli.Post("/v1/completions", body.dump(), "application/json");
  if (!res) {
    o.error = fmt::format("POST /v1/completions: {}", httplib::to_string(res.error()));
    return o;
  }
  if (res->status != 200) {
    o.error = fmt::format("POST /v1/completions: HTTP {}: {}", res->status, res->body.substr(0, 300));
    return o;
  }
  const json j = json::parse(res->body, nullptr, false);
  try {
    const json& c = j.at("choices").at(0);
    o.ids = c.at("token_ids").get<std::vector<int32_t>>();
    const json& lp = c.at("logprobs");
    for (const json& v : lp.at("token_logprobs")) o.logprobs.push_back(v.get<double>());
    for (const json& v : lp.at("top_logprobs")) o.top_logprobs.push_back(v);
    if (c.contains("strata_state")) o.state = c["strata_state"];
    if (j.contains("usage") && j["usage"].contains("prompt_tokens_details") &&
        j["usage"]["prompt_tokens_details"].is_object())
      o.cached_tokens = j["usage"]["prompt_tokens_details"].value("cached_tokens", int64_t{0});
  } catch (const std::exception& e) {
    o.error = fmt::format("unexpected response ({}): {}", e.what(), res->body.substr(0, 300));
  }
  return o;
}

}  // namespace

std::vector<PromptOutput> run_prompts(const std::string& url,
                                      const std::vector<MatrixPrompt>& prompts,
                                      int64_t max_tokens, bool concurrent, int repeat) {
  std::vector<PromptOutput> out(prompts.size() * static_cast<size_t>(repeat));
  if (!concurrent) {
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = post_prompt(url, prompts[i % prompts.size()], max_tokens);
    return out;
  }
  std::vector<std::thread> threads;
  for (size_t i = 0; i < out.size(); ++i)
    threads.emplace_back([&, i] { out[i] = post_prompt(url, prompts[i % prompts.size()], max_tokens); });
  for (auto& t : threads) t.join();
  return out;
}

json StateDivergence::to_json() const {
  json j = {{"compared", compared}, {"equal", equal}, {"rows_compared", rows_compared}};
  if (!compared) j["not_compared"] = not_compared;
  if (compared && !equal)
    j["first_divergence"] = {{"position", position}, {"kinds", kinds}, {"owners", owners}};
  else
    j["first_divergence"] = nullptr;
  return j;
}

namespace {

struct RowKey {
  std::string owner;
  int64_t row;
  bool operator<(const RowKey& o) const { return std::tie(owner, row) < std::tie(o.owner, o.row); }
};
struct RowInfo {
  std::string kind;
  std::string hash;
  int64_t position;
};

std::map<RowKey, RowInfo> state_rows(const json& st) {
  std::map<RowKey, RowInfo> m;
  const int64_t n = st.value("num_tokens", int64_t{0});
  for (const json& r : st.at("runs")) {
    const std::string owner = r.at("owner").get<std::string>();
    const int64_t row0 = r.at("row0").get<int64_t>();
    const int64_t per = r.at("positions_per_row").get<int64_t>();
    const json& h = r.at("hashes");
    for (size_t i = 0; i < h.size(); ++i) {
      const int64_t row = row0 + static_cast<int64_t>(i);
      m[{owner, row}] = {r.at("kind").get<std::string>(), h[i].get<std::string>(),
                         per > 0 ? row * per : n};
    }
  }
  return m;
}

}  // namespace

StateDivergence compare_state(const json& below, const json& here) {
  StateDivergence d;
  auto usable = [](const json& s, const char* side, std::string* why) {
    if (s.is_null()) *why = fmt::format("the {} deployment sent no state (not in validation mode)", side);
    else if (s.contains("error")) *why = fmt::format("the {} deployment could not export its state: {}", side, s["error"].get<std::string>());
    else return true;
    return false;
  };
  if (!usable(below, "lower", &d.not_compared) || !usable(here, "checked", &d.not_compared)) return d;
  d.compared = true;
  const auto a = state_rows(below), b = state_rows(here);
  std::map<int64_t, std::set<std::pair<std::string, std::string>>> diffs;  // pos -> (kind, owner)
  for (const auto& [k, v] : b) {
    auto it = a.find(k);
    if (it == a.end()) diffs[v.position].insert({v.kind, k.owner});
    else {
      ++d.rows_compared;
      if (it->second.hash != v.hash) diffs[v.position].insert({v.kind, k.owner});
    }
  }
  for (const auto& [k, v] : a)
    if (!b.count(k)) diffs[v.position].insert({v.kind, k.owner});
  d.equal = diffs.empty();
  if (d.equal) return d;
  const auto& [pos, set] = *diffs.begin();
  d.position = pos;
  std::set<std::string> kinds;
  for (const auto& [kind, owner] : set) {
    kinds.insert(kind);
    if (d.owners.size() < 8) d.owners.push_back(owner);
  }
  d.kinds.assign(kinds.begin(), kinds.end());
  return d;
}

json Comparison::to_json() const {
  return {{"prompts", prompts},
          {"tokens_equal", tokens_equal},
          {"max_abs_logprob_diff", max_abs_logprob_diff},
          {"states_compared", states_compared},
          {"failure", failure.empty() ? json(nullptr) : json(failure)},
          {"state", state.to_json()}};
}

Comparison compare_outputs(const std::vector<PromptOutput>& below,
                           const std::vector<PromptOutput>& here, double tolerance) {
  Comparison c;
  c.prompts = static_cast<int64_t>(here.size());
  bool state_failed = false;
  auto fail = [&](const PromptOutput& p, std::string why) {
    if (c.failure.empty()) {
      c.failure = fmt::format("prompt '{}': {}", p.name, why);
      c.failed_prompt = p.name;
    }
  };
  for (size_t i = 0; i < here.size(); ++i) {
    const PromptOutput& h = here[i];
    if (!h.error.empty()) {
      fail(h, h.error);
      continue;
    }
    if (i >= below.size() || !below[i].error.empty()) {
      fail(h, "no answer from the lower step to compare with");
      continue;
    }
    const PromptOutput& b = below[i];
    std::vector<std::string> why;  // every difference of this prompt, state kind last
    if (h.ids != b.ids) {
      c.tokens_equal = false;
      size_t k = 0;
      while (k < h.ids.size() && k < b.ids.size() && h.ids[k] == b.ids[k]) ++k;
      why.push_back(fmt::format("token {} differs ({} vs {} below)", k,
                                k < h.ids.size() ? std::to_string(h.ids[k]) : "none",
                                k < b.ids.size() ? std::to_string(b.ids[k]) : "none"));
    }
    // Logprobs over the common tokens: the chosen token's and every top-5 entry both name.
    const size_t n = std::min(h.logprobs.size(), b.logprobs.size());
    double worst = 0;
    for (size_t k = 0; k < n; ++k) {
      worst = std::max(worst, std::abs(h.logprobs[k] - b.logprobs[k]));
      if (k < h.top_logprobs.size() && k < b.top_logprobs.size())
        for (const auto& [tok, v] : h.top_logprobs[k].items())
          if (b.top_logprobs[k].contains(tok))
            worst = std::max(worst, std::abs(v.get<double>() - b.top_logprobs[k][tok].get<double>()));
    }
    c.max_abs_logprob_diff = std::max(c.max_abs_logprob_diff, worst);
    if (worst > tolerance) why.push_back(fmt::format("logprobs differ by {:.3g} (tolerance {})", worst, tolerance));
    StateDivergence sd = compare_state(b.state, h.state);
    if (sd.compared) ++c.states_compared;
    if (sd.compared && !sd.equal) {
      if (!state_failed) c.state = sd;
      state_failed = true;
      why.push_back(fmt::format("state kind {} differs first (position {}: {})",
                                fmt::join(sd.kinds, ", "), sd.position, fmt::join(sd.owners, ", ")));
    } else if (!state_failed && (sd.compared || !c.state.compared)) {
      c.state = sd;
    }
    if (!why.empty()) fail(h, fmt::format("{}", fmt::join(why, "; ")));
  }
  c.pass = c.failure.empty();
  return c;
}

std::vector<MetricSample> parse_metrics(const std::string& text) {
  std::vector<MetricSample> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    MetricSample s;
    size_t i = line.find_first_of("{ ");
    if (i == std::string::npos) continue;
    s.name = line.substr(0, i);
    if (line[i] == '{') {
      const size_t close = line.find('}', i);
      if (close == std::string::npos) continue;
      std::string labels = line.substr(i + 1, close - i - 1);
      size_t p = 0;
      while (p < labels.size()) {
        const size_t eq = labels.find('=', p);
        if (eq == std::string::npos || eq + 1 >= labels.size() || labels[eq + 1] != '"') break;
        const size_t q = labels.find('"', eq + 2);
        if (q == std::string::npos) break;
        s.labels[labels.substr(p, eq - p)] = labels.substr(eq + 2, q - eq - 2);
        p = labels.find(',', q);
        p = p == std::string::npos ? labels.size() : p + 1;
      }
      i = close + 1;
    }
    try {
      s.value = std::stod(line.substr(i));
    } catch (...) {
      continue;
    }
    out.push_back(std::move(s));
  }
  return out;
}

double metric_sum(const std::vector<MetricSample>& m, const std::string& suffix,
                  const std::map<std::string, std::string>& where) {
  double sum = 0;
  for (const MetricSample& s : m) {
    if (s.name.size() < suffix.size() ||
        s.name.compare(s.name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    bool ok = true;
    for (const auto& [k, v] : where) {
      auto it = s.labels.find(k);
      ok = ok && it != s.labels.end() && it->second == v;
    }
    if (ok) sum += s.value;
  }
  return sum;
}

std::vector<MetricSample> fetch_metrics(const std::string& url) {
  httplib::Client cli(url);
  cli.set_read_timeout(10, 0);
  auto res = cli.Get("/metrics");
  if (!res || res->status != 200) return {};
  return parse_metrics(res->body);
}

}  // namespace strata::tools
