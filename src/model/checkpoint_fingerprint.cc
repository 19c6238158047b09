// Checkpoint fingerprint; see checkpoint_fingerprint.h.
#include "model/checkpoint_fingerprint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include <xxhash.h>

namespace strata {

StatusOr<uint64_t> checkpoint_fingerprint(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& de : fs::directory_iterator(dir, ec))
    if (de.is_regular_file()) files.push_back(de.path());
  if (ec) return not_found("{}: cannot list the model directory ({})", dir, ec.message());
  std::sort(files.begin(), files.end());
  constexpr int64_t kSpan = 1 << 20;
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  std::vector<char> buf(kSpan);
  for (const fs::path& f : files) {
    const std::string name = f.filename().string();
    const int64_t size = static_cast<int64_t>(fs::file_size(f, ec));
    if (ec) break;
    XXH3_64bits_update(st, name.data(), name.size() + 1);
    XXH3_64bits_update(st, &size, sizeof(size));
    std::ifstream in(f, std::ios::binary);
    for (int64_t at : {int64_t{0}, std::max<int64_t>(0, size - kSpan)}) {
      const int64_t n = std::min(kSpan, size - at);
      in.seekg(at);
      in.read(buf.data(), n);
      if (!in) {
        XXH3_freeState(st);
        return data_loss("{}: cannot read {} bytes at {}", f.string(), n, at);
      }
      const uint64_t h = XXH3_64bits(buf.data(), static_cast<size_t>(n));
      XXH3_64bits_update(st, &h, sizeof(h));
    }
  }
  const uint64_t out = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  if (ec) return not_found("{}: {}", dir, ec.message());
  return out;
}

}  // namespace strata
