// A child process of `strata validate matrix`: `strata serve` / `strata router`, or either
// under mpirun, started with posix_spawn in its own process group (so mpirun's ranks go
// with it), stdout read for the startup lines, stderr to a log file. stop() sends SIGTERM
// to the group, waits up to 10 s, then SIGKILLs it; the destructor stops it.
// Thread safety: one owner thread.
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace strata::tools {

class ChildProcess {
 public:
  // argv[0] is the program path. Unavailable when it cannot be spawned.
  static StatusOr<std::unique_ptr<ChildProcess>> spawn(const std::vector<std::string>& argv,
                                                       const std::string& log_path);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Reads stdout lines until one contains `needle` (returned, without the newline).
  // Unavailable after `timeout_s`, or when the process ended first (either message carries
  // the last lines of its log).
  StatusOr<std::string> wait_for_line(const std::string& needle, double timeout_s);
  void stop();
  bool running();  // false once it exited (reaped)
  const std::string& log_path() const { return log_; }
  // The last `n` lines of the log (for error messages).
  std::string log_tail(int n = 8) const;

 private:
  ChildProcess() = default;
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string buf_;
  std::string log_;
};

// A strata server process: `strata serve`/`router` args (the binary is prepended; with a
// launcher such as {"mpirun", "-np", "2"} it goes after it). Waits for its
// "listening on http://HOST:PORT" line (and, for a prefill server, "state handed off at").
struct ServerProcess {
  std::unique_ptr<ChildProcess> proc;
  std::string url;       // http://127.0.0.1:PORT
  std::string endpoint;  // prefill role: the transfer endpoint
};
StatusOr<ServerProcess> start_server(const std::string& strata_bin,
                                     const std::vector<std::string>& launcher,
                                     const std::vector<std::string>& args,
                                     const std::string& log_path, double timeout_s = 120);

// Installs SIGINT / SIGTERM / SIGHUP handlers that send SIGTERM to the process group of every
// ChildProcess still running, then end this process with the same signal -- so an interrupted
// `validate matrix` leaves no server, rank or redis-server behind (they run in their own
// process groups, which a terminal's Ctrl-C does not reach). Call once, from the main thread.
void stop_children_on_signals();
// Adds / removes a process the handlers above also signal (ChildProcess does this itself).
void track_child_process(pid_t pid);
void untrack_child_process(pid_t pid);

// The strata binary running now (/proc/self/exe).
std::string self_binary();
// A free loopback TCP port (bound and released; racy by nature, fine for local tests).
int free_port();

}  // namespace strata::tools
