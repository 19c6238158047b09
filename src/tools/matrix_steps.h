// The nine steps of `strata validate matrix` (issue 27; docs/validation-matrix.md) and the
// deployment each one starts: which processes (strata serve / router, under mpirun, a
// redis-server), with which flags, and what its configuration is. Every server runs in the
// validation mode (--debug-state-digests) except under DCP, where no rank holds every row.
// Thread safety: one owner thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "tools/matrix_process.h"

namespace strata {
class RedisTestServer;
}

namespace strata::tools {

struct StepInfo {
  int id;
  const char* name;   // schema id: baseline, chunked_prefill, ...
  const char* title;  // words for the report
};
// Steps 1..10 in ladder order.
const std::vector<StepInfo>& matrix_steps();

// What the whole run knows about the model and the machine.
struct MatrixContext {
  std::string strata_bin;
  std::string model_dir;
  std::string architecture;   // inspect's architecture.family ("deepseek" / "llama")
  bool has_experts = false;
  std::string out_dir;        // logs go to out_dir/logs
  int threads = 1;
  std::string perturb_kind;   // --debug-perturb-restore (test hook), "" = none
  int perturb_step = 3;       // the step whose servers get it
};

// A running deployment of one step.
struct Deployment {
  std::vector<ServerProcess> servers;
  std::shared_ptr<RedisTestServer> redis;  // step 6
  std::string url;          // where requests go
  std::string metrics_url;  // where /metrics is read (the decode server under PD)
  std::string prefill_metrics_url;  // PD: the prefill server
  nlohmann::json parallel;  // {"tp","dp","ep","dcp","pp","pd"}
  int processes = 1;
  int ranks = 1;
  bool concurrent = false;  // send the check prompts all at once
  int repeat = 1;           // send the prompt set this many times
  bool state_digests = true;
  std::string spec_method;  // step 8: the drafter used
  std::vector<std::string> notes;
  void stop();              // servers first, then redis
};

// Why a step does not run on this model / machine: "" = it runs. `status` gets not_built,
// not_applicable or unavailable.
std::string step_skip_reason(const MatrixContext& c, int step, std::string* status);

// Starts step `step`'s deployment (the pool step also restarts its server once, so the
// second server hits units the first wrote: `restart` is called between the two rounds).
StatusOr<Deployment> start_step(const MatrixContext& c, int step);
// Step 6: stops the first server and starts a second one on the same pool.
Status restart_pool_server(const MatrixContext& c, Deployment* d);

}  // namespace strata::tools
