// Expert parallelism's collective, as the MoE layer sees it (issue 25 item 3). Experts are
// partitioned over ranks in contiguous id ranges (expert_owner); every rank holds every token
// (attention and the shared expert replicated), computes the routed experts it owns, and the
// combine gathers every routed expert's output rows to every rank, which then sums them in
// ascending expert id in fp32 exactly as one rank does -- so the result is bit-identical to a
// single rank. The implementation over MPI is dist/mpi_world.h (linked into the strata binary
// only); tests may provide their own.
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
  // In place: buf holds, for each rank r in order, rows_per_rank[r] rows of row_floats floats
  // (its experts' outputs, ascending expert id); this rank's segment is filled, the call fills
  // every other rank's. Every rank passes the same rows_per_rank (derived from the replicated
  // routing); the implementation first exchanges the counts and CHECK-fails naming the ranks
  // if they disagree (diverged routing) or a count exceeds MPI's int range.
  virtual void allgather_rows(float* buf, const std::vector<int64_t>& rows_per_rank,
                              int64_t row_floats) = 0;
  // Seconds spent in allgather_rows since construction (the MoE collective time).
  virtual double seconds() const = 0;
};

// The process's expert-parallel communicator (null: one rank). Set once at startup (the
// strata binary under mpirun with --enable-expert-parallel); read by model loaders.
void set_process_expert_comm(std::shared_ptr<ExpertComm> c);
std::shared_ptr<ExpertComm> process_expert_comm();

}  // namespace strata
