// HttpFrontEnd: the HTTP/1.1 server under Strata's front ends (HttpServer, Router), on GNU
// libmicrohttpd (Debian's libmicrohttpd-dev) with one epoll thread for all connections.
//
// Why not cpp-httplib's server (issue 24 items 6 and 8): Debian's cpp-httplib 0.11.4 holds a
// thread per connection from accept on (64 slow clients made a server unreachable), drops
// the bytes of pipelined requests and writes nothing to a client that half-closed after its
// request. Here a connection costs a descriptor and a little memory until its request is
// complete (1,000 slow clients are 1,000 epoll entries; /health keeps answering), pipelined
// requests are answered in order, and a half-closed client gets its response.
//
// Handlers keep cpp-httplib's types (httplib::Request / Response / DataSink), so route code
// and the request guard are shared with the router's upstream client:
//   * the Request carries method, path (without the query), target, params (query
//     arguments), headers, body, remote/local address and port, version;
//   * the Response gives status, headers, body -- or a content provider, streamed with
//     chunked transfer encoding; the provider runs on the handler's worker thread and its
//     DataSink::write blocks while more than ~1 MiB waits for the client; it returns false
//     (and is_writable() is false) once the client is gone. The resource releaser gets
//     success = true only when the provider called done() and the client read to the end.
// Threads: POST handlers run on `threads` request workers (a streaming response holds its
// worker until it ends); every other method runs on `control_threads` workers, so /health and
// /metrics never wait behind generation. HEAD is routed as GET. After routing, a status >= 400
// with an empty body goes through the error handler (404 for an unknown path).
// Limits: request bodies past `max_body_bytes` are refused with 413 (Content-Length up front,
// chunked bodies once they pass it: the rest is read and dropped, never stored); a header
// block past `max_header_bytes` gets libmicrohttpd's 431; a connection idle for
// `idle_timeout_s` (keep-alive, or a client that stopped sending) is closed; at most
// `connection_limit` connections are open at once (more are accepted and closed); start()
// raises the process's soft descriptor limit towards connection_limit + 1,024 (as vLLM
// does; never past the hard limit).
// Errors: start() gives Unavailable when the address cannot be bound or the daemon fails.
// Thread safety: route setup, start() and stop() from one controlling thread, before / after
// serving; handlers run concurrently on the workers.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "base/status.h"

namespace strata {

struct HttpFrontEndOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                    // 0: any free port (see port())
  int threads = 64;                   // POST workers (each SSE stream holds one)
  int control_threads = 2;            // GET / OPTIONS / other workers
  size_t max_body_bytes = 8 << 20;    // 0: no limit
  size_t max_header_bytes = 16 << 10; // the request line and headers
  int idle_timeout_s = 30;
  int connection_limit = 4096;
  int listen_backlog = 1024;
};

class HttpFrontEnd {
 public:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  // Runs before routing; true when it answered (the route handler is then skipped).
  using PreRoutingHandler = std::function<bool(const httplib::Request&, httplib::Response&)>;

  explicit HttpFrontEnd(HttpFrontEndOptions options);
  ~HttpFrontEnd();
  HttpFrontEnd(const HttpFrontEnd&) = delete;
  HttpFrontEnd& operator=(const HttpFrontEnd&) = delete;

  void Get(const std::string& path, Handler h);
  void Post(const std::string& path, Handler h);
  void set_pre_routing_handler(PreRoutingHandler h);
  void set_error_handler(Handler h);

  // Binds (SO_REUSEADDR, not SO_REUSEPORT: a second server cannot take this port) and starts
  // serving on background threads.
  Status start();
  int port() const { return port_; }
  // Ends open streams (their providers see a closed client), waits for running handlers,
  // and closes every connection. Idempotent.
  void stop();
  // Blocks until stop() returns on another thread.
  void wait();
  // On a worker thread inside a handler: the descriptor of the request's connection (for
  // polling only: serve/client_socket.h); -1 elsewhere.
  static int client_fd();

  struct Impl;  // libmicrohttpd glue (http_front_end.cc)

 private:
  std::unique_ptr<Impl> impl_;
  int port_ = -1;
};

}  // namespace strata
