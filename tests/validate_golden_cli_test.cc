// `strata validate golden` exit statuses through the CLI: 0 when every case passes, 1 for a
// failure (a cases file or checkpoint that does not load, another model's cases), 2 for a
// usage error.
#include <gtest/gtest.h>

#include <string>

#include "cli_runner.h"

namespace strata::tools {
namespace {

std::string src_dir() {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  return e ? e : STRATA_SOURCE_DIR;
}

TEST(ValidateGoldenCli, ExitStatuses) {
  const std::string v41 = src_dir() + "/models/deepseek-v41-tiny";
  const std::string v4 = src_dir() + "/models/deepseek-v4flash-tiny";
  const std::string v41_cases = src_dir() + "/testdata/golden/v41-tiny/cases.safetensors";
  std::string out;
  // not a cases file: a failure to load, exit 1, with the reason
  EXPECT_EQ(run_strata("validate golden --model " + v41 + " --cases " + src_dir() + "/README.md",
                       &out, /*with_stderr=*/true),
            1);
  EXPECT_NE(out.find("validate golden:"), std::string::npos) << out;
  // no such checkpoint: exit 1
  EXPECT_EQ(run_strata("validate golden --model /nonexistent --cases " + v41_cases, &out), 1);
  // another model's cases: every case fails up front, exit 1
  out.clear();
  EXPECT_EQ(run_strata("validate golden --model " + v4 + " --cases " + v41_cases, &out), 1);
  EXPECT_NE(out.find("made for another model"), std::string::npos) << out;
  EXPECT_NE(out.find("route_divergent=0"), std::string::npos) << out;
  // usage errors: exit 2
  EXPECT_EQ(run_strata("validate golden --model " + v41, &out), 2);  // --cases missing
  EXPECT_EQ(run_strata("validate golden --model " + v41 + " --cases " + v41_cases +
                           " --chunk-size -1",
                       &out),
            2);
}

// The DSpark check (cases with dspark_draft_ids): every draft id equal in the reference call
// shape (these ids come from the golden file only); the canonical form reports its count.
TEST(ValidateGoldenCli, DsparkLine) {
  const std::string v41 = src_dir() + "/models/deepseek-v41-tiny";
  const std::string cases = src_dir() + "/testdata/golden/v41-tiny/cases.safetensors";
  std::string out;
  EXPECT_EQ(run_strata("validate golden --model " + v41 + " --cases " + cases +
                           " --call-shape reference --case case04 --case case07",
                       &out),
            0)
      << out;
  EXPECT_NE(out.find("dspark: 2 cases, 16 steps, 0 draft ids differ"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run_strata("validate golden --model " + v41 + " --cases " + cases +
                           " --call-shape canonical --case case04 --case case07",
                       &out),
            0)
      << out;
  EXPECT_NE(out.find("dspark: 2 cases, 16 steps, "), std::string::npos) << out;
  // A case without draft tensors: no dspark line.
  out.clear();
  EXPECT_EQ(run_strata("validate golden --model " + v41 + " --cases " + cases + " --case case05",
                       &out),
            0)
      << out;
  EXPECT_EQ(out.find("dspark:"), std::string::npos) << out;
}

}  // namespace
}  // namespace strata::tools
