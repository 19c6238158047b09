// The chain of configured tiers (make_unit_store) and byte-size parsing. See tiers.h.
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <condition_variable>
#include <deque>
#include <map>
#include <thread>
#include <mutex>

#include "tiers/tiers.h"

namespace strata {
namespace {

// Which tiers the cost model admits (shared by the chain and the host tier's demotion gate).
struct Admission {
  mutable std::mutex mu;
  std::vector<bool> store;  // empty = every tier
  bool at(size_t i) const {
    std::lock_guard<std::mutex> l(mu);
    return i >= store.size() || store[i];
  }
};

// The host tier's demotion target: the disk tier, but only while the cost model admits it.
class DemotionGate final : public UnitStore {
 public:
  DemotionGate(UnitStore* target, std::shared_ptr<Admission> a, size_t index)
      : target_(target), a_(std::move(a)), index_(index) {}
  bool contains(uint64_t key) override { return target_->contains(key); }
  std::optional<std::vector<uint8_t>> get(uint64_t key) override { return target_->get(key); }
  void put(uint64_t key, const std::vector<uint8_t>& bytes) override {
    if (a_->at(index_)) target_->put(key, bytes);
  }
  void reject(uint64_t key) override { target_->reject(key); }
  std::vector<TierStats> stats() const override { return target_->stats(); }

 private:
  UnitStore* target_;
  std::shared_ptr<Admission> a_;
  size_t index_;
};

class TierChain final : public UnitStore {
 public:
  // tiers: top first; shared: index of the shared pool in tiers (-1 = none). The host tier,
  // if any, was built with the disk tier as its spill.
  TierChain(std::vector<std::unique_ptr<UnitStore>> tiers, int shared,
            std::shared_ptr<Admission> admission, std::unique_ptr<UnitStore> gate)
      : tiers_(std::move(tiers)), shared_(shared), admission_(std::move(admission)),
        gate_(std::move(gate)) {
    if (tiers_.size() > 1) worker_ = std::thread([this] { prefetch_loop(); });
  }
  ~TierChain() override {
    if (worker_.joinable()) {
      {
        std::lock_guard<std::mutex> l(mu_);
        stop_ = true;
      }
      cv_.notify_all();
      worker_.join();
    }
    flush();
  }

  void prefetch(const std::vector<uint64_t>& keys) override {
    if (!worker_.joinable() || keys.empty()) return;
    {
      std::lock_guard<std::mutex> l(mu_);
      queue_.insert(queue_.end(), keys.begin(), keys.end());
    }
    cv_.notify_one();
  }

  void wait_prefetch() override {
    std::unique_lock<std::mutex> l(mu_);
    idle_cv_.wait(l, [&] { return queue_.empty() && !busy_; });
  }

  // The prefetch worker: each queued key not in the top tier is fetched (get() promotes it).
  void prefetch_loop() {
    for (;;) {
      uint64_t key;
      {
        std::unique_lock<std::mutex> l(mu_);
        busy_ = false;
        if (queue_.empty()) idle_cv_.notify_all();
        cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        key = queue_.front();
        queue_.pop_front();
        busy_ = true;
      }
      if (tiers_[0]->contains(key)) continue;
      if (get(key)) {
        std::lock_guard<std::mutex> l(mu_);
        ++prefetched_;
      }
    }
  }

  bool contains(uint64_t key) override {
    for (auto& t : tiers_)
      if (t->contains(key)) return true;
    return false;
  }

  std::optional<std::vector<uint8_t>> get(uint64_t key) override {
    for (size_t i = 0; i < tiers_.size(); ++i) {
      if (!tiers_[i]->contains(key)) continue;
      std::optional<std::vector<uint8_t>> b = tiers_[i]->get(key);
      if (!b) continue;
      // Promote: copy into every tier above (the shared pool is never below a private one).
      for (size_t j = 0; j < i; ++j) {
        tiers_[j]->put(key, *b);
        std::lock_guard<std::mutex> l(mu_);
        ++promotions_[j];
      }
      return b;
    }
    return std::nullopt;
  }

  void put(uint64_t key, const std::vector<uint8_t>& bytes) override {
    // The fastest admitted private tier (host, else disk) and, write-through, the shared pool
    // if admitted (the cost model, set_admission).
    for (size_t i = 0; i < tiers_.size(); ++i)
      if (static_cast<int>(i) != shared_ && admitted(i)) {
        tiers_[i]->put(key, bytes);
        break;
      }
    if (shared_ >= 0 && admitted(shared_)) tiers_[shared_]->put(key, bytes);
  }

  std::vector<double> measure_load_seconds(int64_t bytes) override {
    std::vector<double> out;
    const std::vector<uint8_t> probe(static_cast<size_t>(std::max<int64_t>(bytes, 1)), 0x5a);
    for (size_t i = 0; i < tiers_.size(); ++i) {
      const uint64_t key = 0xfffffffffffff000ull + i;  // never a chain key in practice
      tiers_[i]->put(key, probe);
      const auto t0 = std::chrono::steady_clock::now();
      const bool ok = tiers_[i]->get(key).has_value();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      tiers_[i]->remove(key);
      out.push_back(ok ? s : -1.0);
    }
    return out;
  }

  void set_admission(const std::vector<bool>& store_per_tier) override {
    std::lock_guard<std::mutex> l(admission_->mu);
    admission_->store = store_per_tier;
  }

  void reject(uint64_t key) override {
    for (auto& t : tiers_) t->reject(key);
  }

  void flush() override {
    for (auto& t : tiers_) t->flush();
  }

  std::vector<TierStats> stats() const override {
    std::vector<TierStats> out;
    for (size_t i = 0; i < tiers_.size(); ++i) {
      TierStats s = tiers_[i]->stats().at(0);
      std::lock_guard<std::mutex> l(mu_);
      s.promotions += promotions_.count(i) ? promotions_.at(i) : 0;
      if (i == 0) s.prefetched = prefetched_;
      out.push_back(s);
    }
    return out;
  }

 private:
  std::vector<std::unique_ptr<UnitStore>> tiers_;
  int shared_;
  mutable std::mutex mu_;
  std::map<size_t, int64_t> promotions_;
  bool admitted(size_t i) const { return admission_->at(i); }
  std::shared_ptr<Admission> admission_;
  std::unique_ptr<UnitStore> gate_;  // the host tier's demotion target (gated disk tier)
  // Prefetch worker (only with more than one tier).
  std::thread worker_;
  std::condition_variable cv_, idle_cv_;
  std::deque<uint64_t> queue_;
  bool stop_ = false, busy_ = false;
  int64_t prefetched_ = 0;
};

}  // namespace

StatusOr<std::shared_ptr<UnitStore>> make_unit_store(const TierOptions& o) {
  if (o.host_bytes < 0 || o.disk_bytes < 0)
    return invalid_argument("tier byte budgets must be >= 0");
  if (o.disk_bytes > 0 && o.disk_dir.empty())
    return invalid_argument("--disk-cache-bytes needs --kv-cache-dir");
  if (!o.any()) return std::shared_ptr<UnitStore>();
  std::unique_ptr<UnitStore> disk, pool;
  if (!o.disk_dir.empty()) {
    STRATA_ASSIGN_OR_RETURN(disk, make_disk_tier(o.disk_dir, o.disk_bytes));
  }
  if (!o.pool_url.empty()) {
    STRATA_ASSIGN_OR_RETURN(pool, make_redis_tier(o.pool_url));
  }
  std::vector<std::unique_ptr<UnitStore>> tiers;
  auto admission = std::make_shared<Admission>();
  std::unique_ptr<UnitStore> gate;
  if (o.host_bytes > 0 && disk) gate = std::make_unique<DemotionGate>(disk.get(), admission, 1);
  if (o.host_bytes > 0) tiers.push_back(make_host_tier(o.host_bytes, gate.get()));
  if (disk) tiers.push_back(std::move(disk));
  int shared = -1;
  if (pool) {
    shared = static_cast<int>(tiers.size());
    tiers.push_back(std::move(pool));
  }
  return std::shared_ptr<UnitStore>(
      std::make_shared<TierChain>(std::move(tiers), shared, admission, std::move(gate)));
}

StatusOr<int64_t> parse_byte_size(const std::string& s) {
  static const std::pair<const char*, double> kUnits[] = {
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
      {"KB", 1e3},     {"MB", 1e6},        {"GB", 1e9},           {"TB", 1e12},
      {"K", 1024.0},   {"M", 1048576.0},   {"G", 1073741824.0},   {"B", 1.0}};
  std::string num = s;
  double mult = 1;
  for (const auto& [suffix, m] : kUnits) {
    const std::string suf = suffix;
    if (num.size() > suf.size() && num.compare(num.size() - suf.size(), suf.size(), suf) == 0) {
      num = num.substr(0, num.size() - suf.size());
      mult = m;
      break;
    }
  }
  char* end = nullptr;
  const double v = num.empty() ? -1 : std::strtod(num.c_str(), &end);
  if (num.empty() || !end || *end != '\0' || !(v >= 0) || !std::isfinite(v * mult) ||
      v * mult > 9.0e18)
    return invalid_argument("'{}' is not a byte size (examples: 4096, 512MiB, 16GiB, 1e9)", s);
  return static_cast<int64_t>(v * mult);
}

}  // namespace strata
