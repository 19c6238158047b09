// The packed-weight cache on synthetic pack jobs: a miss packs and writes, a hit restores the
// same bytes as read-only views of the mapping; a changed checkpoint file, another layout, a
// flipped data or header byte, a truncated file and slots that disagree with the file are
// misses (the jobs run, the results are the packed ones) and the file is rewritten.
#include "model/packed_weight_cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

namespace strata {
namespace {

namespace fs = std::filesystem;

struct Dirs {
  fs::path root, model, cache;
  Dirs() {
    root = fs::temp_directory_path() /
           ("strata_pwc_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root);
    model = root / "model";
    cache = root / "cache";
    fs::create_directories(model);
    write(model / "config.json", "{\"dim\": 64}");
    write(model / "model.safetensors", std::string(4096, 'w'));
  }
  ~Dirs() { fs::remove_all(root); }
  static void write(const fs::path& p, const std::string& s) {
    std::ofstream(p, std::ios::binary) << s;
  }
  std::vector<fs::path> cache_files() const {
    std::vector<fs::path> out;
    if (fs::exists(cache))
      for (const auto& e : fs::directory_iterator(cache)) out.push_back(e.path());
    return out;
  }
};

// The one cache file (not its .verified record).
fs::path cache_file(const Dirs& d) {
  for (const fs::path& p : d.cache_files())
    if (p.extension() == ".strata-packed") return p;
  ADD_FAILURE() << "no cache file";
  return {};
}

// Weights the jobs "pack": a V41PackedLinear holding FP8 arrays (with subnormal flags), one
// holding FP4 arrays, an empty slot, and a BF16 and an F32 sequential weight.
struct FakeWeights {
  std::shared_ptr<const V41PackedLinear> fp8, fp4, unused;
  std::shared_ptr<const kernels::PackedSeqWeight> bf16, f32;
  int packs = 0;  // how many times the jobs ran
};

template <class T>
std::vector<T> random_vec(std::mt19937& rng, size_t n) {
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(rng() % 251);
  return v;
}

std::vector<PackJob> jobs_for(FakeWeights* w, int64_t fp8_rows = 64) {
  std::vector<PackJob> jobs;
  jobs.push_back({[w, fp8_rows] {
                    std::mt19937 rng(1);
                    auto p = std::make_shared<V41PackedLinear>();
                    p->fp8.n = fp8_rows;
                    p->fp8.k = 96;
                    p->fp8.block_k = 32;
                    p->fp8.codes = random_vec<uint8_t>(rng, 64 * 96 + 5);
                    p->fp8.scales_e8m0 = random_vec<uint8_t>(rng, 64 * 3);
                    p->fp8.subnormal_blocks = random_vec<uint8_t>(rng, 3);
                    w->fp8 = p;
                    ++w->packs;
                    return p->bytes();
                  },
                  {{&w->fp8, fp8_rows, 96}, {&w->unused, 8, 8}}});
  jobs.push_back({[w] {
                    std::mt19937 rng(2);
                    auto p = std::make_shared<V41PackedLinear>();
                    p->fp4.n = 16;
                    p->fp4.k = 64;
                    p->fp4.codes = random_vec<uint8_t>(rng, 16 * 32 + 64);
                    p->fp4.scales = random_vec<float>(rng, 16 * 2);
                    w->fp4 = p;
                    return p->bytes();
                  },
                  {{&w->fp4, 16, 64}}});
  jobs.push_back({[w] {
                    std::mt19937 rng(3);
                    auto b = std::make_shared<kernels::PackedSeqWeight>();
                    b->n = 9;
                    b->k = 7;
                    b->data16 = random_vec<uint16_t>(rng, 16 * 7);
                    w->bf16 = b;
                    auto f = std::make_shared<kernels::PackedSeqWeight>();
                    f->n = 3;
                    f->k = 5;
                    f->bf16 = false;
                    f->data32 = random_vec<float>(rng, 8 * 5);
                    w->f32 = f;
                    return b->bytes() + f->bytes();
                  },
                  {{&w->bf16, 9, 7}, {&w->f32, 3, 5}}});
  return jobs;
}

template <class T>
std::vector<T> bytes_of(const kernels::WeightBuffer<T>& b) {
  return std::vector<T>(b.begin(), b.end());
}

// Every array equal between two fake weight sets; `views` says whether `b`'s are views.
void expect_same(const FakeWeights& a, const FakeWeights& b, bool views) {
  ASSERT_TRUE(b.fp8 && b.fp4 && b.bf16 && b.f32);
  EXPECT_EQ(b.unused, nullptr);
  EXPECT_EQ(b.fp8->fp8.n, a.fp8->fp8.n);
  EXPECT_EQ(b.fp8->fp8.k, a.fp8->fp8.k);
  EXPECT_EQ(b.fp8->fp8.block_k, a.fp8->fp8.block_k);
  EXPECT_EQ(bytes_of(b.fp8->fp8.codes), bytes_of(a.fp8->fp8.codes));
  EXPECT_EQ(bytes_of(b.fp8->fp8.scales_e8m0), bytes_of(a.fp8->fp8.scales_e8m0));
  EXPECT_EQ(bytes_of(b.fp8->fp8.subnormal_blocks), bytes_of(a.fp8->fp8.subnormal_blocks));
  EXPECT_TRUE(b.fp8->fp8.scales.empty());
  EXPECT_EQ(bytes_of(b.fp4->fp4.codes), bytes_of(a.fp4->fp4.codes));
  EXPECT_EQ(bytes_of(b.fp4->fp4.scales), bytes_of(a.fp4->fp4.scales));
  EXPECT_EQ(b.fp4->fp4.n, 16);
  EXPECT_EQ(bytes_of(b.bf16->data16), bytes_of(a.bf16->data16));
  EXPECT_TRUE(b.bf16->bf16);
  EXPECT_EQ(bytes_of(b.f32->data32), bytes_of(a.f32->data32));
  EXPECT_FALSE(b.f32->bf16);
  EXPECT_EQ(b.f32->n, 3);
  EXPECT_EQ(b.fp8->fp8.codes.is_view(), views);
  EXPECT_EQ(b.f32->data32.is_view(), views);
  if (views) {  // 64-byte aligned arrays in the mapping
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.fp8->fp8.codes.data()) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.f32->data32.data()) % 64, 0u);
  }
}

WeightCacheSettings settings(const Dirs& d) { return {d.cache.string(), 0}; }

// Packs through a cache opened now; returns whether it was a hit.
bool load(const Dirs& d, FakeWeights* w, const std::string& layout = "fake layers [0, 1)",
          int64_t fp8_rows = 64) {
  auto c = PackedWeightCache::open(d.model.string(), layout, settings(d), nullptr);
  EXPECT_NE(c, nullptr);
  if (!c) return false;
  const bool hit = c->hit();
  const std::vector<PackJob> jobs = jobs_for(w, fp8_rows);
  c->pack(jobs, nullptr);
  c->finish({"a.weight", "b.weight"});
  return hit;
}

TEST(PackedWeightCache, MissWritesHitRestoresViews) {
  Dirs d;
  FakeWeights first, second;
  EXPECT_FALSE(load(d, &first));
  EXPECT_EQ(first.packs, 1);
  ASSERT_EQ(d.cache_files().size(), 1u);
  EXPECT_EQ(d.cache_files()[0].extension(), ".strata-packed");
  EXPECT_TRUE(load(d, &second));  // checked in full, and the file's identity recorded
  EXPECT_TRUE(fs::exists(cache_file(d).string() + ".verified"));
  EXPECT_EQ(second.packs, 0);  // restored, not packed
  expect_same(first, second, true);
  EXPECT_FALSE(first.fp8->fp8.codes.is_view());
  auto c = PackedWeightCache::open(d.model.string(), "fake layers [0, 1)", settings(d), nullptr);
  ASSERT_TRUE(c && c->hit());
  EXPECT_EQ(c->scanned_tensors(), (std::vector<std::string>{"a.weight", "b.weight"}));
}

TEST(PackedWeightCache, ViewsOutliveTheCacheObject) {
  Dirs d;
  FakeWeights first, second;
  load(d, &first);
  load(d, &second);  // the cache object is gone: the views keep the mapping
  fs::remove_all(d.cache);
  expect_same(first, second, true);
}

TEST(PackedWeightCache, ChangedCheckpointOrLayoutMisses) {
  Dirs d;
  FakeWeights a, b, c, e;
  load(d, &a);
  Dirs::write(d.model / "model.safetensors", std::string(4097, 'w'));
  EXPECT_FALSE(load(d, &b));  // the checkpoint changed: repacked, file rewritten
  EXPECT_EQ(b.packs, 1);
  EXPECT_TRUE(load(d, &c));
  EXPECT_FALSE(load(d, &e, "fake layers [0, 2)"));  // another layout: its own file
  EXPECT_EQ(d.cache_files().size(), 3u);  // two files, the first one's .verified record
  Dirs::write(d.model / "config.json", "{\"dim\": 65}");
  FakeWeights f;
  EXPECT_FALSE(load(d, &f));
  // An in-place write of the same size that puts the modify time back: the change time moved.
  FakeWeights g, h;
  EXPECT_TRUE(load(d, &g));
  const fs::path st = d.model / "model.safetensors";
  const auto mtime = fs::last_write_time(st);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  Dirs::write(st, std::string(4097, 'x'));
  fs::last_write_time(st, mtime);
  EXPECT_FALSE(load(d, &h));
  EXPECT_EQ(h.packs, 1);
}

// A writer killed part-way leaves <name>.tmp.<pid>: the next write removes the temporaries of
// processes that no longer run, and keeps a running one's.
TEST(PackedWeightCache, OrphanedTemporariesAreRemoved) {
  Dirs d;
  FakeWeights a;
  load(d, &a);
  const std::string file = cache_file(d).string();
  fs::remove(file);
  Dirs::write(file + ".tmp.2147483646", "left by a killed writer");
  Dirs::write(file + ".verified.tmp.2147483645", "x");
  Dirs::write(file + ".tmp.1", "pid 1 runs");
  FakeWeights b;
  EXPECT_FALSE(load(d, &b));
  EXPECT_FALSE(fs::exists(file + ".tmp.2147483646"));
  EXPECT_FALSE(fs::exists(file + ".verified.tmp.2147483645"));
  EXPECT_TRUE(fs::exists(file + ".tmp.1"));
  EXPECT_TRUE(fs::exists(file));
}

// Flips one byte at `at` (from the end when negative) of the cache file. First waits 30 ms:
// a file's modify time moves only with the kernel's timestamp tick (a few ms without
// fine-grained timestamps), and a change in the same tick as the last full check would keep
// the identity recorded then (packed_weight_cache.h).
void flip(const Dirs& d, int64_t at) {
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const fs::path p = cache_file(d);
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(0, std::ios::end);
  const int64_t size = f.tellg();
  const int64_t pos = at < 0 ? size + at : at;
  f.seekg(pos);
  char c = 0;
  f.read(&c, 1);
  c ^= 0x10;
  f.seekp(pos);
  f.write(&c, 1);
}

TEST(PackedWeightCache, CorruptFilesAreIgnoredAndRewritten) {
  Dirs d;
  FakeWeights ref;
  load(d, &ref);
  for (int64_t at : {int64_t{-1}, int64_t{-300}, int64_t{40}, int64_t{0}}) {
    flip(d, at);  // the last data byte, an earlier one, a header byte, the magic
    FakeWeights w;
    EXPECT_FALSE(load(d, &w)) << "flipped byte " << at;
    EXPECT_EQ(w.packs, 1);
    expect_same(ref, w, false);
    FakeWeights again;
    EXPECT_TRUE(load(d, &again)) << "rewritten after byte " << at;
    expect_same(ref, again, true);
  }
  fs::resize_file(cache_file(d), fs::file_size(cache_file(d)) - 64);
  FakeWeights t;
  EXPECT_FALSE(load(d, &t));
  expect_same(ref, t, false);
}

TEST(PackedWeightCache, ARecordOfAnotherIdentityMeansAFullCheck) {
  Dirs d;
  FakeWeights ref, a, b;
  load(d, &ref);
  EXPECT_TRUE(load(d, &a));
  const std::string record = cache_file(d).string() + ".verified";
  Dirs::write(record, "ino 1 size 2");
  flip(d, -1);  // the record does not match: checked in full, so the flip is found
  FakeWeights w;
  EXPECT_FALSE(load(d, &w));
  expect_same(ref, w, false);
  EXPECT_TRUE(load(d, &b));
  expect_same(ref, b, true);
}

TEST(PackedWeightCache, SlotsThatDisagreeArePacked) {
  Dirs d;
  FakeWeights a;
  load(d, &a);
  FakeWeights b;  // same key, but the model now wants another shape in the first slot
  EXPECT_TRUE(load(d, &b, "fake layers [0, 1)", 32));
  EXPECT_EQ(b.packs, 1);
  EXPECT_FALSE(b.fp8->fp8.codes.is_view());
  EXPECT_EQ(b.fp8->fp8.n, 32);
}

TEST(PackedWeightCache, SettingsTurnItOff) {
  Dirs d;
  EXPECT_EQ(PackedWeightCache::open(d.model.string(), "x", {"", 0}, nullptr), nullptr);
  EXPECT_EQ(PackedWeightCache::open(d.model.string(), "x", {d.cache.string(), 1 << 20}, nullptr),
            nullptr);  // the checkpoint is smaller than the threshold
  EXPECT_NE(PackedWeightCache::open(d.model.string(), "x", {d.cache.string(), 4000}, nullptr),
            nullptr);
  EXPECT_TRUE(weight_cache_settings_from_flag("none").dir.empty());
  EXPECT_EQ(weight_cache_settings_from_flag("/x").dir, "/x");
  EXPECT_EQ(weight_cache_settings_from_flag("/x").min_checkpoint_bytes, 0);
}

}  // namespace
}  // namespace strata
