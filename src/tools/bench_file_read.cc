// page_cache_read_seconds (see bench_file_read.h).
#include "tools/bench_file_read.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <vector>

namespace strata {

StatusOr<double> page_cache_read_seconds(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  std::error_code ec;
  if (fs::is_regular_file(dir, ec)) {
    files.push_back(dir);
  } else {
    for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
      if (e.is_regular_file() && e.path().extension() == ".safetensors") files.push_back(e.path());
  }
  if (files.empty()) return not_found("{}: no .safetensors file to read", dir);
  std::sort(files.begin(), files.end());
  std::vector<char> buf(size_t{4} << 20);
  double seconds = 0;
  for (int pass = 0; pass < 2; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    for (const fs::path& f : files) {
      const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return data_loss("{}: cannot open", f.string());
      ssize_t n = 0;
      while ((n = ::read(fd, buf.data(), buf.size())) > 0) {
      }
      ::close(fd);
      if (n < 0) return data_loss("{}: read failed", f.string());
    }
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return seconds;
}

}  // namespace strata
