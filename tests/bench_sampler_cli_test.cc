// `strata bench sampler` (src/tools/cmd_bench_sampler.cc) through the real binary: it times
// Sampler::sample against the full-sort reference and reports whether both picked the same
// tokens (peaked, flat and all-tied rows, top-p / top-k / min-p); greedy settings have no
// filter to time and a NaN spread is not a row, so both exit 2 with the reason.
#include <gtest/gtest.h>

#include <string>

#include "cli_runner.h"

namespace strata::tools {
namespace {

TEST(BenchSamplerCli, SameTokensAsTheFullSort) {
  for (const std::string args : {"--vocab 20000 --spread 4 --samples 20",
                                 "--vocab 20000 --spread 1 --top-p 0.99 --samples 10",
                                 "--vocab 5000 --top-p 1 --top-k 40 --temperature 0.8 --samples 20",
                                 "--vocab 5000 --min-p 0.01 --samples 20",
                                 "--vocab 20000 --spread 0 --samples 10"}) {  // all tied
    std::string out;
    EXPECT_EQ(run_strata("bench sampler " + args, &out, true), 0) << args << "\n" << out;
    EXPECT_NE(out.find("same tokens          yes"), std::string::npos) << args << "\n" << out;
    EXPECT_NE(out.find("us/token"), std::string::npos) << out;
  }
}

TEST(BenchSamplerCli, GreedyAndBadSpreadExitTwo) {
  std::string out;
  EXPECT_EQ(run_strata("bench sampler --temperature 0", &out, true), 2) << out;
  EXPECT_NE(out.find("greedy"), std::string::npos) << out;
  EXPECT_EQ(run_strata("bench sampler --spread nan", &out, true), 2) << out;
  EXPECT_NE(out.find("--spread must be in [0, 10000]"), std::string::npos) << out;
}

}  // namespace
}  // namespace strata::tools
