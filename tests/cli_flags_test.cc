// Issue 24 item 12 (vLLM-style CLI): `strata --version`, `strata serve MODEL` (positional),
// `--max-model-len` and the security flags in --help, two different models refused.
#include <gtest/gtest.h>

#include <string>

#include "cli_runner.h"

namespace strata::tools {
namespace {

TEST(CliFlags, VersionOnTheRootCommand) {
  std::string out;
  EXPECT_EQ(run_strata("--version", &out), 0);
  EXPECT_NE(out.find("strata 0.1.0"), std::string::npos) << out;
  std::string v;
  EXPECT_EQ(run_strata("version", &v), 0);
  EXPECT_EQ(out, v);
}

TEST(CliFlags, ServeHelpShowsTheServingFlags) {
  std::string out;
  EXPECT_EQ(run_strata("serve --help", &out), 0);
  for (const char* f : {"model_dir", "--max-model-len", "--api-key", "--allowed-hosts",
                        "--allowed-origins", "--disaggregation-mode", "--kv-load-failure-policy"})
    EXPECT_NE(out.find(f), std::string::npos) << f;
}

TEST(CliFlags, TwoDifferentModelsAreAUsageError) {
  std::string out;
  EXPECT_EQ(run_strata("serve models/a --model models/b --port 0", &out, true), 2) << out;
  EXPECT_NE(out.find("two models"), std::string::npos) << out;
}

}  // namespace
}  // namespace strata::tools
