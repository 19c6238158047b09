// Disk tier: one file per object under a directory, LRU within a byte budget. See tiers.h.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <list>
#include <mutex>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "tiers/tiers.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Whole-file write / read with POSIX calls (short writes and EINTR handled).
bool write_all(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, uint8_t* p, size_t n) {
  size_t at = 0;
  while (at < n) {
    const ssize_t r = ::pread(fd, p + at, n - at, static_cast<off_t>(at));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    at += static_cast<size_t>(r);
  }
  return true;
}

class DiskTier final : public UnitStore {
 public:
  DiskTier(std::string dir, int64_t budget) : dir_(std::move(dir)), budget_(budget) {
    stats_.tier = "disk";
    stats_.capacity_bytes = budget;
    // Index what a previous run left, oldest first (by modification time).
    std::vector<std::pair<fs::file_time_type, std::pair<uint64_t, int64_t>>> found;
    std::error_code ec;
    for (const auto& de : fs::directory_iterator(dir_, ec)) {
      const std::string name = de.path().filename().string();
      if (name.size() != 21 || name.substr(16) != ".unit") continue;
      const std::string hex = name.substr(0, 16);  // outlives `end`
      char* end = nullptr;
      const uint64_t key = std::strtoull(hex.c_str(), &end, 16);
      if (!end || *end != '\0') continue;
      std::error_code e2;
      const auto size = de.file_size(e2);
      const auto mtime = de.last_write_time(e2);
      if (e2) continue;
      found.push_back({mtime, {key, static_cast<int64_t>(size)}});
    }
    std::sort(found.begin(), found.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [t, kv] : found) insert_locked(kv.first, kv.second);
    evict_locked(0);
  }

  bool contains(uint64_t key) override {
    std::lock_guard<std::mutex> l(mu_);
    return map_.count(key) > 0;
  }

  std::optional<std::vector<uint8_t>> get(uint64_t key) override {
    std::lock_guard<std::mutex> l(mu_);
    ++stats_.lookups;
    auto it = map_.find(key);
    if (it == map_.end()) return std::nullopt;
    const auto t0 = std::chrono::steady_clock::now();
    const std::string path = path_of(key);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0) {
      if (fd >= 0) ::close(fd);
      ++stats_.errors;
      erase_locked(key, /*unlink=*/false);  // gone behind our back
      return std::nullopt;
    }
    std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
    const bool ok = read_all(fd, bytes.data(), bytes.size());
    ::close(fd);
    if (!ok) {
      ++stats_.errors;
      return std::nullopt;
    }
    lru_.splice(lru_.end(), lru_, it->second.pos);
    stats_.count_load(static_cast<int64_t>(bytes.size()), since(t0));
    return bytes;
  }

  void put(uint64_t key, const std::vector<uint8_t>& bytes) override {
    std::lock_guard<std::mutex> l(mu_);
    const int64_t n = static_cast<int64_t>(bytes.size());
    if (n > budget_) return;
    const auto t0 = std::chrono::steady_clock::now();
    const std::string path = path_of(key);
    const std::string tmp = fmt::format("{}/.tmp-{:016x}-{}", dir_, key, ::getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    bool ok = fd >= 0 && write_all(fd, bytes.data(), bytes.size());
    if (fd >= 0) ok = (::close(fd) == 0) && ok;
    ok = ok && ::rename(tmp.c_str(), path.c_str()) == 0;
    if (!ok) {
      ::unlink(tmp.c_str());
      if (stats_.errors++ == 0)
        spdlog::warn("strata: disk tier {}: cannot write {} ({})", dir_, path, std::strerror(errno));
      return;
    }
    erase_locked(key, /*unlink=*/false);
    insert_locked(key, n);
    evict_locked(key);
    stats_.count_store(n, since(t0));
  }

  void remove(uint64_t key) override {
    std::lock_guard<std::mutex> l(mu_);
    erase_locked(key, /*unlink=*/true);
  }

  void reject(uint64_t key) override {
    std::lock_guard<std::mutex> l(mu_);
    if (map_.count(key)) ++stats_.rejected;
    erase_locked(key, /*unlink=*/true);
  }

  std::vector<TierStats> stats() const override {
    std::lock_guard<std::mutex> l(mu_);
    return {stats_};
  }

 private:
  struct Obj {
    int64_t bytes;
    std::list<uint64_t>::iterator pos;
  };

  std::string path_of(uint64_t key) const { return fmt::format("{}/{:016x}.unit", dir_, key); }

  void insert_locked(uint64_t key, int64_t n) {
    lru_.push_back(key);
    map_[key] = Obj{n, std::prev(lru_.end())};
    stats_.bytes += n;
    ++stats_.objects;
  }

  void erase_locked(uint64_t key, bool unlink) {
    auto it = map_.find(key);
    if (it == map_.end()) return;
    stats_.bytes -= it->second.bytes;
    --stats_.objects;
    lru_.erase(it->second.pos);
    map_.erase(it);
    if (unlink) ::unlink(path_of(key).c_str());
  }

  // Drops least recently used files (never `keep`) until the budget holds.
  void evict_locked(uint64_t keep) {
    while (stats_.bytes > budget_ && !lru_.empty()) {
      const uint64_t victim = lru_.front() == keep && lru_.size() > 1 ? *std::next(lru_.begin())
                                                                       : lru_.front();
      if (victim == keep) break;
      erase_locked(victim, /*unlink=*/true);
      ++stats_.evictions;
    }
  }

  const std::string dir_;
  const int64_t budget_;
  mutable std::mutex mu_;
  std::list<uint64_t> lru_;
  std::unordered_map<uint64_t, Obj> map_;
  TierStats stats_;
};

}  // namespace

StatusOr<std::unique_ptr<UnitStore>> make_disk_tier(const std::string& dir, int64_t budget_bytes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    return invalid_argument("--kv-cache-dir {}: cannot create the directory ({})", dir,
                            ec ? ec.message() : "not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return invalid_argument("--kv-cache-dir {}: not writable", dir);
  return std::unique_ptr<UnitStore>(
      std::make_unique<DiskTier>(dir, budget_bytes > 0 ? budget_bytes : (int64_t{16} << 30)));
}

}  // namespace strata
