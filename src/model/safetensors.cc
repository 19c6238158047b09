// Safetensors reading (mmap, zero-copy) and writing. Format: 8-byte little-endian header
// length N, N bytes of JSON header {name: {dtype, shape, data_offsets:[begin,end]}, ...,
// "__metadata__": {str: str}}, then the data section; offsets are relative to its start.
// Reference: https://github.com/huggingface/safetensors (format description in README).
#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "base/check.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;   // as HF safetensors
constexpr size_t kProgressMinBytes = 64ull << 20;

std::string shape_str(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

// numel with overflow detection; nullopt on overflow.
std::optional<int64_t> checked_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (__builtin_mul_overflow(n, d, &n)) return std::nullopt;
  }
  return n;
}

// Accepted byte size of a tensor: numel*dtype_size, or for I8/U8 also ceil(numel/2) (FP4 E2M1
// stored with its logical shape, two values per byte).
bool byte_size_ok(DType dt, int64_t numel, uint64_t bytes) {
  const uint64_t expect = static_cast<uint64_t>(numel) * dtype_size(dt);
  if (bytes == expect) return true;
  if ((dt == DType::kI8 || dt == DType::kU8) && bytes == (static_cast<uint64_t>(numel) + 1) / 2)
    return true;
  return false;
}

// Reads the file once through `fd` (into the page cache, not into the mapping: no page of
// the process is faulted in, so the resident set does not hold the whole file), printing a
// percentage line: a cold checkpoint's disk read shows as progress.
void prefault(const std::string& path, int fd, size_t n) {
  const size_t chunk = 16ull << 20;
  std::vector<uint8_t> buf(chunk);
  // On a terminal the line updates in place; into a file or pipe only the final line goes.
  const bool tty = isatty(STDERR_FILENO) != 0;
  int last_pct = -1;
  for (size_t off = 0; off < n; off += chunk) {
    const size_t end = std::min(n, off + chunk);
    if (::pread(fd, buf.data(), end - off, static_cast<off_t>(off)) <= 0) break;
    const int pct = static_cast<int>(100.0 * static_cast<double>(end) / static_cast<double>(n));
    if (tty && pct != last_pct) {
      fmt::print(stderr, "\r[load] {}: {:3d}% ({} MiB)", path, pct, end >> 20);
      std::fflush(stderr);
      last_pct = pct;
    }
  }
  if (tty) {
    fmt::print(stderr, "\n");
  } else {
    fmt::print(stderr, "[load] {}: 100% ({} MiB)\n", path, n >> 20);
  }
}

// Parses and validates the JSON header. `data_bytes`: size of the data section.
Status parse_header(const std::string& path, std::string_view text, const uint8_t* data,
                    uint64_t data_bytes, std::map<std::string, TensorView>* tensors,
                    std::map<std::string, std::string>* metadata) {
  json h = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (h.is_discarded()) return data_loss("{}: header is not valid JSON", path);
  if (!h.is_object()) return data_loss("{}: header JSON is not an object", path);

  struct Range { uint64_t begin, end; const std::string* name; };
  std::vector<Range> ranges;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return data_loss("{}: __metadata__ is not an object", path);
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          return data_loss("{}: __metadata__ value '{}' is not a string", path, m.key());
        (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) return data_loss("{}: tensor '{}': entry is not an object", path, name);
    auto dt_it = v.find("dtype");
    auto sh_it = v.find("shape");
    auto off_it = v.find("data_offsets");
    if (dt_it == v.end() || !dt_it->is_string())
      return data_loss("{}: tensor '{}': missing or non-string 'dtype'", path, name);
    if (sh_it == v.end() || !sh_it->is_array())
      return data_loss("{}: tensor '{}': missing or non-array 'shape'", path, name);
    if (off_it == v.end() || !off_it->is_array() || off_it->size() != 2 ||
        !(*off_it)[0].is_number_unsigned() || !(*off_it)[1].is_number_unsigned())
      return data_loss("{}: tensor '{}': 'data_offsets' must be [begin, end] of non-negative "
                       "integers", path, name);
    const std::string dts = dt_it->get<std::string>();
    std::optional<DType> dt = dtype_from_string(dts);
    if (!dt) return unimplemented("{}: tensor '{}': unknown dtype '{}'", path, name, dts);
    TensorView t;
    t.name = name;
    t.dtype = *dt;
    t.file = path;
    for (const json& d : *sh_it) {
      if (!d.is_number_unsigned())
        return data_loss("{}: tensor '{}': shape entries must be non-negative integers", path,
                         name);
      const uint64_t du = d.get<uint64_t>();
      if (du > static_cast<uint64_t>(INT64_MAX))
        return data_loss("{}: tensor '{}': shape dimension too large", path, name);
      t.shape.push_back(static_cast<int64_t>(du));
    }
    const uint64_t begin = (*off_it)[0].get<uint64_t>();
    const uint64_t end = (*off_it)[1].get<uint64_t>();
    if (begin > end)
      return data_loss("{}: tensor '{}': data_offsets [{}, {}] have begin > end", path, name,
                       begin, end);
    if (end > data_bytes)
      return data_loss("{}: tensor '{}': data_offsets [{}, {}] run past the end of the data "
                       "section ({} bytes; file truncated?)", path, name, begin, end, data_bytes);
    std::optional<int64_t> numel = checked_numel(t.shape);
    if (!numel) return data_loss("{}: tensor '{}': shape {} overflows", path, name,
                                 shape_str(t.shape));
    if (!byte_size_ok(t.dtype, *numel, end - begin))
      return data_loss("{}: tensor '{}': {} bytes in data_offsets but shape {} x {} needs {}",
                       path, name, end - begin, shape_str(t.shape), dts,
                       static_cast<uint64_t>(*numel) * dtype_size(t.dtype));
    t.data = data + begin;
    t.num_bytes = end - begin;
    auto [pos, inserted] = tensors->emplace(name, std::move(t));
    (void)inserted;  // JSON objects cannot hold duplicate keys after parsing
    ranges.push_back({begin, end, &pos->first});
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin || (a.begin == b.begin && a.end < b.end); });
  const Range* prev = nullptr;
  for (const Range& r : ranges) {
    if (r.begin == r.end) continue;  // empty tensors occupy no bytes
    if (prev && r.begin < prev->end)
      return data_loss("{}: tensor '{}' data_offsets [{}, {}] overlap tensor '{}' [{}, {}]", path,
                       *r.name, r.begin, r.end, *prev->name, prev->begin, prev->end);
    prev = &r;
  }
  return ok_status();
}

}  // namespace

// ---------------------------------------------------------------- TensorView

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const float* TensorView::f32() const {
  STRATA_CHECK_MSG(dtype == DType::kF32, "tensor {} is {}, not F32", name, dtype_name(dtype));
  return reinterpret_cast<const float*>(data);
}

const uint16_t* TensorView::u16() const {
  STRATA_CHECK_MSG(dtype == DType::kBF16 || dtype == DType::kF16, "tensor {} is {}, not BF16/F16",
                   name, dtype_name(dtype));
  return reinterpret_cast<const uint16_t*>(data);
}

// ---------------------------------------------------------------- SafetensorsFile

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path,
                                                                  bool progress) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) return not_found("{}: safetensors file does not exist", path);
    return not_found("{}: cannot open safetensors file: {}", path, std::strerror(e));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument("{}: not a regular file", path);
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return data_loss("{}: file is {} bytes, too short for the 8-byte header length", path, size);
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  if (map == MAP_FAILED) {
    ::close(fd);
    return internal_error("{}: mmap of {} bytes failed: {}", path, size, std::strerror(map_errno));
  }

  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->fd_ = fd;  // kept for scans by read (scan_nonfinite)
  f->path_ = path;
  f->map_ = map;
  f->map_bytes_ = size;
  const uint8_t* base = static_cast<const uint8_t*>(map);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(base[i]) << (8 * i);
  if (n > size - 8)
    return data_loss("{}: header length {} runs past the end of the file ({} bytes)", path, n,
                     size);
  if (n > kMaxHeaderBytes)
    return data_loss("{}: header length {} exceeds the {} byte limit", path, n, kMaxHeaderBytes);
  std::string_view text(reinterpret_cast<const char*>(base + 8), n);
  try {
    STRATA_RETURN_IF_ERROR(parse_header(path, text, base + 8 + n, size - 8 - n, &f->tensors_,
                                        &f->metadata_));
  } catch (const std::exception& e) {  // nlohmann type errors etc.; should not happen
    return data_loss("{}: bad header: {}", path, e.what());
  }
  for (auto& [name, t] : f->tensors_) {
    t.file_offset = t.data - base;
    t.mapped = true;
  }
  // safetensors aligns nothing: a tensor may start at an offset that is not a multiple of
  // its element size (a file whose header length or earlier tensors are odd-sized), where
  // typed reads through f32() / u16() are undefined. Such tensors are copied once into
  // owned, aligned memory; aligned ones (every released checkpoint's) stay in the mapping.
  for (auto& [name, t] : f->tensors_) {
    const size_t es = dtype_size(t.dtype);
    if (t.num_bytes == 0 || es <= 1 || reinterpret_cast<uintptr_t>(t.data) % es == 0) continue;
    auto& copy = f->aligned_copies_.emplace_back(new uint64_t[(t.num_bytes + 7) / 8]);
    std::memcpy(copy.get(), t.data, t.num_bytes);
    t.data = reinterpret_cast<const uint8_t*>(copy.get());
    t.mapped = false;
  }
  if (progress && size > kProgressMinBytes) prefault(path, f->fd_, size);
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_bytes_);
  if (fd_ >= 0) ::close(fd_);
}

int64_t SafetensorsFile::scan_nonfinite(const TensorView& t) const {
  const auto* base = static_cast<const uint8_t*>(map_);
  if (fd_ < 0 || !t.mapped || t.data < base || t.data + t.num_bytes > base + map_bytes_) return -1;
  constexpr size_t kChunk = size_t{1} << 22;  // a multiple of every element size
  thread_local std::vector<uint8_t> buf;
  buf.resize(kChunk);
  int64_t bad = 0;
  for (size_t done = 0; done < t.num_bytes;) {
    const size_t want = std::min(kChunk, t.num_bytes - done);
    const ssize_t got = ::pread(fd_, buf.data(), want, static_cast<off_t>((t.data - base) + done));
    if (got <= 0) return -1;  // the caller scans the mapping instead
    const size_t n = static_cast<size_t>(got) - static_cast<size_t>(got) % dtype_size(t.dtype);
    if (n == 0) return -1;
    bad += count_nonfinite(t.dtype, buf.data(), n);
    done += n;
  }
  return bad;
}

void SafetensorsFile::release_resident_pages() const {
  if (map_) ::madvise(map_, map_bytes_, MADV_DONTNEED);
}

void release_view_pages(const TensorView& t) {
  if (!t.mapped || t.data == nullptr) return;
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t b = (reinterpret_cast<uintptr_t>(t.data) + page - 1) & ~(page - 1);
  const uintptr_t e = (reinterpret_cast<uintptr_t>(t.data) + t.num_bytes) & ~(page - 1);
  if (e > b) ::madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

// ---------------------------------------------------------------- SafetensorsCheckpoint

void SafetensorsCheckpoint::release_resident_pages() const {
  for (const auto& f : files_) f->release_resident_pages();
}

StatusOr<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::open(
    const std::string& dir, bool progress) {
  std::error_code ec;
  auto ckpt = std::unique_ptr<SafetensorsCheckpoint>(new SafetensorsCheckpoint());
  ckpt->dir_ = dir;
  if (!fs::exists(dir, ec)) return not_found("{}: checkpoint path does not exist", dir);

  auto open_single = [&](const std::string& file) -> Status {
    STRATA_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open(file, progress));
    for (const auto& [name, view] : f->tensors()) ckpt->index_[name] = &view;
    ckpt->files_.push_back(std::move(f));
    return ok_status();
  };

  if (fs::is_regular_file(dir, ec)) {
    STRATA_RETURN_IF_ERROR(open_single(dir));
    return ckpt;
  }
  const fs::path root(dir);
  const fs::path index_path = root / "model.safetensors.index.json";
  const fs::path single_path = root / "model.safetensors";
  if (fs::exists(index_path, ec)) {
    std::ifstream in(index_path);
    if (!in) return not_found("{}: cannot read", index_path.string());
    json idx = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (idx.is_discarded() || !idx.is_object())
      return data_loss("{}: not valid JSON", index_path.string());
    auto wm = idx.find("weight_map");
    if (wm == idx.end() || !wm->is_object())
      return data_loss("{}: missing 'weight_map' object", index_path.string());
    // Open each shard once, in name order.
    std::map<std::string, SafetensorsFile*> shards;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string())
        return data_loss("{}: weight_map['{}'] is not a string", index_path.string(), it.key());
      shards.emplace(it.value().get<std::string>(), nullptr);
    }
    for (auto& [shard, ptr] : shards) {
      const std::string shard_path = (root / shard).string();
      if (!fs::exists(shard_path, ec))
        return not_found("{}: shard '{}' listed in the index does not exist ({})",
                         index_path.string(), shard, shard_path);
      STRATA_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open(shard_path, progress));
      ptr = f.get();
      ckpt->files_.push_back(std::move(f));
    }
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      SafetensorsFile* f = shards.at(it.value().get<std::string>());
      auto t = f->tensors().find(it.key());
      if (t == f->tensors().end())
        return not_found("{}: tensor '{}' is listed in the index for shard '{}' but is not in {}",
                         index_path.string(), it.key(), it.value().get<std::string>(), f->path());
      ckpt->index_[it.key()] = &t->second;
    }
    return ckpt;
  }
  if (fs::exists(single_path, ec)) {
    STRATA_RETURN_IF_ERROR(open_single(single_path.string()));
    return ckpt;
  }
  return not_found("{}: no model.safetensors or model.safetensors.index.json in checkpoint "
                   "directory", dir);
}

bool SafetensorsCheckpoint::has(const std::string& name) const { return index_.count(name) > 0; }

StatusOr<TensorView> SafetensorsCheckpoint::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end())
    return not_found("checkpoint {}: tensor '{}' not found", dir_, name);
  return *it->second;
}

StatusOr<TensorView> SafetensorsCheckpoint::get(const std::string& name, DType dtype,
                                                const std::vector<int64_t>& expect_shape) const {
  STRATA_ASSIGN_OR_RETURN(TensorView t, get(name));
  if (t.dtype != dtype || t.shape != expect_shape)
    return failed_precondition(
        "checkpoint {}: tensor '{}' (in {}): expected {} {}, found {} {}", dir_, name, t.file,
        dtype_name(dtype), shape_str(expect_shape), dtype_name(t.dtype), shape_str(t.shape));
  STRATA_RETURN_IF_ERROR(check_finite(t));
  return t;
}

int tensor_layer(const std::string& name) {
  for (const char* prefix : {"layers.", "model.layers."}) {
    const size_t n = std::strlen(prefix);
    if (name.compare(0, n, prefix) != 0) continue;
    size_t i = n;
    int layer = 0;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9' && layer < (1 << 24))
      layer = layer * 10 + (name[i++] - '0');
    if (i > n && i < name.size() && name[i] == '.') return layer;
  }
  return -1;
}

void SafetensorsCheckpoint::skip_scans_outside_layers(int begin, int end) {
  scan_begin_ = begin;
  scan_end_ = end;
}

std::vector<std::string> SafetensorsCheckpoint::scanned_tensors() const {
  std::lock_guard lock(scanned_mu_);
  return {scanned_.begin(), scanned_.end()};
}

void SafetensorsCheckpoint::mark_scanned(const std::vector<std::string>& names) {
  std::lock_guard lock(scanned_mu_);
  for (const std::string& n : names)
    if (index_.count(n)) scanned_.insert(n);
}

Status SafetensorsCheckpoint::check_finite(const TensorView& t) const {
  if (const int l = tensor_layer(t.name); l >= 0 && (l < scan_begin_ || l >= scan_end_))
    return ok_status();  // another pipeline stage's layer: scanned there
  {
    std::lock_guard lock(scanned_mu_);
    if (scanned_.count(t.name)) return ok_status();
  }
  // Read through the file descriptor (a copy from the page cache), not the mapping: the scan
  // then faults no page of the mapping in, so the load's peak resident set is the packed
  // weights plus what the packers are reading (they release each tensor once packed).
  int64_t bad = -1;
  for (const auto& f : files_)
    if ((bad = f->scan_nonfinite(t)) >= 0) break;
  if (bad < 0) bad = count_nonfinite(t.dtype, t.data, t.num_bytes);
  if (bad > 0)
    return data_loss("checkpoint {}: tensor '{}' (in {}) holds {} NaN/Inf value(s) of {}: the "
                     "weights are corrupt", dir_, t.name, t.file, bad, t.numel());
  std::lock_guard lock(scanned_mu_);
  scanned_.insert(t.name);
  return ok_status();
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, v] : index_) out.push_back(name);
  return out;
}

// ---------------------------------------------------------------- writing

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) {
    json m = json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  std::set<std::string> seen;
  for (const TensorToWrite& t : tensors) {
    if (t.name == "__metadata__" || !seen.insert(t.name).second)
      return invalid_argument("{}: duplicate or reserved tensor name '{}'", path, t.name);
    std::optional<int64_t> numel = checked_numel(t.shape);
    if (!numel) return invalid_argument("{}: tensor '{}': bad shape {}", path, t.name,
                                        shape_str(t.shape));
    if (dtype_size(t.dtype) == 0 || !byte_size_ok(t.dtype, *numel, t.bytes.size()))
      return invalid_argument("{}: tensor '{}': {} bytes do not match shape {} x {}", path,
                              t.name, t.bytes.size(), shape_str(t.shape), dtype_name(t.dtype));
    json e = json::object();
    e["dtype"] = dtype_name(t.dtype);
    e["shape"] = t.shape;
    e["data_offsets"] = {offset, offset + t.bytes.size()};
    header[t.name] = std::move(e);
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // align the data section to 8 bytes, as HF
  const uint64_t n = text.size();
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));

  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return internal_error("{}: cannot create file: {}", tmp, std::strerror(errno));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const TensorToWrite& t : tensors)
      out.write(reinterpret_cast<const char*>(t.bytes.data()),
                static_cast<std::streamsize>(t.bytes.size()));
    out.flush();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      return internal_error("{}: write failed", tmp);
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return internal_error("{}: rename from {} failed: {}", path, tmp, ec.message());
  return ok_status();
}

}  // namespace strata
