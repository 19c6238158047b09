#include "disagg/contract.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "state/state_graph.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

std::string hex64(uint64_t h) { return fmt::format("{:016x}", h); }

// Feeds [off, off + n) of the file into the state.
bool hash_range(std::ifstream& f, int64_t off, int64_t n, XXH3_state_t* st) {
  std::vector<char> buf(1 << 20);
  f.clear();
  f.seekg(off);
  while (n > 0 && f) {
    const int64_t c = std::min<int64_t>(n, static_cast<int64_t>(buf.size()));
    f.read(buf.data(), c);
    const std::streamsize got = f.gcount();
    if (got <= 0) return false;
    XXH3_64bits_update(st, buf.data(), static_cast<size_t>(got));
    n -= got;
  }
  return n == 0;
}

StatusOr<std::string> hash_files(const std::vector<fs::path>& files, bool sample_large) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  for (const fs::path& p : files) {
    const std::string name = p.filename().string();
    const int64_t size = static_cast<int64_t>(fs::file_size(p));
    XXH3_64bits_update(st, name.data(), name.size());
    XXH3_64bits_update(st, &size, sizeof(size));
    std::ifstream f(p, std::ios::binary);
    constexpr int64_t kWhole = int64_t{256} << 20, kEdge = int64_t{16} << 20;
    bool ok = true;
    if (!sample_large || size <= kWhole) {
      ok = hash_range(f, 0, size, st);
    } else {
      ok = hash_range(f, 0, kEdge, st) && hash_range(f, size - kEdge, kEdge, st);
    }
    if (!ok) {
      XXH3_freeState(st);
      return data_loss("cannot read {}", p.string());
    }
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return hex64(h);
}

std::string state_formats(const StateGraph& g) {
  std::string s;
  for (const StateOwnerInfo& o : g.owners()) {
    const StateSpec& p = o.spec;
    s += fmt::format("{}@{}:{}:r{}:n{}:e{}:{}:b{}:rope{}:{}B:{};", state_kind_name(o.kind), o.layer,
                     granularity_name(p.granularity), p.ratio, p.rows_fixed, p.row_elems,
                     row_format_name(p.format), p.quant_block, p.rope_elems, p.row_bytes,
                     handoff_policy_name(p.handoff));
  }
  return s;
}

std::string owner_map(const StateGraph& g) {
  std::string s;
  for (const LayerStateAccess& l : g.layers()) {
    s += fmt::format("{}{}:w", stage_name(l.stage), l.layer);
    for (OwnerId o : l.writes) s += fmt::format(",{}", o);
    s += ":r";
    for (OwnerId o : l.reads) s += fmt::format(",{}", o);
    s += ";";
  }
  return s;
}

}  // namespace

const std::string* HandoffContract::find(const std::string& name) const {
  for (const auto& [k, v] : fields)
    if (k == name) return &v;
  return nullptr;
}

std::string HandoffContract::to_json() const {
  nlohmann::json f = nlohmann::json::array(), i = nlohmann::json::array();
  for (const auto& [k, v] : fields) f.push_back({k, v});
  for (const auto& [k, v] : info) i.push_back({k, v});
  return nlohmann::json{{"fields", f}, {"info", i}}.dump();
}

StatusOr<HandoffContract> HandoffContract::from_json(const std::string& s) {
  HandoffContract c;
  try {
    const nlohmann::json j = nlohmann::json::parse(s);
    for (const auto& p : j.at("fields")) c.fields.emplace_back(p.at(0), p.at(1));
    if (j.contains("info"))
      for (const auto& p : j.at("info")) c.info.emplace_back(p.at(0), p.at(1));
  } catch (const std::exception& e) {
    return data_loss("malformed handoff contract: {}", e.what());
  }
  return c;
}

StatusOr<HandoffContract> make_handoff_contract(const ModelRunner& runner,
                                                const std::string& model_dir,
                                                const std::vector<std::string>& overrides) {
  const StateGraph* g = runner.state_graph();
  if (g == nullptr)
    return failed_precondition("{} cannot hand off state", runner.info().architecture);
  HandoffContract c;
  auto& f = c.fields;
  f.emplace_back("protocol_version", kPdProtocolVersion);
  f.emplace_back("architecture", runner.info().architecture);
  const fs::path dir(model_dir);
  STRATA_ASSIGN_OR_RETURN(std::string cfg, hash_files({dir / "config.json"}, false));
  f.emplace_back("config_hash", cfg);
  std::vector<fs::path> weights, toks;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") weights.push_back(e.path());
  std::sort(weights.begin(), weights.end());
  STRATA_ASSIGN_OR_RETURN(std::string wh, hash_files(weights, true));
  f.emplace_back("weight_hash", wh);
  for (const char* n : {"tokenizer.json", "tokenizer.bin", "tokenizer.model", "tokenizer_config.json"})
    if (fs::exists(dir / n)) toks.push_back(dir / n);
  std::string th = "none";
  if (!toks.empty()) {
    STRATA_ASSIGN_OR_RETURN(th, hash_files(toks, false));
  }
  f.emplace_back("tokenizer_hash", th);
  f.emplace_back("numeric_form", "canonical");
  f.emplace_back("state_formats", state_formats(*g));
  std::string ratios;
  for (int r : g->growth_ratios()) ratios += fmt::format("{}{}", ratios.empty() ? "" : ",", r);
  f.emplace_back("compression_ratios", ratios);
  int64_t window = 0;
  for (const StateOwnerInfo& o : g->owners())
    if (o.kind == StateKind::kWindowKv) window = std::max<int64_t>(window, o.spec.rows_fixed);
  f.emplace_back("window", std::to_string(window));
  f.emplace_back("owner_map", owner_map(*g));
  f.emplace_back("speculative_config", "none");
  c.info.emplace_back("prefix_alignment", std::to_string(runner.prefix_alignment()));
  c.info.emplace_back("max_context", std::to_string(runner.info().max_context));
  for (const std::string& o : overrides) {
    const size_t eq = o.find('=');
    if (eq == std::string::npos)
      return invalid_argument("contract override '{}' is not FIELD=VALUE", o);
    const std::string k = o.substr(0, eq);
    auto it = std::find_if(f.begin(), f.end(), [&](const auto& p) { return p.first == k; });
    if (it == f.end()) return invalid_argument("contract override: unknown field '{}'", k);
    it->second = o.substr(eq + 1);
  }
  return c;
}

Status compare_handoff_contracts(const HandoffContract& prefill, const HandoffContract& decode) {
  auto shown = [](const std::string* v) -> std::string {
    if (v == nullptr) return "(missing)";
    if (v->size() <= 40) return "'" + *v + "'";
    return fmt::format("<{} chars, xxh3 {}>", v->size(), hex64(XXH3_64bits(v->data(), v->size())));
  };
  std::vector<std::string> names;
  for (const auto& [k, v] : prefill.fields) names.push_back(k);
  for (const auto& [k, v] : decode.fields)
    if (prefill.find(k) == nullptr) names.push_back(k);
  for (const std::string& k : names) {
    const std::string* a = prefill.find(k);
    const std::string* b = decode.find(k);
    if (a == nullptr || b == nullptr || *a != *b)
      return failed_precondition("handoff contract field '{}' differs: prefill {}, decode {}", k,
                                 shown(a), shown(b));
  }
  return ok_status();
}

}  // namespace strata
