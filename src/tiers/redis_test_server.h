// Test helper: a real redis-server on a free loopback port, started by the test and stopped
// (SIGTERM, then waited for) when the object goes away. Test-only header.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include <hiredis.h>

namespace strata {

class RedisTestServer {
 public:
  // Path of the binary ("" when redis-server is not installed: the caller skips).
  static std::string binary() {
    for (const char* p : {"/usr/bin/redis-server", "/usr/local/bin/redis-server"})
      if (::access(p, X_OK) == 0) return p;
    return "";
  }

  RedisTestServer() {
    const std::string bin = binary();
    if (bin.empty()) return;
    port_ = free_port();
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string port = std::to_string(port_);
      ::execl(bin.c_str(), bin.c_str(), "--port", port.c_str(), "--bind", "127.0.0.1",
              "--save", "", "--appendonly", "no", "--dir", "/tmp", "--logfile", "/dev/null",
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Ready when a PING answers (up to ~10 s).
    for (int i = 0; i < 200 && !ready_; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const timeval tv{1, 0};
      redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, tv);
      if (c && !c->err) {
        auto* r = static_cast<redisReply*>(redisCommand(c, "PING"));
        ready_ = r != nullptr && r->type == REDIS_REPLY_STATUS;
        if (r) freeReplyObject(r);
      }
      if (c) redisFree(c);
    }
  }
  ~RedisTestServer() { stop(); }
  RedisTestServer(const RedisTestServer&) = delete;
  RedisTestServer& operator=(const RedisTestServer&) = delete;

  void stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int st = 0;
      ::waitpid(pid_, &st, 0);
      pid_ = -1;
    }
  }
  bool ready() const { return ready_; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }  // -1 once stopped
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

 private:
  static int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    socklen_t n = sizeof(a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
    ::close(fd);
    return ntohs(a.sin_port);
  }

  pid_t pid_ = -1;
  int port_ = 0;
  bool ready_ = false;
};

}  // namespace strata
