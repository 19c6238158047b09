// `strata router`: the OpenAI-compatible front of a prefill/decode deployment
// (serve/router.h). SIGINT/SIGTERM stop it.
#include <csignal>
#include <pthread.h>

#include <fmt/format.h>

#include "serve/router.h"
#include "tools/command_registry.h"

namespace strata::tools {
namespace {

int run_router(RouterOptions& o) {
  if (o.guard.api_key.empty())
    if (const char* k = std::getenv("STRATA_API_KEY")) o.guard.api_key = k;
  if (o.guard.api_key.empty() && o.host != "127.0.0.1" && o.host != "localhost" && o.host != "::1")
    fmt::print(stderr, "strata router: warning: listening on {} without --api-key\n", o.host);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  Router r(o);
  Status st = r.start();
  if (!st.ok()) {
    fmt::print(stderr, "strata router: {}\n", st.to_string());
    return 1;
  }
  for (const std::string& line : r.pair_report()) fmt::print("strata router: pair {}\n", line);
  fmt::print("strata router: listening on http://{}:{} (policy {})\n", o.host, r.port(), o.policy);
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  fmt::print(stderr, "strata router: signal {}, shutting down\n", sig);
  r.stop();
  return 0;
}

void setup_router(CLI::App& app) {
  auto o = std::make_shared<RouterOptions>();
  auto* cmd = app.add_subcommand("router", "Route OpenAI requests over prefill and decode servers");
  cmd->add_option("--prefill", o->prefill, "Prefill server base URL(s), comma separated")
      ->delimiter(',')
      ->required();
  cmd->add_option("--decode", o->decode, "Decode server base URL(s), comma separated")
      ->delimiter(',')
      ->required();
  cmd->add_option("--host", o->host, "Address to bind")->capture_default_str();
  cmd->add_option("--port", o->port, "Port (0: any free port)")->check(CLI::Range(0, 65535))->capture_default_str();
  cmd->add_option("--policy", o->policy, "round-robin, least-loaded or prefix-aware")
      ->check(CLI::IsMember({"round-robin", "least-loaded", "prefix-aware"}))
      ->capture_default_str();
  cmd->add_option("--http-threads", o->threads, "Workers for requests being routed (connections themselves hold no thread)")->check(CLI::Range(2, 4096));
  cmd->add_option("--api-key", o->guard.api_key,
                  "Require 'Authorization: Bearer KEY' on /v1/* (default: $STRATA_API_KEY)");
  cmd->add_option("--backend-api-key", o->backend_api_key,
                  "API key of the prefill/decode servers (default: pass the client's on)");
  cmd->add_option("--allowed-hosts", o->guard.allowed_hosts,
                  "Accepted Host header names, comma separated (default: any)")->delimiter(',');
  cmd->add_option("--allowed-origins", o->guard.allowed_origins,
                  "CORS origins allowed, comma separated, * for any (default: CORS off)")->delimiter(',');
  cmd->callback([o] { set_exit_code(run_router(*o)); });
}

}  // namespace
STRATA_REGISTER_COMMAND("router", setup_router);
}  // namespace strata::tools
