// The expert part of one MoE layer under expert parallelism (issue 25 item 3), shared by the
// DeepSeek V4.1 and V4 forwards. Given the replicated routing of S tokens (sel / wts, as the
// one-rank layer computes them) and the replicated hidden rows x [S, D]:
//   1. each token's origin rank (dist/expert_dispatch.h) quantizes its own rows to FP8 E4M3
//      with UE8M0 scales per `act_block` -- the reference's act_quant, what the routed
//      experts' first GEMM consumes -- and dispatches each row once to every rank owning an
//      expert it picked (alltoallv of D code bytes + D/act_block scale bytes per row);
//   2. each rank runs its experts on the received rows (`routed`, ascending expert id);
//   3. the expert output rows (fp32) go back to the origins (alltoallv), which add each
//      token's rows in ascending expert id in fp32 (the one-rank order), add the shared
//      expert's output (`shared`, run by the origin on its own rows), and round to bf16;
//   4. the finished rows (bf16 bits) are allgathered, so every rank leaves with out [S, D].
// Bit-identical to the one-rank layer whenever the experts' rows do not depend on which
// other rows share their GEMM (the kernels' batch invariance) and `routed` on pre-quantized
// rows equals the expert on the float rows (the reference's linear = act_quant + GEMM).
// Ranks with no tokens, no routed rows, or every token routed elsewhere take part in every
// collective (three per call, in the same order on every rank).
// Errors: CHECK failures on diverged counts (expert_comm.h) or a scale that is not a UE8M0
// power of two. Thread safety: the forward's calling thread; `routed` / `shared` may use a pool.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "base/status.h"
#include "dist/expert_comm.h"
#include "kernels/block_gemm.h"

namespace strata {

struct EpMoeExperts {
  int64_t dim = 0;       // D
  int act_block = 128;   // the routed experts' activation block; D % act_block == 0
  // Routed expert e on a.m pre-quantized rows (a.k == D, a.block == act_block), route
  // weights route_w[a.m]: out [a.m, D] fp32.
  std::function<void(int64_t e, const kernels::QuantActs& a, const float* route_w, float* out)>
      routed;
  // The shared expert on n float rows x [n, D]: out [n, D] fp32.
  std::function<void(const float* x, int64_t n, float* out)> shared;
};

// A layer with n_experts routed experts (0: a dense layer, nothing to check) can be split
// over `ranks` EP ranks: at least one expert per rank, else FailedPrecondition naming it.
Status check_expert_parallel_layer(int layer, int64_t n_experts, int ranks);

// sel / wts: [S] each token's expert ids and route weights; x [S, D]; out [S, D] (bf16 values
// in f32). E: routed experts in the layer (>= comm.size()).
void moe_expert_parallel(ExpertComm& comm, const std::vector<std::vector<int32_t>>& sel,
                         const std::vector<std::vector<float>>& wts, int64_t E, const float* x,
                         int64_t S, const EpMoeExperts& ex, float* out);

}  // namespace strata
