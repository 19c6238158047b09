// `strata serve`: the OpenAI-compatible server (serve/serving_stack.h) on a model directory
// (default: the embedded models/stories260K), bound to 127.0.0.1 unless --host says
// otherwise. SIGINT/SIGTERM shut it down: open requests end with an error, then the
// listener stops.
#include <csignal>
#include <pthread.h>

#include <fmt/format.h>

#include "base/log.h"
#include "sched/spec_decode.h"
#include "serve/serving_stack.h"
#include "tools/command_registry.h"
#include "tools/tier_flags.h"
#include "mpi/mirrored_runner.h"
#include "mpi/mpi_world.h"
#include "tools/rank_flags.h"

namespace strata::tools {
namespace {

struct ServeCli {
  std::string model;
  std::string model_pos;  // positional MODEL
  int64_t max_model_len = 0;
  std::string reasoning_parser, tool_call_parser;
  std::string log_level = "info";
  std::string chat_template;
  std::string served_name;
  std::string host = "127.0.0.1";
  int port = 8000;
  int threads = 0;
  int http_threads = 64;
  int32_t max_num_seqs = 16;
  int64_t max_num_batched_tokens = 512;
  int64_t chunk_size = 256;
  int64_t kv_cache_tokens = 0;
  std::string prefix_restore = "stored";
  uint64_t seed = 0;
  size_t max_body_bytes = 8 << 20;
  DisaggregationOptions disagg;
  std::string kv_load_failure_policy = "fail";
  RequestGuardOptions guard;
  bool disable_log_requests = false;
  bool disable_log_stats = false;
  double log_stats_interval = 10;
  std::string metrics_prefix = "strata:";
  std::string speculative_config;
  TierCli tiers;
  RankLayout ranks;  // --enable-expert-parallel, --decode-context-parallel-size (mpirun)
  bool debug_state_digests = false;
  bool enable_prefix_caching = true;
  std::string debug_perturb_restore;
};

int run_serve(ServeCli& o) {
  if (Status st = set_log_level(o.log_level); !st.ok()) {
    fmt::print(stderr, "strata serve: {}\n", st.message());
    return 2;
  }
  if (!o.model_pos.empty()) {
    if (!o.model.empty() && o.model != o.model_pos) {
      fmt::print(stderr, "strata serve: two models given ({} and --model {})\n", o.model_pos, o.model);
      set_exit_code(2);
      return 2;
    }
    o.model = o.model_pos;
  }
  if (o.model.empty()) {
    auto d = default_model_dir();
    if (!d.ok()) {
      fmt::print(stderr, "strata serve: {}\n", d.status().to_string());
      return 1;
    }
    o.model = *d;
  }
  // Signals go to a sigwait() in this thread only; block them before any thread starts.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  ServeOptions so;
  so.model_dir = o.model;
  so.http.host = o.host;
  so.http.port = o.port;
  so.http.threads = o.http_threads;
  so.http.max_body_bytes = o.max_body_bytes;
  so.http.model_name = o.served_name;
  so.http.max_model_len = o.max_model_len;
  so.http.reasoning_parser = o.reasoning_parser;
  so.http.chat_template = o.chat_template;
  so.http.tool_call_parser = o.tool_call_parser;
  so.http.metrics_prefix = o.metrics_prefix;
  so.log.log_requests = !o.disable_log_requests;
  so.log.stats_interval_s = o.disable_log_stats ? 0 : o.log_stats_interval;
  so.engine.scheduler.max_num_seqs = o.max_num_seqs;
  so.engine.scheduler.max_num_batched_tokens = o.max_num_batched_tokens;
  so.engine.scheduler.chunk_size = o.chunk_size;
  so.engine.seed = o.seed;
  {
    StatusOr<SpeculativeConfig> sc = parse_speculative_config(o.speculative_config);
    if (!sc.ok()) {
      fmt::print(stderr, "strata serve: {}\n", sc.status().message());
      set_exit_code(2);
      return 2;
    }
    so.engine.speculative = *sc;
  }
  so.runner.threads = o.threads;
  so.runner.kv_cache_tokens = o.kv_cache_tokens;
  so.runner.prefix_restore = o.prefix_restore;
  if (Status st = apply_tier_flags(o.tiers, &so.runner); !st.ok()) {
    fmt::print(stderr, "strata serve: {}\n", st.message());
    return 2;
  }
  so.runner.debug_perturb_restore = o.debug_perturb_restore;
  so.runner.enable_prefix_caching = o.enable_prefix_caching;
  so.http.state_digests = o.debug_state_digests;
  if (o.debug_state_digests && (o.ranks.dcp > 1 || o.ranks.pp > 1)) {
    fmt::print(stderr, "strata serve: --debug-state-digests is not built under {} (each rank "
               "holds a share of the rows)\n", o.ranks.dcp > 1 ? "decode context parallelism"
                                                                : "pipeline parallelism");
    return 2;
  }
  so.runner.progress = true;
  so.runner.name = o.served_name;
  so.disagg = o.disagg;
  if (o.guard.api_key.empty())
    if (const char* k = std::getenv("STRATA_API_KEY")) o.guard.api_key = k;
  so.http.guard = o.guard;
  if (o.guard.api_key.empty() && o.host != "127.0.0.1" && o.host != "localhost" && o.host != "::1")
    fmt::print(stderr, "strata serve: warning: listening on {} without --api-key: anyone who can "
               "reach it can use it\n", o.host);
  so.disagg.load_failure_recompute = o.kv_load_failure_policy == "recompute";
  // Several ranks (mpirun): rank 0 serves, the others follow its runner calls.
  if (const int rc = setup_ranks("strata serve", o.ranks); rc != 0) return rc;
  if (mpi_size() > 1) {
    if (so.runner.tiers.any() || !so.disagg.mode.empty()) {
      fmt::print(stderr, "strata serve: several ranks with prefix-cache tiers or a "
                 "disaggregation role are not supported yet\n");
      return 2;
    }
    if (mpi_rank() != 0) {
      auto runner = make_model_runner(so.model_dir, so.runner);
      if (!runner.ok()) {
        fmt::print(stderr, "strata serve (rank {}): {}\n", mpi_rank(), runner.status().to_string());
        return 1;
      }
      follow(**runner);
      return 0;
    }
    so.wrap_runner = [](std::unique_ptr<ModelRunner> r) { return make_mirrored_runner(std::move(r)); };
  } else if (o.ranks.expert_parallel) {
    fmt::print(stderr, "strata serve: --enable-expert-parallel with one rank: every expert is "
               "here (start with mpirun -np N)\n");
  }
  auto stack = ServingStack::start(so);
  if (!stack.ok()) {
    // A speculative config the loaded model cannot run is a usage error (exit 2), as in
    // `generate` and `bench model`.
    if (stack.status().message().rfind("--speculative-config", 0) == 0) {
      fmt::print(stderr, "strata serve: {}\n", stack.status().message());
      return 2;
    }
    fmt::print(stderr, "strata serve: {}\n", stack.status().to_string());
    return 1;
  }
  const ModelInfo& info = (*stack)->runner().info();
  fmt::print("strata serve: listening on http://{}:{} (model '{}', {}, context {} tokens)\n",
             o.host, (*stack)->port(), (*stack)->http().model_name(), info.architecture,
             info.max_context);
  if ((*stack)->kv_sender() != nullptr)
    fmt::print("strata serve: prefill role, state handed off at {}\n",
               (*stack)->kv_sender()->endpoint());
  if (o.disagg.mode == "decode")
    fmt::print("strata serve: decode role, --kv-load-failure-policy {}\n", o.kv_load_failure_policy);
  if (mpi_size() > 1) {
    std::string layout;
    if (o.ranks.expert_parallel) layout += "routed experts partitioned (EP)";
    if (o.ranks.dcp > 1)
      layout += fmt::format("{}compressed KV / index keys sharded (DCP {}, interleave {})",
                            layout.empty() ? "" : ", ", o.ranks.dcp, o.ranks.dcp_interleave);
    if (o.ranks.pp > 1)
      layout += fmt::format("{}decoder layers split over {} stages (PP {})",
                            layout.empty() ? "" : ", ", o.ranks.pp, o.ranks.pp);
    fmt::print("strata serve: {} ranks: {}; watchdog --dist-timeout-s {}\n", mpi_size(), layout,
               o.ranks.dist_timeout_s);
    if (o.ranks.expert_parallel && info.architecture == "llama")
      fmt::print(stderr, "strata serve: note: --enable-expert-parallel on a model without routed "
                 "experts: every rank computes the whole model\n");
  }
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  fmt::print(stderr, "strata serve: signal {}, shutting down\n", sig);
  (*stack)->shutdown();
  return 0;
}

void setup_serve(CLI::App& app) {
  auto o = std::make_shared<ServeCli>();
  auto* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  cmd->add_option("model_dir", o->model_pos, "Model directory (as vLLM's `serve MODEL`)");
  cmd->add_option("--model", o->model, "Model directory (default: the embedded stories260K)");
  cmd->add_option("--max-model-len", o->max_model_len,
                  "Context limit per request in tokens (prompt + max_tokens; 0: the model's); "
                  "longer requests get 400 context_length_exceeded")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--chat-template", o->chat_template,
                  "Jinja chat template: a file, or the template text (default: the checkpoint's "
                  "tokenizer_config.json chat_template; DeepSeek models: DeepSeek's own encoder)");
  cmd->add_option("--reasoning-parser", o->reasoning_parser,
                  "Chat output: put the model's reasoning in reasoning_content (deepseek_v4; "
                  "DeepSeek V4/V4.1 models)")
      ->check(CLI::IsMember({"deepseek_v4"}));
  cmd->add_option("--tool-call-parser", o->tool_call_parser,
                  "Chat: accept `tools` and parse the model's DSML tool calls into tool_calls "
                  "(deepseek_v4; DeepSeek V4/V4.1 models)")
      ->check(CLI::IsMember({"deepseek_v4"}));
  cmd->add_option("--served-model-name", o->served_name, "Model id in the API (default: directory name)");
  cmd->add_option("--host", o->host, "Address to bind (default 127.0.0.1, loopback only)");
  cmd->add_option("--port", o->port, "Port (0: any free port)")->check(CLI::Range(0, 65535));
  cmd->add_option("--threads", o->threads, "Compute threads (0: the CPUs this process may use)")->check(threads_range());
  cmd->add_option("--http-threads", o->http_threads, "Workers for requests being generated (one per open stream; connections themselves hold no thread)")->check(CLI::Range(2, 4096));
  cmd->add_option("--max-num-seqs", o->max_num_seqs, "Sequences running at once")->check(positive());
  cmd->add_option("--max-num-batched-tokens", o->max_num_batched_tokens, "Token budget per step (prefill + decode)")->check(positive());
  cmd->add_option("--chunk-size", o->chunk_size, "Max prompt tokens one sequence feeds per step")->check(positive());
  cmd->add_option("--kv-cache-tokens", o->kv_cache_tokens, "KV capacity in tokens (0: runner default)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--prefix-restore", o->prefix_restore,
                  "V4.1 prefix-cache hits: stored (exact, stores window/compressor state per "
                  "boundary), replay (approximate, replays the last window of tokens) or "
                  "replay-exact (replays the layers' window dependency cone; exact)")
      ->check(CLI::IsMember({"stored", "replay", "replay-exact"}))
      ->capture_default_str();
  add_tier_options(cmd, &o->tiers);
  add_rank_flags(cmd, &o->ranks);  // rank 0 serves HTTP; every model call is mirrored
  cmd->add_option("--seed", o->seed, "Base seed for requests without their own");
  cmd->add_option("--speculative-config", o->speculative_config,
                  "Speculative decoding, vLLM's JSON: '{\"method\": \"ngram\", "
                  "\"num_speculative_tokens\": 4}' (prompt_lookup_max/min too), or method "
                  "\"dspark\" on a V4.1 checkpoint with DSpark stages (K <= 5), or \"mtp\" on a V4 "
                  "checkpoint with an MTP layer (K <= 16); outputs are "
                  "unchanged, only faster where drafts are accepted");
  cmd->add_option("--max-body-bytes", o->max_body_bytes, "Larger request bodies get HTTP 413")
      ->check(CLI::Range(size_t{1}, size_t{1} << 40))
      ->capture_default_str();
  cmd->add_flag("--disable-log-requests", o->disable_log_requests,
                "No log line per finished request");
  cmd->add_option("--log-stats-interval", o->log_stats_interval,
                  "Seconds between throughput log lines while busy (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_flag("--disable-log-stats", o->disable_log_stats, "No periodic throughput log lines");
  cmd->add_option("--log-level", o->log_level,
                  "Least severe log lines shown: debug, info (request and throughput lines), "
                  "warning, error, critical")
      ->check(CLI::IsMember({"debug", "info", "warning", "error", "critical"}))
      ->capture_default_str();
  cmd->add_option("--metrics-prefix", o->metrics_prefix,
                  "Prefix of the /metrics names (vllm: for vLLM dashboards)")
      ->capture_default_str();
  cmd->add_option("--api-key", o->guard.api_key,
                  "Require 'Authorization: Bearer KEY' on /v1/* (default: $STRATA_API_KEY)");
  cmd->add_flag("--protect-metrics", o->guard.protect_metrics, "Require the API key on /metrics too");
  cmd->add_option("--allowed-hosts", o->guard.allowed_hosts,
                  "Accepted Host header names, comma separated (default: any)")->delimiter(',');
  cmd->add_option("--allowed-origins", o->guard.allowed_origins,
                  "CORS origins allowed, comma separated, * for any (default: CORS off)")->delimiter(',');
  cmd->add_option("--disaggregation-mode", o->disagg.mode,
                  "Prefill/decode disaggregation role: prefill or decode (default: colocated)")
      ->check(CLI::IsMember({"prefill", "decode"}));
  cmd->add_option("--kv-transfer-endpoint", o->disagg.transfer.endpoint,
                  "Prefill role: ZeroMQ endpoint the state is fetched from (tcp://HOST:PORT, "
                  "port 0 = any; or ipc://PATH)")
      ->capture_default_str();
  cmd->add_option("--kv-transfer-lease-ms", o->disagg.transfer.lease_ms,
                  "Prefill role: how long a handed-off state waits for its decode server")
      ->check(positive())
      ->capture_default_str();
  cmd->add_option("--kv-transfer-timeout-ms", o->disagg.transfer.timeout_ms,
                  "Decode role: timeout of one transfer request")
      ->check(positive())
      ->capture_default_str();
  cmd->add_option("--kv-load-failure-policy", o->kv_load_failure_policy,
                  "Decode role, when the state does not arrive intact: fail (error response) or "
                  "recompute (prefill locally)")
      ->check(CLI::IsMember({"fail", "recompute"}))
      ->capture_default_str();
  cmd->add_option("--disaggregation-transfer-backend", o->disagg.backend,
                  "Decode role: zmq, or fault (zmq with injected faults, for tests)")
      ->check(CLI::IsMember({"zmq", "fault"}))
      ->capture_default_str();
  cmd->add_option("--kv-transfer-fault", o->disagg.fault_spec,
                  "Fault backend spec: KIND[,KIND..][:p=P][:seed=N][:delay_ms=MS]; kinds drop, "
                  "corrupt, truncate, duplicate, reorder, delay, handshake");
  cmd->add_option("--kv-transfer-contract-override", o->disagg.contract_overrides,
                  "Test hook: FIELD=VALUE replaces a handoff-contract field (to exercise a "
                  "mismatch)");
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", o->enable_prefix_caching,
                "Prefix caching (default on; as vLLM)");
  cmd->add_flag("--debug-state-digests", o->debug_state_digests,
                "Validation mode: non-streaming responses carry each request's final state, "
                "hashed row by row (\"strata_state\"; `strata validate matrix` compares them)");
  cmd->add_option("--debug-perturb-restore", o->debug_perturb_restore,
                  "Test hook: a prefix-hit restore changes one byte of this state kind's rows "
                  "(window_kv, compressed_kv, index_keys, ...) -- a deliberately broken restore");
  cmd->callback([o] { set_exit_code(run_serve(*o)); });
}

}  // namespace
STRATA_REGISTER_COMMAND("serve", setup_serve);
}  // namespace strata::tools
