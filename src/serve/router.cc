#include "serve/router.h"

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "serve/dashboard_page.h"
#include "serve/dashboard_state.h"
#include "serve/http_front_end.h"
#include "serve/openai_api.h"

namespace strata {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Router::Backend {
  std::string url;
  std::atomic<int64_t> in_flight{0};
};

struct Router::Pair {
  Backend* p = nullptr;
  Backend* d = nullptr;
  std::mutex mu;
  Status status = Status(StatusCode::kUnavailable, "not checked yet");
  Clock::time_point checked{};
};

namespace {

void send_error(httplib::Response& res, int status, const std::string& type,
                const std::string& msg) {
  res.status = status;
  res.set_content(render_error({status, type, "", msg}), "application/json");
}

std::unique_ptr<httplib::Client> client(const std::string& url, int timeout_s,
                                        const std::string& auth = "") {
  auto c = std::make_unique<httplib::Client>(url);
  if (!auth.empty()) c->set_default_headers({{"Authorization", auth}});
  c->set_connection_timeout(5, 0);
  c->set_read_timeout(timeout_s, 0);
  c->set_write_timeout(timeout_s, 0);
  return c;
}

// A backend's dashboard state and metrics (short timeouts: the page polls every second).
DashboardBackend fetch_dashboard(const std::string& url, const std::string& role,
                                 const std::string& auth) {
  DashboardBackend b{url, role, nullptr, "", ""};
  auto c = client(url, 2, auth);
  c->set_connection_timeout(1, 0);
  auto st = c->Get("/v1/dashboard/state");
  if (!st) {
    b.error = "unreachable";
  } else if (st->status != 200) {
    b.error = fmt::format("/v1/dashboard/state: HTTP {}", st->status);
  } else if (Json j = Json::parse(st->body, nullptr, /*allow_exceptions=*/false); j.is_discarded()) {
    b.error = "/v1/dashboard/state: not JSON";
  } else {
    b.state = std::move(j);
    if (auto m = c->Get("/metrics"); m && m->status == 200) b.metrics = m->body;
  }
  return b;
}

struct InFlight {
  std::atomic<int64_t>& n;
  explicit InFlight(std::atomic<int64_t>& c) : n(c) { ++n; }
  ~InFlight() { --n; }
};

// A streamed backend response, produced by a thread and consumed by the client's handler.
struct Relay {
  std::mutex mu;
  std::condition_variable cv;
  int status = 0;
  std::string content_type;
  std::deque<std::string> chunks;
  bool headers = false, done = false, failed = false;
  std::string error;
  std::atomic<bool> cancelled{false};
};

}  // namespace

Router::Router(RouterOptions o) : o_(std::move(o)) {}
Router::~Router() { stop(); }

Status Router::check_pair(Pair& pr) {
  std::lock_guard lock(pr.mu);
  if (pr.status.ok()) return pr.status;
  if (Clock::now() - pr.checked < std::chrono::seconds(5) && pr.checked != Clock::time_point{})
    return pr.status;
  pr.checked = Clock::now();
  const std::string auth = o_.backend_api_key.empty() ? "" : "Bearer " + o_.backend_api_key;
  auto pc = client(pr.p->url, 10, auth);
  auto info = pc->Get("/v1/disaggregation");
  if (!info || info->status != 200) {
    pr.status = Status(StatusCode::kUnavailable,
                       fmt::format("prefill server {} does not answer /v1/disaggregation", pr.p->url));
    return pr.status;
  }
  std::string ep;
  try {
    const Json j = Json::parse(info->body);
    if (j.value("mode", "") != "prefill") {
      pr.status = Status(StatusCode::kFailedPrecondition,
                         fmt::format("{} is not a prefill server (mode {})", pr.p->url, j.value("mode", "?")));
      return pr.status;
    }
    ep = j.at("kv_transfer_endpoint").get<std::string>();
  } catch (const std::exception& e) {
    pr.status = Status(StatusCode::kUnavailable, fmt::format("{}: bad /v1/disaggregation: {}", pr.p->url, e.what()));
    return pr.status;
  }
  auto dc = client(pr.d->url, 30, auth);
  auto hs = dc->Post("/v1/disaggregation/handshake", Json{{"remote_endpoint", ep}}.dump(),
                     "application/json");
  if (!hs) {
    pr.status = Status(StatusCode::kUnavailable, fmt::format("decode server {} does not answer", pr.d->url));
  } else if (hs->status != 200) {
    std::string msg = hs->body;
    try {
      msg = Json::parse(hs->body).at("error").at("message").get<std::string>();
    } catch (const std::exception&) {
    }
    pr.status = Status(StatusCode::kFailedPrecondition,
                       fmt::format("{} -> {}: {}", pr.p->url, pr.d->url, msg));
  } else {
    pr.status = ok_status();
  }
  return pr.status;
}

std::vector<std::string> Router::pair_report() {
  std::vector<std::string> out;
  for (auto& pr : pairs_) {
    Status s = check_pair(*pr);
    out.push_back(fmt::format("{} -> {}: {}", pr->p->url, pr->d->url, s.ok() ? "ok" : s.to_string()));
  }
  return out;
}

Status Router::start() {
  if (o_.prefill.empty() || o_.decode.empty())
    return invalid_argument("the router needs at least one --prefill and one --decode URL");
  if (o_.policy != "round-robin" && o_.policy != "least-loaded" && o_.policy != "prefix-aware")
    return invalid_argument("--policy must be round-robin, least-loaded or prefix-aware, not '{}'", o_.policy);
  for (const auto& u : o_.prefill) {
    prefill_.push_back(std::make_unique<Backend>());
    prefill_.back()->url = u;
  }
  for (const auto& u : o_.decode) {
    decode_.push_back(std::make_unique<Backend>());
    decode_.back()->url = u;
  }
  for (auto& p : prefill_)
    for (auto& d : decode_) {
      pairs_.push_back(std::make_unique<Pair>());
      pairs_.back()->p = p.get();
      pairs_.back()->d = d.get();
      (void)check_pair(*pairs_.back());
    }
  HttpFrontEndOptions fo;
  fo.host = o_.host;
  fo.port = o_.port;
  fo.threads = o_.threads;
  fo.max_body_bytes = o_.max_body_bytes;
  server_ = std::make_unique<HttpFrontEnd>(std::move(fo));
  install_request_guard(*server_, o_.guard,
                        {{"/health", "GET"}, {"/metrics", "GET"}, {"/v1/models", "GET"},
                         {"/dashboard", "GET"}, {"/v1/dashboard/state", "GET"},
                         {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"}});
  install_routes();
  STRATA_RETURN_IF_ERROR(server_->start());
  port_ = server_->port();
  return ok_status();
}

void Router::stop() {
  if (server_) server_->stop();
}

void Router::wait() {
  if (server_) server_->wait();
}

void Router::install_routes() {
  HttpFrontEnd& s = *server_;
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    for (auto& pr : pairs_)
      if (check_pair(*pr).ok()) return res.set_content("{}", "application/json");
    send_error(res, 503, "service_unavailable", "no usable prefill/decode pair");
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    auto r = client(prefill_.front()->url, 10)->Get("/v1/models");
    if (!r) return send_error(res, 502, "bad_gateway", "prefill server unreachable");
    res.status = r->status;
    res.set_content(r->body, "application/json");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    std::string m;
    m += fmt::format("# TYPE strata:router_requests_total counter\nstrata:router_requests_total {}\n", requests_.load());
    m += fmt::format("# TYPE strata:router_failures_total counter\nstrata:router_failures_total {}\n", failures_.load());
    m += fmt::format("# TYPE strata:router_handoff_seconds summary\nstrata:router_handoff_seconds_sum {}\n"
                     "strata:router_handoff_seconds_count {}\n",
                     handoff_us_.load() / 1e6, handoffs_.load());
    for (auto& b : prefill_)
      m += fmt::format("strata:router_in_flight{{role=\"prefill\",url=\"{}\"}} {}\n", b->url, b->in_flight.load());
    for (auto& b : decode_)
      m += fmt::format("strata:router_in_flight{{role=\"decode\",url=\"{}\"}} {}\n", b->url, b->in_flight.load());
    res.set_content(m, "text/plain; version=0.0.4");
  });

  s.Get("/dashboard", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-cache");
    res.set_content(std::string(dashboard_page_html()), "text/html; charset=utf-8");
  });
  s.Get("/v1/dashboard/state", [this](const httplib::Request&, httplib::Response& res) {
    const std::string auth = o_.backend_api_key.empty() ? "" : "Bearer " + o_.backend_api_key;
    std::vector<std::future<DashboardBackend>> pending;
    for (const auto* list : {&prefill_, &decode_})
      for (const auto& b : *list)
        pending.push_back(std::async(std::launch::async, fetch_dashboard, b->url,
                                     list == &prefill_ ? "prefill" : "decode", auth));
    std::vector<DashboardBackend> backends;
    for (auto& f : pending) backends.push_back(f.get());
    res.set_header("Cache-Control", "no-store");
    res.set_content(router_dashboard_json(o_.policy, backends).dump(), "application/json");
  });

  auto route = [this](const std::string& path, const httplib::Request& req, httplib::Response& res) {
    ++requests_;
    const std::string auth = o_.backend_api_key.empty() ? req.get_header_value("Authorization")
                                                        : "Bearer " + o_.backend_api_key;
    StatusOr<Json> parsed = parse_json_body(req.body);
    if (parsed.ok() && !parsed->is_object())
      parsed = invalid_argument("request body must be a JSON object");
    if (!parsed.ok()) {
      ++failures_;
      return send_error(res, 400, "invalid_request_error", parsed.status().message());
    }
    Json body = std::move(*parsed);
    // Pick P, then D.
    auto least = [](std::vector<std::unique_ptr<Backend>>& v) {
      Backend* b = v.front().get();
      for (auto& x : v)
        if (x->in_flight < b->in_flight) b = x.get();
      return b;
    };
    Backend* p = nullptr;
    Backend* d = nullptr;
    const uint64_t k = rr_++;
    if (o_.policy == "round-robin") {
      p = prefill_[k % prefill_.size()].get();
      d = decode_[k % decode_.size()].get();
    } else if (o_.policy == "least-loaded") {
      p = least(prefill_);
      d = least(decode_);
    } else {
      std::string key = body.contains("messages") ? body["messages"].dump()
                                                  : body.value("prompt", Json()).dump();
      key.resize(std::min<size_t>(key.size(), 256));
      p = prefill_[XXH3_64bits(key.data(), key.size()) % prefill_.size()].get();
      d = least(decode_);
    }
    Pair* pr = nullptr;
    for (auto& x : pairs_)
      if (x->p == p && x->d == d) pr = x.get();
    Status ps = check_pair(*pr);
    if (!ps.ok()) {
      ++failures_;
      return send_error(res, 503, "kv_transfer_error", ps.message());
    }
    // 1. Prefill on P.
    Json pre = body;
    pre["stream"] = false;
    pre.erase("stream_options");
    pre["kv_transfer_params"] = {{"do_remote_decode", true}};
    const auto t0 = Clock::now();
    Json kvp;
    {
      InFlight f(p->in_flight);
      auto r = client(p->url, o_.timeout_s, auth)->Post(path, pre.dump(), "application/json");
      if (!r) {
        ++failures_;
        return send_error(res, 502, "bad_gateway", fmt::format("prefill server {} unreachable", p->url));
      }
      if (r->status != 200) {
        ++failures_;
        res.status = r->status;
        return res.set_content(r->body, "application/json");
      }
      try {
        kvp = Json::parse(r->body).at("kv_transfer_params");
      } catch (const std::exception& e) {
        ++failures_;
        return send_error(res, 502, "bad_gateway", fmt::format("prefill server {}: no kv_transfer_params", p->url));
      }
    }
    handoff_us_ += std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
    ++handoffs_;
    // 2. Decode on D, relayed (streamed as it arrives when the client asked for a stream).
    Json dec = body;
    dec["kv_transfer_params"] = kvp;
    const bool stream = body.value("stream", false);
    if (!stream) {
      InFlight f(d->in_flight);
      auto r = client(d->url, o_.timeout_s, auth)->Post(path, dec.dump(), "application/json");
      if (!r) {
        ++failures_;
        return send_error(res, 502, "bad_gateway", fmt::format("decode server {} unreachable", d->url));
      }
      if (r->status != 200) ++failures_;
      res.status = r->status;
      return res.set_content(r->body, r->get_header_value("Content-Type"));
    }
    auto relay = std::make_shared<Relay>();
    const std::string url = d->url, payload = dec.dump();
    const int timeout = o_.timeout_s;
    Backend* db = d;
    std::thread([relay, url, payload, path, timeout, db, auth] {
      InFlight f(db->in_flight);
      httplib::Request rq;
      rq.method = "POST";
      rq.path = path;
      rq.body = payload;
      rq.headers.emplace("Content-Type", "application/json");
      rq.response_handler = [relay](const httplib::Response& r) {
        std::lock_guard lock(relay->mu);
        relay->status = r.status;
        relay->content_type = r.get_header_value("Content-Type");
        relay->headers = true;
        relay->cv.notify_all();
        return !relay->cancelled;
      };
      rq.content_receiver = [relay](const char* data, size_t n, uint64_t, uint64_t) {
        std::lock_guard lock(relay->mu);
        relay->chunks.emplace_back(data, n);
        relay->cv.notify_all();
        return !relay->cancelled.load();
      };
      auto r = client(url, timeout, auth)->send(rq);
      std::lock_guard lock(relay->mu);
      if (!r) {
        relay->failed = true;
        relay->error = fmt::format("decode server {} unreachable", url);
      }
      relay->done = true;
      relay->cv.notify_all();
    }).detach();  // holds its own reference; a cancelled client aborts the receive
    std::unique_lock lock(relay->mu);
    relay->cv.wait(lock, [&] { return relay->headers || relay->done; });
    if (!relay->headers) {
      ++failures_;
      lock.unlock();
      return send_error(res, 502, "bad_gateway", relay->error);
    }
    if (relay->status != 200) {  // an error before any token: relay status and body whole
      ++failures_;
      relay->cv.wait(lock, [&] { return relay->done; });
      std::string b;
      for (auto& c : relay->chunks) b += c;
      res.status = relay->status;
      return res.set_content(b, "application/json");
    }
    lock.unlock();
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [relay](size_t, httplib::DataSink& sink) {
          std::unique_lock l(relay->mu);
          relay->cv.wait(l, [&] { return !relay->chunks.empty() || relay->done; });
          while (!relay->chunks.empty()) {
            std::string c = std::move(relay->chunks.front());
            relay->chunks.pop_front();
            l.unlock();
            if (!sink.write(c.data(), c.size())) {
              relay->cancelled = true;
              return false;
            }
            l.lock();
          }
          if (relay->done) {
            l.unlock();
            sink.done();
          }
          return true;
        },
        [relay](bool) { relay->cancelled = true; });
  };
  s.Post("/v1/completions", [route](const httplib::Request& q, httplib::Response& r) {
    route("/v1/completions", q, r);
  });
  s.Post("/v1/chat/completions", [route](const httplib::Request& q, httplib::Response& r) {
    route("/v1/chat/completions", q, r);
  });
}

}  // namespace strata
