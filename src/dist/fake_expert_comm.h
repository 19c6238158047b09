// An in-process expert-parallel group for unit tests: `size` FakeExpertGroup::Comm objects
// share one board and each rank runs on its own thread; alltoallv_rows / allgatherv_rows are
// real collectives between the threads (each blocks until every rank has called it). Same
// contract as the MPI implementation: counts checked first, a mismatch is a CHECK failure.
#pragma once

#include <barrier>
#include <cstring>
#include <functional>
#include <vector>

#include "base/check.h"
#include "dist/fake_ranks.h"
#include "dist/expert_comm.h"

namespace strata {

class FakeExpertGroup {
 public:
  explicit FakeExpertGroup(int size)
      : size_(size), sync_(size), counts_(size), bufs_(size), calls_(size, 0) {}

  class Comm final : public ExpertComm {
   public:
    Comm(FakeExpertGroup* g, int r) : g_(g), r_(r) {}
    int rank() const override { return r_; }
    int size() const override { return g_->size_; }
    double seconds() const override { return 0; }
    void alltoallv_rows(const void* send, const std::vector<int64_t>& send_rows, void* recv,
                        const std::vector<int64_t>& recv_rows, int64_t row_bytes) override {
      ++g_->calls_[r_];
      g_->counts_[r_] = send_rows;
      g_->bufs_[r_] = const_cast<void*>(send);
      g_->sync_.arrive_and_wait();
      int64_t at = 0;
      for (int s = 0; s < g_->size_; ++s) {
        STRATA_CHECK_MSG(g_->counts_[s][r_] == recv_rows[s],
                         "rank {} sends {} rows, rank {} expected {}", s, g_->counts_[s][r_], r_,
                         recv_rows[s]);
        int64_t off = 0;  // rank s's rows for ranks before this one
        for (int d = 0; d < r_; ++d) off += g_->counts_[s][d];
        const int64_t n = recv_rows[s] * row_bytes;
        if (n > 0)
          std::memcpy(static_cast<char*>(recv) + at,
                      static_cast<const char*>(g_->bufs_[s]) + off * row_bytes, n);
        at += n;
      }
      g_->sync_.arrive_and_wait();  // nobody's buffer is read after this
    }
    void allgatherv_rows(void* buf, const std::vector<int64_t>& rows_per_rank,
                         int64_t row_bytes) override {
      ++g_->calls_[r_];
      g_->counts_[r_] = rows_per_rank;
      g_->bufs_[r_] = buf;
      g_->sync_.arrive_and_wait();
      int64_t at = 0;
      for (int r = 0; r < g_->size_; ++r) {
        STRATA_CHECK_MSG(g_->counts_[r] == rows_per_rank, "rank {} disagrees on the counts", r);
        const int64_t n = rows_per_rank[r] * row_bytes;
        if (r != r_ && n > 0)
          std::memcpy(static_cast<char*>(buf) + at, static_cast<const char*>(g_->bufs_[r]) + at,
                      n);
        at += n;
      }
      g_->sync_.arrive_and_wait();
    }

   private:
    FakeExpertGroup* g_;
    int r_;
  };

  // Runs body(comm) on `size` threads, one per rank; returns when all are done.
  void run(const std::function<void(ExpertComm&)>& body) {
    run_rank_threads(size_, [this, &body](int r) {
      Comm c(this, r);
      body(c);
    });
  }
  // Collectives rank r has issued so far.
  int calls(int r) const { return calls_[r]; }

 private:
  int size_;
  std::barrier<> sync_;
  std::vector<std::vector<int64_t>> counts_;
  std::vector<void*> bufs_;
  std::vector<int> calls_;
};

}  // namespace strata
