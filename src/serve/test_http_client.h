// Test helpers (header-only): small HTTP/SSE client calls against a local server on
// 127.0.0.1, for the serve unit tests and tests/serve_e2e_test.cc.
// Thread safety: each call uses its own connection.
#pragma once

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>
#include <vector>

namespace strata::testing {

struct HttpReply {
  int status = 0;         // 0: transport error
  std::string body;
  std::vector<std::string> data;  // SSE "data:" payloads, in order (without [DONE])
  bool done = false;      // saw data: [DONE]
};

inline HttpReply http_get(int port, const std::string& path) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(30);
  HttpReply r;
  if (auto res = c.Get(path)) {
    r.status = res->status;
    r.body = res->body;
  }
  return r;
}

// POSTs `body`; parses an SSE reply. When `disconnect_after` >= 0 the client hangs up after
// that many data events (simulating a client that goes away mid-stream).
inline HttpReply http_post(int port, const std::string& path, const std::string& body,
                           int disconnect_after = -1) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  HttpReply r;
  std::string buf;
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    buf.append(d, n);
    size_t pos;
    while ((pos = buf.find("\n\n")) != std::string::npos) {
      std::string ev = buf.substr(0, pos);
      buf.erase(0, pos + 2);
      if (ev.rfind("data: ", 0) != 0) continue;
      std::string payload = ev.substr(6);
      if (payload == "[DONE]") {
        r.done = true;
      } else {
        r.data.push_back(payload);
      }
      if (disconnect_after >= 0 && static_cast<int>(r.data.size()) >= disconnect_after) {
        return false;
      }
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  c.send(req, res, err);
  r.status = res.status;
  if (r.data.empty() && !r.done) r.body = buf.empty() ? res.body : buf;
  return r;
}

// Raw sockets, for what an HTTP client library hides (pipelining, half-close, slow
// clients, hang-ups).
// A connected TCP socket to 127.0.0.1:port, or -1.
inline int connect_raw(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Writes all of `s`; false when the connection failed.
inline bool send_raw(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// Reads until the peer closes or `timeout_ms` passes without data.
inline std::string read_raw(int fd, int timeout_ms = 3000) {
  std::string out;
  char buf[4096];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) break;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// "POST path" with a JSON body, as raw bytes (add "Connection: close" with `last`).
inline std::string raw_post(const std::string& path, const std::string& body, bool last = false) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
         (last ? "Connection: close\r\n" : "") + "Content-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

// The responses in raw bytes read from one connection (Content-Length bodies; interim 1xx
// responses skipped), in order.
inline std::vector<HttpReply> parse_raw_responses(const std::string& raw) {
  std::vector<HttpReply> out;
  size_t at = 0;
  while (at < raw.size()) {
    const size_t head_end = raw.find("\r\n\r\n", at);
    if (raw.compare(at, 9, "HTTP/1.1 ") != 0 || head_end == std::string::npos) break;
    HttpReply r;
    r.status = std::atoi(raw.c_str() + at + 9);
    std::string head = raw.substr(at, head_end - at);
    for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const size_t cl = head.find("\r\ncontent-length: ");
    const size_t len = cl == std::string::npos ? 0 : std::strtoull(head.c_str() + cl + 18, nullptr, 10);
    r.body = raw.substr(head_end + 4, len);
    at = head_end + 4 + len;
    if (r.status >= 200) out.push_back(std::move(r));
  }
  return out;
}

// Slow clients (issue 24 item 6): `n` connections that each start a GET /health and then
// send one more header line per call of `trickle`; finish() ends their headers and counts
// the ones answered 200. Needs ~2n descriptors when the server is in this process.
class SlowClients {
 public:
  SlowClients(int port, int n) {
    for (int i = 0; i < n; ++i) {
      const int fd = connect_raw(port);
      if (fd < 0 || !send_raw(fd, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")) break;
      fds_.push_back(fd);
    }
  }
  ~SlowClients() {
    for (int fd : fds_) close(fd);
  }
  int open() const { return static_cast<int>(fds_.size()); }
  // One more header line on every connection; the number still accepting bytes.
  int trickle(int round) {
    int ok = 0;
    for (int fd : fds_) ok += send_raw(fd, "X-Slow-" + std::to_string(round) + ": 1\r\n");
    return ok;
  }
  int finish() {
    int answered = 0;
    for (int fd : fds_) send_raw(fd, "Connection: close\r\n\r\n");
    for (int fd : fds_) answered += read_raw(fd).find("HTTP/1.1 200") != std::string::npos;
    return answered;
  }

 private:
  std::vector<int> fds_;
};

// Raises the soft descriptor limit to at least `n` (within the hard limit); the limit now.
inline rlim_t raise_fd_limit(rlim_t n) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur < n) {
    rl.rlim_cur = std::min(n, rl.rlim_max);
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  return rl.rlim_cur;
}

}  // namespace strata::testing
