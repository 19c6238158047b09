// Pipeline parallelism as the forward sees it (issue 25 item 4). The decoder layers are split
// over the ranks in contiguous ranges (stage r of P owns [pp_layer_begin(r), pp_layer_begin(r +
// 1))). Every rank runs the same calls (the mirrored runner or the same command on every
// rank), so each forward runs on every rank in lockstep: stage 0 embeds the tokens and runs
// its layers, each later stage receives the stage boundary from the one before it (the
// complete state the next layer reads: docs/parallel.md "Pipeline parallelism"), and the last
// stage's boundary goes to every rank, which then runs the epilogue (final norm, head, the
// drafter's rows) on the same bits. A layer's state (window ring, compressed rows, index
// keys, compressor tail) lives and is written only on its stage.
// The implementation over MPI is mpi/mpi_world.h (linked into the strata binary only).
// Thread safety: called from the forward's calling thread only, one at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace strata {

// First layer of stage r of `stages` over n_layers decoder layers: floor(r * n / P).
inline int pp_layer_begin(int r, int n_layers, int stages) {
  return static_cast<int>(static_cast<int64_t>(r) * n_layers / stages);
}

class PipeComm {
 public:
  virtual ~PipeComm() = default;
  virtual int rank() const = 0;  // this rank's stage
  virtual int size() const = 0;  // P, the number of stages
  // Sends this stage's boundary to stage rank() + 1 (not called on the last stage).
  virtual void send_next(const std::vector<uint8_t>& bytes) = 0;
  // Receives the boundary stage rank() - 1 sent (not called on stage 0).
  virtual std::vector<uint8_t> recv_prev() = 0;
  // The last stage's `*bytes` to every stage (in place; every stage calls it).
  virtual void bcast_from_last(std::vector<uint8_t>* bytes) = 0;
  // Seconds spent in the three calls since construction (the stage-boundary transfer time,
  // waiting for the previous stage included).
  virtual double seconds() const = 0;
};

// Microbatches a call of `rows` rows is split into on a pipeline of `stages` (> 1): 2 per stage
// (so every stage has work while the pipeline fills and drains), at least 4 rows each; 1 =
// the call runs whole (a decode step). Only the canonical numeric form splits a call: there a
// row's result does not depend on the call it is computed in (exec/call_shape.h).
inline int64_t pp_microbatches(int64_t rows, int stages) {
  const int64_t by_rows = (rows + 3) / 4;
  return by_rows < 2 * stages ? by_rows : 2 * stages;
}

// Which layers this rank runs: [begin, end) of n_layers; all of them without a PipeComm.
struct PipeStage {
  int begin = 0, end = 0;
  bool first = true, last = true;
  bool split() const { return !(first && last); }
};
inline PipeStage pipe_stage(const PipeComm* c, int n_layers) {
  if (c == nullptr || c->size() <= 1) return {0, n_layers, true, true};
  const int r = c->rank(), P = c->size();
  return {pp_layer_begin(r, n_layers, P), pp_layer_begin(r + 1, n_layers, P), r == 0, r == P - 1};
}

// The process's pipeline communicator (null: one stage). Set once at startup (the strata
// binary under mpirun with --pipeline-parallel-size); read by model loaders.
void set_process_pipe_comm(std::shared_ptr<PipeComm> c);
std::shared_ptr<PipeComm> process_pipe_comm();

}  // namespace strata
