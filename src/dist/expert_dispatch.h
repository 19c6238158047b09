// Who sends what to whom in one expert-parallel MoE call (issue 25 item 3; design reference
// ../shared/docs/pd-dcp-ep.md, EP section). Every rank holds every token and the same routing
// (attention and the gate are replicated); token t's origin is the rank whose contiguous range
// [tok_begin[r], tok_begin[r + 1]) holds it, tok_begin[r] = floor(r * S / ranks) -- so with
// fewer tokens than ranks some ranks originate none. The origin dispatches each of its tokens
// once to every rank owning an expert the token picked (expert_owner, dist/expert_comm.h),
// that rank computes its experts, and each expert output row goes back to the token's origin.
// Every list below is a pure function of (routing, E, ranks, rank), so both ends of every
// exchange derive the same counts and order without asking.
// Thread safety: a plain value.
#pragma once

#include <cstdint>
#include <vector>

namespace strata {

struct ExpertDispatchPlan {
  int ranks = 1, me = 0;
  int64_t S = 0, E = 0;
  std::vector<int64_t> tok_begin;  // [ranks + 1]
  // Dispatch: send_toks[d] = this rank's tokens that picked an expert of rank d, ascending,
  // each once; recv_toks[s] = rank s's tokens that picked an expert of this rank, ascending.
  // Received rows laid out in rank order are therefore in ascending token id.
  std::vector<std::vector<int64_t>> send_toks, recv_toks;
  // This rank's routed expert calls: the experts it owns that some token picked, ascending
  // id; a call's rows are (token, route weight) for t ascending, then the token's slots j in
  // order (the one-rank layout).
  struct Call {
    int64_t e = 0;
    std::vector<int64_t> toks;
    std::vector<float> rw;
  };
  std::vector<Call> calls;
  // Combine: back_rows[s] = rows this rank returns to origin s (for each call in order, its
  // rows whose token rank s originates, in the call's order); ret_toks[r] = the token of each
  // row rank r returns to this rank, in the order r sends them (r's experts ascending, then
  // the call order) -- so summing them in rank order adds each token's expert rows in
  // ascending expert id, the one-rank order.
  std::vector<int64_t> back_rows;
  std::vector<std::vector<int64_t>> ret_toks;

  int64_t own_begin() const { return tok_begin[me]; }
  int64_t own_end() const { return tok_begin[me + 1]; }
};

// sel[t] = the experts token t picked (ids in [0, E)), wts[t] their route weights (same
// length). Shapes: sel.size() == wts.size() == S; ranks >= 1; 0 <= me < ranks; E >= ranks.
ExpertDispatchPlan plan_expert_dispatch(const std::vector<std::vector<int32_t>>& sel,
                                        const std::vector<std::vector<float>>& wts, int64_t E,
                                        int ranks, int me);

}  // namespace strata
