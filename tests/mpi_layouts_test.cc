// Multi-rank layouts through real `mpirun ... strata` processes (issue 25): `validate golden`
// on both golden sets with expert parallelism over 2 and 3 ranks gives the same report and
// the same logits digest (every logits row bit for bit) as one rank, twice in a row; several
// ranks without a layout are refused at startup. Every run appends one support-matrix record
// (docs/support-matrix.md is generated from them by `strata support-matrix`).
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "cli_runner.h"
#include "pd_process.h"
#include "runner_fixtures.h"
#include "serve/test_http_client.h"

#include <nlohmann/json.hpp>
#include <thread>

namespace strata {
namespace {

namespace fs = std::filesystem;

std::string src_dir() {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  return e ? e : STRATA_SOURCE_DIR;
}

bool have_mpirun() { return ::access("/usr/bin/mpirun", X_OK) == 0; }

// Runs a shell command; stdout (+ stderr) into *out; the exit status.
int sh(const std::string& cmd, std::string* out) {
  out->clear();
  return tools::run_command(cmd + " 2>&1", out);
}

std::string line_starting(const std::string& text, const std::string& prefix) {
  const size_t at = text.find("\n" + prefix);
  const size_t start = text.rfind(prefix, 0) == 0 ? 0 : (at == std::string::npos ? at : at + 1);
  if (start == std::string::npos) return "";
  return text.substr(start, text.find('\n', start) - start);
}

void record(const std::string& model, int ranks, int ep, const std::string& features,
            const std::string& result) {
  const char* e = std::getenv("STRATA_SUPPORT_RECORDS");
  const std::string path =
      e ? e : (fs::path(tools::strata_binary()).parent_path().parent_path().parent_path() /
               "support-matrix-records.jsonl").string();
  const std::time_t t = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&t));
  std::ofstream(path, std::ios::app)
      << fmt::format("{{\"model\":\"{}\",\"quantization\":\"{}\",\"ranks\":{},\"dcp\":1,"
                     "\"ep\":{},\"pp\":1,\"backend\":\"Open MPI (mpirun, one node)\","
                     "\"features\":\"{}\",\"result\":\"{}\",\"date\":\"{}\"}}\n",
                     model, "checkpoint formats (FP8 weights, FP4 experts)", ranks, ep, features, result, date);
}

void check_set(const std::string& model, const std::string& golden) {
  const std::string args = fmt::format(
      "validate golden --model {}/models/{} --cases {}/testdata/golden/{}/cases.safetensors "
      "--threads 1",
      src_dir(), model, src_dir(), golden);
  std::string one;
  ASSERT_EQ(tools::run_strata(args, &one), 0) << one;
  const std::string digest = line_starting(one, "logits digest: ");
  const std::string last = line_starting(one, "golden: ");
  ASSERT_FALSE(digest.empty()) << one;
  for (int np : {2, 3}) {
    for (int run = 0; run < 2; ++run) {
      std::string out;
      const int rc = sh(fmt::format("timeout -s KILL 300 mpirun --oversubscribe --allow-run-as-root "
                                    "-np {} {} {} --enable-expert-parallel",
                                    np, tools::strata_binary(), args),
                        &out);
      EXPECT_EQ(rc, 0) << out;
      EXPECT_EQ(line_starting(out, "logits digest: "), digest) << model << " np " << np << "\n" << out;
      EXPECT_EQ(line_starting(out, "golden: "), last) << model << " np " << np;
      EXPECT_NE(out.find(fmt::format("expert parallel: {} ranks", np)), std::string::npos) << out;
      const bool same = rc == 0 && line_starting(out, "logits digest: ") == digest;
      if (run == 0)
        record(model, np, np, "validate golden (canonical), EP over all ranks, attention replicated",
               same ? "pass: logits bit-identical to 1 rank" : "FAIL");
    }
  }
}

TEST(MpiLayouts, ExpertParallelGoldenV41) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed (scripts/setup.sh installs openmpi-bin)";
  check_set("deepseek-v41-tiny", "v41-tiny");
}

TEST(MpiLayouts, ExpertParallelGoldenV4) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed (scripts/setup.sh installs openmpi-bin)";
  check_set("deepseek-v4flash-tiny", "v4flash-tiny");
}

TEST(MpiLayouts, RanksWithoutALayoutAreRefused) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  std::string out;
  const int rc = sh(fmt::format("timeout -s KILL 120 mpirun --oversubscribe --allow-run-as-root -np 2 "
                                "{} validate golden --model {}/models/deepseek-v41-tiny --cases "
                                "{}/testdata/golden/v41-tiny/cases.safetensors",
                                tools::strata_binary(), src_dir(), src_dir()),
                    &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("2 ranks but no parallel layout"), std::string::npos) << out;
}

// The generator keeps the latest record of a configuration and refuses a line that is not one.
TEST(SupportMatrix, LatestRecordPerConfiguration) {
  const std::string path = fmt::format("/tmp/strata-sm-{}.jsonl", ::getpid());
  const std::string rec =
      R"({"model":"m","quantization":"q","ranks":2,"dcp":1,"ep":2,"pp":1,"backend":"b",)"
      R"("features":"f","result":"RESULT","date":"DATE"})";
  auto with = [&](const std::string& r, const std::string& d) {
    std::string s = rec;
    s.replace(s.find("RESULT"), 6, r);
    s.replace(s.find("DATE"), 4, d);
    return s;
  };
  std::ofstream(path) << with("pass-new", "2026-12-06") << "\n"
                      << with("FAIL-old", "2026-12-01") << "\n";
  std::string out;
  ASSERT_EQ(tools::run_strata("support-matrix " + path, &out), 0) << out;
  EXPECT_NE(out.find("| m | q | 2 | 1 | 2 | 1 | b | f | pass-new | 2026-12-06 |"), std::string::npos)
      << out;
  EXPECT_EQ(out.find("FAIL-old"), std::string::npos);
  std::ofstream(path, std::ios::app) << "{\"model\": 1}\n";
  EXPECT_EQ(tools::run_strata("support-matrix " + path, &out, true), 1);
  fs::remove(path);
}

// Through the server: `mpirun -np 2 strata serve --enable-expert-parallel` answers greedy
// requests (prompt lengths around the tiny models' window 16, ratios 2 / 4 / 16 and unit 64;
// sequential, then four at once) with the token ids and logprobs of a one-rank server.
struct Answer {
  int status = 0;
  std::string ids, logprobs, body;
};

Answer ask(int port, const std::vector<int32_t>& prompt) {
  const nlohmann::json j = {{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0},
                            {"logprobs", 2}, {"return_token_ids", true}, {"ignore_eos", true}};
  const testing::HttpReply h = testing::http_post(port, "/v1/completions", j.dump());
  Answer a;
  a.status = h.status;
  a.body = h.body;
  if (h.status != 200) return a;
  const nlohmann::json b = nlohmann::json::parse(h.body);
  a.ids = b["choices"][0]["token_ids"].dump();
  a.logprobs = b["choices"][0]["logprobs"].dump();
  return a;
}

void serve_equal(const std::string& model) {
  const std::vector<std::string> args = {"serve", "--model", src_dir() + "/models/" + model,
                                         "--port", "0", "--threads", "1", "--disable-log-requests"};
  auto one = testing::StrataProcess::start(args, model + "-1rank");
  std::vector<std::string> ep_args = args;
  ep_args.push_back("--enable-expert-parallel");
  auto two = testing::StrataProcess::start_with(
      {"/usr/bin/mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2"}, ep_args,
      model + "-2ranks");
  ASSERT_TRUE(one && two);
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t len : {1, 2, 15, 16, 17, 33, 63, 64, 65, 150})
    prompts.push_back(testing::random_prompt(len, static_cast<uint32_t>(len * 7 + 1), 512));
  for (const auto& p : prompts) {
    const Answer a = ask(one->port(), p), b = ask(two->port(), p);
    ASSERT_EQ(a.status, 200) << a.body;
    ASSERT_EQ(b.status, 200) << b.body;
    EXPECT_EQ(b.ids, a.ids) << model << " len " << p.size();
    EXPECT_EQ(b.logprobs, a.logprobs) << model << " len " << p.size();
  }
  std::vector<Answer> together(4);
  std::vector<std::thread> th;
  for (int i = 0; i < 4; ++i)
    th.emplace_back([&, i] { together[i] = ask(two->port(), prompts[3 + 2 * i]); });
  for (auto& t : th) t.join();
  for (int i = 0; i < 4; ++i) {
    const Answer a = ask(one->port(), prompts[3 + 2 * i]);
    EXPECT_EQ(together[i].ids, a.ids) << model << " concurrent " << i;
    EXPECT_EQ(together[i].logprobs, a.logprobs) << model << " concurrent " << i;
  }
  record(model, 2, 2, "serve (greedy, batched), EP over all ranks, attention replicated",
         ::testing::Test::HasFailure() ? "FAIL" : "pass: outputs equal 1 rank");
}

TEST(MpiLayouts, ServerWithExpertParallelAnswersAsOneRankV41) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  serve_equal("deepseek-v41-tiny");
}

TEST(MpiLayouts, ServerWithExpertParallelAnswersAsOneRankV4) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  serve_equal("deepseek-v4flash-tiny");
}

// `generate` runs the same calls on every rank: under mpirun with expert parallelism its
// output (greedy and seeded sampling) equals one rank's.
TEST(MpiLayouts, GenerateWithExpertParallelEqualsOneRank) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  for (const char* model : {"deepseek-v41-tiny", "deepseek-v4flash-tiny"})
    for (const char* sampling : {"-t 0", "-t 0.8 -s 7"}) {
      const std::string args = fmt::format(
          "generate -m {}/models/{} --prompt-ids 5,9,22,37,41,60,77,81,90,101,3,4,5,6,7,8,9,10 "
          "-n 24 {} --threads 1",
          src_dir(), model, sampling);
      std::string one, two;
      ASSERT_EQ(tools::run_strata(args, &one), 0) << one;
      EXPECT_EQ(tools::run_command(
                    fmt::format("timeout -s KILL 120 mpirun --oversubscribe --allow-run-as-root "
                                "-np 2 {} {} --enable-expert-parallel 2>/dev/null",
                                tools::strata_binary(), args),
                    &two),
                0)
          << two;
      EXPECT_EQ(two, one) << model << " " << sampling;
      EXPECT_FALSE(one.empty());
    }
}

}  // namespace
}  // namespace strata
