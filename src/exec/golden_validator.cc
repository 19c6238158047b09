// Golden parity validation (see golden_validator.h for the rules and their source).
#include "exec/golden_validator.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/dtype.h"
#include "model/safetensors.h"

namespace strata {
namespace {

StatusOr<std::vector<int64_t>> read_ints(const TensorView& t) {
  const int64_t n = t.numel();
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (t.dtype) {
      case DType::kI64: {
        int64_t v;
        std::memcpy(&v, t.data + i * 8, 8);
        out[static_cast<size_t>(i)] = v;
        break;
      }
      case DType::kI32: {
        int32_t v;
        std::memcpy(&v, t.data + i * 4, 4);
        out[static_cast<size_t>(i)] = v;
        break;
      }
      case DType::kI16: {
        int16_t v;
        std::memcpy(&v, t.data + i * 2, 2);
        out[static_cast<size_t>(i)] = v;
        break;
      }
      default:
        return invalid_argument("{}: tensor {} has dtype {}, expected an integer type", t.file,
                                t.name, dtype_name(t.dtype));
    }
  }
  return out;
}

StatusOr<std::vector<float>> read_floats(const TensorView& t) {
  const int64_t n = t.numel();
  std::vector<float> out(static_cast<size_t>(n));
  if (t.dtype == DType::kF32) {
    std::memcpy(out.data(), t.data, static_cast<size_t>(n) * 4);
  } else if (t.dtype == DType::kBF16) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, t.data + i * 2, 2);
      out[static_cast<size_t>(i)] = bf16_to_f32(h);
    }
  } else {
    return invalid_argument("{}: tensor {} has dtype {}, expected F32 or BF16", t.file, t.name,
                            dtype_name(t.dtype));
  }
  return out;
}

// [a][b][c] from a flat tensor of shape [a, b, c].
std::vector<std::vector<std::vector<int32_t>>> to3(const std::vector<int64_t>& flat, int64_t a,
                                                   int64_t b, int64_t c) {
  std::vector<std::vector<std::vector<int32_t>>> r(
      static_cast<size_t>(a),
      std::vector<std::vector<int32_t>>(static_cast<size_t>(b),
                                        std::vector<int32_t>(static_cast<size_t>(c))));
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j)
      for (int64_t k = 0; k < c; ++k)
        r[i][j][k] = static_cast<int32_t>(flat[static_cast<size_t>((i * b + j) * c + k)]);
  return r;
}

std::vector<int32_t> as_set(const std::vector<int32_t>& v) {
  std::vector<int32_t> s;
  for (int32_t x : v)
    if (x >= 0) s.push_back(x);
  std::sort(s.begin(), s.end());
  s.erase(std::unique(s.begin(), s.end()), s.end());
  return s;
}

std::string set_str(const std::vector<int32_t>& s) { return fmt::format("{{{}}}", fmt::join(s, ",")); }

std::mutex g_factory_mu;
GoldenTargetFactory& factory_slot() {
  static GoldenTargetFactory f;
  return f;
}

}  // namespace

std::string RouteDivergence::describe() const {
  const std::string step_s = step < 0 ? std::string("prefill") : fmt::format("decode{}", step);
  const std::string where = which == "moe" ? fmt::format("moe L{}", layer)
                                           : fmt::format("index#{}", layer);
  return fmt::format("{} {} token {}: golden {} got {}", step_s, where, token, set_str(golden),
                     set_str(got));
}

std::string GoldenCaseResult::summary() const {
  const std::string diff = rows_strict > 0 ? fmt::format("{:.6g}", max_abs_diff)
                                           : "n/a (no logits row was compared strictly)";
  std::string s = fmt::format(
      "{} L={}{}: {} rows {}/{} strict ({} bit-exact), max_abs_diff={}, argmax {}/{}", name,
      prompt_len, fragile ? " (fragile)" : "", passed ? "PASS" : "FAIL", rows_strict, rows_total,
      rows_exact, diff, argmax_agree, argmax_checked);
  if (divergence) {
    s += ", route divergence at " + divergence->describe();
    s += fragile                    ? " (allowed: the case is fragile; rows from the divergence on "
                                      "are checked finite only)"
         : divergence_allowed ? " (allowed in the canonical form: rows from the divergence "
                                "on are checked finite only)"
                              : " (not allowed: the case is stable)";
  }
  if (dspark_steps > 0)
    s += fmt::format(", dspark {} steps, {} draft ids differ, max_abs_diff={:.6g}", dspark_steps,
                     dspark_ids_differ, dspark_max_abs_diff);
  if (!error.empty()) s += ", " + error;
  return s;
}

std::string GoldenReport::last_line() const {
  // With no logits row strictly compared (e.g. every case failed before its first row) a
  // max_abs_diff of 0 would read like a match: say n/a instead.
  int64_t strict = 0;
  for (const GoldenCaseResult& c : cases) strict += c.rows_strict;
  const std::string diff = strict > 0 || cases.empty() ? fmt::format("{:.6g}", max_abs_diff) : "n/a";
  return fmt::format("golden: {} passed, {} failed, max_abs_diff={}, route_divergent={}", passed,
                     failed, diff, route_divergent);
}

std::string GoldenReport::digest_line() const {
  uint64_t h = 0;
  for (const GoldenCaseResult& c : cases) h = XXH3_64bits_withSeed(&c.logits_digest, 8, h);
  return fmt::format("logits digest: {:016x} ({} cases)", h, cases.size());
}

std::string GoldenReport::dspark_line() const {
  if (dspark_steps == 0) return "";
  return fmt::format("dspark: {} cases, {} steps, {} draft ids differ", dspark_cases, dspark_steps,
                     dspark_ids_differ);
}

StatusOr<std::vector<GoldenCase>> load_golden_cases(const std::string& cases_path,
                                                    const std::string& stats_path) {
  auto file = SafetensorsFile::open(cases_path);
  if (!file.ok()) return file.status();
  const auto& tensors = (*file)->tensors();
  auto get = [&](const std::string& name) -> StatusOr<const TensorView*> {
    auto it = tensors.find(name);
    if (it == tensors.end()) return not_found("{}: missing tensor {}", cases_path, name);
    return &it->second;
  };
  std::map<std::string, bool> fragile;
  if (!stats_path.empty()) {
    std::ifstream in(stats_path);
    if (!in) return not_found("cannot open stats file {}", stats_path);
    try {
      const nlohmann::json j = nlohmann::json::parse(in);
      if (!j.is_array()) return invalid_argument("{}: expected a JSON array", stats_path);
      for (const auto& e : j) {
        if (e.contains("case") && e["case"].is_string()) {
          fragile[e["case"].get<std::string>()] = e.value("fragile", false);
        }
      }
    } catch (const std::exception& e) {
      return invalid_argument("{}: {}", stats_path, e.what());
    }
  }
  std::vector<GoldenCase> cases;
  for (const auto& [name, view] : tensors) {
    const std::string suffix = ".prompt";
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string cn = name.substr(0, name.size() - suffix.size());
    GoldenCase c;
    c.name = cn;
    auto prompt = read_ints(view);
    if (!prompt.ok()) return prompt.status();
    for (int64_t t : *prompt) c.prompt.push_back(static_cast<int32_t>(t));
    const int64_t L = static_cast<int64_t>(c.prompt.size());

    auto pl = get(cn + ".prefill_logits");
    if (!pl.ok()) return pl.status();
    auto plv = read_floats(**pl);
    if (!plv.ok()) return plv.status();
    c.prefill_logits = std::move(*plv);
    const int64_t V = static_cast<int64_t>(c.prefill_logits.size());

    auto dt = get(cn + ".decode_tokens");
    if (!dt.ok()) return dt.status();
    auto dtv = read_ints(**dt);
    if (!dtv.ok()) return dtv.status();
    for (int64_t t : *dtv) c.decode_tokens.push_back(static_cast<int32_t>(t));
    const int64_t S = static_cast<int64_t>(c.decode_tokens.size());

    auto dl = get(cn + ".decode_logits");
    if (!dl.ok()) return dl.status();
    auto dlv = read_floats(**dl);
    if (!dlv.ok()) return dlv.status();
    if (static_cast<int64_t>(dlv->size()) != S * V) {
      return invalid_argument("{}: {}.decode_logits has {} values, expected {}x{}", cases_path, cn,
                              dlv->size(), S, V);
    }
    for (int64_t s = 0; s < S; ++s) {
      c.decode_logits.emplace_back(dlv->begin() + s * V, dlv->begin() + (s + 1) * V);
    }

    auto load_routes = [&](const std::string& key, bool decode,
                           std::vector<std::vector<std::vector<int32_t>>>* out_pre,
                           std::vector<std::vector<std::vector<int32_t>>>* out_dec) -> Status {
      auto t = get(cn + key);
      if (!t.ok()) return t.status();
      const auto& shape = (*t)->shape;
      auto v = read_ints(**t);
      if (!v.ok()) return v.status();
      if (!decode) {
        if (shape.size() != 3 || shape[1] != L) {
          return invalid_argument("{}: {}{} has an unexpected shape", cases_path, cn, key);
        }
        *out_pre = to3(*v, shape[0], shape[1], shape[2]);
      } else {
        if (shape.size() != 3 || shape[0] != S) {
          return invalid_argument("{}: {}{} has an unexpected shape", cases_path, cn, key);
        }
        *out_dec = to3(*v, shape[0], shape[1], shape[2]);
      }
      return ok_status();
    };
    std::vector<std::vector<std::vector<int32_t>>> unused;
    if (auto st = load_routes(".route_prefill_moe", false, &c.prefill_moe, &unused); !st.ok()) return st;
    if (auto st = load_routes(".route_decode_moe", true, &unused, &c.decode_moe); !st.ok()) return st;
    if (tensors.count(cn + ".route_prefill_index")) {
      if (auto st = load_routes(".route_prefill_index", false, &c.prefill_index, &unused); !st.ok())
        return st;
      if (auto st = load_routes(".route_decode_index", true, &unused, &c.decode_index); !st.ok())
        return st;
    }
    if (tensors.count(cn + ".dspark_draft_ids")) {
      auto t = get(cn + ".dspark_draft_ids");
      auto tl = get(cn + ".dspark_logits");
      auto tc = get(cn + ".dspark_confidence");
      if (!t.ok()) return t.status();
      if (!tl.ok()) return tl.status();
      if (!tc.ok()) return tc.status();
      const auto& shape = (*t)->shape;
      auto ids = read_ints(**t);
      auto lg = read_floats(**tl);
      auto cf = read_floats(**tc);
      if (!ids.ok()) return ids.status();
      if (!lg.ok()) return lg.status();
      if (!cf.ok()) return cf.status();
      if (shape.size() != 2 || shape[1] < 2 || shape[0] > S)
        return invalid_argument("{}: {}.dspark_draft_ids has an unexpected shape", cases_path, cn);
      const int64_t n = shape[0], blk = shape[1] - 1;
      if (static_cast<int64_t>(lg->size()) != n * blk * V ||
          static_cast<int64_t>(cf->size()) != n * blk)
        return invalid_argument("{}: {}.dspark_logits / dspark_confidence do not match "
                                "dspark_draft_ids [{}, {}]", cases_path, cn, n, blk + 1);
      for (int64_t i = 0; i < n; ++i) {
        c.dspark_ids.emplace_back();
        for (int64_t k = 0; k <= blk; ++k)
          c.dspark_ids.back().push_back(static_cast<int32_t>((*ids)[i * (blk + 1) + k]));
        c.dspark_logits.emplace_back(lg->begin() + i * blk * V, lg->begin() + (i + 1) * blk * V);
        c.dspark_confidence.emplace_back(cf->begin() + i * blk, cf->begin() + (i + 1) * blk);
      }
    }
    auto fit = fragile.find(cn);
    c.fragile = fit != fragile.end() && fit->second;
    cases.push_back(std::move(c));
  }
  if (cases.empty()) return not_found("{}: no caseNN.prompt tensors", cases_path);
  std::sort(cases.begin(), cases.end(),
            [](const GoldenCase& a, const GoldenCase& b) { return a.name < b.name; });
  return cases;
}

double compare_logits_row(std::span<const float> golden, std::span<const float> got,
                          double gap_tol, bool* argmax_checked, bool* argmax_ok) {
  double max_diff = 0.0;
  bool has_nan = false;
  const size_t n = std::min(golden.size(), got.size());
  for (size_t i = 0; i < n; ++i) {
    const double d = std::fabs(static_cast<double>(golden[i]) - static_cast<double>(got[i]));
    if (std::isnan(d)) has_nan = true;  // a NaN row can never pass
    else max_diff = std::max(max_diff, d);
  }
  if (golden.size() != got.size()) max_diff = INFINITY;
  // golden top1 / top2
  size_t g1 = 0;
  for (size_t i = 1; i < golden.size(); ++i)
    if (golden[i] > golden[g1]) g1 = i;
  float second = -INFINITY;
  for (size_t i = 0; i < golden.size(); ++i)
    if (i != g1 && golden[i] > second) second = golden[i];
  const double gap = static_cast<double>(golden[g1]) - static_cast<double>(second);
  *argmax_checked = gap > gap_tol;
  size_t a1 = 0;
  for (size_t i = 1; i < got.size(); ++i)
    if (got[i] > got[a1]) a1 = i;
  *argmax_ok = !got.empty() && a1 == g1;
  return has_nan ? NAN : max_diff;
}

std::optional<RouteDivergence> compare_routes(
    const std::vector<std::vector<std::vector<int32_t>>>& golden_moe,
    const std::vector<std::vector<std::vector<int32_t>>>& golden_index,
    const GoldenStepOutput& got, int step, const std::vector<int>& index_layer_ids) {
  // key = (layer, kind: 0 index / 1 moe, token)
  std::optional<RouteDivergence> best;
  std::tuple<int, int, int64_t> best_key;
  auto check = [&](const std::vector<std::vector<std::vector<int32_t>>>& g,
                   const std::vector<std::vector<std::vector<int32_t>>>& o, const char* which,
                   int kind) {
    for (size_t l = 0; l < g.size(); ++l) {
      const int layer_key = kind == 0 && l < index_layer_ids.size() ? index_layer_ids[l]
                                                                    : static_cast<int>(l);
      for (size_t t = 0; t < g[l].size(); ++t) {
        const std::vector<int32_t> gs = as_set(g[l][t]);
        std::vector<int32_t> os;  // a route the target did not report is the empty set
        if (l < o.size() && t < o[l].size()) os = as_set(o[l][t]);
        if (gs != os) {
          const auto key = std::make_tuple(layer_key, kind, static_cast<int64_t>(t));
          if (!best || key < best_key) {
            RouteDivergence d;
            d.step = step;
            d.layer = static_cast<int>(l);
            d.token = static_cast<int64_t>(t);
            d.which = which;
            d.golden = gs;
            d.got = os;
            best = d;
            best_key = key;
          }
          break;  // later tokens of this layer come after this one
        }
      }
    }
  };
  check(golden_index, got.index, "index", 0);
  check(golden_moe, got.moe, "moe", 1);
  return best;
}

GoldenCaseResult run_golden_case(GoldenTarget& target, const GoldenCase& c,
                                 const GoldenOptions& opt) {
  GoldenCaseResult r;
  r.name = c.name;
  r.fragile = c.fragile;
  r.divergence_allowed = c.fragile || opt.allow_stable_divergence;
  r.prompt_len = static_cast<int64_t>(c.prompt.size());
  r.rows_total = 1 + static_cast<int>(c.decode_tokens.size());
  std::vector<std::string> failures;
  auto fail = [&](std::string why) { failures.push_back(std::move(why)); };

  // Another model's cases (e.g. V4.1 cases on a V4 checkpoint): say so once, before any
  // route is compared (its routes would "diverge" for a reason that is not a near-tie).
  if (!c.prefill_logits.empty() &&
      static_cast<int64_t>(c.prefill_logits.size()) != target.vocab_size()) {
    r.error = fmt::format("the golden rows have {} logits but this model's vocabulary is {}: "
                          "these cases were made for another model",
                          c.prefill_logits.size(), target.vocab_size());
    return r;
  }
  if (Status st = target.reset(); !st.ok()) {
    r.error = "reset failed: " + st.to_string();
    return r;
  }
  const int64_t L = r.prompt_len;
  target.set_prompt_length(L);
  const std::vector<int> index_ids = target.index_layer_ids();
  const int64_t chunk = opt.chunk_size > 0 ? opt.chunk_size : std::max<int64_t>(L, 1);
  bool diverged = false;

  // --- prefill (possibly chunked): gather routes for all prompt tokens
  GoldenStepOutput merged;
  merged.moe.resize(c.prefill_moe.size());
  merged.index.resize(c.prefill_index.size());
  std::vector<float> last_logits;
  for (int64_t s = 0; s < L; s += chunk) {
    const int64_t n = std::min(chunk, L - s);
    auto out = target.forward(std::span<const int32_t>(c.prompt.data() + s, static_cast<size_t>(n)), s);
    if (!out.ok()) {
      r.error = fmt::format("prefill chunk at {} failed: {}", s, out.status().to_string());
      return r;
    }
    auto append = [&](std::vector<std::vector<std::vector<int32_t>>>* dst,
                      const std::vector<std::vector<std::vector<int32_t>>>& src) {
      if (dst->size() < src.size()) dst->resize(src.size());
      for (size_t l = 0; l < src.size(); ++l) {
        auto& d = (*dst)[l];
        // pad missing tokens so indices line up (missing -> compared as divergence)
        if (static_cast<int64_t>(d.size()) < s) d.resize(static_cast<size_t>(s));
        for (size_t t = 0; t < src[l].size(); ++t) d.push_back(src[l][t]);
      }
    };
    append(&merged.moe, out->moe);
    append(&merged.index, out->index);
    last_logits = std::move(out->logits);
  }
  if (auto d = compare_routes(c.prefill_moe, c.prefill_index, merged, -1, index_ids)) {
    diverged = true;
    r.divergence = *d;
  }
  auto check_row = [&](const std::vector<float>& golden, const std::vector<float>& got,
                       const std::string& label) {
    r.logits_digest = XXH3_64bits_withSeed(got.data(), got.size() * sizeof(float), r.logits_digest);
    if (got.size() != golden.size()) {
      fail(fmt::format("{}: {} logits, the golden row has {} (another model's cases?)", label,
                       got.size(), golden.size()));
      return;
    }
    int64_t bad = 0;
    for (float v : got)
      if (!std::isfinite(v)) ++bad;
    if (bad > 0) {
      fail(fmt::format("{}: {} of {} logits are not finite (NaN/inf)", label, bad, got.size()));
      return;
    }
    if (diverged) return;
    bool checked = false, ok = false;
    const double d = compare_logits_row(golden, got, opt.gap_tol, &checked, &ok);
    ++r.rows_strict;
    if (d == 0.0) ++r.rows_exact;
    r.max_abs_diff = std::max(r.max_abs_diff, d);
    if (!(d <= opt.logit_tol)) fail(fmt::format("{}: max|dlogit| {:.4g} > {}", label, d, opt.logit_tol));
    if (checked) {
      ++r.argmax_checked;
      if (ok) {
        ++r.argmax_agree;
      } else {
        fail(fmt::format("{}: argmax differs", label));
      }
    }
  };
  check_row(c.prefill_logits, last_logits, "prefill");

  // Draft after decode step i (see GoldenCaseResult::dspark_steps for the rule).
  auto check_draft = [&](size_t i) {
    const std::vector<int32_t>& gids = c.dspark_ids[i];
    const int64_t blk = static_cast<int64_t>(gids.size()) - 1;
    const int64_t V = static_cast<int64_t>(c.prefill_logits.size());
    const std::string label = fmt::format("dspark{}", i);
    auto d = target.draft(gids[0]);
    ++r.dspark_steps;
    if (!d.ok()) {
      fail(fmt::format("{}: {}", label, d.status().to_string()));
      return;
    }
    if (static_cast<int64_t>(d->ids.size()) != blk + 1 ||
        static_cast<int64_t>(d->logits.size()) != blk * V) {
      fail(fmt::format("{}: a block of {} drafts, the golden has {}", label,
                       static_cast<int64_t>(d->ids.size()) - 1, blk));
      return;
    }
    for (int64_t k = 1; k <= blk; ++k) r.dspark_ids_differ += d->ids[k] != gids[k];
    for (float v : d->logits)
      if (!std::isfinite(v)) return fail(label + ": non-finite draft logits");
    for (float v : d->confidence)
      if (!std::isfinite(v)) return fail(label + ": non-finite confidence");
    if (diverged) return;
    for (int64_t k = 0; k < blk; ++k) {
      std::span<const float> g(c.dspark_logits[i].data() + k * V, static_cast<size_t>(V));
      std::span<const float> o(d->logits.data() + k * V, static_cast<size_t>(V));
      bool checked = false, ok = false;
      const double dl = compare_logits_row(g, o, opt.gap_tol, &checked, &ok);
      r.dspark_max_abs_diff = std::max(r.dspark_max_abs_diff, dl);
      if (!(dl <= opt.logit_tol))
        fail(fmt::format("{} row {}: max|dlogit| {:.4g} > {}", label, k, dl, opt.logit_tol));
      if (d->ids[k + 1] == gids[k + 1]) continue;
      // Later rows' Markov bias comes from a different id: a sampling cascade.
      if (checked) fail(fmt::format("{} row {}: draft id {} where the golden has {}", label, k,
                                    d->ids[k + 1], gids[k + 1]));
      break;
    }
  };

  // --- teacher-forced decode
  for (size_t i = 0; i < c.decode_tokens.size(); ++i) {
    const int32_t tok = c.decode_tokens[i];
    auto out = target.forward(std::span<const int32_t>(&tok, 1), L + static_cast<int64_t>(i));
    if (!out.ok()) {
      fail(fmt::format("decode step {} failed: {}", i, out.status().to_string()));
      break;
    }
    if (!diverged) {
      std::vector<std::vector<std::vector<int32_t>>> gm, gi;
      if (i < c.decode_moe.size())
        for (const auto& layer : c.decode_moe[i]) gm.push_back({layer});
      if (i < c.decode_index.size())
        for (const auto& slot : c.decode_index[i]) gi.push_back({slot});
      if (auto d = compare_routes(gm, gi, *out, static_cast<int>(i), index_ids)) {
        diverged = true;
        r.divergence = *d;
      }
    }
    check_row(c.decode_logits[i], out->logits, fmt::format("decode{}", i));
    if (i < c.dspark_ids.size() && target.has_draft()) check_draft(i);
  }
  if (r.divergence && !r.divergence_allowed) fail("route divergence in a stable case");
  r.passed = failures.empty();
  for (size_t i = 0; i < failures.size(); ++i) r.error += (i ? "; " : "") + failures[i];
  return r;
}

GoldenReport run_golden(GoldenTarget& target, const std::vector<GoldenCase>& cases,
                        const GoldenOptions& opt,
                        const std::function<void(const GoldenCaseResult&)>& on_case) {
  GoldenReport rep;
  for (const auto& c : cases) {
    if (!opt.only_cases.empty() &&
        std::find(opt.only_cases.begin(), opt.only_cases.end(), c.name) == opt.only_cases.end())
      continue;
    GoldenCaseResult r = run_golden_case(target, c, opt);
    if (r.passed) {
      ++rep.passed;
    } else {
      ++rep.failed;
    }
    if (r.divergence) ++rep.route_divergent;
    if (r.dspark_steps > 0) ++rep.dspark_cases;
    rep.dspark_steps += r.dspark_steps;
    rep.dspark_ids_differ += r.dspark_ids_differ;
    rep.max_abs_diff = std::max(rep.max_abs_diff, r.max_abs_diff);
    if (on_case) on_case(r);
    rep.cases.push_back(std::move(r));
  }
  return rep;
}

void register_golden_target_factory(GoldenTargetFactory factory) {
  std::lock_guard<std::mutex> lock(g_factory_mu);
  factory_slot() = std::move(factory);
}

StatusOr<std::unique_ptr<GoldenTarget>> make_golden_target(const std::string& model_dir,
                                                           int threads, CallShape shape) {
  GoldenTargetFactory f;
  {
    std::lock_guard<std::mutex> lock(g_factory_mu);
    f = factory_slot();
  }
  if (!f) {
    return not_found("no golden target is registered for this build (the V4.1 forward pass "
                     "must call register_golden_target_factory)");
  }
  return f(model_dir, threads, shape);
}

}  // namespace strata
