// Helpers of the multi-rank tests (tests/mpi_*_test.cc): real `mpirun ... strata` processes,
// their report lines, support-matrix records, greedy completions through a server.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <thread>

#include "cli_runner.h"
#include "pd_process.h"
#include "runner_fixtures.h"
#include "serve/test_http_client.h"

namespace strata::mpitest {

namespace fs = std::filesystem;

inline std::string src_dir() {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  return e ? e : STRATA_SOURCE_DIR;
}

inline bool have_mpirun() { return ::access("/usr/bin/mpirun", X_OK) == 0; }

// Runs a shell command; stdout (+ stderr) into *out; the exit status.
inline int sh(const std::string& cmd, std::string* out) {
  out->clear();
  return tools::run_command(cmd + " 2>&1", out);
}

inline std::string line_starting(const std::string& text, const std::string& prefix) {
  const size_t at = text.find("\n" + prefix);
  const size_t start = text.rfind(prefix, 0) == 0 ? 0 : (at == std::string::npos ? at : at + 1);
  if (start == std::string::npos) return "";
  return text.substr(start, text.find('\n', start) - start);
}

// The record's quantization column: the tiny DeepSeek checkpoints keep the released formats;
// stories260K keeps its f32 checkpoint (the label validate matrix writes).
inline std::string quantization_of(const std::string& model) {
  return model.rfind("stories", 0) == 0 ? "none (checkpoint dtype)"
                                        : "checkpoint formats (FP8 weights, FP4 experts)";
}

inline void record(const std::string& model, int ranks, int ep, const std::string& features,
            const std::string& result, int dcp = 1, int pp = 1) {
  const char* e = std::getenv("STRATA_SUPPORT_RECORDS");
  const std::string path =
      e ? e : (fs::path(tools::strata_binary()).parent_path().parent_path().parent_path() /
               "support-matrix-records.jsonl").string();
  const std::time_t t = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&t));
  std::ofstream(path, std::ios::app)
      << fmt::format("{{\"model\":\"{}\",\"quantization\":\"{}\",\"ranks\":{},\"dcp\":{},"
                     "\"ep\":{},\"pp\":{},\"backend\":\"Open MPI (mpirun, one node)\","
                     "\"features\":\"{}\",\"result\":\"{}\",\"date\":\"{}\"}}\n",
                     model, quantization_of(model), ranks, dcp, ep, pp, features,
                     result, date);
}

// One greedy completion (8 tokens, 2 logprobs) of `prompt` through a server on `port`.
struct Answer {
  int status = 0;
  std::string ids, logprobs, body;
};

inline Answer ask(int port, const std::vector<int32_t>& prompt) {
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

// A layout under test: mpirun's -np, the EP and DCP sizes recorded, and what the record says.
struct Layout {
  int np = 2, ep = 1, dcp = 1;
  std::string features;
  int pp = 1;
};

// `validate golden` of models/MODEL on testdata/golden/GOLDEN under `mpirun -np L.np ...
// FLAGS` prints one rank's report line and logits digest (every logits row bit for bit),
// twice in a row; one support-matrix record per layout. `extra`: more validate flags for
// both runs (e.g. --call-shape reference).
inline void golden_equal_one_rank(const std::string& model, const std::string& golden,
                                  int np, const std::string& flags, const Layout& l,
                                  const std::string& extra = "") {
  const std::string args = fmt::format(
      "validate golden --model {}/models/{} --cases {}/testdata/golden/{}/cases.safetensors "
      "--threads 1 {}",
      src_dir(), model, src_dir(), golden, extra);
  std::string one;
  ASSERT_EQ(tools::run_strata(args, &one), 0) << one;
  const std::string digest = line_starting(one, "logits digest: ");
  const std::string last = line_starting(one, "golden: ");
  ASSERT_FALSE(digest.empty()) << one;
  for (int run = 0; run < 2; ++run) {
    std::string out;
    const int rc = sh(fmt::format("timeout -s KILL 300 mpirun --oversubscribe --allow-run-as-root "
                                  "-np {} {} {} {}",
                                  np, tools::strata_binary(), args, flags),
                      &out);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_EQ(line_starting(out, "logits digest: "), digest) << model << " np " << np << " "
                                                             << flags << "\n" << out;
    EXPECT_EQ(line_starting(out, "golden: "), last) << model << " np " << np << " " << flags;
    if (l.ep > 1) {
      EXPECT_NE(out.find(fmt::format("expert parallel: {} ranks", np)), std::string::npos) << out;
    }
    if (l.dcp > 1) {
      EXPECT_NE(out.find(fmt::format("decode context parallel: {} ranks", np)), std::string::npos)
          << out;
    }
    if (l.pp > 1) {
      EXPECT_NE(out.find(fmt::format("pipeline parallel: {} stages", np)), std::string::npos)
          << out;
    }
    const bool same = rc == 0 && line_starting(out, "logits digest: ") == digest;
    if (run == 0)
      record(model, np, l.ep, l.features, same ? "pass: logits bit-identical to 1 rank" : "FAIL",
             l.dcp, l.pp);
  }
}

// Prompt lengths around the tiny models' window 16, ratios 2 / 4 / 16 and unit 64.
inline const std::vector<int64_t> kBoundaryLens = {1, 2, 15, 16, 17, 33, 63, 64, 65, 150};

// Through the server: `mpirun -np L.np strata serve ... FLAGS` answers greedy requests of
// `lens` tokens (sequential, then four at once) with the token ids and logprobs of a one-rank
// server; one support-matrix record.
inline void serve_equal_one_rank(const std::string& model, const std::vector<std::string>& flags,
                                 const std::vector<int64_t>& lens, const Layout& l) {
  const std::vector<std::string> args = {"serve", "--model", src_dir() + "/models/" + model,
                                         "--port", "0", "--threads", "1", "--disable-log-requests"};
  auto one = testing::StrataProcess::start(args, model + "-1rank");
  std::vector<std::string> multi = args;
  multi.insert(multi.end(), flags.begin(), flags.end());
  auto many = testing::StrataProcess::start_with(
      {"/usr/bin/mpirun", "--oversubscribe", "--allow-run-as-root", "-np", std::to_string(l.np)},
      multi, model + "-" + std::to_string(l.np) + "ranks");
  ASSERT_TRUE(one && many);
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t len : lens)
    prompts.push_back(testing::random_prompt(len, static_cast<uint32_t>(len * 7 + 1), 512));
  for (const auto& p : prompts) {
    const Answer a = ask(one->port(), p), b = ask(many->port(), p);
    ASSERT_EQ(a.status, 200) << a.body;
    ASSERT_EQ(b.status, 200) << b.body;
    EXPECT_EQ(b.ids, a.ids) << model << " len " << p.size();
    EXPECT_EQ(b.logprobs, a.logprobs) << model << " len " << p.size();
  }
  const size_t n = std::min<size_t>(4, prompts.size());
  std::vector<Answer> together(n);
  std::vector<std::thread> th;
  for (size_t i = 0; i < n; ++i)
    th.emplace_back([&, i] { together[i] = ask(many->port(), prompts[prompts.size() - 1 - i]); });
  for (auto& t : th) t.join();
  for (size_t i = 0; i < n; ++i) {
    const Answer a = ask(one->port(), prompts[prompts.size() - 1 - i]);
    EXPECT_EQ(together[i].ids, a.ids) << model << " concurrent " << i;
    EXPECT_EQ(together[i].logprobs, a.logprobs) << model << " concurrent " << i;
  }
  // The layouts' collective time is exported (rank 0's), and is 0 on one rank.
  auto metric = [](int port, const std::string& name) {
    const std::string body = testing::http_get(port, "/metrics").body;
    const size_t at = body.find("\nstrata:" + name + "{");
    if (at == std::string::npos) return -1.0;
    return std::stod(body.substr(body.find("} ", at) + 2));
  };
  for (const auto& [name, on] : {std::pair{std::string("moe_collective_seconds_total"), l.ep > 1},
                                 {std::string("dcp_exchange_seconds_total"), l.dcp > 1},
                                 {std::string("pp_boundary_seconds_total"), l.pp > 1}}) {
    EXPECT_EQ(metric(one->port(), name), 0.0) << name;
    const double v = metric(many->port(), name);
    if (on) {
      EXPECT_GT(v, 0.0) << name;
    } else {
      EXPECT_EQ(v, 0.0) << name;
    }
  }
  record(model, l.np, l.ep, l.features,
         ::testing::Test::HasFailure() ? "FAIL" : "pass: outputs equal 1 rank", l.dcp, l.pp);
}

// `generate` runs the same calls on every rank: under `mpirun -np 2 ... FLAGS` its output
// (greedy and seeded sampling; V4.1 and V4 unless `models` says) equals one rank's.
inline void generate_equals_one_rank(
    const std::string& flags, int tokens,
    const std::vector<std::string>& models = {"deepseek-v41-tiny", "deepseek-v4flash-tiny"}) {
  for (const std::string& model : models)
    for (const char* sampling : {"-t 0", "-t 0.8 -s 7"}) {
      const std::string args = fmt::format(
          "generate -m {}/models/{} --prompt-ids 5,9,22,37,41,60,77,81,90,101,3,4,5,6,7,8,9,10 "
          "-n {} {} --threads 1",
          src_dir(), model, tokens, sampling);
      std::string one, two;
      ASSERT_EQ(tools::run_strata(args, &one), 0) << one;
      EXPECT_EQ(tools::run_command(
                    fmt::format("timeout -s KILL 120 mpirun --oversubscribe --allow-run-as-root "
                                "-np 2 {} {} {} 2>/dev/null",
                                tools::strata_binary(), args, flags),
                    &two),
                0)
          << two;
      EXPECT_EQ(two, one) << model << " " << sampling << " " << flags;
      EXPECT_FALSE(one.empty());
    }
}

}  // namespace strata::mpitest
