// BlockPool: lazy arena (issue 3, item C) and the refcount / free-list contract.
//   * a pool with a large byte budget is cheap to create: resident memory (RSS from
//     /proc/self/statm, not time) grows by far less than the budget, and grows by about the
//     bytes written once blocks are used;
//   * never-written rows read as zero; row pointers of a live block stay put while other
//     blocks are allocated, freed, copied and the pool object itself is moved;
//   * refcounts: a block returns to the free list only after its last unref.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "state/block_pool.h"

namespace strata {
namespace {

// Resident set size of this process in bytes (second field of /proc/self/statm, in pages).
int64_t rss_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return -1;
  long size = 0, resident = 0;
  const int n = std::fscanf(f, "%ld %ld", &size, &resident);
  std::fclose(f);
  if (n != 2) return -1;
  return static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
}

constexpr int64_t kMiB = 1 << 20;

TEST(BlockPool, LargeBudgetIsCheapToCreate) {
  // 4 GiB of arena: 131072 blocks of 64 rows x 512 B (32 KiB each).
  const int64_t nblocks = 131072, rpb = 64, rb = 512;
  const int64_t before = rss_bytes();
  ASSERT_GT(before, 0);
  BlockPool pool(nblocks, rpb, rb, /*with_storage=*/true);
  const int64_t created = rss_bytes();
  ASSERT_TRUE(pool.has_storage());
  EXPECT_EQ(pool.arena_bytes(), nblocks * rpb * rb);
  // Metadata is 8 B per block (refcount + free-list entry) = 1 MiB; an eager arena would
  // make this 4 GiB.
  EXPECT_LT(created - before, 16 * kMiB) << "before " << before << " after " << created;

  // Writing 64 blocks (2 MiB) makes about that much resident (the kernel's RSS counters
  // may lag by a few pages, hence the slack).
  std::vector<BlockId> used;
  for (int i = 0; i < 64; ++i) {
    const BlockId b = pool.allocate();
    for (int64_t r = 0; r < rpb; ++r) std::memset(pool.row(b, r), 0x5a, rb);
    used.push_back(b);
  }
  const int64_t touched = rss_bytes();
  EXPECT_GT(touched - created, 1 * kMiB);
  EXPECT_LT(touched - before, 64 * kMiB);
  for (BlockId b : used) pool.unref(b);
  std::string why;
  EXPECT_TRUE(pool.check_invariants(&why)) << why;
}

TEST(BlockPool, UntouchedRowsReadZeroAndPointersAreStable) {
  BlockPool pool(64, 4, 100, true);
  const BlockId a = pool.allocate();
  for (int64_t r = 0; r < 4; ++r)
    for (int i = 0; i < 100; ++i) EXPECT_EQ(pool.row(a, r)[i], 0) << r << " " << i;
  uint8_t* pa = pool.row(a, 2);
  std::memset(pa, 7, 100);
  // Churn: allocate / write / free every other block, copy into a fresh one.
  std::vector<BlockId> others;
  for (int i = 0; i < 40; ++i) others.push_back(pool.allocate());
  for (BlockId b : others) std::memset(pool.row(b, 0), 9, 100);
  const BlockId c = others.back();
  pool.copy_block(c, a);
  for (size_t i = 0; i < others.size(); i += 2) pool.unref(others[i]);
  EXPECT_EQ(pool.row(a, 2), pa);
  EXPECT_EQ(pool.row(c, 2)[99], 7);
  // Moving the pool (as std::vector<BlockPool> does when it grows) keeps the arena.
  std::vector<BlockPool> pools;
  pools.push_back(std::move(pool));
  pools.emplace_back(8, 1, 1, true);
  pools.emplace_back(8, 1, 1, false);
  EXPECT_EQ(pools[0].row(a, 2), pa);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(pa[i], 7);
  EXPECT_FALSE(pools[2].has_storage());
  EXPECT_EQ(pools[2].arena_bytes(), 0);
  std::string why;
  EXPECT_TRUE(pools[0].check_invariants(&why)) << why;
}

TEST(BlockPool, BlockFreedOnlyAfterLastUser) {
  BlockPool pool(3, 1, 8, false);
  const BlockId b = pool.allocate();
  pool.ref(b);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_FALSE(pool.unref(b));
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_TRUE(pool.unref(b));
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_EQ(pool.refcount(b), 0);
  std::string why;
  EXPECT_TRUE(pool.check_invariants(&why)) << why;
}

TEST(BlockPool, ZeroSizedStorageHasNoArena) {
  BlockPool pool(0, 4, 16, true);
  EXPECT_FALSE(pool.has_storage());
  BlockPool empty_rows(4, 4, 0, true);
  EXPECT_FALSE(empty_rows.has_storage());
}

// A sharded pool (DCP) stores only its rank's rows, 1/D of each block, at dense slots; the
// D ranks' pools together hold every row once; another rank's row is refused.
TEST(BlockPool, ShardedPoolStoresItsRanksRows) {
  for (int D : {2, 3})
    for (int64_t S : {1, 2}) {
      const int64_t rpb = 12, rb = 4;
      std::vector<BlockPool> ranks;
      for (int r = 0; r < D; ++r) ranks.emplace_back(2, rpb, rb, true, RowShard{r, D, S});
      std::vector<int> holders(rpb, 0);
      for (int r = 0; r < D; ++r) {
        BlockPool& p = ranks[r];
        EXPECT_EQ(p.rows_per_block(), rpb);
        EXPECT_EQ(p.stored_rows(), rpb / D);
        EXPECT_EQ(p.block_bytes(), rpb / D * rb);
        const BlockId b = p.allocate();
        std::vector<const uint8_t*> seen;
        for (int64_t row = 0; row < rpb; ++row) {
          if (!p.holds(row)) continue;
          ++holders[row];
          EXPECT_EQ((row / S) % D, r);
          uint8_t* at = p.row(b, row);
          // Inside the block's stored bytes, distinct slots.
          EXPECT_GE(at, p.block_data(b));
          EXPECT_LT(at, p.block_data(b) + p.block_bytes());
          for (const uint8_t* q : seen) EXPECT_NE(q, at);
          seen.push_back(at);
          std::memset(at, static_cast<int>(row), rb);
        }
        for (int64_t row = 0; row < rpb; ++row) {
          if (p.holds(row)) {
            EXPECT_EQ(p.row(b, row)[rb - 1], row);
          }
        }
      }
      for (int64_t row = 0; row < rpb; ++row) EXPECT_EQ(holders[row], 1) << row;
    }
  BlockPool p(1, 4, 4, true, RowShard{1, 2, 1});
  EXPECT_DEATH(p.row(p.allocate(), 0), "stored by DCP rank 0, not rank 1");
  EXPECT_DEATH(BlockPool(1, 6, 4, true, RowShard{0, 2, 2}), "do not split over 2 ranks");
}

}  // namespace
}  // namespace strata
