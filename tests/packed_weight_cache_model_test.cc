// The packed-weight cache (model/packed_weight_cache.h) under the real loaders: the tiny V4.1
// and V4 models loaded with a cache directory write the file on the first load and map it on
// the next (the packed weights are then views of the mapping), and the logits of a prompt,
// a chunked prompt and decode steps are bit-identical to the scalar reference loops either
// way, at 1 and 2 threads. A corrupted file is ignored (packed anew, same bits) and rewritten.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "base/check.h"
#include "deepseek_ab_run.h"
#include "exec/deepseek_v4/deepseek_v4_model.h"
#include "exec/deepseek_v41/deepseek_v41_model.h"
#include "model/packed_weight_cache.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::string source_dir() {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  return e ? e : STRATA_SOURCE_DIR;
}

// A cache directory of its own for the test; the process settings restored at the end.
struct CacheDir {
  fs::path dir;
  WeightCacheSettings saved = process_weight_cache_settings();
  CacheDir() {
    dir = fs::temp_directory_path() /
          ("strata_pwc_model_" + std::to_string(getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    set_process_weight_cache_settings({dir.string(), 0});
  }
  ~CacheDir() {
    set_process_weight_cache_settings(saved);
    fs::remove_all(dir);
  }
  std::vector<fs::path> files() const {
    std::vector<fs::path> out;
    if (fs::exists(dir))
      for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path());
    return out;
  }
  // Flips a byte in the middle of the cache file (inside the packed data), 30 ms after the
  // last full check so that the file's modify time moves (packed_weight_cache.h).
  void corrupt() const {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    fs::path p;
    for (const fs::path& f : files())
      if (f.extension() == ".strata-packed") p = f;
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    const int64_t at = static_cast<int64_t>(fs::file_size(p)) / 2;
    f.seekg(at);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x01;
    f.seekp(at);
    f.write(&c, 1);
  }
};

std::unique_ptr<DeepseekV41Model> load_v41(bool scalar, int threads) {
  V41LoadOptions o;
  o.state_max_tokens = 256;
  o.scalar_reference = scalar;
  o.threads = threads;
  auto r = DeepseekV41Model::load(source_dir() + "/models/deepseek-v41-tiny", o);
  STRATA_CHECK_MSG(r.ok(), "{}", r.status().to_string());
  return std::move(r).value();
}

std::vector<float> run_v41(const DeepseekV41Model& m, int64_t n, int64_t chunk) {
  return testing_ab::run_prompt_then_decode<V41ForwardOptions>(
      m, n, chunk, 4, 99u, [](V41ForwardOptions& o) { o.decode_step = true; });
}

bool v41_is_mapped(const DeepseekV41Model& m) {
  const V41Linear& l = m.weights().layer(0).attn.wq_a;
  EXPECT_NE(l.packed, nullptr);
  return l.packed && l.packed->fp8.codes.is_view();
}

// Logits of a whole and a chunked prompt, each followed by 4 decode steps.
std::vector<std::vector<float>> runs_v41(const DeepseekV41Model& m) {
  return {run_v41(m, 70, 0), run_v41(m, 70, 7)};
}

void expect_v41_same(const std::vector<std::vector<float>>& want, const DeepseekV41Model& got,
                     const std::string& what) {
  const std::vector<std::vector<float>> b = runs_v41(got);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(want[i].size(), b[i].size());
    EXPECT_EQ(0, std::memcmp(want[i].data(), b[i].data(), b[i].size() * 4)) << what << " run " << i;
  }
}

TEST(PackedWeightCacheModels, V41MappedWeightsGiveTheReferenceBits) {
  CacheDir cache;
  const std::vector<std::vector<float>> ref = runs_v41(*load_v41(true, 1));
  auto packed = load_v41(false, 1);  // a miss: packs, writes the file
  ASSERT_EQ(cache.files().size(), 1u);  // the file (no .verified record before a check)
  EXPECT_FALSE(v41_is_mapped(*packed));
  auto mapped1 = load_v41(false, 1);
  auto mapped2 = load_v41(false, 2);
  EXPECT_TRUE(v41_is_mapped(*mapped1));
  EXPECT_TRUE(v41_is_mapped(*mapped2));
  EXPECT_EQ(mapped1->weights().packed_bytes(), packed->weights().packed_bytes());
  expect_v41_same(ref, *packed, "packed");
  expect_v41_same(ref, *mapped1, "mapped, 1 thread");
  expect_v41_same(ref, *mapped2, "mapped, 2 threads");

  cache.corrupt();
  auto repacked = load_v41(false, 2);
  EXPECT_FALSE(v41_is_mapped(*repacked));
  expect_v41_same(ref, *repacked, "after a corrupt file");
  auto remapped = load_v41(false, 1);  // the rewritten file
  EXPECT_TRUE(v41_is_mapped(*remapped));
  expect_v41_same(ref, *remapped, "rewritten");
}

std::unique_ptr<DeepseekV4Model> load_v4(bool scalar, int threads) {
  auto r = DeepseekV4Model::load(source_dir() + "/models/deepseek-v4flash-tiny", 0, false, 256,
                                 threads, scalar);
  STRATA_CHECK_MSG(r.ok(), "{}", r.status().to_string());
  return std::move(r).value();
}

TEST(PackedWeightCacheModels, V4MappedWeightsGiveTheReferenceBits) {
  CacheDir cache;
  auto ref = load_v4(true, 1);
  auto packed = load_v4(false, 2);
  ASSERT_EQ(cache.files().size(), 1u);  // the file (no .verified record before a check)
  auto mapped = load_v4(false, 1);
  const V41Linear& l = mapped->weights().layer(0).attn.wq_a;
  ASSERT_NE(l.packed, nullptr);
  EXPECT_TRUE(l.packed->fp8.codes.is_view());
  EXPECT_EQ(mapped->weights().packed_bytes(), packed->weights().packed_bytes());
  for (auto [n, chunk] : {std::pair<int64_t, int64_t>{70, 0}, {70, 9}}) {
    auto run = [&](const DeepseekV4Model& m) {
      return testing_ab::run_prompt_then_decode<V4ForwardOptions>(m, n, chunk, 4, 7u,
                                                                  [](V4ForwardOptions&) {});
    };
    const std::vector<float> want = run(*ref), a = run(*packed), b = run(*mapped);
    ASSERT_EQ(a.size(), want.size());
    ASSERT_EQ(b.size(), want.size());
    EXPECT_EQ(0, std::memcmp(a.data(), want.data(), a.size() * 4)) << "packed chunk " << chunk;
    EXPECT_EQ(0, std::memcmp(b.data(), want.data(), b.size() * 4)) << "mapped chunk " << chunk;
  }
}

}  // namespace
}  // namespace strata
