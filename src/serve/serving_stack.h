// ServingStack: everything `strata serve` runs, built from a model directory: the runner
// (make_model_runner), its tokenizer, the Engine loop, the metrics and the HTTP server.
// Used by the CLI and by the end-to-end tests (which bind port 0 on 127.0.0.1).
//
// Shutdown order: engine first (open requests end with an error), then the HTTP server,
// so no client ever gets a 200 with partial text.
// Thread safety: create/shutdown from one controlling thread.
#pragma once

#include <functional>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <string>

#include "base/status.h"
#include "disagg/kv_transfer.h"
#include "exec/model_runner.h"
#include "exec/runner_factory.h"
#include "model/tokenizer.h"
#include "sched/engine.h"
#include "serve/http_server.h"
#include "serve/server_metrics.h"

namespace strata {

// PD disaggregation flags of `strata serve` (names as vLLM where it has one).
struct DisaggregationOptions {
  std::string mode;                 // --disaggregation-mode: "" (colocated), prefill, decode
  KvTransferOptions transfer;       // --kv-transfer-endpoint, --kv-transfer-lease-ms, -timeout-ms
  std::string backend = "zmq";      // --disaggregation-transfer-backend: zmq | fault
  std::string fault_spec;           // --kv-transfer-fault (transport.h FaultSpec)
  bool load_failure_recompute = false;  // --kv-load-failure-policy recompute (default fail)
  std::vector<std::string> contract_overrides;  // --kv-transfer-contract-override (tests)
};

// Logs (vLLM's): a line per finished request, and every interval a throughput line while
// there is activity.
struct ServeLogOptions {
  bool log_requests = true;     // --disable-log-requests turns off
  double stats_interval_s = 10; // --log-stats-interval; 0 = --disable-log-stats
};

struct ServeOptions {
  std::string model_dir;
  ServeLogOptions log;
  HttpServerOptions http;
  EngineOptions engine;
  RunnerOptions runner;
  DisaggregationOptions disagg;
  // Applied to the loaded runner before the engine sees it (e.g. several ranks: the runner
  // that broadcasts every call to the other ranks, mpi/mirrored_runner.h). Null: none.
  std::function<std::unique_ptr<ModelRunner>(std::unique_ptr<ModelRunner>)> wrap_runner;
};

class ServingStack {
 public:
  // Loads the model, starts the engine thread and the HTTP listener.
  static StatusOr<std::unique_ptr<ServingStack>> start(const ServeOptions& options);
  ~ServingStack();

  int port() const { return http_->port(); }
  Engine& engine() { return *engine_; }
  ModelRunner& runner() { return *runner_; }
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  HttpServer& http() { return *http_; }
  // PD roles (null when colocated / the other role).
  KvTransferSender* kv_sender() { return kv_sender_.get(); }
  KvTransferReceiver* kv_receiver() { return kv_receiver_.get(); }
  // Idempotent.
  void shutdown();
  // Blocks until the HTTP listener stops.
  void wait() { http_->wait(); }

 private:
  ServingStack() = default;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<KvTransferSender> kv_sender_;
  std::unique_ptr<KvTransferReceiver> kv_receiver_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<HttpServer> http_;
  bool shut_down_ = false;
  void log_stats_loop(double interval_s);
  std::thread stats_thread_;
  std::mutex stats_mu_;
  std::condition_variable stats_cv_;
  bool stats_stop_ = false;
};

}  // namespace strata
