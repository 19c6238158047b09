// An in-process DCP group for unit tests: D FakeDcpComm objects share one board, and each
// rank runs on its own thread (allgather_rows is a real collective between the threads: it
// blocks until every rank has called it). Same contract as the MPI implementation, counts
// checked first.
#pragma once

#include <barrier>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "base/check.h"
#include "dist/fake_ranks.h"
#include "dist/dcp_comm.h"

namespace strata {

class FakeDcpGroup {
 public:
  FakeDcpGroup(int size, int64_t interleave)
      : size_(size), interleave_(interleave), sync_(size), said_(size), bufs_(size) {}

  class Comm final : public DcpComm {
   public:
    Comm(FakeDcpGroup* g, int r) : g_(g), r_(r) {}
    int rank() const override { return r_; }
    int size() const override { return g_->size_; }
    int64_t interleave() const override { return g_->interleave_; }
    double seconds() const override { return 0; }
    void allgather_rows(float* buf, const std::vector<int64_t>& rows_per_rank,
                        int64_t row_floats) override {
      g_->said_[r_] = rows_per_rank;
      g_->bufs_[r_] = buf;
      g_->sync_.arrive_and_wait();
      int64_t at = 0;
      for (int r = 0; r < g_->size_; ++r) {
        STRATA_CHECK_MSG(g_->said_[r] == rows_per_rank, "rank {} disagrees on the counts", r);
        const int64_t n = rows_per_rank[r] * row_floats;
        if (r != r_ && n > 0) std::memcpy(buf + at, g_->bufs_[r] + at, n * sizeof(float));
        at += n;
      }
      g_->sync_.arrive_and_wait();  // nobody's buffer is read after this
    }

   private:
    FakeDcpGroup* g_;
    int r_;
  };

  // Runs body(comm) on `size` threads, one per rank; returns when all are done.
  void run(const std::function<void(DcpComm&)>& body) {
    run_rank_threads(size_, [this, &body](int r) {
      Comm c(this, r);
      body(c);
    });
  }

 private:
  int size_;
  int64_t interleave_;
  std::barrier<> sync_;
  std::vector<std::vector<int64_t>> said_;
  std::vector<float*> bufs_;
};

}  // namespace strata
