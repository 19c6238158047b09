// Host tier: objects in process memory, LRU within a byte budget. See tiers.h.
#include <chrono>
#include <list>
#include <mutex>
#include <unordered_map>

#include "tiers/tiers.h"

namespace strata {
namespace {

class HostTier final : public UnitStore {
 public:
  HostTier(int64_t budget, UnitStore* spill) : budget_(budget), spill_(spill) {
    stats_.tier = "host";
    stats_.capacity_bytes = budget;
  }

  bool contains(uint64_t key) override {
    std::lock_guard<std::mutex> l(mu_);
    return map_.count(key) > 0;
  }

  std::optional<std::vector<uint8_t>> get(uint64_t key) override {
    const auto t0 = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> l(mu_);
    ++stats_.lookups;
    auto it = map_.find(key);
    if (it == map_.end()) return std::nullopt;
    lru_.splice(lru_.end(), lru_, it->second.pos);  // most recently used last
    std::vector<uint8_t> out = it->second.bytes;
    stats_.count_load(static_cast<int64_t>(out.size()),
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return out;
  }

  void put(uint64_t key, const std::vector<uint8_t>& bytes) override {
    std::vector<std::pair<uint64_t, std::vector<uint8_t>>> evicted;
    const auto t0 = std::chrono::steady_clock::now();
    {
      std::lock_guard<std::mutex> l(mu_);
      const int64_t n = static_cast<int64_t>(bytes.size());
      if (n > budget_) return;  // larger than the whole tier: not kept here
      erase_locked(key);
      while (stats_.bytes + n > budget_ && !lru_.empty()) {
        const uint64_t victim = lru_.front();
        std::vector<uint8_t> b = map_.at(victim).bytes;
        erase_locked(victim);
        evicted.emplace_back(victim, std::move(b));
        ++stats_.evictions;
      }
      lru_.push_back(key);
      map_.emplace(key, Obj{bytes, std::prev(lru_.end())});
      stats_.bytes += n;
      ++stats_.objects;
      stats_.count_store(
          n, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    spill(evicted);  // outside the lock: the next tier does I/O
  }

  void remove(uint64_t key) override {
    std::lock_guard<std::mutex> l(mu_);
    erase_locked(key);
  }

  void reject(uint64_t key) override {
    std::lock_guard<std::mutex> l(mu_);
    if (erase_locked(key)) ++stats_.rejected;
  }

  void flush() override {
    std::vector<std::pair<uint64_t, std::vector<uint8_t>>> all;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (uint64_t k : lru_) all.emplace_back(k, map_.at(k).bytes);
    }
    spill(all);
  }

  std::vector<TierStats> stats() const override {
    std::lock_guard<std::mutex> l(mu_);
    return {stats_};
  }

 private:
  struct Obj {
    std::vector<uint8_t> bytes;
    std::list<uint64_t>::iterator pos;
  };

  bool erase_locked(uint64_t key) {
    auto it = map_.find(key);
    if (it == map_.end()) return false;
    stats_.bytes -= static_cast<int64_t>(it->second.bytes.size());
    --stats_.objects;
    lru_.erase(it->second.pos);
    map_.erase(it);
    return true;
  }

  void spill(const std::vector<std::pair<uint64_t, std::vector<uint8_t>>>& objs) {
    if (!spill_) return;
    int64_t n = 0;
    for (const auto& [k, b] : objs)
      if (!spill_->contains(k)) {
        spill_->put(k, b);
        ++n;
      }
    std::lock_guard<std::mutex> l(mu_);
    stats_.demotions += n;
  }

  const int64_t budget_;
  UnitStore* spill_;
  mutable std::mutex mu_;
  std::list<uint64_t> lru_;
  std::unordered_map<uint64_t, Obj> map_;
  TierStats stats_;
};

}  // namespace

std::unique_ptr<UnitStore> make_host_tier(int64_t budget_bytes, UnitStore* spill) {
  return std::make_unique<HostTier>(budget_bytes, spill);
}

}  // namespace strata
