// Tiers: byte sizes; the host tier's LRU budget and its demotion to disk; the disk tier's
// persistence across instances (a restart), budget and rejection; the chain's promotion and
// flush; the Redis tier against a real redis-server started here (shared by two chains).
#include "tiers/tiers.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "tiers/redis_test_server.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> obj(uint8_t fill, size_t n) { return std::vector<uint8_t>(n, fill); }

struct TempDir {
  TempDir() {
    path = (fs::temp_directory_path() / fmt::format("strata-tiers-{}-{}", ::getpid(), counter++))
               .string();
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string path;
  static inline int counter = 0;
};

TEST(Tiers, ParseByteSize) {
  EXPECT_EQ(*parse_byte_size("4096"), 4096);
  EXPECT_EQ(*parse_byte_size("512MiB"), 512ll << 20);
  EXPECT_EQ(*parse_byte_size("16GiB"), 16ll << 30);
  EXPECT_EQ(*parse_byte_size("2G"), 2ll << 30);
  EXPECT_EQ(*parse_byte_size("1e9"), 1000000000);
  EXPECT_EQ(*parse_byte_size("3GB"), 3000000000);
  for (const char* bad : {"", "x", "-1", "12QB", "1e40", "MiB"})
    EXPECT_EQ(parse_byte_size(bad).status().code(), StatusCode::kInvalidArgument) << bad;
}

TEST(Tiers, HostLruBudgetDemotesToDisk) {
  TempDir d;
  auto disk = make_disk_tier(d.path, 1 << 20);
  ASSERT_TRUE(disk.ok());
  auto host = make_host_tier(250, disk->get());
  host->put(1, obj(1, 100));
  host->put(2, obj(2, 100));
  ASSERT_TRUE(host->get(1));  // 1 is now the most recently used
  host->put(3, obj(3, 100));  // over 250: evicts 2 (LRU), demoted to disk
  EXPECT_TRUE(host->contains(1));
  EXPECT_FALSE(host->contains(2));
  EXPECT_TRUE(host->contains(3));
  EXPECT_TRUE((*disk)->contains(2));
  EXPECT_EQ(*(*disk)->get(2), obj(2, 100));
  const TierStats hs = host->stats().at(0);
  EXPECT_EQ(hs.bytes, 200);
  EXPECT_EQ(hs.objects, 2);
  EXPECT_EQ(hs.evictions, 1);
  EXPECT_EQ(hs.demotions, 1);
  // An object larger than the whole tier is not kept (nothing evicted for it).
  host->put(4, obj(4, 300));
  EXPECT_FALSE(host->contains(4));
  EXPECT_TRUE(host->contains(1));
}

TEST(Tiers, DiskPersistsAcrossInstancesWithinBudget) {
  TempDir d;
  {
    auto disk = make_disk_tier(d.path, 1000);
    ASSERT_TRUE(disk.ok());
    (*disk)->put(0xa, obj(7, 400));
    (*disk)->put(0xb, obj(8, 400));
    (*disk)->put(0xc, obj(9, 400));  // over 1000: the oldest (0xa) file is removed
    EXPECT_FALSE((*disk)->contains(0xa));
    EXPECT_EQ((*disk)->stats().at(0).evictions, 1);
  }
  // Junk in the directory is ignored; a half-written temp file is not an object.
  std::ofstream(d.path + "/notes.txt") << "x";
  std::ofstream(d.path + "/.tmp-000000000000000d-1") << "partial";
  auto again = make_disk_tier(d.path, 1000);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE((*again)->contains(0xa));
  EXPECT_FALSE((*again)->contains(0xd));
  EXPECT_EQ(*(*again)->get(0xb), obj(8, 400));
  EXPECT_EQ(*(*again)->get(0xc), obj(9, 400));
  EXPECT_EQ((*again)->stats().at(0).objects, 2);
  EXPECT_EQ((*again)->stats().at(0).bytes, 800);
  (*again)->reject(0xb);
  EXPECT_FALSE(fs::exists(d.path + "/000000000000000b.unit"));
  EXPECT_EQ((*again)->stats().at(0).rejected, 1);
  // A smaller budget on restart trims to it.
  auto small = make_disk_tier(d.path, 100);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ((*small)->stats().at(0).objects, 0);
}

TEST(Tiers, DiskDirectoryErrors) {
  EXPECT_EQ(make_disk_tier("/proc/strata-no-such-dir", 0).status().code(),
            StatusCode::kInvalidArgument);
  TempDir d;
  fs::create_directories(d.path);
  std::ofstream(d.path + "/file") << "x";
  EXPECT_EQ(make_disk_tier(d.path + "/file", 0).status().code(), StatusCode::kInvalidArgument);
}

TEST(Tiers, ChainPromotesAndFlushesToDisk) {
  TempDir d;
  TierOptions o{.host_bytes = 1000, .disk_dir = d.path};
  {
    auto chain = make_unit_store(o);
    ASSERT_TRUE(chain.ok());
    (*chain)->put(5, obj(5, 300));
    auto st = (*chain)->stats();
    ASSERT_EQ(st.size(), 2u);
    EXPECT_EQ(st[0].tier, "host");
    EXPECT_EQ(st[0].objects, 1);
    EXPECT_EQ(st[1].objects, 0);  // not on disk until demoted or flushed
  }  // the chain's destructor flushes the host tier to disk
  auto chain = make_unit_store(o);
  ASSERT_TRUE(chain.ok());
  EXPECT_TRUE((*chain)->contains(5));
  EXPECT_EQ(*(*chain)->get(5), obj(5, 300));  // from disk, promoted to host
  auto st = (*chain)->stats();
  EXPECT_EQ(st[0].objects, 1);
  EXPECT_EQ(st[0].promotions, 1);
  EXPECT_EQ(st[1].hits, 1);
  EXPECT_FALSE((*chain)->get(6));
  // Nothing configured: no store.
  auto none = make_unit_store(TierOptions{});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->get(), nullptr);
  EXPECT_EQ(make_unit_store(TierOptions{.disk_bytes = 5}).status().code(),
            StatusCode::kInvalidArgument);
}

// Prefetch copies objects from the disk tier into the host tier in the background; absent
// keys are skipped; a chain with one tier does nothing.
TEST(Tiers, PrefetchWarmsTheHostTier) {
  TempDir d;
  TierOptions o{.host_bytes = 1 << 20, .disk_dir = d.path};
  {
    auto a = make_unit_store(o);
    ASSERT_TRUE(a.ok());
    for (uint64_t k = 1; k <= 5; ++k) (*a)->put(k, obj(static_cast<uint8_t>(k), 1000));
  }  // flushed to disk
  auto b = make_unit_store(o);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->stats()[0].objects, 0);
  (*b)->prefetch({1, 2, 3, 4, 5, 99});
  (*b)->wait_prefetch();
  const auto st = (*b)->stats();
  EXPECT_EQ(st[0].objects, 5);
  EXPECT_EQ(st[0].prefetched, 5);
  EXPECT_EQ(st[0].promotions, 5);
  EXPECT_EQ(st[1].hits, 5);
  EXPECT_EQ(*(*b)->get(3), obj(3, 1000));
  EXPECT_EQ((*b)->stats()[0].hits, 1);  // from the host tier now
  (*b)->prefetch({1, 2});                // already on top: nothing to do
  (*b)->wait_prefetch();
  EXPECT_EQ((*b)->stats()[0].prefetched, 5);
  auto single = make_unit_store(TierOptions{.disk_dir = d.path});
  ASSERT_TRUE(single.ok());
  (*single)->prefetch({1});
  (*single)->wait_prefetch();
  EXPECT_EQ((*single)->stats()[0].hits, 0);
}

// The cost model's admission: a tier where recomputing wins gets no units, neither stored
// nor demoted; the fastest admitted tier takes them. The probe measures every tier and
// leaves nothing behind.
TEST(Tiers, AdmissionAndProbe) {
  TempDir d;
  auto chain = make_unit_store(TierOptions{.host_bytes = 250, .disk_dir = d.path});
  ASSERT_TRUE(chain.ok());
  const std::vector<double> load = (*chain)->measure_load_seconds(100);
  ASSERT_EQ(load.size(), 2u);
  for (double s : load) EXPECT_GE(s, 0);
  EXPECT_EQ((*chain)->stats()[0].objects, 0);
  EXPECT_EQ((*chain)->stats()[1].objects, 0);
  EXPECT_EQ((*chain)->stats()[0].rejected + (*chain)->stats()[1].rejected, 0);
  (*chain)->set_admission({true, false});  // disk: recompute wins
  for (uint64_t k = 1; k <= 3; ++k) (*chain)->put(k, obj(static_cast<uint8_t>(k), 100));
  EXPECT_EQ((*chain)->stats()[0].evictions, 1);  // the host budget holds two
  EXPECT_EQ((*chain)->stats()[1].objects, 0) << "nothing demoted to a tier not admitted";
  (*chain)->set_admission({false, true});  // host: not worth it; disk takes the units
  (*chain)->put(9, obj(9, 100));
  EXPECT_EQ((*chain)->stats()[1].objects, 1);
  EXPECT_EQ((*chain)->stats()[0].objects, 2);
  EXPECT_TRUE((*chain)->contains(9));
  EXPECT_FALSE((*chain)->contains(1));  // evicted from host while disk was not admitted
}

TEST(Tiers, RedisPoolSharedByTwoChains) {
  if (RedisTestServer::binary().empty()) GTEST_SKIP() << "redis-server not installed";
  RedisTestServer server;
  ASSERT_TRUE(server.ready()) << "redis-server did not answer on " << server.url();
  auto a = make_unit_store(TierOptions{.host_bytes = 1 << 20, .pool_url = server.url()});
  auto b = make_unit_store(TierOptions{.pool_url = server.url()});
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  (*a)->put(42, obj(4, 5000));  // host + write-through to the pool
  EXPECT_TRUE((*b)->contains(42));
  EXPECT_EQ(*(*b)->get(42), obj(4, 5000));
  (*b)->reject(42);
  EXPECT_FALSE((*b)->contains(42));
  EXPECT_EQ((*b)->stats().at(0).rejected, 1);
  // The pool going away makes operations misses, counted, never errors or hangs.
  server.stop();
  EXPECT_FALSE((*b)->get(42));
  (*b)->put(43, obj(1, 10));
  EXPECT_GT((*b)->stats().at(0).errors, 0);
  EXPECT_EQ(make_unit_store(TierOptions{.pool_url = server.url()}).status().code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(make_unit_store(TierOptions{.pool_url = "http://x"}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(make_unit_store(TierOptions{.pool_url = "redis://h:99999"}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata
