// `strata bench model` (src/tools/cmd_bench_model.cc) end to end on the embedded tiny V4.1
// checkpoint through the real `strata` binary (its JSON output): the roofline arithmetic
// against the numbers it reports, and the conservative bandwidth (the higher of the readings
// before and after the runs). No timings are asserted.
//
// The binary: see tests/cli_runner.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace strata::tools {
namespace {

std::string v41_dir() {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  return std::string(e ? e : STRATA_SOURCE_DIR) + "/models/deepseek-v41-tiny";
}

TEST(BenchModelCli, RooflineUsesTheHigherBandwidthReading) {
  std::string out;
  const int rc = run_strata("bench model --model " + v41_dir() +
                                " --prompt-tokens 6 --decode-tokens 3 --repeats 1 --threads 1 "
                                "--bandwidth-mib 8 --json",
                            &out);
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out.substr(out.find('{')), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  const double before = j["read_bandwidth_before_gbs"], after = j["read_bandwidth_after_gbs"];
  const double bw = j["read_bandwidth_gbs"];
  EXPECT_GT(before, 0.0);
  EXPECT_GT(after, 0.0);
  EXPECT_EQ(bw, std::max(before, after));
  const double bytes = j["decode_bytes_per_token"], tps = j["decode_tok_s"];
  EXPECT_GT(bytes, 0.0);
  EXPECT_GT(tps, 0.0);
  EXPECT_NEAR(j["decode_roofline_tok_s"].get<double>(), bw * 1e9 / bytes,
              1e-9 * bw * 1e9 / bytes);
  EXPECT_NEAR(j["decode_roofline_fraction"].get<double>(), tps * bytes / (bw * 1e9),
              1e-9 * tps * bytes / (bw * 1e9));
  EXPECT_NEAR(j["decode_bandwidth_gbs"].get<double>(), tps * bytes / 1e9, 1e-9 * tps * bytes);
  EXPECT_EQ(j["prompt_tokens"], 6);
  EXPECT_EQ(j["decode_tokens"], 3);
}

TEST(BenchModelCli, RejectsAContextOverflow) {
  std::string out;
  const int rc = run_strata("bench model --model " + v41_dir() +
                                " --prompt-tokens 100000 --decode-tokens 3 --bandwidth-mib 8",
                            &out, true);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("exceed the context"), std::string::npos) << out;
}

}  // namespace
}  // namespace strata::tools
