// `strata validate matrix` end to end (issue 27): the ladder on the tiny V4.1 model writes
// matrix.json that validates against docs/validation-matrix.schema.json (checked with
// Strata's own JSON Schema checker, sched/json_schema.h, fed the compact text byte by byte),
// every built step passes with its fields filled from what it ran, report.html carries the
// plots; a deliberately broken restore (--debug-perturb-restore) fails the run naming the
// step and the state kind; on a Llama model the DCP / EP steps are reported as not built /
// not applicable, never skipped silently.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "sched/json_schema.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string src(const std::string& rel) { return std::string(STRATA_SOURCE_DIR) + "/" + rel; }

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in, nullptr, false);
}

// Whether `doc` is valid under the documented schema (the compact dump, byte by byte).
bool valid_under_schema(const json& doc, std::string* where) {
  const json schema = read_json(src("docs/validation-matrix.schema.json"));
  auto compiled = JsonSchema::compile(schema);
  if (!compiled.ok()) {
    *where = "schema does not compile: " + compiled.status().message();
    return false;
  }
  JsonSchemaState st(*compiled);
  const std::string text = doc.dump();
  for (size_t i = 0; i < text.size(); ++i)
    if (!st.feed(text[i])) {
      *where = "rejected at byte " + std::to_string(i) + ": ..." +
               text.substr(i > 120 ? i - 120 : 0, std::min<size_t>(i, 120)) + "[" + text[i] + "]";
      return false;
    }
  if (!st.complete()) {
    *where = "incomplete";
    return false;
  }
  return true;
}

fs::path out_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("strata-vm-" + std::to_string(getpid()) + "-" + name);
  fs::remove_all(d);
  return d;
}

const json& step(const json& doc, int id) {
  for (const json& r : doc["steps"])
    if (r["step"] == id) return r;
  static const json none;
  return none;
}

bool have(const char* p) { return ::access(p, X_OK) == 0; }

TEST(ValidateMatrixTest, LadderOnTinyV41) {
  const fs::path out = out_dir("v41");
  std::string log;
  const int rc = tools::run_strata(
      "validate matrix --model " + src("models/deepseek-v41-tiny") + " --out " + out.string() +
          " --load-requests 8",  // the golden set is found by its config.json
      &log, true, 1500);
  ASSERT_EQ(rc, 0) << log;
  const json doc = read_json(out / "matrix.json");
  ASSERT_FALSE(doc.is_discarded()) << log;
  std::string where;
  EXPECT_TRUE(valid_under_schema(doc, &where)) << where;
  ASSERT_EQ(doc["steps"].size(), 10u);
  const bool mpi = have("/usr/bin/mpirun"), redis = have("/usr/bin/redis-server");
  for (const json& r : doc["steps"]) {
    const int id = r["step"].get<int>();
    const bool needs_mpi = id == 5 || id == 7 || id == 10, needs_redis = id == 6;
    if ((needs_mpi && !mpi) || (needs_redis && !redis)) {
      EXPECT_EQ(r["status"], "unavailable") << r.dump();
      continue;
    }
    ASSERT_EQ(r["status"], "pass") << "step " << id << ": " << r["reason"].dump() << "\n" << log;
    const json& acc = r["accuracy"];
    EXPECT_EQ(acc["compared_to"], id == 1 ? json(nullptr) : json(id - 1 - (id == 6 && !mpi ? 1 : 0)))
        << r.dump();
    EXPECT_TRUE(acc["tokens_equal"].get<bool>());
    EXPECT_EQ(acc["max_abs_logprob_diff"].get<double>(), 0.0);
    // Every step but the reference, DCP and PP (rows sharded) compared the state row by row.
    if (id != 1 && id != 5 && id != 10) {
      EXPECT_GT(acc["states_compared"].get<int64_t>(), 0) << r.dump();
      EXPECT_GT(acc["state"]["rows_compared"].get<int64_t>(), 0);
      EXPECT_TRUE(acc["state"]["equal"].get<bool>());
    }
    EXPECT_EQ(r["latency"]["failed"], 0);
    EXPECT_GT(r["latency"]["completed"].get<int64_t>(), 0);
    EXPECT_GT(r["latency"]["ttft_ms"]["p99"].get<double>(), 0);
    EXPECT_FALSE(r["occupancy"]["peak"].empty());
    double peak = 0;
    for (const json& p : r["occupancy"]["peak"]) peak = std::max(peak, p["peak_used_bytes"].get<double>());
    EXPECT_GT(peak, 0) << "the sampler saw no state in use during the load";
  }
  // Golden result in the baseline: the repo's v41-tiny set, found by its config.json.
  EXPECT_EQ(step(doc, 1)["accuracy"]["golden"]["result"], "pass");
  EXPECT_NE(step(doc, 1)["accuracy"]["golden"]["cases"].get<std::string>().find("v41-tiny"), std::string::npos);
  EXPECT_NE(step(doc, 1)["accuracy"]["golden"]["summary"].get<std::string>().find("golden:"), std::string::npos);
  EXPECT_TRUE(step(doc, 2)["accuracy"]["golden"].is_null());
  // Prefix hits where the step restores state, none where caching is off.
  EXPECT_EQ(step(doc, 1)["prefix_cache"]["hits_tokens"].get<double>(), 0);
  EXPECT_GT(step(doc, 3)["prefix_cache"]["hit_rate"].get<double>(), 0);
  EXPECT_GT(step(doc, 4)["transfer"]["handoffs"].get<double>(), 0);
  EXPECT_GT(step(doc, 4)["transfer"]["imported_tokens"].get<double>(), 0);
  {  // bytes per kind per handoff add up to the bytes received; V4.1 moves these kinds
    const json& t = step(doc, 4)["transfer"];
    EXPECT_GT(t["bytes"].get<double>(), 0);
    EXPECT_GT(t["mean_latency_ms"].get<double>(), 0);
    double sum = 0;
    for (const auto& [k, v] : t["per_kind_bytes_per_handoff"].items()) sum += v.get<double>();
    EXPECT_NEAR(sum * t["fetches"].get<double>(), t["bytes"].get<double>(), 1.0) << t.dump();
    for (const char* k : {"window_kv", "compressed_kv", "index_keys"})
      EXPECT_GT(t["per_kind_bytes_per_handoff"].value(k, 0.0), 0) << k << " " << t.dump();
    EXPECT_TRUE(step(doc, 3)["transfer"].is_null());
  }
  EXPECT_EQ(step(doc, 4)["parallel"]["pd"], "1P1D");
  EXPECT_EQ(step(doc, 8)["speculative"]["method"], "dspark");
  EXPECT_GT(step(doc, 8)["speculative"]["draft_tokens"].get<double>(), 0);
  if (redis) {
    bool pool_hit = false;
    for (const json& t : step(doc, 6)["prefix_cache"]["tiers"]) pool_hit |= t["hits"].get<double>() > 0;
    EXPECT_TRUE(pool_hit) << step(doc, 6)["prefix_cache"].dump();
  }
  if (mpi) {
    EXPECT_EQ(step(doc, 5)["parallel"]["dcp"], 2);
    EXPECT_GT(step(doc, 5)["collectives"]["dcp_exchange_s"].get<double>(), 0);
    EXPECT_EQ(step(doc, 7)["parallel"]["ep"], 2);
    EXPECT_GT(step(doc, 7)["collectives"]["moe_collective_s"].get<double>(), 0);
    EXPECT_EQ(step(doc, 10)["parallel"]["pp"], 2);
    EXPECT_GT(step(doc, 10)["collectives"]["pp_boundary_s"].get<double>(), 0);
    EXPECT_EQ(step(doc, 10)["collectives"]["moe_collective_s"].get<double>(), 0);
  }
  // The report: one row per step and the plots.
  std::ifstream h(out / "report.html");
  std::stringstream html;
  html << h.rdbuf();
  for (int id = 1; id <= 9; ++id)
    EXPECT_NE(html.str().find("data-step=\"" + std::to_string(id) + "\""), std::string::npos) << id;
  size_t svgs = 0;
  for (size_t p = 0; (p = html.str().find("<svg", p)) != std::string::npos; ++p) ++svgs;
  EXPECT_GE(svgs, 4u);
  EXPECT_NE(html.str().find("polyline"), std::string::npos);
  // Support-matrix rows of the steps that ran.
  std::ifstream sm(out / "support-matrix.jsonl");
  int rows = 0;
  for (std::string l; std::getline(sm, l);) {
    const json j = json::parse(l);
    EXPECT_EQ(j["result"].get<std::string>().rfind("pass", 0), 0u) << l;
    EXPECT_EQ(j["quantization"], "checkpoint formats (FP8 weights, FP4 experts)");
    ++rows;
  }
  EXPECT_EQ(rows, 10 - (mpi ? 0 : 3) - (redis ? 0 : 1));
  fs::remove_all(out);
}

// A restore that changes one byte of a kind: the prefix-cache step fails, and the record and
// the exit status say which step and which kind.
TEST(ValidateMatrixTest, BrokenRestoreNamesStepAndKind) {
  for (const std::string kind : {"compressed_kv", "index_keys"}) {
    const fs::path out = out_dir("broken-" + kind);
    std::string log;
    const int rc = tools::run_strata("validate matrix --model " + src("models/deepseek-v41-tiny") +
                                         " --steps 1-3 --load-requests 2 --out " + out.string() +
                                         " --debug-perturb-restore " + kind,
                                     &log, true, 900);
    EXPECT_EQ(rc, 1) << log;
    EXPECT_NE(log.find("FAILED"), std::string::npos) << log;
    const json doc = read_json(out / "matrix.json");
    ASSERT_FALSE(doc.is_discarded()) << log;
    std::string where;
    EXPECT_TRUE(valid_under_schema(doc, &where)) << where;
    EXPECT_EQ(step(doc, 1)["status"], "pass");
    EXPECT_EQ(step(doc, 2)["status"], "pass");
    const json& r = step(doc, 3);
    EXPECT_EQ(r["status"], "fail");
    const std::string reason = r["reason"].get<std::string>();
    EXPECT_NE(reason.find("step 3 (prefix_cache)"), std::string::npos) << reason;
    EXPECT_NE(reason.find("state kind " + kind + " differs first"), std::string::npos) << reason;
    EXPECT_EQ(r["accuracy"]["state"]["first_divergence"]["kinds"], json::array({kind})) << r["accuracy"].dump();
    EXPECT_EQ(r["accuracy"]["state"]["first_divergence"]["position"], 0);
    fs::remove_all(out);
  }
}

// The checker behind the schema test can fail: a record without one field, and one with a
// status outside the enum, are rejected.
TEST(ValidateMatrixTest, SchemaRejectsIncompleteRecords) {
  const fs::path out = out_dir("llama");
  std::string log;
  // stories260K (Llama): DCP and PP run, EP has no experts to split.
  const int rc = tools::run_strata("validate matrix --model " + src("models/stories260K") +
                                       " --steps 1,5,7,10 --load-requests 2 --out " + out.string(),
                                   &log, true, 600);
  ASSERT_EQ(rc, 0) << log;
  json doc = read_json(out / "matrix.json");
  std::string where;
  ASSERT_TRUE(valid_under_schema(doc, &where)) << where;
  EXPECT_EQ(step(doc, 1)["status"], "pass");
  if (have("/usr/bin/mpirun")) {
    EXPECT_EQ(step(doc, 5)["status"], "pass") << step(doc, 5).dump();
    EXPECT_EQ(step(doc, 7)["status"], "not_applicable");
    EXPECT_EQ(step(doc, 10)["status"], "pass") << step(doc, 10).dump();
  }
  EXPECT_TRUE(step(doc, 7)["latency"].is_null());
  json missing = doc;
  missing["steps"][0].erase("occupancy");
  EXPECT_FALSE(valid_under_schema(missing, &where));
  json bad_status = doc;
  bad_status["steps"][0]["status"] = "skipped";
  EXPECT_FALSE(valid_under_schema(bad_status, &where));
  json extra = doc;
  extra["steps"][0]["undocumented"] = 1;
  EXPECT_FALSE(valid_under_schema(extra, &where));
  fs::remove_all(out);
}

TEST(ValidateMatrixTest, UsageErrors) {
  std::string out;
  const std::string none = out_dir("none").string();
  EXPECT_EQ(tools::run_strata("validate matrix --model " + src("models/stories260K") + " --steps 0-12", &out, true), 2) << out;
  EXPECT_NE(out.find("--steps"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(tools::run_strata("validate matrix --model /nonexistent --out " + none, &out, true), 1) << out;
  EXPECT_NE(out.find("/nonexistent"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(none));  // nothing written for a model that does not load
  out.clear();
  EXPECT_EQ(tools::run_strata("validate matrix --model " + src("models/deepseek-v41-tiny") +
                                  " --debug-perturb-restore nosuchkind --out " + none, &out, true), 2) << out;
  EXPECT_NE(out.find("unknown state kind 'nosuchkind'"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(tools::run_strata("validate matrix --model " + src("models/stories260K") +
                                  " --debug-perturb-restore plain_kv --out " + none, &out, true), 2) << out;
  EXPECT_NE(out.find("built for the DeepSeek"), std::string::npos) << out;
  // --out naming a file: a clear error, the file untouched.
  const fs::path file = out_dir("file");
  std::ofstream(file) << "keep";
  out.clear();
  EXPECT_EQ(tools::run_strata("validate matrix --model " + src("models/stories260K") + " --out " + file.string(), &out, true), 2) << out;
  EXPECT_NE(out.find("cannot write into"), std::string::npos) << out;
  std::ifstream in(file);
  std::string kept;
  in >> kept;
  EXPECT_EQ(kept, "keep");
  fs::remove(file);
}

}  // namespace
}  // namespace strata
