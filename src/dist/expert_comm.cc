// The process-wide expert-parallel communicator; see expert_comm.h.
#include "dist/expert_comm.h"

#include "base/process_slot.h"

namespace strata {
namespace {
ProcessSlot<ExpertComm> g_comm;
}  // namespace

void set_process_expert_comm(std::shared_ptr<ExpertComm> c) { g_comm.set(std::move(c)); }
std::shared_ptr<ExpertComm> process_expert_comm() { return g_comm.get(); }

}  // namespace strata
