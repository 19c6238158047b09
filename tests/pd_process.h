// Test helper: runs `strata serve` / `strata router` as a real child process (posix_spawn),
// waits for its "listening on http://HOST:PORT" line (port 0 = the one it bound) and, for a
// prefill server, its "state handed off at ENDPOINT" line; stops it with SIGTERM (or SIGKILL)
// in the destructor. stderr goes to a log file under /tmp named after the process.
#pragma once

#include <signal.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli_runner.h"

extern char** environ;

namespace strata::testing {

class StrataProcess {
 public:
  // `args` after the binary name. Returns null (and prints why) if it did not come up.
  static std::unique_ptr<StrataProcess> start(const std::vector<std::string>& args,
                                              const std::string& log_name) {
    return start_with({}, args, log_name);
  }
  // The same under a launcher: `launcher` (e.g. {"/usr/bin/mpirun", "-np", "2"}) then the
  // strata binary and `args`.
  static std::unique_ptr<StrataProcess> start_with(const std::vector<std::string>& launcher,
                                                   const std::vector<std::string>& args,
                                                   const std::string& log_name) {
    std::unique_ptr<StrataProcess> p(new StrataProcess());
    int out[2];
    if (pipe(out) != 0) return nullptr;
    p->log_ = "/tmp/strata-test-" + std::to_string(getpid()) + "-" + log_name + ".log";
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    posix_spawn_file_actions_addopen(&fa, 2, p->log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const std::string bin = launcher.empty() ? tools::strata_binary() : launcher[0];
    std::vector<std::string> all = launcher;
    all.push_back(tools::strata_binary());
    if (launcher.empty()) all = {bin};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int rc = posix_spawn(&p->pid_, bin.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    if (rc != 0) {
      close(out[0]);
      std::fprintf(stderr, "cannot spawn %s\n", bin.c_str());
      return nullptr;
    }
    p->out_ = fdopen(out[0], "r");
    const bool prefill = std::find(args.begin(), args.end(), "prefill") != args.end();
    char line[4096];
    while (std::fgets(line, sizeof line, p->out_)) {
      const std::string l(line);
      const size_t at = l.find("listening on http://");
      if (at != std::string::npos) {
        const size_t colon = l.find(':', at + 20);
        p->port_ = std::stoi(l.substr(colon + 1));
        if (!prefill) break;
      }
      const size_t ep = l.find("state handed off at ");
      if (ep != std::string::npos) {
        p->endpoint_ = l.substr(ep + 20);
        while (!p->endpoint_.empty() && (p->endpoint_.back() == '\n' || p->endpoint_.back() == '\r'))
          p->endpoint_.pop_back();
        break;
      }
    }
    if (p->port_ <= 0) {
      std::fprintf(stderr, "%s did not start; see %s\n", log_name.c_str(), p->log_.c_str());
      return nullptr;
    }
    return p;
  }
  ~StrataProcess() { stop(SIGTERM); }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& endpoint() const { return endpoint_; }  // prefill: ZeroMQ endpoint
  const std::string& log() const { return log_; }
  pid_t pid() const { return pid_; }
  // Waits up to `seconds` for the process to exit by itself; true if it did (it is reaped).
  bool wait_exit(double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (pid_ > 0) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return true;
      }
      if (std::chrono::steady_clock::now() > end) return false;
      usleep(50 * 1000);
    }
    return true;
  }
  void stop(int sig) {
    if (pid_ > 0) {
      kill(pid_, sig);
      int st = 0;
      waitpid(pid_, &st, 0);
      pid_ = -1;
    }
    if (out_) {
      std::fclose(out_);
      out_ = nullptr;
    }
  }

 private:
  StrataProcess() = default;
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  int port_ = -1;
  std::string endpoint_;
  std::string log_;
};

}  // namespace strata::testing
