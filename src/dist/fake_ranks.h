// In-process ranks for the fake communicators' unit tests (fake_dcp_comm.h,
// fake_expert_comm.h, fake_pipe_comm.h): run_rank_threads(size, body) runs body(r) on `size`
// threads, one per rank r, and returns when all are done.
#pragma once

#include <thread>
#include <vector>

namespace strata {

template <class Body>
void run_rank_threads(int size, const Body& body) {
  std::vector<std::thread> th;
  for (int r = 0; r < size; ++r) th.emplace_back([r, &body] { body(r); });
  for (auto& t : th) t.join();
}

}  // namespace strata
