// ClientSocket: the connection a non-streaming handler serves, so a long generation can
// notice that its client went away (issue 24 item 7). The descriptor comes from
// HttpFrontEnd::client_fd(); the front end keeps the connection open (suspended, nothing
// else reads or writes it) while the handler runs, so it cannot be closed or reused under it.
//
// A FIN alone does not tell a client that closed from one that half-closed after its request
// (shutdown(SHUT_WR): a legal "that is all", and it still reads the response -- issue 24
// item 8). So on the first FIN of an HTTP/1.1 request, peer_closed() writes an interim
// "100 Continue" (RFC 9110 §15.2: a client must accept 1xx responses it did not ask for);
// a closed client's kernel answers it with a reset, a half-closed one reads past it. The
// client is gone once the connection hangs up or fails (POLLHUP / POLLERR), or, for
// HTTP/1.0 (no interim responses), at the FIN. Bytes of a pipelined next request are not a
// close.
// Thread safety: use from the handler's thread.
#pragma once

namespace strata {

class ClientSocket {
 public:
  // fd < 0: unknown (peer_closed() is always false). http11: the request is HTTP/1.1.
  ClientSocket(int fd, bool http11);
  int fd() const { return fd_; }
  // Non-blocking check (poll with a zero timeout; at most one 25-byte write).
  bool peer_closed();

 private:
  int fd_ = -1;
  bool http11_ = false;
  bool probed_ = false;  // the interim response was written
};

}  // namespace strata
