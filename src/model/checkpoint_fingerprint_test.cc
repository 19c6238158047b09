// Checkpoint fingerprint: a copy of a model directory agrees; a changed byte in a weight
// file's last MiB, a renamed or an added file changes it; a missing directory is NotFound.
#include "model/checkpoint_fingerprint.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace strata {
namespace {

namespace fs = std::filesystem;

TEST(CheckpointFingerprint, CopyAgreesChangesDiffer) {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  const fs::path src = fs::path(e ? e : STRATA_SOURCE_DIR) / "models" / "deepseek-v41-tiny";
  const fs::path tmp = fs::temp_directory_path() / fmt::format("strata-fp-{}", ::getpid());
  fs::remove_all(tmp);
  fs::copy(src, tmp, fs::copy_options::recursive);
  auto a = checkpoint_fingerprint(src.string());
  auto b = checkpoint_fingerprint(tmp.string());
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
  // One byte near the end of the largest file.
  fs::path big;
  for (const auto& de : fs::directory_iterator(tmp))
    if (de.is_regular_file() && (big.empty() || de.file_size() > fs::file_size(big)))
      big = de.path();
  {
    std::fstream f(big, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-3, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    c ^= 1;
    f.seekp(-3, std::ios::end);
    f.write(&c, 1);
  }
  auto c = checkpoint_fingerprint(tmp.string());
  ASSERT_TRUE(c.ok());
  EXPECT_NE(*c, *a);
  std::ofstream(tmp / "extra.txt") << "x";
  auto d = checkpoint_fingerprint(tmp.string());
  ASSERT_TRUE(d.ok());
  EXPECT_NE(*d, *c);
  fs::remove_all(tmp);
  EXPECT_EQ(checkpoint_fingerprint(tmp.string()).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace strata
