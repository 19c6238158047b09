// ChildProcess / start_server (see matrix_process.h).
#include "tools/matrix_process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <deque>
#include <thread>

#include <fmt/format.h>

extern char** environ;

namespace strata::tools {

using Clock = std::chrono::steady_clock;

namespace {
// Process groups of the running children (0 = free slot), read by the signal handler.
constexpr int kMaxChildren = 64;
std::atomic<pid_t> g_children[kMaxChildren];

}  // namespace

void track_child_process(pid_t pid) {
  for (auto& slot : g_children) {
    pid_t free_slot = 0;
    if (slot.compare_exchange_strong(free_slot, pid)) return;
  }
}
void untrack_child_process(pid_t pid) {
  for (auto& slot : g_children) {
    pid_t p = pid;
    if (slot.compare_exchange_strong(p, 0)) return;
  }
}
namespace {
void on_fatal_signal(int sig) {
  for (auto& slot : g_children) {
    const pid_t p = slot.load();
    if (p > 0) {
      kill(-p, SIGTERM);  // its process group (a ChildProcess leads one)
      kill(p, SIGTERM);   // or just it (a tracked process in our own group)
    }
  }
  signal(sig, SIG_DFL);
  raise(sig);
}
}  // namespace

void stop_children_on_signals() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) signal(sig, on_fatal_signal);
}

StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::spawn(const std::vector<std::string>& argv,
                                                            const std::string& log_path) {
  std::unique_ptr<ChildProcess> p(new ChildProcess());
  p->log_ = log_path;
  int out[2];
  if (pipe(out) != 0) return Status(StatusCode::kUnavailable, "pipe failed");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  posix_spawn_file_actions_addopen(&fa, 2, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const int rc = posix_spawnp(&p->pid_, args[0].c_str(), &fa, &attr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(out[1]);
  if (rc != 0) {
    close(out[0]);
    p->pid_ = -1;
    return Status(StatusCode::kUnavailable, fmt::format("cannot start {}", args[0]));
  }
  p->out_fd_ = out[0];
  track_child_process(p->pid_);
  return p;
}

ChildProcess::~ChildProcess() { stop(); }

bool ChildProcess::running() {
  if (pid_ <= 0) return false;
  int st = 0;
  if (waitpid(pid_, &st, WNOHANG) == pid_) {
    untrack_child_process(pid_);
    pid_ = -1;
    return false;
  }
  return true;
}

std::string ChildProcess::log_tail(int n) const {
  std::ifstream in(log_);
  std::deque<std::string> lines;
  for (std::string l; std::getline(in, l);) {
    lines.push_back(l);
    if (static_cast<int>(lines.size()) > n) lines.pop_front();
  }
  std::string out;
  for (const auto& l : lines) out += (out.empty() ? "" : " | ") + l;
  return out;
}

StatusOr<std::string> ChildProcess::wait_for_line(const std::string& needle, double timeout_s) {
  const auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    for (size_t nl; (nl = buf_.find('\n')) != std::string::npos;) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      if (line.find(needle) != std::string::npos) return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    if (left.count() <= 0)
      return Status(StatusCode::kUnavailable,
                    fmt::format("no \"{}\" within {} s (log {}: {})", needle, timeout_s, log_, log_tail()));
    pollfd pfd{out_fd_, POLLIN, 0};
    const int r = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 200)));
    if (r <= 0) continue;
    char chunk[4096];
    const ssize_t n = read(out_fd_, chunk, sizeof chunk);
    if (n <= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      running();
      return Status(StatusCode::kUnavailable,
                    fmt::format("the process ended before \"{}\" (log {}: {})", needle, log_, log_tail()));
    }
    buf_.append(chunk, static_cast<size_t>(n));
  }
}

void ChildProcess::stop() {
  if (pid_ > 0) {
    kill(-pid_, SIGTERM);
    const auto end = Clock::now() + std::chrono::seconds(10);
    int st = 0;
    while (waitpid(pid_, &st, WNOHANG) != pid_) {
      if (Clock::now() > end) {
        kill(-pid_, SIGKILL);
        waitpid(pid_, &st, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(-pid_, SIGKILL);  // anything of the group left behind (mpirun's ranks)
    untrack_child_process(pid_);
    pid_ = -1;
  }
  if (out_fd_ >= 0) {
    close(out_fd_);
    out_fd_ = -1;
  }
}

StatusOr<ServerProcess> start_server(const std::string& strata_bin,
                                     const std::vector<std::string>& launcher,
                                     const std::vector<std::string>& args,
                                     const std::string& log_path, double timeout_s) {
  std::vector<std::string> argv = launcher;
  argv.push_back(strata_bin);
  argv.insert(argv.end(), args.begin(), args.end());
  ServerProcess s;
  STRATA_ASSIGN_OR_RETURN(s.proc, ChildProcess::spawn(argv, log_path));
  STRATA_ASSIGN_OR_RETURN(std::string line, s.proc->wait_for_line("listening on http://", timeout_s));
  const size_t at = line.find("listening on http://") + 20;
  const size_t colon = line.find(':', at);
  const size_t end = line.find_first_not_of("0123456789", colon + 1);
  s.url = "http://127.0.0.1:" + line.substr(colon + 1, end - colon - 1);
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--disaggregation-mode" && args[i + 1] == "prefill") {
      STRATA_ASSIGN_OR_RETURN(std::string ep, s.proc->wait_for_line("state handed off at ", timeout_s));
      s.endpoint = ep.substr(ep.find("state handed off at ") + 20);
      while (!s.endpoint.empty() && (s.endpoint.back() == '\r' || s.endpoint.back() == ' '))
        s.endpoint.pop_back();
    }
  return s;
}

std::string self_binary() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("strata");
}

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t n = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  close(fd);
  return ntohs(a.sin_port);
}

}  // namespace strata::tools
