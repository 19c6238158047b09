// ListenSocket: how Strata's cpp-httplib servers (HttpServer, Router) configure their
// listening socket. install() (before bind) sets SO_REUSEADDR only -- cpp-httplib's default
// also sets SO_REUSEPORT, which let a second server bind the same port and take half of its
// connections -- and remembers the socket; raise_backlog() (after bind) calls listen() again
// with a larger backlog: Debian's compiled cpp-httplib listens with a backlog of 5, so bursts
// of concurrent connects (64 clients at once) were reset or timed out, and Linux updates the
// backlog of a socket that is already listening. Thread safety: one controlling thread.
#pragma once

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <memory>

namespace strata {

class ListenSocket {
 public:
  void install(httplib::Server& s) {
    auto fd = fd_;
    s.set_socket_options([fd](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<void*>(&yes), sizeof(yes));
      fd->store(static_cast<int>(sock));
    });
  }
  void raise_backlog(int backlog = 1024) const {
    if (*fd_ >= 0) ::listen(*fd_, backlog);
  }

 private:
  std::shared_ptr<std::atomic<int>> fd_ = std::make_shared<std::atomic<int>>(-1);
};

}  // namespace strata
