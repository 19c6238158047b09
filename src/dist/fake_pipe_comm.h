// An in-process pipeline group for unit tests: P FakePipeGroup::Comm objects share mailboxes,
// and each stage runs on its own thread (run()). send_next / recv_prev are a real hand-off
// between the threads (recv blocks until the previous stage has sent), bcast_from_last blocks
// every other stage until the last one has posted. Same contract as the MPI implementation.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "dist/fake_ranks.h"
#include "dist/pipe_comm.h"

namespace strata {

class FakePipeGroup {
 public:
  explicit FakePipeGroup(int size) : size_(size), p2p_(size), bcast_(size) {}

  class Comm final : public PipeComm {
   public:
    Comm(FakePipeGroup* g, int r) : g_(g), r_(r) {}
    int rank() const override { return r_; }
    int size() const override { return g_->size_; }
    double seconds() const override { return 0; }
    void send_next(const std::vector<uint8_t>& bytes) override { g_->post(&g_->p2p_[r_ + 1], bytes); }
    std::vector<uint8_t> recv_prev() override { return g_->take(&g_->p2p_[r_]); }
    void bcast_from_last(std::vector<uint8_t>* bytes) override {
      if (r_ == g_->size_ - 1) {
        for (int r = 0; r + 1 < g_->size_; ++r) g_->post(&g_->bcast_[r], *bytes);
      } else {
        *bytes = g_->take(&g_->bcast_[r_]);
      }
    }

   private:
    FakePipeGroup* g_;
    int r_;
  };

  // Runs body(stage) on `size` threads, one per stage; returns when all are done.
  void run(const std::function<void(int stage, std::shared_ptr<PipeComm> comm)>& body) {
    run_rank_threads(size_, [this, &body](int r) { body(r, std::make_shared<Comm>(this, r)); });
  }

 private:
  using Box = std::deque<std::vector<uint8_t>>;
  void post(Box* b, const std::vector<uint8_t>& bytes) {
    {
      std::lock_guard<std::mutex> l(mu_);
      b->push_back(bytes);
    }
    cv_.notify_all();
  }
  std::vector<uint8_t> take(Box* b) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [b] { return !b->empty(); });
    std::vector<uint8_t> v = std::move(b->front());
    b->pop_front();
    return v;
  }

  int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Box> p2p_, bcast_;  // by receiving stage
};

}  // namespace strata
