// `strata bench serve` (src/tools/cmd_bench_serve.cc) through the real binary, on the paths
// that need no server (model, context and vocabulary given on the command line): a trace file
// that is missing or does not parse exits 1 with the file named, a malformed --trace argument
// exits 2, and with no server and nothing given the user reads why it could not connect.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "cli_runner.h"

namespace strata::tools {
namespace {

namespace fs = std::filesystem;

// Port 9 (discard) on loopback: nothing listens there on a test machine.
const std::string kNoServer = "--url http://127.0.0.1:9";
const std::string kGiven = " --model m --max-context 512 --vocab 512";

TEST(BenchServeCli, MissingTraceFileExitsOneAndNamesIt) {
  std::string out;
  const std::string missing = (fs::temp_directory_path() / "strata_no_such_trace.jsonl").string();
  EXPECT_EQ(run_strata("bench serve " + kNoServer + kGiven + " --trace mooncake:" + missing, &out, true), 1)
      << out;
  EXPECT_NE(out.find("cannot open Mooncake trace " + missing), std::string::npos) << out;
}

TEST(BenchServeCli, UnparsableTraceExitsOneWithTheLine) {
  const fs::path p = fs::temp_directory_path() / "strata_bad_trace.jsonl";
  std::ofstream(p) << "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 2, \"hash_ids\": [1]}\n"
                   << "not json\n";
  std::string out;
  EXPECT_EQ(run_strata("bench serve " + kNoServer + kGiven + " --trace mooncake:" + p.string(), &out, true), 1)
      << out;
  EXPECT_NE(out.find(p.string() + ":2"), std::string::npos) << out;
  fs::remove(p);
}

TEST(BenchServeCli, MalformedTraceArgumentExitsTwo) {
  std::string out;
  EXPECT_EQ(run_strata("bench serve " + kNoServer + kGiven + " --trace nokind", &out, true), 2) << out;
  EXPECT_NE(out.find("--trace expects mooncake:FILE or azure:FILE"), std::string::npos) << out;
}

TEST(BenchServeCli, NoServerSaysItCouldNotConnect) {
  std::string out;
  EXPECT_EQ(run_strata("bench serve " + kNoServer + " --random", &out, true), 1) << out;
  EXPECT_NE(out.find("could not connect"), std::string::npos) << out;
}

}  // namespace
}  // namespace strata::tools
