// Router: the OpenAI-compatible front of a prefill/decode deployment (`strata router`,
// issue 23 item 1). It holds no model. For each POST /v1/completions or /v1/chat/completions
// it picks a prefill server P and a decode server D, sends the request to P with
// kv_transfer_params {"do_remote_decode": true} (P computes the prompt's state and leases
// it), then the original request plus P's kv_transfer_params (handle, endpoint) to D, which
// fetches the state, computes the rest and answers; D's response (JSON or SSE, status and
// body) is relayed as is. Errors: P or D unreachable -> 502; a pair whose contract handshake
// failed -> 503 naming the field (the router handshakes every pair at start and re-checks a
// failed one at most every 5 s); P's or D's own errors are relayed with their status.
// Policies (--policy): round-robin; least-loaded (fewest requests in flight through this
// router); prefix-aware (P chosen by a hash of the first 256 bytes of the prompt / messages,
// so requests sharing a prefix reuse one P's prefix cache; D least-loaded).
// Endpoints besides the API: GET /health (200 when at least one pair is usable),
// GET /v1/models (P's), GET /metrics (strata:router_* counters), GET /dashboard (the
// server's dashboard page, serve/dashboard_page.h, one section per backend) and
// GET /v1/dashboard/state (the router shape of serve/dashboard_state.h: every backend's URL,
// role, its own /v1/dashboard/state and /metrics fetched in parallel with a 2 s timeout, or
// the error).
// Thread safety: start/stop from one thread; handlers run on the HTTP pool.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "serve/request_guard.h"



namespace strata {

class HttpFrontEnd;

struct RouterOptions {
  std::vector<std::string> prefill;  // base URLs, e.g. http://127.0.0.1:8100
  std::vector<std::string> decode;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string policy = "round-robin";  // round-robin | least-loaded | prefix-aware
  int threads = 64;
  int timeout_s = 600;  // per backend request
  // The router's own API key, hosts and CORS (serve/request_guard.h). The client's
  // Authorization header is passed on to the prefill and decode servers; `backend_api_key`,
  // when set, replaces it (servers started with --api-key).
  RequestGuardOptions guard;
  std::string backend_api_key;
  size_t max_body_bytes = 8 << 20;  // larger request bodies get 413
};

class Router {
 public:
  explicit Router(RouterOptions o);
  ~Router();
  // Validates options, handshakes the pairs, binds and starts listening. InvalidArgument for
  // bad options, Unavailable if the port cannot be bound.
  Status start();
  int port() const { return port_; }
  void stop();
  void wait();
  // "P URL -> D URL: ok | error" per pair (after start()).
  std::vector<std::string> pair_report();

 private:
  struct Backend;
  struct Pair;
  void install_routes();
  Status check_pair(Pair& p);
  RouterOptions o_;
  std::vector<std::unique_ptr<Backend>> prefill_, decode_;
  std::vector<std::unique_ptr<Pair>> pairs_;
  std::mutex mu_;
  std::atomic<uint64_t> rr_{0};
  std::atomic<int64_t> requests_{0}, failures_{0}, handoffs_{0};
  std::atomic<int64_t> handoff_us_{0};
  std::unique_ptr<HttpFrontEnd> server_;
  int port_ = -1;
};

}  // namespace strata
