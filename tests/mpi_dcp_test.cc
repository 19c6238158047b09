// Decode context parallelism through real `mpirun ... strata` processes (issue 25 item 2):
// compressed KV rows and index keys owner-sharded over the ranks (dist/dcp_comm.h), the
// indexer's scores and the selected rows exchanged. `validate golden` on both golden sets
// gives one rank's report and logits digest (every logits row bit for bit) with DCP 2 and 3,
// interleave 1 / 2 / 3, canonical and reference call shapes, chunked prefill, and DCP + EP;
// the server and `generate` answer as one rank; unsupported layouts are refused at startup.
// A plain-KV (Llama) model shards its KV by 16-position chunks and merges the ranks' attention
// chunk partials (exec/llama/llama_dcp_attention.h): stories260K answers as one rank too.
#include <gtest/gtest.h>

#include <string>

#include <fmt/format.h>

#include "cli_runner.h"
#include "mpi_test_util.h"

namespace strata {
namespace {

using namespace mpitest;  // NOLINT: test helpers

std::string dcp_flags(int np, int S) {
  return fmt::format("--decode-context-parallel-size {} --dcp-kv-cache-interleave-size {}", np, S);
}

void golden_layouts(const std::string& model, const std::string& golden) {
  for (auto [np, S] : {std::pair{2, 1}, {2, 3}, {3, 1}, {3, 2}})
    golden_equal_one_rank(model, golden, np, dcp_flags(np, S),
                          {np, 1, np, fmt::format("validate golden (canonical), DCP interleave {}", S)});
  golden_equal_one_rank(model, golden, 2, dcp_flags(2, 1),
                        {2, 1, 2, "validate golden (reference call shape), DCP interleave 1"},
                        "--call-shape reference");
  golden_equal_one_rank(model, golden, 2, dcp_flags(2, 2),
                        {2, 1, 2, "validate golden (canonical, prefill chunks of 5), DCP interleave 2"},
                        "--chunk-size 5");
  golden_equal_one_rank(model, golden, 2, dcp_flags(2, 1) + " --enable-expert-parallel",
                        {2, 2, 2, "validate golden (canonical), DCP + EP over all ranks"});
}

TEST(MpiDcp, GoldenV41EqualsOneRank) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed (scripts/setup.sh installs openmpi-bin)";
  golden_layouts("deepseek-v41-tiny", "v41-tiny");
}

TEST(MpiDcp, GoldenV4EqualsOneRank) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed (scripts/setup.sh installs openmpi-bin)";
  golden_layouts("deepseek-v4flash-tiny", "v4flash-tiny");
}

// Prompts around every ratio (2 / 4 / 16), the window (16), the unit (64) and the interleave
// boundaries, including prompts so short that a rank holds no compressed row (1-3 tokens at
// ratio 2 give at most one record, owned by rank 0).
const std::vector<int64_t> kDcpLens = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 150};

TEST(MpiDcp, ServerAnswersAsOneRankV41) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  serve_equal_one_rank("deepseek-v41-tiny", {"--decode-context-parallel-size", "2"}, kDcpLens,
                       {2, 1, 2, "serve (greedy, batched), DCP interleave 1"});
}

TEST(MpiDcp, ServerAnswersAsOneRankV4) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  serve_equal_one_rank("deepseek-v4flash-tiny", {"--decode-context-parallel-size", "2"}, kDcpLens,
                       {2, 1, 2, "serve (greedy, batched), DCP interleave 1"});
}

TEST(MpiDcp, ServerWithDcpAndExpertParallelAnswersAsOneRank) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  serve_equal_one_rank("deepseek-v41-tiny",
                       {"--decode-context-parallel-size", "3", "--dcp-kv-cache-interleave-size",
                        "2", "--enable-expert-parallel"},
                       kDcpLens, {3, 3, 3, "serve (greedy, batched), DCP interleave 2 + EP"});
}

TEST(MpiDcp, GenerateEqualsOneRank) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  generate_equals_one_rank("--decode-context-parallel-size 2", 40);
}

// Plain KV: records are chunks of 16 positions, so prompts around 16 / 32 / 48 (interleave 1
// over 2 ranks, interleave 2 over 3) and the prefix units (32 at DCP 2, 96 at DCP 3 with
// interleave 2); 1-16 tokens leave every rank but 0 without a row.
const std::vector<int64_t> kLlamaLens = {1,  2,  15, 16, 17, 31, 32, 33, 47, 48,
                                           63, 64, 65, 95, 96, 97, 150};

TEST(MpiDcp, ServerAnswersAsOneRankLlama) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  serve_equal_one_rank("stories260K", {"--decode-context-parallel-size", "2"}, kLlamaLens,
                       {2, 1, 2, "serve (greedy, batched), DCP interleave 1 (plain KV)"});
  serve_equal_one_rank("stories260K",
                       {"--decode-context-parallel-size", "3", "--dcp-kv-cache-interleave-size", "2"},
                       kLlamaLens, {3, 1, 3, "serve (greedy, batched), DCP interleave 2 (plain KV)"});
}

TEST(MpiDcp, GenerateEqualsOneRankLlama) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  generate_equals_one_rank("--decode-context-parallel-size 2", 200, {"stories260K"});
}

// Layouts the engine does not run are refused at startup with a message naming the fix.
TEST(MpiDcp, UnsupportedLayoutsAreRefused) {
  const std::string golden = fmt::format(
      "validate golden --model {}/models/deepseek-v41-tiny --cases "
      "{}/testdata/golden/v41-tiny/cases.safetensors",
      src_dir(), src_dir());
  std::string out;
  EXPECT_EQ(tools::run_strata(golden + " --decode-context-parallel-size 2", &out, true), 2);
  EXPECT_NE(out.find("needs 2 ranks: start with mpirun -np 2"), std::string::npos) << out;
  EXPECT_EQ(tools::run_strata(golden + " --dcp-kv-cache-interleave-size 4", &out, true), 2);
  EXPECT_NE(out.find("needs --decode-context-parallel-size > 1"), std::string::npos) << out;
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  EXPECT_NE(sh(fmt::format("timeout -s KILL 120 mpirun --oversubscribe --allow-run-as-root -np 2 "
                           "{} {} --decode-context-parallel-size 3",
                           tools::strata_binary(), golden),
               &out),
            0);
  EXPECT_NE(out.find("the DCP group spans every rank (pass 2)"), std::string::npos) << out;
  // A model without routed experts has nothing to run expert-parallel.
  EXPECT_NE(sh(fmt::format("timeout -s KILL 120 mpirun --oversubscribe --allow-run-as-root -np 2 "
                           "{} generate --model {}/models/stories260K --prompt 'Once' "
                           "--max-tokens 4 --enable-expert-parallel",
                           tools::strata_binary(), src_dir()),
               &out),
            0);
  EXPECT_NE(out.find("is a Llama model, it has no routed experts"), std::string::npos) << out;
}

}  // namespace
}  // namespace strata
