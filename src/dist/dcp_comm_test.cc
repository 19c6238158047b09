// exchange_owned_columns over an in-process DCP group (fake_dcp_comm.h): every rank ends with
// the full score rows although each wrote only its own columns.
#include "dist/dcp_comm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "dist/fake_dcp_comm.h"

namespace strata {
namespace {

float value(int64_t i, int64_t g) { return static_cast<float>(i * 1000 + g) * 0.5f; }

TEST(DcpComm, OwnedColumnsExchangeFillsEveryColumn) {
  for (int D : {2, 3, 4})
    for (int64_t S : {1, 2, 5})
      for (int64_t ncols : {0, 1, 3, 7, 20}) {
        const int64_t rows = 3, stride = ncols + 2;
        FakeDcpGroup group(D, S);
        std::mutex mu;
        std::vector<std::vector<float>> got(D);
        group.run([&](DcpComm& c) {
          std::vector<float> s(rows * stride, NAN);  // NaN: not written by anyone
          for (int64_t i = 0; i < rows; ++i)
            for (int64_t g = 0; g < ncols; ++g)
              if (c.owns(g)) s[i * stride + g] = value(i, g);
          exchange_owned_columns(c, s.data(), rows, stride, ncols);
          std::lock_guard<std::mutex> l(mu);
          got[c.rank()] = s;
        });
        for (int r = 0; r < D; ++r)
          for (int64_t i = 0; i < rows; ++i) {
            for (int64_t g = 0; g < ncols; ++g)
              ASSERT_EQ(got[r][i * stride + g], value(i, g))
                  << "D " << D << " S " << S << " rank " << r << " row " << i << " col " << g;
            for (int64_t g = ncols; g < stride; ++g)  // the padding is left alone
              ASSERT_TRUE(std::isnan(got[r][i * stride + g]));
          }
      }
}

// Counts that disagree between ranks (diverged replicated state) are an error, not garbage.
TEST(DcpComm, DisagreeingCountsAreAnError) {
  EXPECT_DEATH(
      {
        FakeDcpGroup group(2, 1);
        group.run([&](DcpComm& c) {
          std::vector<float> buf(8, 0.f);
          c.allgather_rows(buf.data(), {c.rank() == 0 ? 1 : 2, 1}, 1);
        });
      },
      "disagrees on the counts");
}

}  // namespace
}  // namespace strata
