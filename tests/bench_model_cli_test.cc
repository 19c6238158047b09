// `strata bench model` (src/tools/cmd_bench_model.cc) end to end on the embedded tiny V4.1
// checkpoint through the real `strata` binary (its JSON output): the roofline arithmetic
// against the numbers it reports, and the conservative bandwidth (the higher of the readings
// before and after the runs). No timings are asserted.
//
// The binary: see tests/cli_runner.h.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace strata::tools {
namespace {

std::string v41_dir() {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  return std::string(e ? e : STRATA_SOURCE_DIR) + "/models/deepseek-v41-tiny";
}

// `strata bench model --model <tiny V4.1> <args> --bandwidth-mib 8 --json`, parsed; fails the
// test (and returns null) when the command fails or prints no JSON.
nlohmann::json bench_json(const std::string& args) {
  std::string out;
  const int rc = run_strata("bench model --model " + v41_dir() + " " + args +
                                " --bandwidth-mib 8 --json",
                            &out);
  EXPECT_EQ(rc, 0) << out;
  const size_t brace = out.find('{');
  if (rc != 0 || brace == std::string::npos) {
    ADD_FAILURE() << "no JSON: " << out;
    return nullptr;
  }
  auto j = nlohmann::json::parse(out.substr(brace), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << out;
  return j.is_discarded() ? nullptr : j;
}

TEST(BenchModelCli, RooflineUsesTheHigherBandwidthReading) {
  const auto j = bench_json("--prompt-tokens 6 --decode-tokens 3 --repeats 1 --threads 1");
  ASSERT_FALSE(j.is_null());
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

// The load time and its peer, one page-cache read of the checkpoint, are reported; with
// --weight-cache-dir the first run writes the packed-weight cache there and the next maps it
// (the same decode rate's inputs: the tokens agree through the logits tests elsewhere).
TEST(BenchModelCli, LoadTimeBesideACheckpointReadAndTheWeightCacheFlag) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("strata_bench_wc_" + std::to_string(getpid()));
  fs::remove_all(dir);
  for (int run = 0; run < 2; ++run) {
    const auto j = bench_json("--prompt-tokens 4 --decode-tokens 2 --repeats 1 --threads 1 "
                              "--sgemm-size 0 --weight-cache-dir " + dir.string());
    ASSERT_FALSE(j.is_null());
    EXPECT_GT(j["load_s"].get<double>(), 0.0);
    EXPECT_GT(j["checkpoint_read_s"].get<double>(), 0.0);
    int packed = 0;
    for (const auto& e : fs::directory_iterator(dir))
      packed += e.path().extension() == ".strata-packed";
    EXPECT_EQ(packed, 1) << "run " << run;
  }
  std::string out;
  ASSERT_EQ(run_strata("bench model --model " + v41_dir() + " --prompt-tokens 4 --decode-tokens 2 "
                       "--repeats 1 --threads 1 --sgemm-size 0 --bandwidth-mib 8 "
                       "--weight-cache-dir none", &out), 0) << out;
  EXPECT_NE(out.find("one page-cache read of the checkpoint"), std::string::npos) << out;
  fs::remove_all(dir);
}

// --breakdown: the decode phases of the V4.1 forward (GEMM families, attention), per token;
// their times plus the rest add up to the measured decode time per token, and the token
// time agrees with the reported rate (a median of one repeat: the same run). Without the
// flag, no phase keys.
TEST(BenchModelCli, BreakdownPhasesAddUpToTheDecodeToken) {
  const auto j = bench_json("--prompt-tokens 6 --decode-tokens 4 --repeats 1 --threads 2 --breakdown");
  ASSERT_FALSE(j.is_null());
  ASSERT_TRUE(j.contains("decode_phases")) << j.dump();
  const auto& phases = j["decode_phases"];
  ASSERT_TRUE(phases.is_array());
  double sum = 0;
  bool gemm = false, attention = false;
  for (const auto& p : phases) {
    const std::string name = p["phase"];
    gemm = gemm || name.find("gemm") != std::string::npos;
    attention = attention || name.find("attention") != std::string::npos;
    EXPECT_GT(p["calls_per_token"].get<double>(), 0.0) << name;
    EXPECT_GE(p["ms_per_token"].get<double>(), 0.0) << name;
    sum += p["ms_per_token"].get<double>();
  }
  EXPECT_TRUE(gemm) << j.dump();
  EXPECT_TRUE(attention) << j.dump();
  const double token_ms = j["decode_ms_per_token"], other_ms = j["decode_other_ms_per_token"];
  EXPECT_GE(other_ms, 0.0);
  EXPECT_NEAR(sum + other_ms, token_ms, 1e-6 * token_ms);
  EXPECT_NEAR(1000.0 / token_ms, j["decode_tok_s"].get<double>(),
              1e-6 * j["decode_tok_s"].get<double>());

  const auto k = bench_json("--prompt-tokens 6 --decode-tokens 2 --repeats 1 --threads 1");
  ASSERT_FALSE(k.is_null());
  EXPECT_FALSE(k.contains("decode_phases"));
}

// Prefill GFLOP/s and its sgemm peer: the GEMM FLOPs per prompt token equal 2 x the weight
// elements counted here straight from the checkpoint's safetensors header (the backbone's
// linear weights and mHC mixes; FP4 experts, stored two codes per I8 byte, at top-k / n of
// all experts), the GFLOP/s is that times the reported prefill rate, and OpenBLAS sgemm was
// measured (positive, at the requested size).
// 2 x the backbone's GEMM weight elements of a checkpoint, from its safetensors header: the
// linear weights (names ending in one of `dense`), mHC mixes, and routed experts (FP4 stored
// two codes per I8 byte) at `k_of_n` of all of them.
int64_t header_gemm_flops(const std::string& file, const std::vector<std::string>& dense,
                          double k_of_n) {
  std::ifstream f(file, std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string hdr(n, '\0');
  f.read(hdr.data(), static_cast<std::streamsize>(n));
  const auto h = nlohmann::json::parse(hdr);
  auto ends = [](const std::string& s, const std::string& t) {
    return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
  };
  int64_t d = 0, routed = 0;
  for (const auto& [name, t] : h.items()) {
    if (name.rfind("layers.", 0) != 0) continue;
    int64_t e = 1;
    for (int64_t x : t["shape"]) e *= x;
    if (name.find(".ffn.experts.") != std::string::npos && ends(name, ".weight")) {
      routed += t["dtype"] == "I8" ? 2 * e : e;
      continue;
    }
    for (const std::string& suf : dense)
      if (ends(name, suf)) d += e;
  }
  return 2 * (d + static_cast<int64_t>(static_cast<double>(routed) * k_of_n));
}

// The V4 path (tiny V4-Flash): its compressors (kv and indexer) and no Engram; 6 routed
// experts, 2 per token (config.json).
TEST(BenchModelCli, PrefillGflopsOfTheV4Path) {
  const std::string dir = std::string(std::getenv("STRATA_SOURCE_DIR") ? std::getenv("STRATA_SOURCE_DIR")
                                                                       : STRATA_SOURCE_DIR) +
                          "/models/deepseek-v4flash-tiny";
  const int64_t want = header_gemm_flops(
      dir + "/model.safetensors",
      {"attn.wq_a.weight", "attn.wq_b.weight", "attn.wkv.weight", "attn.wo_a.weight",
       "attn.wo_b.weight", "compressor.wkv.weight", "compressor.wgate.weight",
       "indexer.wq_b.weight", "indexer.weights_proj.weight", "ffn.gate.weight",
       "shared_experts.w1.weight", "shared_experts.w2.weight", "shared_experts.w3.weight",
       "hc_attn_fn", "hc_ffn_fn"},
      2.0 / 6.0);
  std::string out;
  ASSERT_EQ(run_strata("bench model --model " + dir + " --prompt-tokens 8 --decode-tokens 1 "
                       "--repeats 1 --threads 1 --sgemm-size 0 --bandwidth-mib 8 --json",
                       &out),
            0)
      << out;
  const auto j = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(j["prefill_gemm_flops_per_token"].get<double>(), static_cast<double>(want));
}

TEST(BenchModelCli, PrefillGflopsCountTheCheckpointsGemmWeights) {
  // config: 8 routed experts, 2 per token
  const int64_t want = header_gemm_flops(
      v41_dir() + "/model.safetensors",
      {"attn.wq_a.weight", "attn.wq_b.weight", "attn.wkv.weight", "attn.wo_a.weight",
       "attn.wo_b.weight", "compressor.wkv.weight", "compressor.wgate.weight",
       "indexer.wq_b.weight", "indexer.weights_proj.weight", "indexer.wk.weight",
       "ffn.gate.weight", "shared_experts.w1.weight", "shared_experts.w2.weight",
       "shared_experts.w3.weight", "engram.wkv.weight", "hc_attn_fn", "hc_ffn_fn"},
      2.0 / 8.0);
  const auto j = bench_json("--prompt-tokens 8 --decode-tokens 1 --repeats 1 --threads 1 --sgemm-size 128");
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j["prefill_gemm_flops_per_token"].get<double>(), static_cast<double>(want));
  const double gf = j["prefill_gflops"], tps = j["prefill_tok_s"], sg = j["sgemm_gflops"];
  EXPECT_NEAR(gf, tps * static_cast<double>(want) / 1e9, 1e-9 * gf);
  EXPECT_GT(sg, 0.0);
  EXPECT_EQ(j["sgemm_size"], 128);
  EXPECT_NEAR(j["prefill_sgemm_ratio"].get<double>(), gf / sg, 1e-9 * gf / sg);
  const auto k = bench_json("--prompt-tokens 8 --decode-tokens 1 --repeats 1 --threads 1 --sgemm-size 0");
  ASSERT_FALSE(k.is_null());
  EXPECT_TRUE(k["sgemm_gflops"].is_null()) << k["sgemm_gflops"];  // skipped
  EXPECT_TRUE(k["prefill_sgemm_ratio"].is_null());
  std::string out;  // a negative size is a usage error that names the range
  EXPECT_EQ(run_strata("bench model --model " + v41_dir() + " --sgemm-size -5", &out, true), 2);
  EXPECT_NE(out.find("not in range 0 to 16384"), std::string::npos) << out;
}

// The Llama path (embedded stories260K): per layer wq, wo [64, 64], wk, wv [4 kv heads x 8, 64]
// and gate/up/down [172, 64] (its config.json), 5 layers.
TEST(BenchModelCli, PrefillGflopsOfTheLlamaPath) {
  std::string out;
  ASSERT_EQ(run_strata("bench model --prompt-tokens 8 --decode-tokens 1 --repeats 1 --threads 1 "
                       "--sgemm-size 64 --bandwidth-mib 8 --json",
                       &out),
            0)
      << out;
  const auto j = nlohmann::json::parse(out.substr(out.find('{')));
  const int64_t per_layer = 2 * 64 * 64 + 2 * 32 * 64 + 3 * 172 * 64;
  EXPECT_EQ(j["prefill_gemm_flops_per_token"].get<double>(), 2.0 * 5 * per_layer);
}

TEST(BenchModelCli, RejectsAContextOverflow) {
  std::string out;
  const int rc = run_strata("bench model --model " + v41_dir() +
                                " --prompt-tokens 100000 --decode-tokens 3 --bandwidth-mib 8",
                            &out, true);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("exceed the context"), std::string::npos) << out;
}

// --context-sweep: one row per length, in order, the first at ratio 1; the bytes a decode
// token reads grow with the context (compressed rows, index keys) and the floor is those
// bytes at the reported bandwidth. A length past the context is a usage error.
TEST(BenchModelCli, ContextSweepReportsEveryLengthAndItsFloor) {
  const auto j = bench_json("--context-sweep 8,64,200 --decode-tokens 4 --repeats 1 --threads 1");
  ASSERT_FALSE(j.is_null());
  const auto& rows = j["context_sweep"];
  ASSERT_EQ(rows.size(), 3u) << j.dump();
  const double bw = j["read_bandwidth_gb_s"].get<double>() * 1e9;
  ASSERT_GT(bw, 0);
  const int64_t want[3] = {8, 64, 200};
  for (size_t i = 0; i < 3; ++i) {
    const auto& r = rows[i];
    EXPECT_EQ(r["context"].get<int64_t>(), want[i]);
    EXPECT_GT(r["tpot_ms"].get<double>(), 0);
    EXPECT_NEAR(r["tpot_ratio"].get<double>(),
                r["tpot_ms"].get<double>() / rows[0]["tpot_ms"].get<double>(), 1e-9);
    EXPECT_NEAR(r["bandwidth_floor_ms"].get<double>(),
                1e3 * r["bytes_per_token"].get<double>() / bw, 1e-9);
  }
  EXPECT_DOUBLE_EQ(rows[0]["tpot_ratio"].get<double>(), 1.0);
  EXPECT_GT(rows[2]["bytes_per_token"].get<int64_t>(), rows[0]["bytes_per_token"].get<int64_t>());
  std::string out;
  EXPECT_EQ(run_strata("bench model --model " + v41_dir() +
                           " --context-sweep 8,100000 --decode-tokens 4 --bandwidth-mib 8",
                       &out, true),
            2)
      << out;
  EXPECT_NE(out.find("--context-sweep length 100000"), std::string::npos) << out;
}

// A count of 0 is a usage error with a message that names the option and the rule.
// --breakdown-prefill: the prefill's phases (the V4.1 forward's GEMM batches, attention,
// mHC) per prompt in the text report; with --breakdown it is refused before the load.
TEST(BenchModelCli, BreakdownPrefillListsThePrefillPhases) {
  std::string out;
  int rc = run_strata("bench model --model " + v41_dir() +
                          " --prompt-tokens 6 --decode-tokens 2 --repeats 1 --bandwidth-mib 8 "
                          "--sgemm-size 0 --breakdown-prefill",
                      &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("prefill phases per prompt of 6 tokens over 1 prompts"), std::string::npos)
      << out;
  for (const char* phase : {"gemm batch", "attention:", "mhc: mixes"})
    EXPECT_NE(out.find(std::string("\n  ") + phase), std::string::npos) << phase << "\n" << out;
  EXPECT_EQ(out.find("decode phases"), std::string::npos) << out;
  rc = run_strata("bench model --model " + v41_dir() + " --breakdown --breakdown-prefill", &out,
                  true);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--breakdown and --breakdown-prefill: pass one"), std::string::npos) << out;
  EXPECT_EQ(out.find("loading"), std::string::npos) << out;
}

TEST(BenchModelCli, RejectsZeroRepeatsClearly) {
  std::string out;
  const int rc = run_strata("bench model --model " + v41_dir() + " --repeats 0", &out, true);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--repeats: must be greater than 0 (got 0)"), std::string::npos) << out;
}

}  // namespace
}  // namespace strata::tools
