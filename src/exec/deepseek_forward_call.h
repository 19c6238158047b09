// Internal: what the per-call contexts of both DeepSeek forwards (DeepseekV41Model::Ctx,
// DeepseekV4Model::Call) hold alike, the preamble both forwards run, and the MoE gate GEMM
// both routers start from. Not a public API.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "exec/call_shape.h"
#include "exec/deepseek_v41/deepseek_v41_model.h"
#include "exec/deepseek_v41/v41_ops.h"
#include "model/deepseek_config.h"

namespace strata {

// Seq: V41SequenceState or V4SequenceState (a SequenceCallState).
template <class Seq>
struct DeepseekForwardCall {
  Seq* seq = nullptr;
  int64_t s0 = 0;  // position of the first token of the call
  int64_t S = 0;   // tokens in the call
  V41Routes* routes = nullptr;
  // Canonical form (exec/call_shape.h): every row laid out as a one-token decode step at its
  // own position; false: the reference emulation (each model's own fields say how).
  bool canonical = true;
  // Where row i sits in torch's elementwise tensors (v41::torch_exp_at): token vrows.tok(i)
  // of a vrows.n-token call. Canonical: token 0 of 1 for every row.
  v41::CallRows vrows;

  // The preamble of a forward over `tokens` on `s`: check_call (InvalidArgument /
  // OutOfRange; nothing changes) and begin_call, then the fields above (vrows canonical);
  // routes, when non-null, sized to n_layers MoE lists and n_index_sources index lists of S
  // rows each.
  Status begin(Seq* s, std::span<const int32_t> tokens, int64_t vocab, int64_t max_context,
               CallShape shape, V41Routes* r, int n_layers, size_t n_index_sources) {
    STRATA_RETURN_IF_ERROR(s->check_call(tokens, vocab, max_context));
    STRATA_RETURN_IF_ERROR(s->begin_call(tokens));
    seq = s;
    s0 = s->length();
    S = static_cast<int64_t>(tokens.size());
    routes = r;
    canonical = shape == CallShape::kCanonical;
    vrows = v41::CallRows::canonical();
    if (routes) {
      routes->moe.assign(n_layers, {});
      routes->index.assign(n_index_sources, std::vector<std::vector<int32_t>>(S));
    }
    return ok_status();
  }

  // Pipeline microbatches (dist/pipe_comm.h pp_microbatches): this context as rows [a, b) of
  // the canonical call `call` -- same sequence, positions from call.s0 + a -- recording routes
  // into `part` (sized like begin() does) when the call records them.
  void microbatch_of(const DeepseekForwardCall& call, int64_t a, int64_t b, V41Routes* part,
                     int n_layers, size_t n_index_sources) {
    seq = call.seq;
    s0 = call.s0 + a;
    S = b - a;
    canonical = true;
    vrows = call.vrows;
    routes = nullptr;
    if (call.routes) {
      part->moe.assign(n_layers, {});
      part->index.assign(n_index_sources, std::vector<std::vector<int32_t>>(S));
      routes = part;
    }
  }
};

// The MoE router's logits of a call's S rows, [S, E] (E = layer L's routed experts): x [S, dim]
// times the gate weight [E, dim] in fp32 (the reference's F.linear on the promoted weight,
// v41::linear_f32's order). MoeWeights: V41MoeWeights or V4MoeWeights.
template <class MoeWeights>
std::vector<float> moe_gate_logits(const DeepseekConfig& cf, int L, const MoeWeights& mw,
                                   const float* x, int64_t S, ThreadPool* pool) {
  const int64_t E = cf.layers[L].n_routed_experts;
  std::vector<float> logit(S * E);
  v41::linear_f32(x, S, mw.gate_weight, E, cf.dim, logit.data(), mw.gate_packed.get(), pool);
  return logit;
}

}  // namespace strata
