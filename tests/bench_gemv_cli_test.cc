// `strata bench gemv` (src/tools/cmd_bench_gemv.cc): the checkpoint byte accounting of
// tools/bench_gemv_bytes.h against hand-worked counts, and the command end to end at tiny
// sizes through the real `strata` binary (its JSON output). No timings are asserted.
//
// The binary: see tests/cli_runner.h.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "tools/bench_gemv_bytes.h"
#include "cli_runner.h"

namespace strata::tools {
namespace {


// Hand counts (see the header comment of tools/bench_gemv_bytes.h for the formats).
TEST(BenchGemvBytes, DefaultShape) {
  // 4096 x 4096 FP8: 16 Mi codes + (4096/32)^2 = 16384 block scales.
  EXPECT_EQ(gemv_checkpoint_bytes(GemvFormat::kFp8, 4096, 4096), 16777216 + 16384);
  EXPECT_EQ(gemv_checkpoint_bytes(GemvFormat::kF64Einsum, 4096, 4096), 16777216 + 16384);
  // FP4: 8 Mi bytes of codes + 4096 rows x 128 scales.
  EXPECT_EQ(gemv_checkpoint_bytes(GemvFormat::kFp4, 4096, 4096), 8388608 + 524288);
  EXPECT_EQ(gemv_checkpoint_bytes(GemvFormat::kBf16, 4096, 4096), 33554432);
  // 512 MiB budget: 536870912 / 16793600 = 31.97 -> 32; / 8912896 = 60.2 -> 61; / 2^25 = 16.
  EXPECT_EQ(gemv_matrices_for_budget(536870912.0, 16793600), 32);
  EXPECT_EQ(gemv_matrices_for_budget(536870912.0, 8912896), 61);
  EXPECT_EQ(gemv_matrices_for_budget(536870912.0, 33554432), 16);
  EXPECT_EQ(gemv_matrices_for_budget(1.0, 33554432), 1);
}

TEST(BenchGemvBytes, RaggedShape) {
  // N = 40 rows, K = 96: FP8 3840 codes + ceil(40/32)=2 x 3 blocks = 3846;
  // FP4 1920 code bytes + 40 x 3 scales = 2040; BF16 7680.
  EXPECT_EQ(gemv_checkpoint_bytes(GemvFormat::kFp8, 40, 96), 3846);
  EXPECT_EQ(gemv_checkpoint_bytes(GemvFormat::kFp4, 40, 96), 2040);
  EXPECT_EQ(gemv_checkpoint_bytes(GemvFormat::kBf16, 40, 96), 7680);
}

TEST(BenchGemvCli, RunsEndToEndTiny) {
  std::string out;
  const int rc = run_strata(
      "bench gemv --n 40 --k 96 --m 2 --matrices 3 --threads 1 --repeats 2 "
      "--bandwidth-mib 1 --avx512 off --json",
      &out);
  ASSERT_EQ(rc, 0) << "binary " << strata_binary() << " output:\n" << out;
  const auto j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_EQ(j["threads"], 1);
  EXPECT_EQ(j["m"], 2);
  EXPECT_EQ(j["avx512_enabled"], false);
  EXPECT_EQ(j["avx512_active"], false);
  EXPECT_EQ(j["fp8_multiply"], "fma chain");  // VDPBF16PS needs the AVX-512 paths
  EXPECT_GT(j["read_bandwidth_gbs"].get<double>(), 0.0);
  const std::map<std::string, int64_t> expect = {
      {"fp8", 3846}, {"f64-einsum", 3846}, {"fp4", 2040}, {"bf16", 7680}};
  ASSERT_EQ(j["formats"].size(), 4u);
  for (const auto& f : j["formats"]) {
    const std::string name = f["format"];
    ASSERT_TRUE(expect.count(name)) << name;
    EXPECT_EQ(f["matrices"], 3) << name;
    EXPECT_EQ(f["checkpoint_bytes_per_matrix"], expect.at(name)) << name;
    EXPECT_EQ(f["checkpoint_bytes"], 3 * expect.at(name)) << name;
    EXPECT_EQ(f["weights"], 3 * 40 * 96) << name;
    // The packed layouts never store less than the checkpoint (padding, f32 scales).
    EXPECT_GE(f["resident_bytes"].get<int64_t>(), 3 * expect.at(name)) << name;
    EXPECT_GT(f["read_bandwidth_gbs"].get<double>(), 0.0) << name;
    EXPECT_GT(f["best_s"].get<double>(), 0.0) << name;
    EXPECT_LE(f["best_s"].get<double>(), f["median_s"].get<double>()) << name;
  }
}

TEST(BenchGemvCli, MatrixCountFromBudgetAndFormatFilter) {
  std::string out;
  // 0.01 MiB = 10485.76 B; FP4 [40, 96] = 2040 B/matrix -> ceil(5.14) = 6 matrices.
  const int rc = run_strata(
      "bench gemv --n 40 --k 96 --mib 0.01 --format fp4 --threads 1 --repeats 1 "
      "--bandwidth-mib 1 --avx512 on --json",
      &out);
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  ASSERT_EQ(j["formats"].size(), 1u);
  EXPECT_EQ(j["formats"][0]["format"], "fp4");
  EXPECT_EQ(j["formats"][0]["matrices"], 6);
  EXPECT_EQ(j["avx512_enabled"], true);
  EXPECT_EQ(j["avx512_active"], j["avx512_cpu"]);  // on an AVX2 machine
  if (j["avx512_ext_active"] == false) EXPECT_EQ(j["fp8_multiply"], "fma chain");
  else EXPECT_TRUE(j["fp8_multiply"] == "vdpbf16ps" || j["fp8_multiply"] == "fma chain");
}

// Usage errors exit 2 (src/tools/main.cc), whether the command or CLI11 finds them.
TEST(BenchGemvCli, RejectsBadArguments) {
  std::string out;
  EXPECT_EQ(run_strata("bench gemv --m 5 --n 8 --k 32 --matrices 1 --bandwidth-mib 1", &out), 2);
  EXPECT_EQ(run_strata("bench gemv --k 33 --n 8 --matrices 1 --bandwidth-mib 1", &out), 2);
  EXPECT_EQ(run_strata("bench gemv --format int8 --n 8 --k 32 --matrices 1 --bandwidth-mib 1",
                       &out),
            2);
  EXPECT_EQ(run_strata("bench gemv --avx512 maybe", &out), 2);
  EXPECT_EQ(run_strata("bench gemv --threads 5000", &out), 2);
  EXPECT_EQ(run_strata("bench gemv --no-such-flag", &out), 2);
  out.clear();
  EXPECT_EQ(run_strata("no-such-command", &out, /*with_stderr=*/true), 2);
  EXPECT_NE(out.find("no-such-command"), std::string::npos) << out;  // names the word
  EXPECT_EQ(run_strata("", &out), 2);                                  // no subcommand
  EXPECT_EQ(run_strata("bench gemv --help", &out), 0);
}

// A size the machine cannot hold ends with one line and exit 1, not an abort: a 1 EiB
// bandwidth buffer (its mmap fails at once; huge weight matrices take the same path,
// std::bad_alloc, but fill gigabytes first).
TEST(BenchGemvCli, OutOfMemoryIsAFailureNotACrash) {
  std::string out;
  EXPECT_EQ(run_strata("bench gemv --bandwidth-mib 1073741824 --mib 1 --threads 1 --repeats 1 "
                       "--format fp8",
                       &out, /*with_stderr=*/true),
            1);
  EXPECT_NE(out.find("out of memory"), std::string::npos) << out;
}

}  // namespace
}  // namespace strata::tools
