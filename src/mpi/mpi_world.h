// The MPI world of a `strata` process started by mpirun (issue 25). init_if_launched()
// initializes MPI (MPI_THREAD_SERIALIZED: one thread at a time calls MPI -- the one running
// forwards, which in a server is the engine thread) when the
// launcher's environment is present (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK), silences
// stdout on ranks other than 0 (every rank runs the same command; rank 0 reports), and
// registers MPI_Finalize at exit. Without a launcher nothing happens: size() == 1.
// Errors: a failed MPI_Init_thread is a CHECK failure naming the code.
// Thread safety: call init from main() before any other thread starts.
#pragma once

#include <memory>
#include <stdexcept>

#include "dist/dcp_comm.h"
#include "dist/expert_comm.h"
#include "dist/pipe_comm.h"

namespace strata {

bool mpi_init_if_launched(int* argc, char*** argv);
int mpi_rank();
int mpi_size();
// The expert-parallel communicator over MPI_COMM_WORLD (dist/expert_comm.h).
std::shared_ptr<ExpertComm> make_mpi_expert_comm();
// The DCP communicator over MPI_COMM_WORLD (every rank in one DCP group), interleave S >= 1
// records (dist/dcp_comm.h).
std::shared_ptr<DcpComm> make_mpi_dcp_comm(int64_t interleave);
// The pipeline communicator over MPI_COMM_WORLD: rank r is stage r (dist/pipe_comm.h).
std::shared_ptr<PipeComm> make_mpi_pipe_comm();

// The watchdog of multi-rank runs (issue 25 item 5, --dist-timeout-s): every collective strata
// issues inside a step (the MoE dispatch and combine, the DCP exchanges, the mirrored calls'
// payloads) is non-blocking and waits at most this many seconds (0: forever); a rank that
// hung or died then makes the others throw DistFailure instead of waiting forever. After a
// DistFailure the MPI world is unusable: the only MPI call left is MPI_Abort (mpi_abort_after).
void set_dist_timeout(double seconds);
double dist_timeout();
struct DistFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Ends the whole job (MPI_Abort on every rank) `seconds` from now, from a detached thread, so
// that answers already handed to clients (errors for the requests in flight) go out first.
void mpi_abort_after(double seconds, int code);

}  // namespace strata
