#include "serve/bench_workload.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <unordered_set>

#include <nlohmann/json.hpp>

namespace strata {

namespace {

uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

int32_t token_at(uint64_t key, int64_t j, int32_t vocab) {
  const uint64_t span = static_cast<uint64_t>(std::max(1, vocab - kFirstToken));
  return kFirstToken + static_cast<int32_t>(mix64(key ^ mix64(static_cast<uint64_t>(j))) % span);
}

std::vector<int32_t> random_tokens(std::mt19937_64& rng, int64_t n, int32_t vocab) {
  std::vector<int32_t> out(n);
  std::uniform_int_distribution<int32_t> d(kFirstToken, std::max(kFirstToken, vocab - 1));
  for (auto& t : out) t = d(rng);
  return out;
}

int64_t scaled(int64_t n, double scale) {
  return std::max<int64_t>(1, std::llround(static_cast<double>(n) * scale));
}

bool fits(const WorkloadOptions& o, int64_t prompt, int64_t output) {
  return prompt + output <= o.max_context;
}

void assign_poisson(std::vector<BenchRequest>& reqs, double rate, uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0xA5A5A5A5ull);
  double t = 0;
  for (auto& r : reqs) {
    if (rate > 0) {
      std::exponential_distribution<double> d(rate);
      t += d(rng);
    }
    r.arrival_s = rate > 0 ? t : 0.0;
  }
}

// "2023-11-16 18:17:03.9799600" -> seconds since the start of the month.
bool parse_azure_time(const std::string& s, double* out) {
  int y, mo, d, h, mi;
  double sec;
  if (std::sscanf(s.c_str(), "%d-%d-%d %d:%d:%lf", &y, &mo, &d, &h, &mi, &sec) != 6) return false;
  *out = ((static_cast<double>(d) * 24 + h) * 60 + mi) * 60 + sec;
  return true;
}

}  // namespace

StatusOr<Workload> load_mooncake_trace(const std::string& path, const WorkloadOptions& o) {
  std::ifstream in(path);
  if (!in) return not_found("cannot open Mooncake trace {}", path);
  if (o.block_tokens < 1) return invalid_argument("block_tokens must be >= 1");
  Workload w;
  w.name = "mooncake";
  std::unordered_set<uint64_t> seen_chains;
  int64_t hit_blocks = 0;
  double t0 = -1;
  std::string line;
  int64_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    if (o.num_requests >= 0 && static_cast<int64_t>(w.requests.size()) >= o.num_requests) break;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      return data_loss("{}:{}: {}", path, lineno, e.what());
    }
    if (!j.contains("timestamp") || !j.contains("output_length") || !j.contains("hash_ids") ||
        !j["hash_ids"].is_array()) {
      return data_loss("{}:{}: missing timestamp/output_length/hash_ids", path, lineno);
    }
    const double ts_ms = j["timestamp"].get<double>();
    const auto hashes = j["hash_ids"].get<std::vector<int64_t>>();
    const int64_t out_len = scaled(j["output_length"].get<int64_t>(), o.length_scale);
    const int64_t prompt_len = static_cast<int64_t>(hashes.size()) * o.block_tokens;
    if (hashes.empty() || !fits(o, prompt_len, out_len)) {
      ++w.skipped_too_long;
      continue;
    }
    if (t0 < 0) t0 = ts_ms;
    BenchRequest r;
    r.arrival_s = (ts_ms - t0) / 1000.0 * o.time_scale;
    r.output_tokens = out_len;
    r.prompt.reserve(prompt_len);
    uint64_t chain = 0x6A09E667F3BCC909ull;
    std::vector<uint64_t> chains;
    for (int64_t h : hashes) {
      const uint64_t key = mix64(o.seed ^ mix64(static_cast<uint64_t>(h) + 0x1234567ull));
      for (int64_t k = 0; k < o.block_tokens; ++k) r.prompt.push_back(token_at(key, k, o.vocab));
      chain = mix64(chain ^ mix64(static_cast<uint64_t>(h)));
      chains.push_back(chain);
      if (seen_chains.count(chain)) ++hit_blocks;
      ++w.oracle_blocks;
    }
    for (uint64_t c : chains) seen_chains.insert(c);
    w.requests.push_back(std::move(r));
  }
  w.oracle_prefix_hit_rate =
      w.oracle_blocks > 0 ? static_cast<double>(hit_blocks) / static_cast<double>(w.oracle_blocks) : 0.0;
  return w;
}

StatusOr<Workload> load_azure_trace(const std::string& path, const WorkloadOptions& o) {
  std::ifstream in(path);
  if (!in) return not_found("cannot open Azure trace {}", path);
  Workload w;
  w.name = "azure";
  std::string line;
  int64_t lineno = 0;
  double t0 = -1;
  while (std::getline(in, line)) {
    ++lineno;
    if (lineno == 1 && line.rfind("TIMESTAMP", 0) == 0) continue;
    if (line.empty() || line == "\r") continue;
    if (o.num_requests >= 0 && static_cast<int64_t>(w.requests.size()) >= o.num_requests) break;
    const size_t c1 = line.find(',');
    const size_t c2 = c1 == std::string::npos ? c1 : line.find(',', c1 + 1);
    if (c2 == std::string::npos) return data_loss("{}:{}: expected 3 columns", path, lineno);
    double ts = 0;
    if (!parse_azure_time(line.substr(0, c1), &ts)) {
      return data_loss("{}:{}: bad timestamp", path, lineno);
    }
    int64_t ctx = 0, gen = 0;
    try {
      ctx = std::stoll(line.substr(c1 + 1, c2 - c1 - 1));
      gen = std::stoll(line.substr(c2 + 1));
    } catch (const std::exception&) {
      return data_loss("{}:{}: bad token counts", path, lineno);
    }
    const int64_t in_len = scaled(ctx, o.length_scale);
    const int64_t out_len = scaled(gen, o.length_scale);
    if (!fits(o, in_len, out_len)) {
      ++w.skipped_too_long;
      continue;
    }
    if (t0 < 0) t0 = ts;
    std::mt19937_64 rng(mix64(o.seed ^ static_cast<uint64_t>(lineno)));
    BenchRequest r;
    r.arrival_s = (ts - t0) * o.time_scale;
    r.prompt = random_tokens(rng, in_len, o.vocab);
    r.output_tokens = out_len;
    w.requests.push_back(std::move(r));
  }
  return w;
}

Workload make_random_workload(const WorkloadOptions& o, const RandomLoadOptions& ro) {
  Workload w;
  w.name = "random";
  std::mt19937_64 rng(mix64(o.seed ^ 0x5EED));
  auto pick = [&](int64_t len) {
    const int64_t lo = std::max<int64_t>(1, std::llround(len * (1.0 - ro.range_ratio)));
    const int64_t hi = std::max<int64_t>(lo, std::llround(len * (1.0 + ro.range_ratio)));
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int64_t n = o.num_requests < 0 ? 100 : o.num_requests;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t in_len = pick(ro.input_len), out_len = pick(ro.output_len);
    if (!fits(o, in_len, out_len)) {
      ++w.skipped_too_long;
      continue;
    }
    BenchRequest r;
    r.prompt = random_tokens(rng, in_len, o.vocab);
    r.output_tokens = out_len;
    w.requests.push_back(std::move(r));
  }
  assign_poisson(w.requests, ro.request_rate, o.seed);
  return w;
}

Workload make_shared_prefix_workload(const WorkloadOptions& o, const SharedPrefixOptions& so) {
  Workload w;
  w.name = "shared-prefix";
  std::mt19937_64 rng(mix64(o.seed ^ 0x5BA4ED));
  std::vector<std::vector<int32_t>> prefixes;
  for (int64_t g = 0; g < std::max<int64_t>(1, so.num_groups); ++g) {
    prefixes.push_back(random_tokens(rng, so.prefix_len, o.vocab));
  }
  const int64_t n = o.num_requests < 0 ? 100 : o.num_requests;
  for (int64_t i = 0; i < n; ++i) {
    BenchRequest r;
    r.prompt = prefixes[i % prefixes.size()];
    auto suffix = random_tokens(rng, so.suffix_len, o.vocab);
    r.prompt.insert(r.prompt.end(), suffix.begin(), suffix.end());
    r.output_tokens = std::max<int64_t>(1, so.output_len);
    if (!fits(o, static_cast<int64_t>(r.prompt.size()), r.output_tokens)) {
      ++w.skipped_too_long;
      continue;
    }
    w.requests.push_back(std::move(r));
  }
  assign_poisson(w.requests, so.request_rate, o.seed);
  return w;
}

}  // namespace strata
