// Engram table placement; see v41_engram_table.h.
#include "exec/deepseek_v41/v41_engram_table.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "base/check.h"

namespace strata {

const char* engram_placement_name(EngramPlacement p) {
  switch (p) {
    case EngramPlacement::kMmap: return "mmap";
    case EngramPlacement::kDisk: return "disk";
    default: return "ram";
  }
}

StatusOr<EngramPlacement> parse_engram_placement(const std::string& s) {
  if (s == "ram") return EngramPlacement::kRam;
  if (s == "mmap") return EngramPlacement::kMmap;
  if (s == "disk") return EngramPlacement::kDisk;
  return invalid_argument("--engram-placement '{}': expected ram, mmap or disk", s);
}

namespace {
bool pread_all(int fd, uint8_t* p, size_t n, int64_t off) {
  size_t at = 0;
  while (at < n) {
    const ssize_t r = ::pread(fd, p + at, n - at, static_cast<off_t>(off + at));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    at += static_cast<size_t>(r);
  }
  return true;
}
}  // namespace

struct EngramTableStore::Impl {
  struct Layer {
    int64_t rows = 0, ed = 0, nsc = 0;
    const uint8_t* table = nullptr;  // ram / mmap
    const uint8_t* scale = nullptr;
    std::vector<uint8_t> own_table, own_scale;  // ram
    int fd_table = -1, fd_scale = -1;           // disk
    int64_t off_table = 0, off_scale = 0;
  };
  std::map<int, Layer> layers;
  std::map<std::string, int> fds;
  int64_t capacity = 0;
  // Hot-row cache (disk): key = layer << 40 | row; value = ed + nsc bytes.
  struct Row {
    uint64_t key;
    std::vector<uint8_t> bytes;
  };
  mutable std::mutex mu;
  std::list<Row> lru;  // most recently used last
  std::unordered_map<uint64_t, std::list<Row>::iterator> index;
  int64_t cached_bytes = 0;
  EngramTableStats st;
  // Prefetch worker.
  std::thread worker;
  std::condition_variable cv;
  bool stop = false;
  bool has_job = false;
  std::vector<std::pair<int, std::vector<int64_t>>> job;

  static uint64_t key_of(int layer, int64_t row) {
    return (static_cast<uint64_t>(layer) << 40) | static_cast<uint64_t>(row);
  }

  // Reads one row from the files (no lock held). CHECKs the read: the files were validated
  // at load, a failed read means the checkpoint changed under the server.
  std::vector<uint8_t> read_row(const Layer& L, int64_t row) const {
    std::vector<uint8_t> b(static_cast<size_t>(L.ed + L.nsc));
    const bool ok = pread_all(L.fd_table, b.data(), L.ed, L.off_table + row * L.ed) &&
                    pread_all(L.fd_scale, b.data() + L.ed, L.nsc, L.off_scale + row * L.nsc);
    STRATA_CHECK_MSG(ok, "Engram table read failed (row {}): {}", row, std::strerror(errno));
    return b;
  }

  // Inserts under mu (the caller holds it); evicts LRU rows beyond the capacity.
  void insert_locked(uint64_t key, std::vector<uint8_t> bytes) {
    if (index.count(key)) return;
    cached_bytes += static_cast<int64_t>(bytes.size());
    lru.push_back(Row{key, std::move(bytes)});
    index[key] = std::prev(lru.end());
    while (cached_bytes > capacity && lru.size() > 1) {
      cached_bytes -= static_cast<int64_t>(lru.front().bytes.size());
      index.erase(lru.front().key);
      lru.pop_front();
    }
  }

  void run_worker() {
    for (;;) {
      std::vector<std::pair<int, std::vector<int64_t>>> todo;
      {
        std::unique_lock<std::mutex> l(mu);
        cv.wait(l, [&] { return stop || has_job; });
        if (stop) return;
        todo = std::move(job);
        has_job = false;
      }
      for (const auto& [layer, rows] : todo) {
        const Layer& L = layers.at(layer);
        for (int64_t r : rows) {
          const uint64_t k = key_of(layer, r);
          {
            std::lock_guard<std::mutex> l(mu);
            if (stop || has_job) break;  // a newer step's prefetch replaces this one
            if (index.count(k)) continue;
          }
          std::vector<uint8_t> b = read_row(L, r);
          std::lock_guard<std::mutex> l(mu);
          st.read_bytes += static_cast<int64_t>(b.size());
          ++st.prefetched;
          insert_locked(k, std::move(b));
        }
      }
    }
  }
};

EngramTableStore::EngramTableStore(EngramPlacement placement, int64_t cache_bytes)
    : placement_(placement), impl_(std::make_unique<Impl>()) {
  impl_->capacity = cache_bytes > 0 ? cache_bytes : (int64_t{64} << 20);
  if (placement_ == EngramPlacement::kDisk)
    impl_->worker = std::thread([this] { impl_->run_worker(); });
}

EngramTableStore::~EngramTableStore() {
  if (impl_->worker.joinable()) {
    {
      std::lock_guard<std::mutex> l(impl_->mu);
      impl_->stop = true;
    }
    impl_->cv.notify_all();
    impl_->worker.join();
  }
  for (const auto& [path, fd] : impl_->fds) ::close(fd);
}

Status EngramTableStore::add_layer(int layer, const TensorView& table, const TensorView& scale) {
  if (table.shape.size() != 2 || scale.shape.size() != 2 || table.shape[0] != scale.shape[0])
    return invalid_argument("Engram layer {}: table / scale shapes do not match", layer);
  Impl::Layer L;
  L.rows = table.shape[0];
  L.ed = table.shape[1];
  L.nsc = scale.shape[1];
  switch (placement_) {
    case EngramPlacement::kRam:
      L.own_table.assign(table.data, table.data + table.num_bytes);
      L.own_scale.assign(scale.data, scale.data + scale.num_bytes);
      L.table = L.own_table.data();
      L.scale = L.own_scale.data();
      break;
    case EngramPlacement::kMmap:
      L.table = table.data;
      L.scale = scale.data;
      break;
    case EngramPlacement::kDisk:
      for (const TensorView* t : {&table, &scale}) {
        if (t->file.empty() || t->file_offset < 0)
          return invalid_argument("Engram layer {}: '{}' is not read from a file", layer, t->name);
        if (!impl_->fds.count(t->file)) {
          const int fd = ::open(t->file.c_str(), O_RDONLY | O_CLOEXEC);
          if (fd < 0) return not_found("{}: {}", t->file, std::strerror(errno));
          impl_->fds[t->file] = fd;
        }
      }
      L.fd_table = impl_->fds.at(table.file);
      L.fd_scale = impl_->fds.at(scale.file);
      L.off_table = table.file_offset;
      L.off_scale = scale.file_offset;
      break;
  }
  impl_->st.table_rows += L.rows;
  impl_->st.table_bytes += static_cast<int64_t>(table.num_bytes + scale.num_bytes);
  impl_->layers[layer] = std::move(L);
  return ok_status();
}

void EngramTableStore::gather(int layer, const int64_t* rows, int64_t n, uint8_t* table_out,
                              uint8_t* scale_out) {
  Impl& I = *impl_;
  const Impl::Layer& L = I.layers.at(layer);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = rows[i];
    STRATA_CHECK(r >= 0 && r < L.rows);
    uint8_t* to = table_out + i * L.ed;
    uint8_t* so = scale_out + i * L.nsc;
    if (placement_ != EngramPlacement::kDisk) {
      std::memcpy(to, L.table + r * L.ed, L.ed);
      std::memcpy(so, L.scale + r * L.nsc, L.nsc);
      continue;
    }
    const uint64_t k = Impl::key_of(layer, r);
    {
      std::lock_guard<std::mutex> l(I.mu);
      ++I.st.lookups;
      auto it = I.index.find(k);
      if (it != I.index.end()) {
        I.lru.splice(I.lru.end(), I.lru, it->second);
        std::memcpy(to, it->second->bytes.data(), L.ed);
        std::memcpy(so, it->second->bytes.data() + L.ed, L.nsc);
        ++I.st.hits;
        continue;
      }
    }
    std::vector<uint8_t> b = I.read_row(L, r);
    std::memcpy(to, b.data(), L.ed);
    std::memcpy(so, b.data() + L.ed, L.nsc);
    std::lock_guard<std::mutex> l(I.mu);
    ++I.st.misses;
    I.st.read_bytes += static_cast<int64_t>(b.size());
    I.insert_locked(k, std::move(b));
  }
  if (placement_ != EngramPlacement::kDisk) {
    std::lock_guard<std::mutex> l(I.mu);
    I.st.lookups += n;
    I.st.hits += n;
  }
}

void EngramTableStore::prefetch(std::vector<std::pair<int, std::vector<int64_t>>> rows_per_layer) {
  if (placement_ != EngramPlacement::kDisk) return;
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    impl_->job = std::move(rows_per_layer);
    impl_->has_job = true;
  }
  impl_->cv.notify_one();
}

EngramTableStats EngramTableStore::stats() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  EngramTableStats s = impl_->st;
  s.cached_rows = static_cast<int64_t>(impl_->lru.size());
  s.cached_bytes = impl_->cached_bytes;
  s.capacity_bytes = placement_ == EngramPlacement::kDisk ? impl_->capacity : 0;
  return s;
}

}  // namespace strata
