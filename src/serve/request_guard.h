// RequestGuard: the checks every Strata HTTP front end (HttpServer, Router) runs before
// routing a request (issue 24 items 9-11), as cpp-httplib pre-routing and error handlers:
//   * Host header against `allowed_hosts` (DNS rebinding; empty = any host): 400 otherwise;
//   * CORS: off by default; an Origin in `allowed_origins` (or "*") gets
//     Access-Control-Allow-Origin and, for a preflight OPTIONS, the allowed methods and
//     headers (204); any OPTIONS is answered 204 with Allow;
//   * API key (`api_key`, vLLM's --api-key): every /v1/* path (and /metrics when
//     protect_metrics) needs "Authorization: Bearer KEY", compared in constant time: 401;
//   * POST bodies must be Content-Type application/json (a text/plain "simple" cross-origin
//     POST is refused): 415;
//   * a known path with another method: 405 with Allow (cpp-httplib answers 404);
//   * both Content-Length and Transfer-Encoding (request smuggling): 400.
// Errors use the OpenAI error body. Thread safety: immutable after construction; the
// handlers run on the HTTP pool.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace httplib {
class Server;
struct Request;
struct Response;
}

namespace strata {

struct RequestGuardOptions {
  std::string api_key;                       // empty: no authentication
  bool protect_metrics = false;              // /metrics needs the key too
  std::vector<std::string> allowed_hosts;    // Host header names (without port); empty: any
  std::vector<std::string> allowed_origins;  // CORS origins; "*" = any; empty: CORS off
};

// For POST handlers: true (and a 413 in `res`) when the body read is longer than `max`,
// which cpp-httplib's own limit does not catch for chunked bodies; call first thing.
bool body_too_large(const httplib::Request& req, httplib::Response& res, size_t max);

// Known paths and their methods, for 405 / Allow.
struct KnownRoute {
  std::string path;
  std::string methods;  // e.g. "GET" or "POST"
};

// Installs the pre-routing handler on `s`. `routes` lists the server's paths.
void install_request_guard(httplib::Server& s, const RequestGuardOptions& o,
                           std::vector<KnownRoute> routes);
// The Allow value for `path` ("" when unknown), for the error handler's 405.
std::string allowed_methods(const std::vector<KnownRoute>& routes, const std::string& path);

}  // namespace strata
