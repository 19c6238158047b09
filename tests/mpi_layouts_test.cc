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
#include "mpi_test_util.h"
#include "pd_process.h"
#include "runner_fixtures.h"
#include "serve/test_http_client.h"

#include <nlohmann/json.hpp>
#include <thread>

namespace strata {
namespace {

using namespace mpitest;  // NOLINT: test helpers
namespace fs = std::filesystem;

TEST(MpiLayouts, ExpertParallelGoldenV41) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed (scripts/setup.sh installs openmpi-bin)";
  for (int np : {2, 3})
    golden_equal_one_rank("deepseek-v41-tiny", "v41-tiny", np, "--enable-expert-parallel",
                          {np, np, 1, "validate golden (canonical), EP over all ranks, attention "
                           "replicated"});
}

TEST(MpiLayouts, ExpertParallelGoldenV4) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed (scripts/setup.sh installs openmpi-bin)";
  for (int np : {2, 3})
    golden_equal_one_rank("deepseek-v4flash-tiny", "v4flash-tiny", np, "--enable-expert-parallel",
                          {np, np, 1, "validate golden (canonical), EP over all ranks, attention "
                           "replicated"});
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

TEST(MpiLayouts, ServerWithExpertParallelAnswersAsOneRankV41) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  serve_equal_one_rank("deepseek-v41-tiny", {"--enable-expert-parallel"}, kBoundaryLens,
                       {2, 2, 1, "serve (greedy, batched), EP over all ranks, attention "
                        "replicated"});
}

TEST(MpiLayouts, ServerWithExpertParallelAnswersAsOneRankV4) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  serve_equal_one_rank("deepseek-v4flash-tiny", {"--enable-expert-parallel"}, kBoundaryLens,
                       {2, 2, 1, "serve (greedy, batched), EP over all ranks, attention "
                        "replicated"});
}

// `generate` runs the same calls on every rank: under mpirun with expert parallelism its
// output (greedy and seeded sampling) equals one rank's.
TEST(MpiLayouts, GenerateWithExpertParallelEqualsOneRank) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  generate_equals_one_rank("--enable-expert-parallel", 24);
}

}  // namespace
}  // namespace strata
