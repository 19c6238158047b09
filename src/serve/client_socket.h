// ClientSocket: the connection a cpp-httplib handler serves, found from the request's
// addresses, so a long non-streaming handler can notice that its client went away (issue 24
// item 7). Debian's cpp-httplib 0.11.4 gives a handler neither its socket nor a "closed"
// query; the socket is the one descriptor of this process whose local and peer addresses
// are the request's (local_addr:local_port, remote_addr:remote_port), a 4-tuple TCP keeps
// unique while the connection lives. The handler's thread owns that connection until it
// returns, so the descriptor cannot be closed or reused under it.
//
// peer_closed() is true once the client has sent FIN or the connection failed (POLLRDHUP /
// POLLHUP / POLLERR). Bytes of a pipelined next request are not a close. A client that
// half-closes after its request counts as gone: cpp-httplib would not write it a response
// either (its is_writable() treats a readable FIN as a dead socket).
// Thread safety: use from the handler's thread.
#pragma once

#include <string>

namespace strata {

class ClientSocket {
 public:
  // Finds the descriptor; fd() < 0 when none matches (e.g. a Unix-domain listener).
  ClientSocket(const std::string& local_addr, int local_port, const std::string& remote_addr,
               int remote_port);
  int fd() const { return fd_; }
  // Non-blocking check (poll with a zero timeout); false when the descriptor is unknown.
  bool peer_closed() const;

 private:
  int fd_ = -1;
};

}  // namespace strata
