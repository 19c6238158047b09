// Completing a non-blocking MPI operation under the multi-rank watchdog (mpi_world.h
// set_dist_timeout): MPI_Wait when the timeout is 0, else MPI_Test polling that throws
// DistFailure naming `what` once the timeout has passed. Thread safety: the calling thread
// must be the one thread that may call MPI (MPI_THREAD_SERIALIZED).
#pragma once

#include <mpi.h>

namespace strata {

void dist_wait(MPI_Request* req, const char* what);
// Completes `req` without a deadline, polling with short sleeps once it has waited a while,
// so a rank idling between calls (a follower waiting for rank 0's next request) does not
// keep a CPU busy the way MPI_Wait's busy polling does. Adds at most ~0.2 ms of latency to
// the first call after an idle period.
void idle_wait(MPI_Request* req);

}  // namespace strata
