// Expert parallelism's collectives, as the MoE layer sees them (issue 25 item 3). Experts are
// partitioned over ranks in contiguous id ranges (expert_owner). Attention and the shared
// expert's inputs are replicated, so every rank holds every token's hidden state; each token
// has one origin rank (dist/expert_dispatch.h, contiguous token ranges), which quantizes it
// and dispatches it (FP8 codes + UE8M0 scales, the format the expert GEMM consumes) to the
// ranks owning the experts it picked with one alltoallv; the expert outputs go back to the
// origin with a second alltoallv, where they are summed in ascending expert id in fp32 exactly
// as one rank sums them; the finished rows are then allgathered so every rank holds every
// token again -- so the result is bit-identical to a single rank. The implementation over MPI
// is mpi/mpi_world.h (linked into the strata binary only); tests use dist/fake_expert_comm.h.
// Thread safety: called from the forward's calling thread only, one at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace strata {

// Contiguous ranges: rank r of `size` owns experts [expert_begin(r), expert_begin(r + 1)),
// expert_begin(r) = floor(r * E / size); expert_owner inverts it.
inline int64_t expert_begin(int r, int64_t E, int size) { return r * E / size; }
inline int expert_owner(int64_t e, int64_t E, int size) {
  return static_cast<int>(((e + 1) * size + E - 1) / E - 1);
}

class ExpertComm {
 public:
  virtual ~ExpertComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // MPI_Alltoallv of rows of `row_bytes` bytes: send holds, for each destination rank d in
  // order, send_rows[d] rows; recv receives, for each source rank s in order, recv_rows[s]
  // rows (what this rank expects, derived from the replicated routing). Counts first: the
  // send counts are exchanged (an alltoall) and compared with recv_rows; a mismatch is a
  // CHECK failure naming both ranks (diverged routing), as is a count beyond MPI's int range.
  virtual void alltoallv_rows(const void* send, const std::vector<int64_t>& send_rows, void* recv,
                              const std::vector<int64_t>& recv_rows, int64_t row_bytes) = 0;
  // In place MPI_Allgatherv of rows of `row_bytes` bytes: buf holds rows_per_rank[r] rows for
  // each rank r in order; this rank's segment is filled, the call fills the others'. Every
  // rank passes the same rows_per_rank; the counts are checked first as above.
  virtual void allgatherv_rows(void* buf, const std::vector<int64_t>& rows_per_rank,
                               int64_t row_bytes) = 0;
  // Seconds spent in the collectives since construction (the MoE collective time).
  virtual double seconds() const = 0;
};

// The process's expert-parallel communicator (null: one rank). Set once at startup (the
// strata binary under mpirun with --enable-expert-parallel); read by model loaders.
void set_process_expert_comm(std::shared_ptr<ExpertComm> c);
std::shared_ptr<ExpertComm> process_expert_comm();

}  // namespace strata
