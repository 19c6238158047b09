// `--enable-expert-parallel` for commands that run the same calls on every rank (generate,
// bench model, validate golden): under mpirun every rank runs the command with the same
// arguments, so the forwards (and the MoE combine inside them) line up without a leader.
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "dist/expert_comm.h"
#include "mpi/mpi_world.h"

namespace strata::tools {

inline void add_expert_parallel_flag(CLI::App* cmd, bool* on) {
  cmd->add_flag("--enable-expert-parallel", *on,
                "Under mpirun -np N: partition the routed experts over the ranks (contiguous "
                "id ranges; attention replicated); results equal one rank's bit for bit");
}

// 0 = go on; otherwise the exit status (message printed): several ranks need a layout.
inline int setup_ranks(const char* command, bool expert_parallel) {
  if (mpi_size() > 1 && !expert_parallel) {
    fmt::print(stderr, "{}: {} ranks but no parallel layout: pass --enable-expert-parallel "
               "(the layout built so far)\n", command, mpi_size());
    return 2;
  }
  if (expert_parallel && mpi_size() > 1) set_process_expert_comm(make_mpi_expert_comm());
  return 0;
}

}  // namespace strata::tools
