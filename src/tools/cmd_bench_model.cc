// `strata bench model`: prefill and decode throughput of a model through the normal runner
// path, with decode expressed as a fraction of the memory-bandwidth roofline measured in the
// same run (streaming read, same thread count).
// `strata bench make-llama2c`: writes a random-weight llama2.c legacy-v0 checkpoint (e.g. the
// 85M-parameter reference model of docs/PERFORMANCE.md).
#include <time.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <optional>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/huge_pages.h"
#include "base/phase_profile.h"
#include "base/thread_pool.h"
#include "exec/llama/llama_runner.h"
#include "exec/runner_factory.h"
#include "exec/sampler.h"
#include "kernels/cpu_features.h"
#include "kernels/membw.h"
#include "model/llama2c_format.h"
#include "model/tokenizer.h"
#include "tools/bench_context_sweep.h"
#include "tools/bench_file_read.h"
#include "tools/bench_sgemm.h"
#include "tools/bench_spec.h"
#include "tools/command_registry.h"
#include "tools/rank_flags.h"
#include "tools/tier_flags.h"

namespace strata::tools {
namespace {

struct BenchModelCli {
  std::string model;
  int64_t prompt_tokens = 128;
  int64_t decode_tokens = 128;
  int threads = 0;
  int repeats = 3;
  int64_t bw_mib = 1024;
  bool json = false;
  bool breakdown = false;
  bool breakdown_prefill = false;
  int sgemm_size = 2048;
  std::string speculative_config;  // also compare decoding with speculation (bench_spec.h)
  std::string prompt_file;         // text prompt (tokenized) instead of random ids
  RankLayout ranks;  // --enable-expert-parallel, --decode-context-parallel-size (mpirun)
  std::vector<int64_t> context_sweep;  // TPOT per prompt length instead of the single run
  std::string weight_cache_dir;        // --weight-cache-dir ("" = the default)
};

using Clock = std::chrono::steady_clock;
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int run_bench_model(BenchModelCli& o) {
  if (o.breakdown_prefill && o.breakdown) {  // one profile: before the (long) load
    fmt::print(stderr, "strata bench model: --breakdown and --breakdown-prefill: pass one\n");
    return 2;
  }
  if (o.model.empty()) {
    auto d = default_model_dir();
    if (!d.ok()) {
      fmt::print(stderr, "strata bench model: {}\n", d.status().to_string());
      return 1;
    }
    o.model = *d;
  }
  StatusOr<SpeculativeConfig> spec = parse_speculative_config(o.speculative_config);
  if (!spec.ok()) {
    fmt::print(stderr, "strata bench model: {}\n", spec.status().message());
    return 2;
  }
  if (const int rc = setup_ranks("strata bench model", o.ranks); rc != 0) return rc;
  apply_weight_cache_flag(o.weight_cache_dir);
  RunnerOptions ro;
  ro.threads = o.threads;
  ro.progress = true;
  // Progress on stderr: loading and packing a large model, and each run, take a while.
  const auto t_load = Clock::now();
  fmt::print(stderr, "[bench model] loading {} ...\n", o.model);
  auto runner_or = make_model_runner(o.model, ro);
  if (!runner_or.ok()) {
    fmt::print(stderr, "strata bench model{}: {}\n", rank_tag(), runner_or.status().to_string());
    return 1;
  }
  ModelRunner& runner = **runner_or;
  const ModelInfo& info = runner.info();
  if (Status st = check_speculative_config(*spec, runner); !st.ok()) {
    fmt::print(stderr, "strata bench model: {}\n", st.message());
    return 2;
  }
  const double load_s = seconds_since(t_load);
  fmt::print(stderr, "[bench model] loaded in {:.1f} s\n", load_s);
  // The load's peer: one page-cache read of the checkpoint files, measured now (goal 4).
  const StatusOr<double> read_s = page_cache_read_seconds(o.model);
  const int threads = o.threads > 0 ? o.threads : ThreadPool(0).num_threads();
  if (o.prompt_tokens < 1 || o.decode_tokens < 1) {
    fmt::print(stderr, "strata bench model: --prompt-tokens and --decode-tokens must be >= 1\n");
    return 2;
  }
  if (o.prompt_tokens + o.decode_tokens > info.max_context) {
    fmt::print(stderr, "strata bench model: prompt + decode tokens ({}) exceed the context ({})\n",
               o.prompt_tokens + o.decode_tokens, info.max_context);
    return 2;
  }

  if (!o.context_sweep.empty()) {
    StatusOr<std::vector<ContextSweepRow>> rows =
        bench_context_sweep(runner, o.context_sweep, o.decode_tokens, o.repeats);
    if (!rows.ok()) {
      fmt::print(stderr, "strata bench model: {}\n", rows.status().message());
      return rows.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
    }
    // The bandwidth floor per length: the bytes a decode token reads there (weights + state)
    // at the streaming read bandwidth measured now with the same threads.
    ThreadPool sweep_bw_pool(threads);
    const double bw = kernels::measure_read_bandwidth(sweep_bw_pool, size_t(o.bw_mib) << 20);  // B/s
    auto floor_ms = [&](const ContextSweepRow& r) {
      return bw > 0 ? 1e3 * static_cast<double>(r.bytes_per_token) / bw : 0.0;
    };
    if (o.json) {
      nlohmann::json j = {{"model", o.model}, {"threads", threads}, {"decode_tokens", o.decode_tokens},
                          {"read_bandwidth_gb_s", bw / 1e9}, {"context_sweep", nlohmann::json::array()}};
      for (const ContextSweepRow& r : *rows)
        j["context_sweep"].push_back({{"context", r.context}, {"tpot_ms", r.tpot_ms},
                                      {"tpot_ratio", r.tpot_ms / rows->front().tpot_ms},
                                      {"prefill_tok_s", r.prefill_tok_s},
                                      {"bytes_per_token", r.bytes_per_token},
                                      {"bandwidth_floor_ms", floor_ms(r)}});
      fmt::print("{}\n", j.dump(2));
      return 0;
    }
    fmt::print("model          {} ({})\nthreads        {}\n", o.model, info.architecture, threads);
    fmt::print("read bandwidth {:.2f} GB/s (streaming read of {} MiB)\n", bw / 1e9, o.bw_mib);
    fmt::print("context sweep  TPOT over {} decode tokens after each prompt, median of {}; floor = "
               "bytes read per decode token / read bandwidth\n", o.decode_tokens, o.repeats);
    fmt::print("  {:>8}  {:>10}  {:>9}  {:>14}  {:>10}  {:>9}  {:>9}\n", "context", "TPOT ms",
               "x first", "prefill tok/s", "MB/token", "floor ms", "x floor");
    for (const ContextSweepRow& r : *rows)
      fmt::print("  {:>8}  {:>10.3f}  {:>9.2f}  {:>14.1f}  {:>10.2f}  {:>9.3f}  {:>9.1f}\n",
                 r.context, r.tpot_ms, r.tpot_ms / rows->front().tpot_ms, r.prefill_tok_s,
                 r.bytes_per_token / 1e6, floor_ms(r),
                 floor_ms(r) > 0 ? r.tpot_ms / floor_ms(r) : 0.0);
    return 0;
  }

  std::vector<int32_t> file_prompt;
  if (!o.prompt_file.empty()) {
    std::ifstream f(o.prompt_file, std::ios::binary);
    auto tok = load_tokenizer_from_dir(o.model);
    if (!f || !tok.ok()) {
      fmt::print(stderr, "strata bench model: --prompt-file needs a readable file and a model "
                         "with a tokenizer\n");
      return 2;
    }
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (info.bos_id >= 0) file_prompt.push_back(info.bos_id);
    for (int32_t t : (*tok)->encode(text)) file_prompt.push_back(t);
    if (static_cast<int64_t>(file_prompt.size()) > o.prompt_tokens) file_prompt.resize(o.prompt_tokens);
    o.prompt_tokens = static_cast<int64_t>(file_prompt.size());
  }

  // 1. Read bandwidth with the same thread count, measured before and again after the runs
  // (step 3): on a shared machine one reading can land in a slow moment, which would inflate
  // the fraction; the roofline uses the higher reading.
  ThreadPool bw_pool(threads);
  const double bw_before = kernels::measure_read_bandwidth(bw_pool, size_t(o.bw_mib) << 20);
  // The fp32 GEMM peer of the prefill figure: OpenBLAS sgemm, same threads, measured first.
  const double sgemm_gflops = o.sgemm_size > 0 ? measure_sgemm_gflops(threads, o.sgemm_size) : 0.0;
  const double prefill_flops = static_cast<double>(runner.prefill_flops_per_token());

  // 2. Prefill and decode through ModelRunner::step.
  std::mt19937_64 rng(1234);
  std::vector<int32_t> prompt(o.prompt_tokens);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % info.vocab_size);
  if (info.bos_id >= 0) prompt[0] = info.bos_id;
  if (!file_prompt.empty()) prompt = file_prompt;
  std::vector<double> prefill_s, decode_s;
  double decode_cpu = 0, decode_wall = 0;
  std::vector<float> logits;
  // --breakdown-prefill: the phases of the prefills (reps 1..), read before decode adds to them.
  std::vector<profile::PhaseTotals> prefill_phases;
  if (o.breakdown_prefill) profile::reset();
  for (int rep = 0; rep <= o.repeats; ++rep) {  // rep 0 is a warm-up
    fmt::print(stderr, "[bench model] {} {}/{}: prefill {} + decode {} tokens\n",
               rep == 0 ? "warm-up" : "run", rep == 0 ? 1 : rep, rep == 0 ? 1 : o.repeats,
               o.prompt_tokens, o.decode_tokens);
    const SeqId seq{rep};
    if (Status st = runner.add_sequence(seq); !st.ok()) {
      fmt::print(stderr, "strata bench model: {}\n", st.to_string());
      return 1;
    }
    if (o.breakdown_prefill && rep > 0) profile::set_enabled(true);
    auto t0 = Clock::now();
    StepItem item{seq, prompt, true};
    if (Status st = runner.step({&item, 1}, &logits); !st.ok()) {
      fmt::print(stderr, "strata bench model: {}\n", st.to_string());
      return 1;
    }
    const double tp = seconds_since(t0);
    profile::set_enabled(false);
    auto t1 = Clock::now();
    const double c1 = cpu_seconds();
    if (o.breakdown_prefill && rep > 0) prefill_phases = profile::snapshot();
    if (o.breakdown && rep > 0) {
      if (rep == 1) profile::reset();
      profile::set_enabled(true);
    }
    for (int64_t i = 0; i < o.decode_tokens; ++i) {
      const int32_t next = argmax(logits);
      StepItem d{seq, std::span<const int32_t>(&next, 1), true};
      if (Status st = runner.step({&d, 1}, &logits); !st.ok()) {
        profile::set_enabled(false);
        fmt::print(stderr, "strata bench model: {}\n", st.to_string());
        return 1;
      }
    }
    const double td = seconds_since(t1);
    profile::set_enabled(false);
    if (rep > 0) {
      decode_cpu += cpu_seconds() - c1;
      decode_wall += td;
    }
    runner.release_sequence(seq);
    if (rep > 0) {
      prefill_s.push_back(tp);
      decode_s.push_back(td);
    }
  }
  std::sort(prefill_s.begin(), prefill_s.end());
  std::sort(decode_s.begin(), decode_s.end());
  std::optional<SpecBenchResult> sb;
  if (spec->enabled()) {
    fmt::print(stderr, "[bench model] speculative: {} runs each way through the engine\n", o.repeats);
    StatusOr<SpecBenchResult> r = bench_speculative(runner, prompt, o.decode_tokens, o.repeats, *spec);
    if (!r.ok()) {
      fmt::print(stderr, "strata bench model: {}\n", r.status().to_string());
      return 1;
    }
    sb = *r;
  }
  const double prefill_tps = o.prompt_tokens / prefill_s[prefill_s.size() / 2];
  const double decode_tps = o.decode_tokens / decode_s[decode_s.size() / 2];
  const double prefill_gflops = prefill_tps * prefill_flops / 1e9;  // 0 when unknown

  // 3. Roofline: bytes read per decode token (weights + KV at the average length), against
  // the higher of the two bandwidth readings.
  const double bw_after = kernels::measure_read_bandwidth(bw_pool, size_t(o.bw_mib) << 20);
  const double bw = std::max(bw_before, bw_after);
  double bytes_per_token = 0;
  {
    const int64_t avg_len = o.prompt_tokens + o.decode_tokens / 2;
    bytes_per_token = static_cast<double>(runner.decode_bytes_read(avg_len));
  }
  const double achieved = bytes_per_token * decode_tps;
  const double roofline_tps = bytes_per_token > 0 ? bw / bytes_per_token : 0;
  // Process CPU time during decode relative to threads × wall time (JSON only: a hint
  // whether the machine was busy; CPU-time accounting in VMs can be coarse).
  const double cpu_util = decode_cpu / std::max(1e-9, decode_wall * threads);
  const AnonMemory mem = anon_memory();  // huge pages: base/huge_pages.h
  // Per decode token: each profiled phase, and the rest of the decode wall time.
  const double measured_tokens = static_cast<double>(o.repeats * o.decode_tokens);
  const std::vector<profile::PhaseTotals> phases =
      o.breakdown ? profile::snapshot() : std::vector<profile::PhaseTotals>{};
  double phase_seconds = 0;
  for (const auto& ph : phases) phase_seconds += ph.seconds;
  if (o.json) {
    nlohmann::json j = {{"model", o.model},
                        {"threads", threads},
                        {"isa", kernels::isa_name(kernels::active_isa())},
                        {"avx512", kernels::avx512_active()},
                        {"avx512_ext", kernels::avx512_ext_active()},
                        {"read_bandwidth_gbs", bw / 1e9},
                        {"read_bandwidth_before_gbs", bw_before / 1e9},
                        {"read_bandwidth_after_gbs", bw_after / 1e9},
                        {"prompt_tokens", o.prompt_tokens},
                        {"decode_tokens", o.decode_tokens},
                        {"prefill_tok_s", prefill_tps},
                        {"decode_tok_s", decode_tps},
                        {"decode_bytes_per_token", bytes_per_token},
                        {"decode_bandwidth_gbs", achieved / 1e9},
                        {"decode_roofline_tok_s", roofline_tps},
                        {"decode_cpu_utilization", cpu_util},
                        {"anon_memory_mib", mem.anon_kib / 1024.0},
                        {"anon_huge_pages_mib", mem.huge_kib / 1024.0},
                        {"file_huge_pages_mib", mem.file_pmd_kib / 1024.0},
                        {"load_s", load_s},
                        {"checkpoint_read_s", read_s.ok() ? nlohmann::json(*read_s)
                                                          : nlohmann::json(nullptr)},
                        {"decode_roofline_fraction", roofline_tps > 0 ? decode_tps / roofline_tps : 0},
                        {"sgemm_size", o.sgemm_size}};
    // Unknown (a runner without a FLOP count) or skipped (--sgemm-size 0): null, not 0.
    auto known = [](double v) { return v > 0 ? nlohmann::json(v) : nlohmann::json(nullptr); };
    j["prefill_gemm_flops_per_token"] = known(prefill_flops);
    j["prefill_gflops"] = known(prefill_gflops);
    j["sgemm_gflops"] = known(sgemm_gflops);
    j["prefill_sgemm_ratio"] = known(sgemm_gflops > 0 ? prefill_gflops / sgemm_gflops : 0);
    if (sb)
      j["speculative"] = {{"config", o.speculative_config},
                          {"plain_decode_tok_s", sb->plain_tok_s},
                          {"spec_decode_tok_s", sb->spec_tok_s},
                          {"speedup", sb->plain_tok_s > 0 ? sb->spec_tok_s / sb->plain_tok_s : 0},
                          {"mean_acceptance_length", sb->mean_acceptance_length},
                          {"draft_acceptance_rate", sb->draft_acceptance_rate},
                          {"outputs_equal", sb->outputs_equal}};
    if (o.breakdown) {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& ph : phases)
        if (ph.calls > 0)
          list.push_back({{"phase", ph.name},
                          {"calls_per_token", ph.calls / measured_tokens},
                          {"ms_per_token", 1e3 * ph.seconds / measured_tokens},
                          {"mb_per_token", ph.bytes / 1e6 / measured_tokens},
                          {"gbs", ph.seconds > 0 ? ph.bytes / ph.seconds / 1e9 : 0.0}});
      j["decode_phases"] = list;
      j["decode_ms_per_token"] = 1e3 * decode_wall / measured_tokens;
      j["decode_other_ms_per_token"] = 1e3 * (decode_wall - phase_seconds) / measured_tokens;
    }
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("model          {} ({})\n", o.model, info.architecture);
    const bool avx512 = kernels::avx512_active();
    fmt::print("threads        {} (kernels: {}{})\n", threads,
               kernels::isa_name(kernels::active_isa()),
               !avx512                        ? ""
               : kernels::avx512_ext_active() ? " + avx512 decode paths + extensions"
                                              : " + avx512 decode paths");
    if (mem.anon_kib >= 0 && mem.huge_kib >= 0)
      fmt::print("memory         {:.0f} of {:.0f} MiB of anonymous memory (packed weights, state, scratch) "
                 "in huge pages\n",
                 mem.huge_kib / 1024.0, mem.anon_kib / 1024.0);
    if (read_s.ok() && *read_s > 0)
      fmt::print("load           {:.2f} s (model load, packing or mapping the packed weights); "
                 "one page-cache read of the checkpoint {:.3f} s; load / read {:.2f}x\n", load_s,
                 *read_s, load_s / *read_s);
    if (mem.file_pmd_kib > 0)
      fmt::print("mapped files   {:.0f} MiB in huge pages (file mappings: the packed-weight "
                 "cache when one is mapped, the checkpoint's pages read in place)\n",
                 mem.file_pmd_kib / 1024.0);
    fmt::print("read bandwidth {:.2f} GB/s (streaming read of {} MiB; the higher of {:.2f} before "
               "and {:.2f} after the runs)\n",
               bw / 1e9, o.bw_mib, bw_before / 1e9, bw_after / 1e9);
    fmt::print("prefill        {:.1f} tok/s ({} tokens, median of {})\n", prefill_tps,
               o.prompt_tokens, o.repeats);
    fmt::print("decode         {:.1f} tok/s ({} tokens after the prompt, median of {})\n",
               decode_tps, o.decode_tokens, o.repeats);
    if (sgemm_gflops > 0)
      fmt::print("sgemm          {:.1f} GFLOP/s (OpenBLAS cblas_sgemm {}^3 f32, {} threads, best of 3)\n",
                 sgemm_gflops, o.sgemm_size, threads);
    if (prefill_flops > 0)
      fmt::print("prefill GEMMs  {:.1f} GFLOP/s ({:.4g} GFLOP of weight GEMMs per prompt token){}\n",
                 prefill_gflops, prefill_flops / 1e9,
                 sgemm_gflops > 0 ? fmt::format(" = {:.2f}x sgemm", prefill_gflops / sgemm_gflops)
                                  : std::string());
    if (bytes_per_token > 0)
      fmt::print("roofline       {:.2f} MB read/token -> {:.1f} tok/s at {:.2f} GB/s; decode "
                 "reaches {:.1f}% ({:.2f} GB/s)\n",
                 bytes_per_token / 1e6, roofline_tps, bw / 1e9, 100.0 * decode_tps / roofline_tps,
                 achieved / 1e9);
    if (bytes_per_token > 0 && decode_tps > roofline_tps)
      fmt::print("               (above 100%: the {:.2f} MB a token reads fit in this CPU's "
                 "caches, so decode is not bound by the DRAM bandwidth the probe measures)\n",
                 bytes_per_token / 1e6);
    if (sb)
      fmt::print("speculative    {:.1f} vs {:.1f} tok/s without (x{:.2f}, engine, greedy, same "
                 "prompt); mean acceptance length {:.2f}, {:.0f}% of {} draft tokens accepted; outputs "
                 "{}\n",
                 sb->spec_tok_s, sb->plain_tok_s,
                 sb->plain_tok_s > 0 ? sb->spec_tok_s / sb->plain_tok_s : 0.0,
                 sb->mean_acceptance_length, 100.0 * sb->draft_acceptance_rate, sb->draft_tokens,
                 sb->outputs_equal ? "identical" : "DIFFER");
    fmt::print("{}", collective_time_line());  // under mpirun: the layouts' collective time
    if (o.breakdown) {
      fmt::print("decode phases  per token over {} x {} tokens, wall time on the calling thread "
                 "(a phase's pool dispatch included)\n",
                 o.repeats, o.decode_tokens);
      fmt::print("  {:<32} {:>7} {:>8} {:>9} {:>7}\n", "phase", "calls", "ms", "MB", "GB/s");
      for (const auto& ph : phases)
        if (ph.calls > 0)
          fmt::print("  {:<32} {:>7.1f} {:>8.3f} {:>9.2f} {:>7.1f}\n", ph.name,
                     ph.calls / measured_tokens, 1e3 * ph.seconds / measured_tokens,
                     ph.bytes / 1e6 / measured_tokens,
                     ph.seconds > 0 ? ph.bytes / ph.seconds / 1e9 : 0.0);
      fmt::print("  {:<32} {:>7} {:>8.3f}\n", "(not in a phase)", "",
                 1e3 * (decode_wall - phase_seconds) / measured_tokens);
      fmt::print("  {:<32} {:>7} {:>8.3f}\n", "decode token", "", 1e3 * decode_wall / measured_tokens);
    }
    if (o.breakdown_prefill) {
      double sum = 0, wall = 0;
      for (double t : prefill_s) wall += t;
      fmt::print("prefill phases per prompt of {} tokens over {} prompts, wall time on the calling "
                 "thread (a phase's pool dispatch included)\n", o.prompt_tokens, o.repeats);
      fmt::print("  {:<32} {:>7} {:>8}\n", "phase", "calls", "ms");
      for (const auto& ph : prefill_phases)
        if (ph.calls > 0) {
          sum += ph.seconds;
          fmt::print("  {:<32} {:>7.1f} {:>8.3f}\n", ph.name,
                     static_cast<double>(ph.calls) / o.repeats, 1e3 * ph.seconds / o.repeats);
        }
      fmt::print("  {:<32} {:>7} {:>8.3f}\n", "(not in a phase)", "",
                 1e3 * (wall - sum) / o.repeats);
      fmt::print("  {:<32} {:>7} {:>8.3f}\n", "prefill", "", 1e3 * wall / o.repeats);
    }
  }
  return 0;
}

struct MakeLlama2cCli {
  int32_t dim = 768, hidden = 2048, layers = 12, heads = 12, kv_heads = 0, vocab = 512;
  int32_t seq_len = 1024;
  bool unshared = false;
  uint64_t seed = 1;
  float scale = 0.05f;
  std::string out;
};

void setup_bench_model(CLI::App& app) {
  CLI::App* bench = app.get_subcommand("bench");
  {
    auto* cmd = bench->add_subcommand(
        "model", "Prefill/decode tok/s and decode as a fraction of the measured read-bandwidth "
                 "roofline");
    auto o = std::make_shared<BenchModelCli>();
    cmd->add_option("-m,--model", o->model, "Model directory (default: embedded stories260K)");
    cmd->add_option("--prompt-tokens", o->prompt_tokens, "Prompt length (prefill)")
        ->capture_default_str();
    cmd->add_option("--decode-tokens", o->decode_tokens, "Tokens decoded after the prompt")
        ->capture_default_str();
    add_rank_flags(cmd, &o->ranks);
    cmd->add_option("--threads", o->threads, "Compute threads (0: the CPUs this process may use)")
        ->capture_default_str()
        ->check(threads_range());
    cmd->add_option("--repeats", o->repeats, "Measured repetitions (after one warm-up)")
        ->capture_default_str()
        ->check(positive());
    cmd->add_option("--bandwidth-mib", o->bw_mib, "Buffer size of the bandwidth measurement")
        ->capture_default_str()
        ->check(positive());
    cmd->add_flag("--json", o->json, "Print JSON");
    cmd->add_option("--speculative-config", o->speculative_config,
                    "Also decode through the engine with and without speculative decoding "
                    "(vLLM JSON, e.g. '{\"method\": \"ngram\", \"num_speculative_tokens\": 4}') "
                    "and report the speed ratio and acceptance");
    cmd->add_option("--prompt-file", o->prompt_file,
                    "Prompt text (tokenized; cut to --prompt-tokens) instead of random ids");
    cmd->add_option("--context-sweep", o->context_sweep,
                    "Comma-separated prompt lengths (e.g. 256,1024,4096,16384): decode TPOT after "
                    "each, and its ratio to the first, instead of the single run")
        ->delimiter(',');
    cmd->add_option("--sgemm-size", o->sgemm_size,
                    "Edge of the OpenBLAS sgemm measured first as the prefill peer (0: skip)")
        ->check(CLI::Range(0, 16384));
    add_weight_cache_option(cmd, &o->weight_cache_dir);
    cmd->add_flag("--breakdown", o->breakdown,
                  "Also time each decode phase (GEMM families, attention steps) per token");
    cmd->add_flag("--breakdown-prefill", o->breakdown_prefill,
                  "Also time each phase of the prefills (GEMM families, attention steps) per "
                  "prompt; DeepSeek models (not with --breakdown)");
    cmd->callback([o] { set_exit_code_of("bench model", [&] { return run_bench_model(*o); }); });
  }
  {
    auto* cmd = bench->add_subcommand(
        "make-llama2c", "Write a random-weight llama2.c legacy-v0 checkpoint (fp32)");
    auto o = std::make_shared<MakeLlama2cCli>();
    cmd->add_option("--dim", o->dim)->capture_default_str();
    cmd->add_option("--hidden", o->hidden)->capture_default_str();
    cmd->add_option("--layers", o->layers)->capture_default_str();
    cmd->add_option("--heads", o->heads)->capture_default_str();
    cmd->add_option("--kv-heads", o->kv_heads, "KV heads (0: = heads)")->capture_default_str();
    cmd->add_option("--vocab", o->vocab)->capture_default_str();
    cmd->add_option("--seq-len", o->seq_len)->capture_default_str();
    cmd->add_flag("--unshared", o->unshared, "Separate classifier (negative vocab in header)");
    cmd->add_option("--seed", o->seed)->capture_default_str();
    cmd->add_option("--scale", o->scale, "Uniform weight range ±scale")->capture_default_str();
    cmd->add_option("--out", o->out, "Output .bin path")->required();
    cmd->callback([o] {
      Llama2cRandomOptions r;
      r.header = {o->dim,   o->hidden, o->layers,  o->heads, o->kv_heads > 0 ? o->kv_heads : o->heads,
                  o->vocab, o->seq_len, !o->unshared};
      r.seed = o->seed;
      r.scale = o->scale;
      Status st = write_llama2c_random(o->out, r);
      if (!st.ok()) {
        fmt::print(stderr, "strata bench make-llama2c: {}\n", st.to_string());
        set_exit_code(1);
        return;
      }
      fmt::print("wrote {} ({} floats after the header)\n", o->out, r.header.num_floats());
    });
  }
}
}  // namespace
STRATA_REGISTER_COMMAND("bench_model", setup_bench_model);
}  // namespace strata::tools
