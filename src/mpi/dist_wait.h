// Completing a non-blocking MPI operation under the multi-rank watchdog (mpi_world.h
// set_dist_timeout): MPI_Wait when the timeout is 0, else MPI_Test polling that throws
// DistFailure naming `what` once the timeout has passed. Thread safety: the calling thread
// must be the one thread that may call MPI (MPI_THREAD_SERIALIZED).
#pragma once

#include <mpi.h>

namespace strata {

void dist_wait(MPI_Request* req, const char* what);

}  // namespace strata
