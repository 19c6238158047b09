// The multi-rank layout flags (vLLM's names) shared by serve, generate, bench model and
// validate golden, and their checks at startup. Under mpirun every rank runs the command
// with the same arguments; a layout says how the ranks share the work (docs/parallel.md):
//   --enable-expert-parallel            routed experts partitioned over the ranks
//   --decode-context-parallel-size D    compressed KV / index keys owner-sharded over D ranks
//   --dcp-kv-cache-interleave-size S    records per ownership run (default 1, as vLLM)
//   --pipeline-parallel-size P          decoder layers split over P stages (DeepSeek V4 / V4.1)
// Every layout spans every rank (DCP D and PP P must equal the number of ranks; DCP with EP
// too: each rank holds 1/N of the experts and 1/N of the compressed records). PP is not
// combined with EP or DCP yet (refused).
#pragma once

#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "dist/dcp_comm.h"
#include "dist/expert_comm.h"
#include "mpi/mpi_world.h"

namespace strata::tools {

struct RankLayout {
  bool expert_parallel = false;
  int dcp = 1;
  int64_t dcp_interleave = 1;
  int pp = 1;
  double dist_timeout_s = 120;  // --dist-timeout-s (0: wait forever)
  bool any() const { return expert_parallel || dcp > 1 || pp > 1; }
};

inline void add_rank_flags(CLI::App* cmd, RankLayout* l) {
  cmd->add_flag("--enable-expert-parallel", l->expert_parallel,
                "Under mpirun -np N: partition the routed experts over the ranks (contiguous "
                "id ranges; attention replicated); results equal one rank's bit for bit");
  cmd->add_option("--decode-context-parallel-size", l->dcp,
                  "Under mpirun -np N with N = this: shard the compressed KV rows and index "
                  "keys of every request over the ranks (DeepSeek V4 / V4.1); results equal "
                  "one rank's bit for bit")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--dcp-kv-cache-interleave-size", l->dcp_interleave,
                  "Consecutive compressed records each DCP rank owns in turn")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--dist-timeout-s", l->dist_timeout_s,
                  "Under mpirun: a collective inside a step that waits longer than this (a rank "
                  "hung or died) fails the step -- the server answers the requests in flight "
                  "with errors and aborts the job; 0 = wait forever")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  cmd->add_option("--pipeline-parallel-size", l->pp,
                  "Under mpirun -np N with N = this: split the decoder layers over the ranks "
                  "in contiguous ranges, the stage boundaries sent rank to rank (DeepSeek V4 / "
                  "V4.1); results equal one rank's bit for bit")
      ->check(CLI::Range(1, 1 << 16));
}

// 0 = go on (the process's communicators are set); otherwise the exit status, the reason
// printed: a layout the engine does not support is refused at startup.
inline int setup_ranks(const char* command, const RankLayout& l) {
  const int n = mpi_size();
  auto refuse = [&](const std::string& why) {
    if (mpi_rank() == 0) fmt::print(stderr, "{}: {}\n", command, why);  // once, not per rank
    return 2;
  };
  // A layout of `size` ranks spans every rank: "" when it does (or is off), else why not.
  auto spans_every_rank = [&](const char* flag, int size, const char* group) -> std::string {
    if (size <= 1) return "";
    if (n == 1)
      return fmt::format("{} {} needs {} ranks: start with mpirun -np {}", flag, size, size, size);
    if (size != n)
      return fmt::format("{} {} with {} ranks: {} every rank (pass {})", flag, size, n, group, n);
    return "";
  };
  if (l.pp > 1 && (l.expert_parallel || l.dcp > 1))  // first: whatever -np was
    return refuse("--pipeline-parallel-size is not combined with --enable-expert-parallel or "
                  "--decode-context-parallel-size yet: run one layout");
  if (std::string why = spans_every_rank("--pipeline-parallel-size", l.pp, "the stages span");
      !why.empty())
    return refuse(why);
  if (std::string why =
          spans_every_rank("--decode-context-parallel-size", l.dcp, "the DCP group spans");
      !why.empty())
    return refuse(why);
  if (n > 1 && !l.expert_parallel && l.dcp == 1 && l.pp == 1)
    return refuse(fmt::format("{} ranks but no parallel layout: pass --enable-expert-parallel "
                              "(models with routed experts) and/or "
                              "--decode-context-parallel-size {}, or --pipeline-parallel-size {}",
                              n, n, n));
  if (l.dcp_interleave != 1 && l.dcp == 1)
    return refuse("--dcp-kv-cache-interleave-size needs --decode-context-parallel-size > 1");
  set_dist_timeout(l.dist_timeout_s);
  if (l.expert_parallel && n > 1) set_process_expert_comm(make_mpi_expert_comm());
  if (l.dcp > 1) set_process_dcp_comm(make_mpi_dcp_comm(l.dcp_interleave));
  if (l.pp > 1) set_process_pipe_comm(make_mpi_pipe_comm());
  return 0;
}

// " (rank N)" under mpirun, "" on one rank: every rank reports its own load errors.
inline std::string rank_tag() {
  return mpi_size() > 1 ? fmt::format(" (rank {})", mpi_rank()) : std::string();
}

// Rank 0's end-of-run line about the layouts' collective time (nothing on one rank).
inline std::string collective_time_line() {
  std::string s;
  if (std::shared_ptr<ExpertComm> ep = process_expert_comm())
    s += fmt::format("expert parallel: {} ranks, MoE dispatch/combine {:.3f} s on rank 0\n",
                     ep->size(), ep->seconds());
  if (std::shared_ptr<DcpComm> d = process_dcp_comm())
    s += fmt::format("decode context parallel: {} ranks, interleave {}, exchange {:.3f} s on "
                     "rank 0\n", d->size(), d->interleave(), d->seconds());
  if (std::shared_ptr<PipeComm> p = process_pipe_comm())
    s += fmt::format("pipeline parallel: {} stages, stage boundaries {:.3f} s on rank 0\n",
                     p->size(), p->seconds());
  return s;
}

}  // namespace strata::tools
