// PackedWeightCache::store: writing the file (see packed_weight_cache.h and the format in
// packed_weight_cache_format.h).
#include <fcntl.h>
#include <signal.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "model/packed_weight_cache_format.h"
#include "model/xxh3_large.h"

namespace strata {

namespace fs = std::filesystem;
using namespace pwc;  // NOLINT: the format's names

namespace {

// Removes <path>.tmp.<pid> and <path>.verified.tmp.<pid> files of processes that no longer run
// (a writing start killed part-way leaves its temporary behind).
void remove_orphaned_temporaries(const std::string& path) {
  const fs::path p(path);
  const std::string stem = p.filename().string();
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(p.parent_path(), ec)) {
    const std::string name = e.path().filename().string();
    for (const std::string& prefix : {stem + ".tmp.", stem + ".verified.tmp."}) {
      if (name.rfind(prefix, 0) != 0) continue;
      const std::string digits = name.substr(prefix.size());
      if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) break;
      const long pid = std::strtol(digits.c_str(), nullptr, 10);
      if (pid > 0 && pid != getpid() && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
        fs::remove(e.path(), ec);
      break;
    }
  }
}

}  // namespace

Status PackedWeightCache::store(const std::vector<std::string>& scanned) {
  // Lay the arrays out, then the header, then stream the data.
  std::vector<std::string> heads;  // per slot: its tag and scalars
  std::vector<ArrayRef> arrays;
  std::vector<std::pair<size_t, size_t>> slot_arrays;  // [begin, end) into `arrays` per slot
  for (const PackSlot& s : pending_) {
    Writer head;
    const size_t a0 = arrays.size();
    encode_slot(s, &head, &arrays);
    heads.push_back(std::move(head.out));
    slot_arrays.emplace_back(a0, arrays.size());
  }
  std::vector<int64_t> offsets(arrays.size());
  int64_t data_bytes = 0;
  for (size_t i = 0; i < arrays.size(); ++i) {
    offsets[i] = align_up(data_bytes, kArrayAlign);
    data_bytes = offsets[i] + arrays[i].count * arrays[i].elem;
  }
  const int64_t nchunks = (data_bytes + kChunkBytes - 1) / kChunkBytes;
  Writer meta;
  meta.str(key_);
  meta.u64(scanned.size());
  for (const std::string& n : scanned) meta.str(n);
  meta.u64(data_bytes);
  meta.u64(kChunkBytes);
  meta.u64(nchunks);
  const size_t sums_at = meta.out.size();
  for (int64_t i = 0; i < nchunks; ++i) meta.u64(0);  // filled in as the data is written
  meta.u64(pending_.size());
  for (size_t i = 0; i < pending_.size(); ++i) {  // each slot: its head, its arrays' places
    meta.out += heads[i];
    for (size_t a = slot_arrays[i].first; a < slot_arrays[i].second; ++a) {
      meta.u64(offsets[a]);
      meta.u64(arrays[a].count);
    }
  }
  meta.u64(0);  // the meta checksum
  const int64_t data_off = align_up(16 + static_cast<int64_t>(meta.out.size()), kDataAlign);
  const int64_t file_bytes = data_off + data_bytes;

  const std::string dir = fs::path(path_).parent_path().string();
  struct statvfs vfs {};
  if (statvfs(dir.c_str(), &vfs) == 0 &&
      static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize) <
          file_bytes + (int64_t{1} << 30))
    return failed_precondition("{} has less free space than the {} MiB file plus 1 GiB", dir,
                               file_bytes >> 20);
  remove_orphaned_temporaries(path_);
  const std::string tmp = fmt::format("{}.tmp.{}", path_, getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return internal_error("cannot create {}: {}", tmp, std::strerror(errno));
  auto fail = [&](const std::string& what) {
    const std::string e = std::strerror(errno);
    ::close(fd);
    ::unlink(tmp.c_str());
    return internal_error("{} {}: {}", what, tmp, e);
  };
  // Stream the data region through a buffer, hashing each chunk as it completes.
  std::vector<uint64_t> sums(static_cast<size_t>(nchunks));
  std::vector<uint8_t> buf(
      static_cast<size_t>(std::min(kChunkBytes, std::max<int64_t>(data_bytes, 1))));
  int64_t pos = 0;  // data offset of buf[0]
  size_t fill = 0;
  auto flush = [&]() -> bool {
    if (fill == 0) return true;
    sums[static_cast<size_t>(pos / kChunkBytes)] = xxh3_64_large(buf.data(), fill);
    const uint8_t* p = buf.data();
    size_t left = fill;
    int64_t at = data_off + pos;
    while (left > 0) {
      const ssize_t w = pwrite(fd, p, left, at);
      if (w <= 0) return false;
      p += w;
      left -= static_cast<size_t>(w);
      at += w;
    }
    pos += static_cast<int64_t>(fill);
    fill = 0;
    return true;
  };
  auto put = [&](const uint8_t* src, int64_t n) -> bool {  // src null: zeros
    while (n > 0) {
      const size_t take = std::min<size_t>(static_cast<size_t>(n), buf.size() - fill);
      if (src != nullptr) {
        std::memcpy(buf.data() + fill, src, take);
        src += take;
      } else {
        std::memset(buf.data() + fill, 0, take);
      }
      fill += take;
      n -= static_cast<int64_t>(take);
      if (fill == buf.size() && !flush()) return false;
    }
    return true;
  };
  int64_t at = 0;
  for (size_t i = 0; i < arrays.size(); ++i) {
    const int64_t n = arrays[i].count * arrays[i].elem;
    if (!put(nullptr, offsets[i] - at) ||
        !put(static_cast<const uint8_t*>(arrays[i].data), n))
      return fail("cannot write");
    at = offsets[i] + n;
  }
  if (!flush()) return fail("cannot write");
  for (int64_t i = 0; i < nchunks; ++i)
    std::memcpy(meta.out.data() + sums_at + 8 * i, &sums[static_cast<size_t>(i)], 8);
  const uint64_t meta_hash = XXH3_64bits(meta.out.data(), meta.out.size() - 8);
  std::memcpy(meta.out.data() + meta.out.size() - 8, &meta_hash, 8);
  std::string head(kMagic, 8);
  const uint64_t meta_bytes = meta.out.size();
  head.append(reinterpret_cast<const char*>(&meta_bytes), 8);
  head += meta.out;
  head.resize(static_cast<size_t>(data_off), '\0');
  if (pwrite(fd, head.data(), head.size(), 0) != static_cast<ssize_t>(head.size()))
    return fail("cannot write the header of");
  if (ftruncate(fd, file_bytes) != 0) return fail("cannot size");
  // On disk before the rename: a crash never leaves a complete-looking file of unwritten blocks.
  if (fdatasync(fd) != 0) return fail("cannot sync");
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return internal_error("cannot close {}: {}", tmp, std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
    const std::string e = std::strerror(errno);
    ::unlink(tmp.c_str());
    return internal_error("cannot rename {} to {}: {}", tmp, path_, e);
  }
  return ok_status();
}

}  // namespace strata
