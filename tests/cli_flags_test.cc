// Issue 24 item 12 (vLLM-style CLI): `strata --version`, `strata serve MODEL` (positional),
// `--max-model-len` and the security flags in --help, two different models refused.
#include <gtest/gtest.h>

#include <cstdlib>

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

// A speculative config the model cannot run is a usage error for serve too (exit 2, the
// message without a status code), as for generate and bench model.
TEST(CliFlags, ServeRefusesASpeculativeConfigTheModelCannotRun) {
  const char* src = std::getenv("STRATA_SOURCE_DIR");
  const std::string models = std::string(src ? src : STRATA_SOURCE_DIR) + "/models/";
  std::string out;
  EXPECT_EQ(run_strata("serve --model " + models + "deepseek-v41-tiny --port 0 --speculative-config "
                       "'{\"method\":\"dspark\",\"num_speculative_tokens\":6}'",
                       &out, true, 120),
            2)
      << out;
  EXPECT_NE(out.find("exceeds the DSpark block size 5"), std::string::npos) << out;
  EXPECT_EQ(out.find("INVALID_ARGUMENT"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run_strata("serve --model " + models + "stories260K --port 0 --speculative-config "
                       "'{\"method\":\"dspark\",\"num_speculative_tokens\":2}'",
                       &out, true, 120),
            2)
      << out;
  EXPECT_NE(out.find("needs a DeepSeek-V4.1 checkpoint with DSpark stages"), std::string::npos) << out;
}

}  // namespace
}  // namespace strata::tools
