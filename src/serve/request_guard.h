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
//   * a known path with another method: 405 with Allow (the servers' error handlers, with
//     allowed_methods());
//   * both Content-Length and Transfer-Encoding, or conflicting Content-Lengths (request
//     smuggling): 400 (the latter also closes the connection).
// Errors use the OpenAI error body. Thread safety: immutable after construction; the
// handlers run on the HTTP pool.
#pragma once

#include <cstddef>
#include <string>
#include <vector>


namespace strata {

class HttpFrontEnd;

struct RequestGuardOptions {
  std::string api_key;                       // empty: no authentication
  bool protect_metrics = false;              // /metrics needs the key too
  std::vector<std::string> allowed_hosts;    // Host header names (without port); empty: any
  std::vector<std::string> allowed_origins;  // CORS origins; "*" = any; empty: CORS off
};

// Known paths and their methods, for 405 / Allow.
struct KnownRoute {
  std::string path;
  std::string methods;  // e.g. "GET" or "POST"
};

// Installs the pre-routing and error handlers on `s`. `routes` lists the server's paths.
void install_request_guard(HttpFrontEnd& s, const RequestGuardOptions& o,
                           std::vector<KnownRoute> routes);
// The Allow value for `path` ("" when unknown), for the error handler's 405.
std::string allowed_methods(const std::vector<KnownRoute>& routes, const std::string& path);

}  // namespace strata
