// SelectedRows (exec/selected_rows.h): distinct ids, negatives skipped, one read per run of
// consecutive ids, rows found by id.
#include "exec/selected_rows.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

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

}  // namespace
}  // namespace strata
