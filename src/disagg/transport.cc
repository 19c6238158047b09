#include "disagg/transport.h"

#include <atomic>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>
#include <nlohmann/json.hpp>

#include "base/check.h"

namespace strata {

namespace {

zmq::context_t& context() {
  static zmq::context_t* ctx = new zmq::context_t(1);  // process-wide, never destroyed
  return *ctx;
}

class ZmqServer : public TransportServer {
 public:
  ZmqServer(zmq::socket_t sock, std::string endpoint, TransportHandler handler)
      : sock_(std::move(sock)), endpoint_(std::move(endpoint)), handler_(std::move(handler)) {
    thread_ = std::thread([this] { loop(); });
  }
  ~ZmqServer() override { stop(); }
  const std::string& endpoint() const override { return endpoint_; }
  void stop() override {
    if (stopping_.exchange(true)) return;
    if (thread_.joinable()) thread_.join();
    sock_.close();
  }

 private:
  void loop() {
    while (!stopping_) {
      zmq::pollitem_t item{sock_.handle(), 0, ZMQ_POLLIN, 0};
      try {
        zmq::poll(&item, 1, std::chrono::milliseconds(50));
        if (!(item.revents & ZMQ_POLLIN)) continue;
        std::vector<zmq::message_t> parts;
        if (!zmq::recv_multipart(sock_, std::back_inserter(parts))) continue;
        // ROUTER envelope from a REQ peer: [identity, empty, payload...].
        if (parts.size() < 2) continue;
        Frames msg;
        for (size_t i = 2; i < parts.size(); ++i) msg.push_back(parts[i].to_string());
        Frames reply = handler_(msg);
        sock_.send(parts[0], zmq::send_flags::sndmore);
        sock_.send(zmq::message_t(), zmq::send_flags::sndmore);
        for (size_t i = 0; i < reply.size(); ++i)
          sock_.send(zmq::buffer(reply[i]),
                     i + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
      } catch (const zmq::error_t&) {
        // A peer that went away mid-message: drop it and keep serving.
      }
    }
  }
  zmq::socket_t sock_;
  std::string endpoint_;
  TransportHandler handler_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

class ZmqClient : public TransportClient {
 public:
  StatusOr<Frames> request(const std::string& endpoint, const Frames& msg,
                           int timeout_ms) override {
    try {
      zmq::socket_t s(context(), zmq::socket_type::req);
      s.set(zmq::sockopt::linger, 0);
      s.set(zmq::sockopt::rcvtimeo, timeout_ms);
      s.set(zmq::sockopt::sndtimeo, timeout_ms);
      s.connect(endpoint);
      for (size_t i = 0; i < msg.size(); ++i)
        if (!s.send(zmq::buffer(msg[i]),
                    i + 1 < msg.size() ? zmq::send_flags::sndmore : zmq::send_flags::none))
          return Status(StatusCode::kUnavailable,
                        fmt::format("kv transfer: cannot send to {}", endpoint));
      std::vector<zmq::message_t> parts;
      if (!zmq::recv_multipart(s, std::back_inserter(parts)))
        return Status(StatusCode::kUnavailable,
                      fmt::format("kv transfer: no reply from {} within {} ms", endpoint,
                                  timeout_ms));
      Frames out;
      for (auto& p : parts) out.push_back(p.to_string());
      return out;
    } catch (const zmq::error_t& e) {
      return Status(StatusCode::kUnavailable,
                    fmt::format("kv transfer to {}: {}", endpoint, e.what()));
    }
  }
};

bool is_op(const Frames& msg, const char* op) {
  return !msg.empty() && msg[0].find(fmt::format("\"op\":\"{}\"", op)) != std::string::npos;
}

class FaultClient : public TransportClient {
 public:
  FaultClient(std::unique_ptr<TransportClient> inner, FaultSpec spec)
      : inner_(std::move(inner)), spec_(std::move(spec)), rng_(spec_.seed) {}
  StatusOr<Frames> request(const std::string& endpoint, const Frames& msg,
                           int timeout_ms) override {
    const bool fetch = is_op(msg, "fetch"), hello = is_op(msg, "hello");
    std::string kind;
    size_t pick = 0;
    {
      std::lock_guard lock(mu_);
      std::vector<std::string> usable;
      for (const std::string& k : spec_.kinds)
        if ((k == "handshake") ? hello : fetch) usable.push_back(k);
      if (!usable.empty() && std::uniform_real_distribution<double>(0, 1)(rng_) < spec_.probability)
        kind = usable[std::uniform_int_distribution<size_t>(0, usable.size() - 1)(rng_)];
      pick = rng_();
    }
    if (kind == "delay")
      std::this_thread::sleep_for(std::chrono::milliseconds(spec_.delay_ms));
    StatusOr<Frames> r = inner_->request(endpoint, msg, timeout_ms);
    if (kind.empty() || kind == "delay" || !r.ok()) return r;
    Frames f = std::move(r).value();
    if (kind == "drop") {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(timeout_ms, 200)));
      return Status(StatusCode::kUnavailable,
                    fmt::format("kv transfer: no reply from {} (fault: dropped)", endpoint));
    }
    if (kind == "handshake") {
      // The peer's contract arrives with one field changed (its weight hash).
      nlohmann::json rep = nlohmann::json::parse(f[0], nullptr, false);
      if (rep.is_object() && rep.contains("contract") && rep["contract"].is_string()) {
        nlohmann::json c = nlohmann::json::parse(rep["contract"].get<std::string>(), nullptr, false);
        if (c.is_object() && c.contains("fields"))
          for (auto& field : c["fields"])
            if (field.at(0) == "weight_hash") field[1] = field[1].get<std::string>() + "-damaged";
        rep["contract"] = c.dump();
        f[0] = rep.dump();
      }
      return f;
    }
    const size_t runs = f.size() > 2 ? f.size() - 2 : 0;  // frames after header + ids
    if (kind == "corrupt" && runs > 0) {
      std::string& fr = f[2 + pick % runs];
      if (!fr.empty()) fr[(pick >> 8) % fr.size()] ^= 0x01;
    } else if (kind == "truncate" && f.size() > 1) {
      f.back().resize(f.back().size() / 2);
    } else if (kind == "duplicate" && f.size() > 1) {
      f.push_back(f.back());
    } else if (kind == "reorder" && runs > 1) {
      std::swap(f[2], f[2 + 1 + pick % (runs - 1)]);
    }
    return f;
  }

 private:
  std::unique_ptr<TransportClient> inner_;
  FaultSpec spec_;
  std::mutex mu_;
  std::mt19937_64 rng_;
};

}  // namespace

StatusOr<std::unique_ptr<TransportServer>> start_zmq_server(const std::string& endpoint,
                                                            TransportHandler handler) {
  try {
    zmq::socket_t s(context(), zmq::socket_type::router);
    s.set(zmq::sockopt::linger, 0);
    std::string ep = endpoint;
    // ZeroMQ's wildcard port is '*'; accept the usual ':0' too.
    if (ep.rfind("tcp://", 0) == 0 && ep.size() > 2 && ep.substr(ep.size() - 2) == ":0")
      ep = ep.substr(0, ep.size() - 1) + "*";
    s.bind(ep);
    std::string bound = s.get(zmq::sockopt::last_endpoint);
    return std::unique_ptr<TransportServer>(
        new ZmqServer(std::move(s), std::move(bound), std::move(handler)));
  } catch (const zmq::error_t& e) {
    return Status(StatusCode::kUnavailable,
                  fmt::format("kv transfer: cannot bind {}: {}", endpoint, e.what()));
  }
}

std::unique_ptr<TransportClient> make_zmq_client() { return std::make_unique<ZmqClient>(); }

StatusOr<FaultSpec> parse_fault_spec(const std::string& spec) {
  FaultSpec f;
  size_t pos = 0;
  bool first = true;
  while (pos <= spec.size()) {
    size_t end = spec.find(':', pos);
    if (end == std::string::npos) end = spec.size();
    const std::string part = spec.substr(pos, end - pos);
    pos = end + 1;
    if (first) {
      first = false;
      size_t p = 0;
      while (p <= part.size()) {
        size_t c = part.find(',', p);
        if (c == std::string::npos) c = part.size();
        const std::string k = part.substr(p, c - p);
        p = c + 1;
        static const char* kKinds[] = {"drop", "corrupt", "truncate", "duplicate",
                                       "reorder", "delay", "handshake"};
        if (std::find(std::begin(kKinds), std::end(kKinds), k) == std::end(kKinds))
          return invalid_argument("fault spec '{}': unknown fault '{}' (drop, corrupt, truncate, "
                                  "duplicate, reorder, delay, handshake)",
                                  spec, k);
        f.kinds.push_back(k);
      }
      continue;
    }
    const size_t eq = part.find('=');
    if (eq == std::string::npos) return invalid_argument("fault spec '{}': '{}' is not KEY=VALUE", spec, part);
    const std::string k = part.substr(0, eq), v = part.substr(eq + 1);
    try {
      if (k == "p") f.probability = std::stod(v);
      else if (k == "seed") f.seed = std::stoull(v);
      else if (k == "delay_ms") f.delay_ms = std::stoi(v);
      else return invalid_argument("fault spec '{}': unknown key '{}' (p, seed, delay_ms)", spec, k);
    } catch (const std::exception&) {
      return invalid_argument("fault spec '{}': bad value for {}", spec, k);
    }
  }
  if (!(f.probability >= 0 && f.probability <= 1))
    return invalid_argument("fault spec '{}': p must be in [0, 1]", spec);
  return f;
}

std::unique_ptr<TransportClient> make_fault_client(std::unique_ptr<TransportClient> inner,
                                                   FaultSpec spec) {
  return std::make_unique<FaultClient>(std::move(inner), std::move(spec));
}

}  // namespace strata
