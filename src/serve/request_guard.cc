#include "serve/request_guard.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>

#include "serve/http_front_end.h"
#include "serve/openai_api.h"

namespace strata {

namespace {

bool constant_time_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

std::string host_name(const std::string& host) {
  if (!host.empty() && host[0] == '[') {  // [::1]:8000
    const size_t end = host.find(']');
    return end == std::string::npos ? host : host.substr(0, end + 1);
  }
  const size_t colon = host.rfind(':');
  return colon == std::string::npos ? host : host.substr(0, colon);
}

bool refuse(httplib::Response& res, int status, const std::string& type,
                                        const std::string& msg) {
  res.status = status;
  res.set_content(render_error({status, type, "", msg}), "application/json");
  return true;
}

}  // namespace

std::string allowed_methods(const std::vector<KnownRoute>& routes, const std::string& path) {
  for (const KnownRoute& r : routes)
    if (r.path == path) return r.methods + ", OPTIONS";
  return "";
}

void install_request_guard(HttpFrontEnd& s, const RequestGuardOptions& o,
                           std::vector<KnownRoute> routes) {
  s.set_pre_routing_handler([o, routes](const httplib::Request& req, httplib::Response& res) {
    if (!o.allowed_hosts.empty()) {
      const std::string h = host_name(req.get_header_value("Host"));
      if (std::find(o.allowed_hosts.begin(), o.allowed_hosts.end(), h) == o.allowed_hosts.end())
        return refuse(res, 400, "invalid_request_error",
                      "Host '" + h + "' is not allowed (see --allowed-hosts)");
    }
    const std::string origin = req.get_header_value("Origin");
    const bool cors = !origin.empty() &&
                      std::any_of(o.allowed_origins.begin(), o.allowed_origins.end(),
                                  [&](const std::string& a) { return a == "*" || a == origin; });
    if (cors) {
      res.set_header("Access-Control-Allow-Origin", origin);
      res.set_header("Vary", "Origin");
    }
    if (req.method == "OPTIONS") {
      const std::string allow = allowed_methods(routes, req.path);
      res.status = 204;
      if (!allow.empty()) res.set_header("Allow", allow);
      if (cors) {
        res.set_header("Access-Control-Allow-Methods", allow.empty() ? "GET, POST, OPTIONS" : allow);
        res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
      }
      return true;
    }
    const bool v1 = req.path.rfind("/v1/", 0) == 0;
    if (!o.api_key.empty() && (v1 || (o.protect_metrics && req.path == "/metrics"))) {
      const std::string auth = req.get_header_value("Authorization");
      const std::string want = "Bearer " + o.api_key;
      if (!constant_time_equal(auth, want)) {
        res.set_header("WWW-Authenticate", "Bearer");
        return refuse(res, 401, "authentication_error",
                      "missing or wrong API key: send 'Authorization: Bearer <key>'");
      }
    }
    if (req.get_header_value_count("Content-Length") > 1) {
      // Conflicting lengths: where this request ends is unknowable (request smuggling
      // behind a proxy), so the connection is closed after the answer.
      for (size_t i = 1; i < req.get_header_value_count("Content-Length"); ++i)
        if (req.get_header_value("Content-Length", i) != req.get_header_value("Content-Length")) {
          res.set_header("Connection", "close");
          return refuse(res, 400, "invalid_request_error",
                        "the request carries conflicting Content-Length headers");
        }
    }
    if (req.has_header("Content-Length") && req.has_header("Transfer-Encoding"))
      return refuse(res, 400, "invalid_request_error",
                    "a request may not carry both Content-Length and Transfer-Encoding");
    if (req.method == "POST") {
      const std::string ct = req.get_header_value("Content-Type");
      std::string media = ct.substr(0, ct.find(';'));  // media types are case-insensitive
      for (char& ch : media) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      while (!media.empty() && media.back() == ' ') media.pop_back();
      if (media != "application/json")
        return refuse(res, 415, "invalid_request_error",
                      "Content-Type must be application/json, not '" + ct + "'");
    }
    return false;
  });
  // Errors without a body: 405 for a known path with another method, else the status's.
  s.set_error_handler([routes](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404 && !allowed_methods(routes, req.path).empty()) {
      res.set_header("Allow", allowed_methods(routes, req.path));
      refuse(res, 405, "invalid_request_error",
             "method " + req.method + " is not allowed on " + req.path + " (allowed: " +
                 allowed_methods(routes, req.path) + ")");
      return;
    }
    refuse(res, res.status, res.status < 500 ? "invalid_request_error" : "internal_error",
           res.status == 404 ? std::string("not found") : "HTTP error " + std::to_string(res.status));
  });
}

}  // namespace strata
