// Several ranks behind one server (issue 25 item 1): rank 0 runs HTTP and the scheduler; its
// ModelRunner is wrapped so that every call that changes state or runs a forward (add /
// release a sequence, attach a cached prefix, step, truncate, draft) is first broadcast
// (MPI_Bcast from rank 0) and then executed; every other rank runs follow() on its own replica
// runner, receiving and executing the same calls in the same order. Forwards therefore run in
// lockstep, so the collectives inside them (the MoE dispatch and combine of expert
// parallelism) line up, also in steps where a rank owns no routed token. Pure queries
// (lengths, capacity, peeks) are answered by rank 0's runner alone. Sampling happens on rank 0
// only (followers drop their logits). Not supported with several ranks: handoff import (PD) --
// Unimplemented.
// Thread safety: rank 0's runner is called by one thread at a time (the engine's), and MPI
// was initialized with at least MPI_THREAD_SERIALIZED.
#pragma once

#include <memory>

#include "exec/model_runner.h"

namespace strata {

// Watchdog (mpi_world.h, --dist-timeout-s): a mirrored call or a collective inside a step
// that times out (a rank hung or died) makes that call return kUnavailable -- the engine
// answers the requests of the step with errors -- and every later call return the same error
// without touching MPI; the job is aborted (MPI_Abort) 2 s later. A follower whose collective
// times out aborts the job at once. Both sides meet in an MPI_Barrier once every replica is
// loaded, so a slow load is not mistaken for a hung rank.
// Rank 0: wraps `inner`; its destructor tells the followers to stop.
std::unique_ptr<ModelRunner> make_mirrored_runner(std::unique_ptr<ModelRunner> inner);
// Ranks > 0: executes rank 0's calls on `runner` until rank 0's runner goes away.
void follow(ModelRunner& runner);

}  // namespace strata
