// ClientSocket (see client_socket.h).
#include "serve/client_socket.h"

#include <poll.h>
#include <sys/socket.h>

#include <cstring>

namespace strata {

ClientSocket::ClientSocket(int fd, bool http11) : fd_(fd), http11_(http11) {}

bool ClientSocket::peer_closed() {
  if (fd_ < 0) return false;
  pollfd p{fd_, static_cast<short>(POLLRDHUP), 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if ((p.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0) return true;
  if ((p.revents & POLLRDHUP) == 0) return false;
  if (!http11_) return true;
  if (!probed_) {
    probed_ = true;
    static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
    const ssize_t n = send(fd_, kContinue, sizeof(kContinue) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) return true;  // EPIPE / ECONNRESET: already gone
  }
  return false;  // half-closed: waits for the reset (if any) on a later call
}

}  // namespace strata
