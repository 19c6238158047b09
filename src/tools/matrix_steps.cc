// Deployments of the validation matrix's steps (see matrix_steps.h).
#include "tools/matrix_steps.h"

#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

#include "tiers/redis_test_server.h"

namespace strata::tools {

using nlohmann::json;

const std::vector<StepInfo>& matrix_steps() {
  static const std::vector<StepInfo> s = {
      {1, "baseline", "single-node baseline (cold prefill, one chunk)"},
      {2, "chunked_prefill", "long and chunked prefill (7-token chunks)"},
      {3, "prefix_cache", "prefix cache (hits restore state)"},
      {4, "pd", "prefill/decode disaggregation (1P1D + router)"},
      {5, "dcp", "decode context parallelism (2 ranks)"},
      {6, "kv_pool", "shared KV pool (Redis; a restarted server hits the pool)"},
      {7, "ep", "expert parallelism (2 ranks)"},
      {8, "speculative", "speculative decoding (draft + verify + rollback)"},
      {9, "high_concurrency", "high concurrency (every prompt at once, 3x)"},
      {10, "pp", "pipeline parallelism (2 stages)"},
  };
  return s;
}

namespace {

bool executable(const char* p) { return ::access(p, X_OK) == 0; }
bool have_mpirun() { return executable("/usr/bin/mpirun") || executable("/usr/local/bin/mpirun"); }

std::vector<std::string> serve_args(const MatrixContext& c, int step, bool digests) {
  std::vector<std::string> a = {"serve", "--model", c.model_dir, "--port", "0", "--threads",
                                std::to_string(c.threads), "--disable-log-requests",
                                "--disable-log-stats", "--seed", "0"};
  if (digests) a.push_back("--debug-state-digests");
  if (!c.perturb_kind.empty() && step == c.perturb_step) {
    a.push_back("--debug-perturb-restore");
    a.push_back(c.perturb_kind);
  }
  return a;
}

std::string log_path(const MatrixContext& c, int step, const std::string& what) {
  std::error_code ec;  // run_matrix made the directory; a failure shows when the log opens
  std::filesystem::create_directories(std::filesystem::path(c.out_dir) / "logs", ec);
  return (std::filesystem::path(c.out_dir) / "logs" / fmt::format("step{}-{}.log", step, what)).string();
}

json parallel(int ep, int dcp, const char* pd, int pp = 1) {
  return {{"tp", 1}, {"dp", 1}, {"ep", ep}, {"dcp", dcp}, {"pp", pp}, {"pd", pd}};
}

const std::vector<std::string> kMpirun = {"mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2"};

}  // namespace

void Deployment::stop() {
  for (auto it = servers.rbegin(); it != servers.rend(); ++it) it->proc->stop();
  if (redis) {
    untrack_child_process(redis->pid());
    redis->stop();
  }
}

std::string step_skip_reason(const MatrixContext& c, int step, std::string* status) {
  if ((step == 5 || step == 7 || step == 10) && !have_mpirun()) {
    *status = "unavailable";
    return "mpirun is not installed (scripts/setup.sh installs openmpi-bin)";
  }
  if (step == 7 && !c.has_experts) {
    *status = "not_applicable";
    return "the model has no routed experts";
  }
  if (step == 6 && RedisTestServer::binary().empty()) {
    *status = "unavailable";
    return "redis-server is not installed (scripts/setup.sh installs redis-server)";
  }
  return "";
}

StatusOr<Deployment> start_step(const MatrixContext& c, int step) {
  Deployment d;
  d.parallel = parallel(1, 1, "colocated");
  auto serve = [&](std::vector<std::string> extra, const std::string& what,
                   const std::vector<std::string>& launcher = {}, bool digests = true) -> Status {
    std::vector<std::string> a = serve_args(c, step, digests);
    a.insert(a.end(), extra.begin(), extra.end());
    STRATA_ASSIGN_OR_RETURN(ServerProcess s, start_server(c.strata_bin, launcher, a, log_path(c, step, what)));
    d.servers.push_back(std::move(s));
    return Status();
  };
  // Two ranks under mpirun whose rows are sharded: no rank can export a request's whole state.
  auto two_ranks_sharded = [&](const char* why) {
    d.ranks = 2;
    d.processes = 3;  // mpirun and two ranks
    d.state_digests = false;
    d.notes.push_back(fmt::format("state rows not compared: {} (token ids and logprobs are "
                                  "compared)", why));
  };
  switch (step) {
    case 1:
      STRATA_RETURN_IF_ERROR(serve({"--no-enable-prefix-caching", "--chunk-size", "4096",
                                    "--max-num-batched-tokens", "8192", "--max-num-seqs", "1"},
                                   "serve"));
      break;
    case 2:
      STRATA_RETURN_IF_ERROR(serve({"--no-enable-prefix-caching", "--chunk-size", "7",
                                    "--max-num-batched-tokens", "16"}, "serve"));
      break;
    case 3:
      STRATA_RETURN_IF_ERROR(serve({}, "serve"));
      d.repeat = 2;
      break;
    case 4: {
      STRATA_RETURN_IF_ERROR(serve({"--disaggregation-mode", "prefill"}, "prefill"));
      STRATA_RETURN_IF_ERROR(serve({"--disaggregation-mode", "decode"}, "decode"));
      std::vector<std::string> r = {"router", "--prefill", d.servers[0].url, "--decode",
                                    d.servers[1].url, "--port", "0"};
      STRATA_ASSIGN_OR_RETURN(ServerProcess s, start_server(c.strata_bin, {}, r, log_path(c, step, "router")));
      d.servers.push_back(std::move(s));
      d.url = d.servers[2].url;
      d.metrics_url = d.servers[1].url;
      d.prefill_metrics_url = d.servers[0].url;
      d.parallel = parallel(1, 1, "1P1D");
      d.processes = 3;
      break;
    }
    case 5:
      STRATA_RETURN_IF_ERROR(serve({"--decode-context-parallel-size", "2"}, "serve", kMpirun, false));
      d.parallel = parallel(1, 2, "colocated");
      two_ranks_sharded(c.architecture == "deepseek"
                            ? "under DCP each rank holds a share of the compressed rows"
                            : "under DCP each rank holds a share of the KV rows");
      break;
    case 6: {
      d.redis = std::make_shared<RedisTestServer>();
      if (!d.redis->ready()) return Status(StatusCode::kUnavailable, "redis-server did not start");
      track_child_process(d.redis->pid());
      STRATA_RETURN_IF_ERROR(serve({"--kv-pool", d.redis->url()}, "serve-a"));
      d.processes = 2;
      d.notes.push_back("round 1 on server A writes the pool; server A stops; round 2 on a new "
                        "server B (empty working pool) hits the units A wrote");
      break;
    }
    case 7:
      STRATA_RETURN_IF_ERROR(serve({"--enable-expert-parallel"}, "serve", kMpirun));
      d.parallel = parallel(2, 1, "colocated");
      d.ranks = 2;
      d.processes = 3;
      break;
    case 8: {
      Status last;
      // DeepSeek checkpoints may carry a drafter (V4.1: DSpark stages, V4: an MTP layer);
      // other models get the n-gram proposer.
      const std::vector<const char*> methods =
          c.architecture == "deepseek" ? std::vector<const char*>{"dspark", "mtp", "ngram"}
                                       : std::vector<const char*>{"ngram"};
      for (const char* m : methods) {
        const std::string cfg = fmt::format(R"({{"method": "{}", "num_speculative_tokens": 3}})", m);
        last = serve({"--speculative-config", cfg}, std::string("serve-") + m);
        if (last.ok()) {
          d.spec_method = m;
          break;
        }
        d.notes.push_back(fmt::format("{} not started: {}", m, last.message()));
      }
      if (!last.ok()) return last;
      break;
    }
    case 9:
      STRATA_RETURN_IF_ERROR(serve({"--max-num-seqs", "16"}, "serve"));
      d.concurrent = true;
      d.repeat = 3;
      break;
    case 10:
      STRATA_RETURN_IF_ERROR(serve({"--pipeline-parallel-size", "2"}, "serve", kMpirun, false));
      d.parallel = parallel(1, 1, "colocated", 2);
      two_ranks_sharded("under PP each stage holds the rows of its own layers");
      break;
    default:
      return Status(StatusCode::kInvalidArgument, fmt::format("no step {}", step));
  }
  if (d.url.empty()) d.url = d.servers.back().url;
  if (d.metrics_url.empty()) d.metrics_url = d.url;
  return d;
}

Status restart_pool_server(const MatrixContext& c, Deployment* d) {
  d->servers.back().proc->stop();
  d->servers.clear();
  std::vector<std::string> a = serve_args(c, 6, true);
  a.insert(a.end(), {"--kv-pool", d->redis->url()});
  STRATA_ASSIGN_OR_RETURN(ServerProcess s, start_server(c.strata_bin, {}, a, log_path(c, 6, "serve-b")));
  d->servers.push_back(std::move(s));
  d->url = d->metrics_url = d->servers.back().url;
  return Status();
}

}  // namespace strata::tools
