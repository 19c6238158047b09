// Packed-weight cache (see packed_weight_cache.h): opening and checking a file, restoring the
// slots from it, and the pack / finish flow. The format: packed_weight_cache_format.h.
#include "model/packed_weight_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "base/thread_pool.h"
#include "kernels/cpu_features.h"
#include "model/packed_weight_cache_format.h"
#include "model/xxh3_large.h"

namespace strata {

namespace fs = std::filesystem;
using namespace pwc;  // NOLINT: the format's names

struct PackedWeightCache::Mapping {
  void* base = nullptr;
  size_t bytes = 0;
  const uint8_t* data = nullptr;  // the data region
  int64_t data_bytes = 0;
  Reader slots{nullptr, nullptr};  // positioned at the first slot
  uint64_t slot_count = 0;
  ~Mapping() {
    if (base != nullptr) munmap(base, bytes);
  }
};

namespace {

// The text of a small file ("" when absent or unreadable).
std::string read_small_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return in ? ss.str() : std::string();
}

// Writes `text` to `path` via a temporary and rename; failures are ignored.
void write_small_file(const std::string& path, const std::string& text) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) {
      std::remove(tmp.c_str());
      return;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) std::remove(tmp.c_str());
}

// Reads an array's (offset, count) and makes it a view of the mapping (false: out of bounds).
template <class T>
bool read_array(Reader* r, const std::shared_ptr<const PackedWeightCache::Mapping>& m,
                kernels::WeightBuffer<T>* out) {
  const uint64_t off = r->u64(), count = r->u64();
  if (!r->ok || off % kArrayAlign != 0 || off > static_cast<uint64_t>(m->data_bytes) ||
      count > (static_cast<uint64_t>(m->data_bytes) - off) / sizeof(T))
    return false;
  if (count == 0) {
    *out = kernels::WeightBuffer<T>();
  } else {
    *out = kernels::WeightBuffer<T>::view(reinterpret_cast<const T*>(m->data + off), count, m);
  }
  return true;
}

bool read_seq(Reader* r, const std::shared_ptr<const PackedWeightCache::Mapping>& m,
              kernels::PackedSeqWeight* w) {
  w->n = static_cast<int64_t>(r->u64());
  w->k = static_cast<int64_t>(r->u64());
  w->bf16 = r->u8() != 0;
  return read_array(r, m, &w->data16) && read_array(r, m, &w->data32);
}

// The [n, k] of a restored packed weight (whichever form it holds).
std::pair<int64_t, int64_t> shape_of(const V41PackedLinear& w) {
  if (!w.fp8.codes.empty()) return {w.fp8.n, w.fp8.k};
  if (!w.fp4.codes.empty()) return {w.fp4.n, w.fp4.k};
  return {w.seq.n, w.seq.k};
}

}  // namespace

PackedWeightCache::~PackedWeightCache() = default;

std::unique_ptr<PackedWeightCache> PackedWeightCache::open(const std::string& model_dir,
                                                           const std::string& layout,
                                                           const WeightCacheSettings& settings,
                                                           ThreadPool* pool) {
  if (settings.dir.empty()) return nullptr;
  int64_t total = 0;
  StatusOr<std::string> files = model_files_identity(model_dir, &total);
  if (!files.ok()) return nullptr;  // the load itself reports a missing directory
  if (total < settings.min_checkpoint_bytes) return nullptr;
  std::error_code ec;
  fs::create_directories(settings.dir, ec);
  if (ec) {
    warn(fmt::format("cannot create {}: {} (packing without a cache)", settings.dir,
                     ec.message()));
    return nullptr;
  }
  std::unique_ptr<PackedWeightCache> c(new PackedWeightCache());
  const std::string real = fs::weakly_canonical(model_dir, ec).string();
  const std::string where = real + '\0' + layout;
  c->path_ = fmt::format("{}/{:016x}.strata-packed", settings.dir,
                         XXH3_64bits(where.data(), where.size()));
  // The CPU's capabilities (not the STRATA_AVX512* switches: the layouts do not depend on
  // them, and an A/B run toggling them should not repack).
  c->key_ = fmt::format("strata packed weights v{}\n{}\ncpu avx2 {} avx512 {} ext {}\n"
                        "layout {}\n{}",
                        kFormatVersion, code_identity(), kernels::cpu_has_avx2_fma(),
                        kernels::cpu_has_avx512(), kernels::cpu_has_avx512_ext(), layout,
                        *files);

  const int fd = ::open(c->path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return c;  // a miss: nothing written yet
  auto bad = [&](const std::string& why) {
    warn(fmt::format("ignoring {}: {}; packing anew", c->path_, why));
    return std::move(c);
  };
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size < 16) {
    ::close(fd);
    return bad("shorter than its header");
  }
  auto m = std::make_shared<Mapping>();
  m->bytes = static_cast<size_t>(st.st_size);
  m->base = mmap(nullptr, m->bytes, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (m->base == MAP_FAILED) {
    m->base = nullptr;
    return bad("cannot map it");
  }
  madvise(m->base, m->bytes, MADV_HUGEPAGE);
  const auto* b = static_cast<const uint8_t*>(m->base);
  uint64_t meta_bytes = 0;
  std::memcpy(&meta_bytes, b + 8, 8);
  if (std::memcmp(b, kMagic, 8) != 0) return bad("not a packed-weight cache file");
  if (meta_bytes > m->bytes - 16 || meta_bytes < 8) return bad("header runs past the end");
  const uint8_t* meta = b + 16;
  uint64_t meta_hash = 0;
  std::memcpy(&meta_hash, meta + meta_bytes - 8, 8);
  if (XXH3_64bits(meta, meta_bytes - 8) != meta_hash) return bad("header checksum mismatch");
  Reader r{meta, meta + meta_bytes - 8};
  if (r.str() != c->key_) {  // replaced at finish()
    warn(fmt::format("{} was written by another build of strata or for other checkpoint "
                     "files; packing anew", c->path_));
    return c;
  }
  const uint64_t nscanned = r.u64();
  std::vector<std::string> scanned;
  for (uint64_t i = 0; r.ok && i < nscanned; ++i) scanned.push_back(r.str());
  const uint64_t data_bytes = r.u64(), chunk = r.u64(), nchunks = r.u64();
  const int64_t data_off = align_up(16 + static_cast<int64_t>(meta_bytes), kDataAlign);
  if (!r.ok || chunk == 0 || nchunks != (data_bytes + chunk - 1) / chunk ||
      static_cast<uint64_t>(data_off) + data_bytes != m->bytes)
    return bad("header does not describe the file");
  std::vector<uint64_t> sums(nchunks);
  for (uint64_t& s : sums) s = r.u64();
  m->slot_count = r.u64();
  if (!r.ok) return bad("header does not describe the file");
  const Reader slots = r;  // the slot records run to the end of the meta (restore())
  m->data = b + data_off;
  m->data_bytes = static_cast<int64_t>(data_bytes);
  // Checked in full once per file identity (verified_identity): a later start maps it
  // without reading every byte again unless the file changed.
  const std::string identity = fmt::format("ino {} size {} mtime {}.{} ctime {}.{} meta {:016x}",
                                           st.st_ino, st.st_size, st.st_mtim.tv_sec,
                                           st.st_mtim.tv_nsec, st.st_ctim.tv_sec,
                                           st.st_ctim.tv_nsec, meta_hash);
  const std::string verified_path = c->path_ + ".verified";
  if (read_small_file(verified_path) == identity) {
    fmt::print(stderr, "[load] packed weights mapped from {}\n", c->path_);
    m->slots = slots;
    c->scanned_ = std::move(scanned);
    c->mapping_ = std::move(m);
    return c;
  }
  std::atomic<int64_t> first_bad{-1};
  auto verify = [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t n = std::min<int64_t>(chunk, m->data_bytes - i * static_cast<int64_t>(chunk));
      if (xxh3_64_large(m->data + i * chunk, static_cast<size_t>(n)) != sums[i]) first_bad = i;
    }
  };
  if (pool != nullptr && pool->num_threads() > 1) {
    pool->parallel_for(static_cast<int64_t>(nchunks), verify);
  } else {
    verify(0, static_cast<int64_t>(nchunks));
  }
  if (first_bad.load() >= 0)
    return bad(fmt::format("data chunk {} checksum mismatch", first_bad.load()));
  write_small_file(verified_path, identity);  // best effort: unrecorded = checked next time
  fmt::print(stderr, "[load] packed weights mapped from {} (checked in full)\n", c->path_);
  m->slots = slots;
  c->scanned_ = std::move(scanned);
  c->mapping_ = std::move(m);
  return c;
}

bool PackedWeightCache::restore(const std::vector<PackJob>& jobs, std::string* why) {
  const std::shared_ptr<const Mapping>& m = mapping_;
  Reader r = m->slots;
  uint64_t n = 0;
  for (const PackJob& j : jobs) n += j.slots.size();
  if (n != m->slot_count) {
    *why = fmt::format("{} slots in the file, {} in the model", m->slot_count, n);
    return false;
  }
  // Decoded into temporaries first: the slots change only when every one is read.
  std::vector<std::pair<const PackSlot*, std::shared_ptr<const void>>> out;
  int64_t index = 0;
  for (const PackJob& j : jobs) {
    for (const PackSlot& s : j.slots) {
      const uint8_t tag = r.u8();
      const bool linear = std::holds_alternative<std::shared_ptr<const V41PackedLinear>*>(s.slot);
      if (tag == 0) {
        out.emplace_back(&s, nullptr);
      } else if (tag == 1 && linear) {
        auto w = std::make_shared<V41PackedLinear>();
        w->fp8.n = static_cast<int64_t>(r.u64());
        w->fp8.k = static_cast<int64_t>(r.u64());
        w->fp8.block_k = static_cast<int>(r.u64());
        w->fp4.n = static_cast<int64_t>(r.u64());
        w->fp4.k = static_cast<int64_t>(r.u64());
        w->seq.n = static_cast<int64_t>(r.u64());
        w->seq.k = static_cast<int64_t>(r.u64());
        w->seq.bf16 = r.u8() != 0;
        const bool ok = read_array(&r, m, &w->fp8.codes) && read_array(&r, m, &w->fp8.scales) &&
                        read_array(&r, m, &w->fp8.scales_e8m0) &&
                        read_array(&r, m, &w->fp8.subnormal_blocks) &&
                        read_array(&r, m, &w->fp4.codes) && read_array(&r, m, &w->fp4.scales) &&
                        read_array(&r, m, &w->fp4.scales_e8m0) &&
                        read_array(&r, m, &w->seq.data16) && read_array(&r, m, &w->seq.data32);
        if (!ok || shape_of(*w) != std::make_pair(s.n, s.k)) {
          *why = fmt::format("slot {}: [{}, {}] expected, the file's differs", index, s.n, s.k);
          return false;
        }
        out.emplace_back(&s, std::shared_ptr<const void>(std::move(w)));
      } else if (tag == 2 && !linear) {
        auto w = std::make_shared<kernels::PackedSeqWeight>();
        if (!read_seq(&r, m, w.get()) || w->n != s.n || w->k != s.k) {
          *why = fmt::format("slot {}: [{}, {}] expected, the file's differs", index, s.n, s.k);
          return false;
        }
        out.emplace_back(&s, std::shared_ptr<const void>(std::move(w)));
      } else {
        *why = fmt::format("slot {}: kind {} in the file", index, tag);
        return false;
      }
      ++index;
    }
  }
  if (r.p != r.end) {
    *why = "the slot records do not fill the header";
    return false;
  }
  for (auto& [s, p] : out) {
    if (auto* lin = std::get_if<std::shared_ptr<const V41PackedLinear>*>(&s->slot)) {
      **lin = std::static_pointer_cast<const V41PackedLinear>(p);
    } else {
      *std::get<std::shared_ptr<const kernels::PackedSeqWeight>*>(s->slot) =
          std::static_pointer_cast<const kernels::PackedSeqWeight>(p);
    }
  }
  return true;
}

int64_t PackedWeightCache::pack(const std::vector<PackJob>& jobs, ThreadPool* pool) {
  if (hit()) {
    std::string why;
    if (restore(jobs, &why)) {
      int64_t bytes = 0;
      for (const PackJob& j : jobs)
        for (const PackSlot& s : j.slots) bytes += slot_bytes(s);
      return bytes;
    }
    warn(fmt::format("ignoring {}: {}; packing anew", path_, why));
    mapping_.reset();
  }
  const int64_t bytes = run_pack_jobs(jobs, pool);
  pending_.clear();
  for (const PackJob& j : jobs) pending_.insert(pending_.end(), j.slots.begin(), j.slots.end());
  packed_ = true;
  return bytes;
}

void PackedWeightCache::finish(const std::vector<std::string>& scanned_tensors) {
  if (!packed_) return;
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = store(scanned_tensors);
  if (!s.ok()) {
    warn(fmt::format("not written ({}): the next start packs again", s.message()));
    return;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print(stderr, "[load] packed weights written to {} in {:.1f} s (later starts map it)\n",
             path_, secs);
  pending_.clear();
  packed_ = false;
}

}  // namespace strata
