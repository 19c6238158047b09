// Multi-rank layouts through real `mpirun ... strata` processes (issue 25): `validate golden`
// on both golden sets with expert parallelism over 2 and 3 ranks gives the same report and
// the same logits digest (every logits row bit for bit) as one rank, twice in a row; several
// ranks without a layout are refused at startup. Every run appends one support-matrix record
// (docs/support-matrix.md is generated from them by `strata support-matrix`).
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "cli_runner.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::string src_dir() {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  return e ? e : STRATA_SOURCE_DIR;
}

bool have_mpirun() { return ::access("/usr/bin/mpirun", X_OK) == 0; }

// Runs a shell command; stdout (+ stderr) into *out; the exit status.
int sh(const std::string& cmd, std::string* out) {
  out->clear();
  return tools::run_command(cmd + " 2>&1", out);
}

std::string line_starting(const std::string& text, const std::string& prefix) {
  const size_t at = text.find("\n" + prefix);
  const size_t start = text.rfind(prefix, 0) == 0 ? 0 : (at == std::string::npos ? at : at + 1);
  if (start == std::string::npos) return "";
  return text.substr(start, text.find('\n', start) - start);
}

void record(const std::string& model, int ranks, int ep, const std::string& features,
            const std::string& result) {
  const char* e = std::getenv("STRATA_SUPPORT_RECORDS");
  const std::string path =
      e ? e : (fs::path(tools::strata_binary()).parent_path().parent_path().parent_path() /
               "support-matrix-records.jsonl").string();
  const std::time_t t = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&t));
  std::ofstream(path, std::ios::app)
      << fmt::format("{{\"model\":\"{}\",\"quantization\":\"{}\",\"ranks\":{},\"dcp\":1,"
                     "\"ep\":{},\"pp\":1,\"backend\":\"Open MPI (mpirun, one node)\","
                     "\"features\":\"{}\",\"result\":\"{}\",\"date\":\"{}\"}}\n",
                     model, "checkpoint formats (FP8 weights, FP4 experts)", ranks, ep, features, result, date);
}

void check_set(const std::string& model, const std::string& golden) {
  const std::string args = fmt::format(
      "validate golden --model {}/models/{} --cases {}/testdata/golden/{}/cases.safetensors "
      "--threads 1",
      src_dir(), model, src_dir(), golden);
  std::string one;
  ASSERT_EQ(tools::run_strata(args, &one), 0) << one;
  const std::string digest = line_starting(one, "logits digest: ");
  const std::string last = line_starting(one, "golden: ");
  ASSERT_FALSE(digest.empty()) << one;
  for (int np : {2, 3}) {
    for (int run = 0; run < 2; ++run) {
      std::string out;
      const int rc = sh(fmt::format("timeout -s KILL 300 mpirun --oversubscribe --allow-run-as-root "
                                    "-np {} {} {} --enable-expert-parallel",
                                    np, tools::strata_binary(), args),
                        &out);
      EXPECT_EQ(rc, 0) << out;
      EXPECT_EQ(line_starting(out, "logits digest: "), digest) << model << " np " << np << "\n" << out;
      EXPECT_EQ(line_starting(out, "golden: "), last) << model << " np " << np;
      EXPECT_NE(out.find(fmt::format("expert parallel: {} ranks", np)), std::string::npos) << out;
      const bool same = rc == 0 && line_starting(out, "logits digest: ") == digest;
      if (run == 0)
        record(model, np, np, "validate golden (canonical), EP over all ranks, attention replicated",
               same ? "pass: logits bit-identical to 1 rank" : "FAIL");
    }
  }
}

TEST(MpiLayouts, ExpertParallelGoldenV41) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed (scripts/setup.sh installs openmpi-bin)";
  check_set("deepseek-v41-tiny", "v41-tiny");
}

TEST(MpiLayouts, ExpertParallelGoldenV4) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed (scripts/setup.sh installs openmpi-bin)";
  check_set("deepseek-v4flash-tiny", "v4flash-tiny");
}

TEST(MpiLayouts, RanksWithoutALayoutAreRefused) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  std::string out;
  const int rc = sh(fmt::format("timeout -s KILL 120 mpirun --oversubscribe --allow-run-as-root -np 2 "
                                "{} validate golden --model {}/models/deepseek-v41-tiny --cases "
                                "{}/testdata/golden/v41-tiny/cases.safetensors",
                                tools::strata_binary(), src_dir(), src_dir()),
                    &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("2 ranks but no parallel layout"), std::string::npos) << out;
}

// The generator keeps the latest record of a configuration and refuses a line that is not one.
TEST(SupportMatrix, LatestRecordPerConfiguration) {
  const std::string path = fmt::format("/tmp/strata-sm-{}.jsonl", ::getpid());
  const std::string rec =
      R"({"model":"m","quantization":"q","ranks":2,"dcp":1,"ep":2,"pp":1,"backend":"b",)"
      R"("features":"f","result":"RESULT","date":"DATE"})";
  auto with = [&](const std::string& r, const std::string& d) {
    std::string s = rec;
    s.replace(s.find("RESULT"), 6, r);
    s.replace(s.find("DATE"), 4, d);
    return s;
  };
  std::ofstream(path) << with("pass-new", "2026-12-06") << "\n"
                      << with("FAIL-old", "2026-12-01") << "\n";
  std::string out;
  ASSERT_EQ(tools::run_strata("support-matrix " + path, &out), 0) << out;
  EXPECT_NE(out.find("| m | q | 2 | 1 | 2 | 1 | b | f | pass-new | 2026-12-06 |"), std::string::npos)
      << out;
  EXPECT_EQ(out.find("FAIL-old"), std::string::npos);
  std::ofstream(path, std::ios::app) << "{\"model\": 1}\n";
  EXPECT_EQ(tools::run_strata("support-matrix " + path, &out, true), 1);
  fs::remove(path);
}

}  // namespace
}  // namespace strata
