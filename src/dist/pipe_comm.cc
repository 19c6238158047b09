// The process-wide pipeline communicator; see pipe_comm.h.
#include "dist/pipe_comm.h"

#include "base/process_slot.h"

namespace strata {
namespace {
ProcessSlot<PipeComm> g_comm;
}  // namespace

void set_process_pipe_comm(std::shared_ptr<PipeComm> c) { g_comm.set(std::move(c)); }
std::shared_ptr<PipeComm> process_pipe_comm() { return g_comm.get(); }

}  // namespace strata
