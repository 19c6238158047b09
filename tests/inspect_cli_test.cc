// `strata inspect` (src/tools/cmd_inspect.cc) through the real binary: a readable model
// directory reports its parameters and exits 0; the same config next to a corrupt
// model.safetensors still gets its config report but exits 1 with the error (text and JSON);
// a path with no config exits 1 like any model that does not load (usage errors exit 2).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "state/state_report.h"

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace strata::tools {
namespace {

namespace fs = std::filesystem;

fs::path tiny_model() { return fs::path(STRATA_SOURCE_DIR) / "models" / "deepseek-v41-tiny"; }

TEST(InspectCli, ReadableCheckpointExitsZero) {
  std::string out;
  EXPECT_EQ(run_strata("inspect " + tiny_model().string(), &out), 0);
  EXPECT_NE(out.find("parameters by dtype"), std::string::npos) << out;
  std::string by_file;  // the config file's path counts the checkpoint next to it too
  EXPECT_EQ(run_strata("inspect " + (tiny_model() / "config.json").string(), &by_file), 0);
  EXPECT_NE(by_file.find("parameters by dtype"), std::string::npos) << by_file;
}

TEST(InspectCli, CorruptCheckpointExitsNonZeroAfterConfigReport) {
  const fs::path dir = fs::temp_directory_path() / ("strata_inspect_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(tiny_model() / "config.json", dir / "config.json",
                fs::copy_options::overwrite_existing);
  {
    std::ofstream f(dir / "model.safetensors", std::ios::binary);
    f << "\x10\x00\x00\x00\x00\x00\x00\x00{not json at all";
  }
  std::string out;
  EXPECT_EQ(run_strata("inspect " + dir.string(), &out), 1);
  EXPECT_NE(out.find("checkpoint unreadable"), std::string::npos) << out;
  EXPECT_NE(out.find("layer schedule"), std::string::npos) << out;  // the config report
  std::string by_file;
  EXPECT_EQ(run_strata("inspect " + (dir / "config.json").string(), &by_file), 1);
  std::string js;
  EXPECT_EQ(run_strata("inspect --json " + dir.string(), &js), 1);
  const auto j = nlohmann::json::parse(js);
  EXPECT_TRUE(j.contains("checkpoint_error"));
  EXPECT_FALSE(j.contains("parameters"));
  fs::remove_all(dir);
}

TEST(InspectCli, MissingModelExitsOne) {
  std::string out;
  EXPECT_EQ(run_strata("inspect /nonexistent/strata-model", &out, /*with_stderr=*/true), 1);
  EXPECT_NE(out.find("no config at"), std::string::npos) << out;
  EXPECT_EQ(run_strata("inspect", &out, /*with_stderr=*/true), 2);  // missing argument
}

}  // namespace
}  // namespace strata::tools

namespace strata::tools {
namespace {
// The real V4.1-Flash config: Engram table rows and bytes (issue 26 item 4). Rows are the
// config's engram_num_embeddings (384,006,168 + 384,016,682); a row is 256 FP8 bytes plus
// 256 / 32 = 8 UE8M0 scale bytes.
TEST(InspectCli, EngramTableBytesOfTheRealConfig) {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  const std::string cfg =
      std::string(e ? e : STRATA_SOURCE_DIR) + "/testdata/configs/deepseek-v4.1-flash.config.json";
  std::string out;
  ASSERT_EQ(run_strata("inspect " + cfg, &out), 0) << out;
  EXPECT_NE(out.find("Engram tables: 768022850 rows in 2 layers, 264 B per row (256 FP8 + 8 "
                     "scale), 202.76 GB"),
            std::string::npos)
      << out;
}

// `inspect CONFIG --state --dcp 4` prints each rank's bytes per kind at 128K and 1M tokens:
// at 1M, V4.1-Flash's compressed rows (1,048,576 + 3 x 524,288 records of 288 B) and index
// keys (68 B) split evenly over 4 ranks; the window rings stay whole.
TEST(InspectCli, BytesPerDcpRankOfTheRealConfig) {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  const std::string cfg =
      std::string(e ? e : STRATA_SOURCE_DIR) + "/testdata/configs/deepseek-v4.1-flash.config.json";
  std::string out;
  ASSERT_EQ(run_strata("inspect " + cfg + " --state --dcp 4", &out), 0) << out;
  const size_t at = out.find("at 1048576 tokens:");
  ASSERT_NE(at, std::string::npos) << out;
  std::string m;  // the section with runs of spaces collapsed
  for (char ch : out.substr(at))
    if (ch != ' ' || m.empty() || m.back() != ' ') m += ch;
  const double recs = 1048576.0 + 3 * 524288.0;
  const std::string kv = format_bytes(288 * recs), kv4 = format_bytes(288 * recs / 4);
  const std::string ik = format_bytes(68 * recs), ik4 = format_bytes(68 * recs / 4);
  EXPECT_NE(m.find(fmt::format("compressed_kv {} {} {} {} {}\n", kv, kv4, kv4, kv4, kv4)),
            std::string::npos) << m;
  EXPECT_NE(m.find(fmt::format("index_keys {} {} {} {} {}\n", ik, ik4, ik4, ik4, ik4)),
            std::string::npos) << m;
  EXPECT_NE(out.find("at 131072 tokens:"), std::string::npos);
}
}  // namespace
}  // namespace strata::tools

namespace strata::tools {
namespace {
// `strata plan` on the real V4.1-Flash config and the stated 8x H100 node: the Engram tables,
// the unit / snapshot bytes and a decision for each tier at 4K, 128K and 1M tokens.
TEST(PlanCli, RealConfigOnAStatedMachine) {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  const std::string src = e ? e : STRATA_SOURCE_DIR;
  const std::string cfg = src + "/testdata/configs/deepseek-v4.1-flash.config.json";
  std::string out;
  ASSERT_EQ(run_strata("plan --model " + cfg + " --hardware " + src +
                           "/testdata/hardware/h100x8-node.json",
                       &out),
            0)
      << out;
  EXPECT_NE(out.find("Engram tables: 202.76 GB -> hbm"), std::string::npos) << out;
  for (const char* ctx : {"context 4096 tokens", "context 131072 tokens", "context 1048576 tokens"})
    EXPECT_NE(out.find(ctx), std::string::npos) << ctx;
  EXPECT_NE(out.find("rows 56960 B + boundary snapshot 2930700 B"), std::string::npos);
  EXPECT_NE(out.find("-> store"), std::string::npos);
  EXPECT_EQ(run_strata("plan --model " + cfg + " --hardware /nonexistent.json", &out, true), 1);
  EXPECT_NE(out.find("cannot open --hardware"), std::string::npos);
  EXPECT_EQ(run_strata("plan --model " + cfg, &out, true), 2);
}
}  // namespace
}  // namespace strata::tools
