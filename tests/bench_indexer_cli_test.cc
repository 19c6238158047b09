// `strata bench indexer` (src/tools/cmd_bench_indexer.cc) through the real binary: it times the
// fused indexer scoring kernel against dots-then-weighting on the same keys and reports whether
// both gave the same bits (the V4.1-Flash shape, the tiny model's, key counts off 16); a head
// dim that is not a multiple of 32 exits 2 with the reason.
#include <gtest/gtest.h>

#include <string>

#include "cli_runner.h"

namespace strata::tools {
namespace {

TEST(BenchIndexerCli, FusedKernelGivesTheSameBits) {
  for (const std::string args : {"--heads 64 --dim 128 --keys 1000 --reps 2",
                                 "--heads 4 --dim 64 --keys 77 --reps 2",
                                 "--heads 8 --dim 64 --keys 33 --reps 2",
                                 "--heads 3 --dim 96 --keys 20 --reps 1"}) {
    std::string out;
    EXPECT_EQ(run_strata("bench indexer " + args, &out, true), 0) << args << "\n" << out;
    EXPECT_NE(out.find("same bits                          yes"), std::string::npos) << args << "\n" << out;
    EXPECT_NE(out.find("ns/key"), std::string::npos) << out;
  }
}

TEST(BenchIndexerCli, BadDimExitsTwo) {
  std::string out;
  EXPECT_EQ(run_strata("bench indexer --dim 48", &out, true), 2) << out;
  EXPECT_NE(out.find("multiple of 32"), std::string::npos) << out;
}

}  // namespace
}  // namespace strata::tools
