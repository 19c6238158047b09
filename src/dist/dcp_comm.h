// Decode context parallelism as the forward sees it (issue 25 item 2). Every rank of the DCP
// group holds every token's replicated state (window ring, compressor partial state) and runs
// the same forward; the compressed KV rows and the index keys are owner-sharded by record
// with dcp::owner (dcp.h, interleave S, one map for both caches). A rank writes and reads
// only the records it owns:
//   * indexer: each rank scores its own keys; the score rows are completed by an all-gather
//     of the owned columns (exchange_owned_columns), so every rank runs the same top-k over
//     the same scores -- the selected set equals one rank's exactly, torch's tie order
//     included (a candidate exchange of local top-k's would need one total order instead,
//     pd-dcp-ep.md §3.3; see docs/parallel.md for why the scores are gathered);
//   * attention: the owners decode the selected rows they hold and one all-gather hands every
//     rank the whole selection (SelectedRows::gather with a DcpComm), so the softmax runs over
//     the same rows in the same order as on one rank: logits bit-identical to one rank.
// The implementation over MPI is mpi/mpi_world.h (linked into the strata binary only).
// Thread safety: called from the forward's calling thread only, one at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dist/dcp.h"

namespace strata {

class DcpComm {
 public:
  virtual ~DcpComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;       // Wd, the DCP group's size
  virtual int64_t interleave() const = 0;  // S >= 1 records per ownership run
  bool owns(int64_t g) const { return dcp::owner(g, interleave(), size()) == rank(); }
  // In place: buf holds, for each rank r in order, rows_per_rank[r] rows of row_floats floats;
  // this rank's segment is filled, the call fills every other rank's. Every rank passes the
  // same rows_per_rank; a disagreement or a count beyond MPI's int range is a CHECK failure
  // naming the ranks (the ranks' replicated state diverged).
  virtual void allgather_rows(float* buf, const std::vector<int64_t>& rows_per_rank,
                              int64_t row_floats) = 0;
  // Seconds spent in allgather_rows since construction (the DCP collective time).
  virtual double seconds() const = 0;
};

// Completes `rows` score rows [rows][stride]: this rank has written, in every row, the
// columns g < ncols that it owns; after the call every column g < ncols holds its owner's
// value (one allgather_rows of rows * owned_count floats per rank).
void exchange_owned_columns(DcpComm& comm, float* scores, int64_t rows, int64_t stride,
                            int64_t ncols);

// The process's DCP communicator (null: no DCP). Set once at startup (the strata binary
// under mpirun with --decode-context-parallel-size); read by model loaders.
void set_process_dcp_comm(std::shared_ptr<DcpComm> c);
std::shared_ptr<DcpComm> process_dcp_comm();

}  // namespace strata
