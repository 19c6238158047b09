// Test helpers (header-only): small HTTP/SSE client calls against a local server on
// 127.0.0.1, for the serve unit tests and tests/serve_e2e_test.cc.
// Thread safety: each call uses its own connection.
#pragma once

#include <httplib.h>

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

}  // namespace strata::testing
