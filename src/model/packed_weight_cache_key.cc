// The packed-weight cache's key parts and settings (see packed_weight_cache.h).
#include <link.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "model/packed_weight_cache_format.h"

namespace strata {

namespace fs = std::filesystem;

namespace pwc {

void warn(const std::string& msg) { fmt::print(stderr, "[load] packed-weight cache: {}\n", msg); }

namespace {

// The GNU build id of the main executable ("" when it has none).
std::string build_id() {
  std::string id;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) -> int {
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_NOTE) continue;
          const auto* p = reinterpret_cast<const uint8_t*>(info->dlpi_addr + ph.p_vaddr);
          const uint8_t* end = p + ph.p_memsz;
          while (p + 12 <= end) {
            uint32_t namesz, descsz, type;
            std::memcpy(&namesz, p, 4);
            std::memcpy(&descsz, p + 4, 4);
            std::memcpy(&type, p + 8, 4);
            const uint8_t* name = p + 12;
            const uint8_t* desc = name + ((namesz + 3) & ~3u);
            if (desc + descsz > end) break;
            if (type == NT_GNU_BUILD_ID && namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
              std::string* s = static_cast<std::string*>(out);
              for (uint32_t j = 0; j < descsz; ++j) *s += fmt::format("{:02x}", desc[j]);
              return 1;
            }
            p = desc + ((descsz + 3) & ~3u);
          }
        }
        return 1;  // the first object is the executable: stop either way
      },
      &id);
  return id;
}

}  // namespace

// What identifies the code that packs: the build id, else the executable file's identity.
std::string code_identity() {
  std::string id = build_id();
  if (!id.empty()) return "build-id " + id;
  struct stat st {};
  if (stat("/proc/self/exe", &st) == 0)
    return fmt::format("exe size {} mtime {}.{}", st.st_size, st.st_mtim.tv_sec,
                       st.st_mtim.tv_nsec);
  return "unknown";
}

StatusOr<std::string> model_files_identity(const std::string& dir, int64_t* total_bytes) {
  std::error_code ec;
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".safetensors" || ext == ".json")) files.push_back(e.path());
  }
  if (ec) return not_found("{}: {}", dir, ec.message());
  std::sort(files.begin(), files.end());
  std::string s;
  *total_bytes = 0;
  for (const fs::path& f : files) {
    struct stat st {};
    if (stat(f.c_str(), &st) != 0) return not_found("{}: cannot stat", f.string());
    *total_bytes += st.st_size;
    // ctime too: an in-place write that restores the modify time still moves it.
    s += fmt::format("file {} size {} mtime {}.{} ctime {}.{} ino {} dev {}",
                     f.filename().string(), st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
                     st.st_ctim.tv_sec, st.st_ctim.tv_nsec, st.st_ino, st.st_dev);
    if (f.filename() == "config.json") {
      std::ifstream in(f, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string text = ss.str();
      s += fmt::format(" xxh3 {:016x}", XXH3_64bits(text.data(), text.size()));
    }
    s += "\n";
  }
  return s;
}

}  // namespace pwc

namespace {

WeightCacheSettings& process_settings() {
  static WeightCacheSettings s = [] {
    WeightCacheSettings d;
    if (const char* env = std::getenv("STRATA_WEIGHT_CACHE_DIR"); env != nullptr && *env) {
      return weight_cache_settings_from_flag(env);
    }
    std::string base;
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x) {
      base = x;
    } else if (const char* h = std::getenv("HOME"); h != nullptr && *h) {
      base = std::string(h) + "/.cache";
    }
    if (base.empty()) return d;
    d.dir = base + "/strata/packed-weights";
    d.min_checkpoint_bytes = int64_t{1} << 30;
    return d;
  }();
  return s;
}

}  // namespace

WeightCacheSettings process_weight_cache_settings() { return process_settings(); }
void set_process_weight_cache_settings(const WeightCacheSettings& s) { process_settings() = s; }

std::string pack_layout(const std::string& kind, int layer_begin, int layer_end,
                        ExpertShare experts) {
  return fmt::format("{} layers [{}, {}) experts {}/{}", kind, layer_begin, layer_end,
                     experts.rank, experts.size);
}

WeightCacheSettings weight_cache_settings_from_flag(const std::string& dir) {
  WeightCacheSettings s;
  if (dir != "none") s.dir = dir;
  return s;
}

}  // namespace strata
