// Shared pool tier on Redis (hiredis, one synchronous connection). See tiers.h.
#include <chrono>
#include <mutex>

#include <hiredis.h>
#include <spdlog/spdlog.h>

#include "tiers/tiers.h"

namespace strata {
namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct ReplyDeleter {
  void operator()(redisReply* r) const {
    if (r) freeReplyObject(r);
  }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

class RedisTier final : public UnitStore {
 public:
  RedisTier(std::string host, int port) : host_(std::move(host)), port_(port) {
    stats_.tier = "redis";
    stats_.bytes = -1;
    stats_.objects = -1;
  }
  ~RedisTier() override {
    if (ctx_) redisFree(ctx_);
  }

  // Connects (or reconnects); false with ctx_ null when the server cannot be reached.
  bool connect_locked(std::string* why) {
    if (ctx_ && !ctx_->err) return true;
    if (ctx_) redisFree(ctx_);
    const timeval tv{2, 0};
    ctx_ = redisConnectWithTimeout(host_.c_str(), port_, tv);
    if (!ctx_ || ctx_->err) {
      if (why) *why = ctx_ ? ctx_->errstr : "out of memory";
      if (ctx_) redisFree(ctx_);
      ctx_ = nullptr;
      return false;
    }
    redisSetTimeout(ctx_, tv);
    return true;
  }

  bool contains(uint64_t key) override {
    std::lock_guard<std::mutex> l(mu_);
    const std::string k = name(key);
    Reply r = command("EXISTS %b", k.data(), k.size());
    return r && r->type == REDIS_REPLY_INTEGER && r->integer > 0;
  }

  std::optional<std::vector<uint8_t>> get(uint64_t key) override {
    std::lock_guard<std::mutex> l(mu_);
    ++stats_.lookups;
    const auto t0 = std::chrono::steady_clock::now();
    const std::string k = name(key);
    Reply r = command("GET %b", k.data(), k.size());
    if (!r || r->type != REDIS_REPLY_STRING) return std::nullopt;
    std::vector<uint8_t> bytes(r->str, r->str + r->len);
    stats_.count_load(static_cast<int64_t>(bytes.size()), since(t0));
    return bytes;
  }

  void put(uint64_t key, const std::vector<uint8_t>& bytes) override {
    std::lock_guard<std::mutex> l(mu_);
    const auto t0 = std::chrono::steady_clock::now();
    const std::string k = name(key);
    Reply r = command("SET %b %b", k.data(), k.size(), bytes.data(), bytes.size());
    if (!r || r->type == REDIS_REPLY_ERROR) {
      if (r && stats_.errors++ == 0)
        spdlog::warn("strata: redis tier {}:{}: SET refused: {}", host_, port_,
                     std::string(r->str, r->len));
      return;
    }
    stats_.count_store(static_cast<int64_t>(bytes.size()), since(t0));
  }

  void remove(uint64_t key) override {
    std::lock_guard<std::mutex> l(mu_);
    const std::string k = name(key);
    (void)command("DEL %b", k.data(), k.size());
  }

  void reject(uint64_t key) override {
    std::lock_guard<std::mutex> l(mu_);
    const std::string k = name(key);
    Reply r = command("DEL %b", k.data(), k.size());
    if (r && r->type == REDIS_REPLY_INTEGER && r->integer > 0) ++stats_.rejected;
  }

  std::vector<TierStats> stats() const override {
    std::lock_guard<std::mutex> l(mu_);
    return {stats_};
  }

 private:
  static std::string name(uint64_t key) { return fmt::format("strata:unit:{:016x}", key); }

  // One command; on a connection failure counts an error, drops the connection (the next
  // call reconnects) and returns null.
  template <typename... A>
  Reply command(const char* fmt_str, A... args) {
    std::string why;
    if (!connect_locked(&why)) {
      if (stats_.errors++ == 0)
        spdlog::warn("strata: redis tier {}:{} unreachable: {}", host_, port_, why);
      return nullptr;
    }
    Reply r(static_cast<redisReply*>(redisCommand(ctx_, fmt_str, args...)));
    if (!r) {
      if (stats_.errors++ == 0)
        spdlog::warn("strata: redis tier {}:{}: {}", host_, port_, ctx_->errstr);
      redisFree(ctx_);
      ctx_ = nullptr;
    }
    return r;
  }

  const std::string host_;
  const int port_;
  mutable std::mutex mu_;
  redisContext* ctx_ = nullptr;
  TierStats stats_;
};

}  // namespace

StatusOr<std::unique_ptr<UnitStore>> make_redis_tier(const std::string& url) {
  const std::string scheme = "redis://";
  if (url.rfind(scheme, 0) != 0)
    return invalid_argument("--kv-pool {}: expected redis://HOST:PORT", url);
  const std::string hp = url.substr(scheme.size());
  const size_t colon = hp.rfind(':');
  std::string host = colon == std::string::npos ? hp : hp.substr(0, colon);
  int port = 6379;
  if (colon != std::string::npos) {
    char* end = nullptr;
    const long p = std::strtol(hp.c_str() + colon + 1, &end, 10);
    if (!end || *end != '\0' || p <= 0 || p > 65535)
      return invalid_argument("--kv-pool {}: bad port", url);
    port = static_cast<int>(p);
  }
  if (host.empty()) return invalid_argument("--kv-pool {}: no host", url);
  auto t = std::make_unique<RedisTier>(host, port);
  std::string why;
  if (!t->connect_locked(&why))
    return Status(StatusCode::kUnavailable,
                  fmt::format("--kv-pool {}: cannot connect: {}", url, why));
  return std::unique_ptr<UnitStore>(std::move(t));
}

}  // namespace strata
