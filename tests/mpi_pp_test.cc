// Pipeline parallelism through real `mpirun ... strata` processes (issue 25 item 4): the
// decoder layers split over the ranks (dist/pipe_comm.h), the stage boundaries sent rank to
// rank (exec/stage_carry.h). `validate golden` on both golden sets gives one rank's report and
// logits digest (every logits row bit for bit) with 2 and 3 stages, canonical and reference
// call shapes and chunked prefill, twice in a row; the server (plain and with the model's
// drafter) and `generate` answer as one rank -- Llama (stories260K) too; layouts not built are
// refused at startup.
#include <gtest/gtest.h>

#include <string>

#include <fmt/format.h>

#include "cli_runner.h"
#include "mpi_test_util.h"

namespace strata {
namespace {

using namespace mpitest;  // NOLINT: test helpers

void golden_layouts(const std::string& model, const std::string& golden) {
  for (int np : {2, 3})
    golden_equal_one_rank(model, golden, np, fmt::format("--pipeline-parallel-size {}", np),
                          {np, 1, 1, "validate golden (canonical), PP", np});
  golden_equal_one_rank(model, golden, 2, "--pipeline-parallel-size 2",
                        {2, 1, 1, "validate golden (reference call shape), PP", 2},
                        "--call-shape reference");
  golden_equal_one_rank(model, golden, 3, "--pipeline-parallel-size 3",
                        {3, 1, 1, "validate golden (canonical, prefill chunks of 5), PP", 3},
                        "--chunk-size 5");
}

TEST(MpiPipeline, GoldenV41EqualsOneRank) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed (scripts/setup.sh installs openmpi-bin)";
  golden_layouts("deepseek-v41-tiny", "v41-tiny");
}

TEST(MpiPipeline, GoldenV4EqualsOneRank) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed (scripts/setup.sh installs openmpi-bin)";
  golden_layouts("deepseek-v4flash-tiny", "v4flash-tiny");
}

// Prompts around the tiny models' window (16), ratios (2 / 4 / 16) and the prefix unit (64).
const std::vector<int64_t> kLens = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 150};

TEST(MpiPipeline, ServerAnswersAsOneRankV41) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  serve_equal_one_rank("deepseek-v41-tiny", {"--pipeline-parallel-size", "2"}, kLens,
                       {2, 1, 1, "serve (greedy, batched), PP", 2});
}

TEST(MpiPipeline, ServerAnswersAsOneRankV4ThreeStages) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  serve_equal_one_rank("deepseek-v4flash-tiny", {"--pipeline-parallel-size", "3"}, kLens,
                       {3, 1, 1, "serve (greedy, batched), PP", 3});
}

// The drafters' rings are written from the last stage's boundary on every rank: speculative
// decoding under PP answers as a one-rank server without it (verify changes no bit).
TEST(MpiPipeline, ServerWithDrafterAnswersAsOneRank) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  serve_equal_one_rank("deepseek-v41-tiny",
                       {"--pipeline-parallel-size", "2", "--speculative-config",
                        R"({"method": "dspark", "num_speculative_tokens": 3})"},
                       kLens, {2, 1, 1, "serve (greedy, batched), PP + DSpark speculative decoding", 2});
  serve_equal_one_rank("deepseek-v4flash-tiny",
                       {"--pipeline-parallel-size", "2", "--speculative-config",
                        R"({"method": "mtp", "num_speculative_tokens": 2})"},
                       kLens, {2, 1, 1, "serve (greedy, batched), PP + MTP speculative decoding", 2});
}

TEST(MpiPipeline, GenerateEqualsOneRank) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  generate_equals_one_rank("--pipeline-parallel-size 2", 40);
}

// Llama: the residual rows cross the boundary (5 layers: 2 + 3 and 1 + 2 + 2), prefill in
// microbatches of the step's rows.
TEST(MpiPipeline, ServerAnswersAsOneRankLlama) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  serve_equal_one_rank("stories260K", {"--pipeline-parallel-size", "2"}, kLens,
                       {2, 1, 1, "serve (greedy, batched), PP", 2});
  serve_equal_one_rank("stories260K", {"--pipeline-parallel-size", "3"}, kLens,
                       {3, 1, 1, "serve (greedy, batched), PP", 3});
}

TEST(MpiPipeline, GenerateEqualsOneRankLlama) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  generate_equals_one_rank("--pipeline-parallel-size 2", 200, {"stories260K"});
}

// Layouts the engine does not run are refused at startup with a message naming the fix.
TEST(MpiPipeline, UnsupportedLayoutsAreRefused) {
  const std::string golden = fmt::format(
      "validate golden --model {}/models/deepseek-v41-tiny --cases "
      "{}/testdata/golden/v41-tiny/cases.safetensors",
      src_dir(), src_dir());
  std::string out;
  EXPECT_EQ(tools::run_strata(golden + " --pipeline-parallel-size 2", &out, true), 2);
  EXPECT_NE(out.find("needs 2 ranks: start with mpirun -np 2"), std::string::npos) << out;
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  auto mpi = [&](int np, const std::string& args) {
    return sh(fmt::format("timeout -s KILL 120 mpirun --oversubscribe --allow-run-as-root -np {} {} {}",
                          np, tools::strata_binary(), args),
              &out);
  };
  EXPECT_NE(mpi(2, golden + " --pipeline-parallel-size 3"), 0);
  EXPECT_NE(out.find("the stages span every rank (pass 2)"), std::string::npos) << out;
  EXPECT_NE(mpi(2, golden + " --pipeline-parallel-size 2 --enable-expert-parallel"), 0);
  EXPECT_NE(out.find("not combined with --enable-expert-parallel"), std::string::npos) << out;
  // The state digests need every row on rank 0.
  EXPECT_NE(mpi(2, fmt::format("serve --model {}/models/deepseek-v41-tiny --port 0 "
                               "--pipeline-parallel-size 2 --debug-state-digests", src_dir())),
            0);
  EXPECT_NE(out.find("--debug-state-digests is not built under pipeline parallelism"),
            std::string::npos) << out;
  // More stages than the V4 tiny model's 7 layers.
  EXPECT_NE(mpi(8, fmt::format("generate -m {}/models/deepseek-v4flash-tiny --prompt-ids 1,2,3 "
                               "-n 2 --pipeline-parallel-size 8", src_dir())),
            0);
  EXPECT_NE(out.find("exceeds the model's 7 layers"), std::string::npos) << out;
  EXPECT_NE(mpi(6, fmt::format("generate -m {}/models/stories260K --prompt-ids 1,2,3 -n 2 "
                               "--pipeline-parallel-size 6", src_dir())),
            0);
  EXPECT_NE(out.find("exceeds the model's 5 layers"), std::string::npos) << out;
}

}  // namespace
}  // namespace strata
