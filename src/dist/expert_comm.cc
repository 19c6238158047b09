// The process-wide expert-parallel communicator; see expert_comm.h.
#include "dist/expert_comm.h"

#include <mutex>

namespace strata {
namespace {
std::mutex g_mu;
std::shared_ptr<ExpertComm> g_comm;
}  // namespace

void set_process_expert_comm(std::shared_ptr<ExpertComm> c) {
  std::lock_guard<std::mutex> l(g_mu);
  g_comm = std::move(c);
}

std::shared_ptr<ExpertComm> process_expert_comm() {
  std::lock_guard<std::mutex> l(g_mu);
  return g_comm;
}

}  // namespace strata
