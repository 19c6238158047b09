// SelectedRows (exec/selected_rows.h): distinct ids, negatives skipped, one read per run of
// consecutive ids, rows found by id.
#include "exec/selected_rows.h"

#include "dist/fake_dcp_comm.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace strata {
namespace {

TEST(SelectedRows, ReadsEachSelectedRowOnceInRuns) {
  const std::vector<std::vector<int32_t>> lists = {{7, 3, -1, 4}, {4, 9, -2}, {3, 8}};
  std::vector<std::pair<int64_t, int64_t>> reads;
  SelectedRows s;
  s.gather(lists, 10, 2, [&](int64_t g0, int64_t n, float* out) {
    reads.emplace_back(g0, n);
    for (int64_t i = 0; i < n; ++i) {
      out[2 * i] = static_cast<float>(g0 + i);
      out[2 * i + 1] = -static_cast<float>(g0 + i);
    }
  });
  // ids {3,4,7,8,9}: runs [3,4] and [7,8,9]
  const std::vector<std::pair<int64_t, int64_t>> want = {{3, 2}, {7, 3}};
  EXPECT_EQ(reads, want);
  for (int g : {3, 4, 7, 8, 9}) {
    EXPECT_EQ(s.row(g)[0], static_cast<float>(g));
    EXPECT_EQ(s.row(g)[1], -static_cast<float>(g));
  }
}

TEST(SelectedRows, EmptyListsReadNothing) {
  SelectedRows s;
  int calls = 0;
  s.gather(std::vector<std::vector<int32_t>>{{}, {-1}}, 0, 4, [&](int64_t, int64_t, float*) { ++calls; });
  EXPECT_EQ(calls, 0);
}

// Reused as scratch: a second, smaller gather after a larger one returns its own rows (the
// buffer keeps its size); trim keeps a buffer under the limit, and a gather after a trim
// that dropped the buffer works.
TEST(SelectedRows, ReuseAndTrim) {
  SelectedRows s;
  auto fill = [](int64_t g0, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(100 + g0 + i);
  };
  s.gather(std::vector<std::vector<int32_t>>{{0, 1, 2, 3, 4, 5}}, 6, 1, fill);
  s.gather(std::vector<std::vector<int32_t>>{{5, 2}}, 6, 1, fill);
  EXPECT_EQ(s.row(2)[0], 102.0f);
  EXPECT_EQ(s.row(5)[0], 105.0f);
  s.trim(1 << 20);  // under the limit: kept
  EXPECT_EQ(s.row(5)[0], 105.0f);
  s.trim(0);
  s.gather(std::vector<std::vector<int32_t>>{{1}}, 6, 1, fill);
  EXPECT_EQ(s.row(1)[0], 101.0f);
}

// With a pool of 2 threads and enough rows, runs are cut into pieces of at most kPieceRows
// rows read in parallel: every selected row is read exactly once, into its own place, and the
// result equals the serial gather's.
TEST(SelectedRows, ParallelPiecesReadEveryRowOnce) {
  std::vector<int32_t> ids;
  for (int32_t g = 199; g >= 0; --g)
    if (g % 40 != 3) ids.push_back(g);  // descending, runs of up to 39 ids, 195 rows
  const std::vector<std::vector<int32_t>> lists = {ids, {-1, 5}};
  auto fill = [](int64_t g0, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) {
      out[2 * i] = static_cast<float>(g0 + i);
      out[2 * i + 1] = 0.5f;
    }
  };
  ThreadPool pool(2);
  std::vector<std::atomic<int>> reads(200);
  std::atomic<int64_t> longest{0};
  SelectedRows par, ser;
  par.gather(lists, 200, 2, [&](int64_t g0, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) reads[g0 + i].fetch_add(1);
    int64_t l = longest.load();
    while (n > l && !longest.compare_exchange_weak(l, n)) {}
    fill(g0, n, out);
  }, &pool);
  ser.gather(lists, 200, 2, fill);
  EXPECT_LE(longest.load(), static_cast<int64_t>(SelectedRows::kPieceRows));
  for (int32_t g = 0; g < 200; ++g) {
    EXPECT_EQ(reads[g].load(), g % 40 == 3 ? 0 : 1) << g;
    if (g % 40 == 3) continue;
    EXPECT_EQ(par.row(g)[0], static_cast<float>(g));
    EXPECT_EQ(par.row(g)[1], 0.5f);
    EXPECT_EQ(ser.row(g)[0], par.row(g)[0]);
  }
}

// With a DCP group each rank reads only the rows it owns, and after the gather every rank
// sees every selected row with one rank's values (the rows of the others came through the
// group's allgather), with and without a pool.
TEST(SelectedRows, DcpRanksReadOwnRowsAndSeeAll) {
  const std::vector<std::vector<int32_t>> lists = {{0, 1, 2, 5, 6, -1}, {7, 8, 9, 13}, {2, 21}};
  const std::vector<int32_t> ids = {0, 1, 2, 5, 6, 7, 8, 9, 13, 21};
  for (int D : {2, 3})
    for (int64_t S : {1, 2, 4}) {
      FakeDcpGroup group(D, S);
      std::mutex mu;
      std::vector<std::string> errors;
      group.run([&](DcpComm& c) {
        SelectedRows s;
        s.gather(lists, 22, 3, [&](int64_t g0, int64_t n, float* out) {
          for (int64_t i = 0; i < n; ++i) {
            if (!c.owns(g0 + i)) {
              std::lock_guard<std::mutex> l(mu);
              errors.push_back(fmt::format("rank {} read row {} it does not own", c.rank(), g0 + i));
            }
            for (int j = 0; j < 3; ++j) out[3 * i + j] = static_cast<float>((g0 + i) * 10 + j);
          }
        }, nullptr, &c);
        for (int32_t g : ids)
          for (int j = 0; j < 3; ++j)
            if (s.row(g)[j] != static_cast<float>(g * 10 + j)) {
              std::lock_guard<std::mutex> l(mu);
              errors.push_back(fmt::format("D {} S {} rank {} row {}[{}] = {}", D, S, c.rank(), g,
                                           j, s.row(g)[j]));
            }
      });
      EXPECT_TRUE(errors.empty()) << (errors.empty() ? "" : errors.front());
    }
}

}  // namespace
}  // namespace strata
