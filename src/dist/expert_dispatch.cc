// The expert-parallel dispatch plan; see expert_dispatch.h.
#include "dist/expert_dispatch.h"

#include "base/check.h"
#include "dist/expert_comm.h"

namespace strata {

ExpertDispatchPlan plan_expert_dispatch(const std::vector<std::vector<int32_t>>& sel,
                                        const std::vector<std::vector<float>>& wts, int64_t E,
                                        int ranks, int me) {
  STRATA_CHECK(ranks >= 1 && me >= 0 && me < ranks && E >= ranks && sel.size() == wts.size());
  ExpertDispatchPlan p;
  p.ranks = ranks;
  p.me = me;
  p.S = static_cast<int64_t>(sel.size());
  p.E = E;
  p.tok_begin.resize(ranks + 1);
  for (int r = 0; r <= ranks; ++r) p.tok_begin[r] = r * p.S / ranks;
  auto origin = [&](int64_t t) {
    int r = 0;
    while (t >= p.tok_begin[r + 1]) ++r;
    return r;
  };
  p.send_toks.assign(ranks, {});
  p.recv_toks.assign(ranks, {});
  std::vector<char> to(ranks);
  for (int64_t t = 0; t < p.S; ++t) {
    STRATA_CHECK(sel[t].size() == wts[t].size());
    std::fill(to.begin(), to.end(), 0);
    for (int32_t e : sel[t]) {
      STRATA_CHECK_MSG(e >= 0 && e < E, "expert id {} outside [0, {})", e, E);
      to[expert_owner(e, E, ranks)] = 1;
    }
    const int o = origin(t);
    if (o == me)
      for (int d = 0; d < ranks; ++d)
        if (to[d]) p.send_toks[d].push_back(t);
    if (to[me]) p.recv_toks[o].push_back(t);
  }
  // Every rank's calls in the one-rank layout; this rank keeps its own and derives what the
  // others return to it.
  p.back_rows.assign(ranks, 0);
  p.ret_toks.assign(ranks, {});
  for (int64_t e = 0; e < E; ++e) {
    const int owner = expert_owner(e, E, ranks);
    ExpertDispatchPlan::Call call;
    call.e = e;
    for (int64_t t = 0; t < p.S; ++t)
      for (size_t j = 0; j < sel[t].size(); ++j)
        if (sel[t][j] == e) {
          call.toks.push_back(t);
          call.rw.push_back(wts[t][j]);
        }
    for (int64_t t : call.toks) {
      if (owner == me) ++p.back_rows[origin(t)];
      if (origin(t) == me) p.ret_toks[owner].push_back(t);
    }
    if (owner == me && !call.toks.empty()) p.calls.push_back(std::move(call));
  }
  return p;
}

}  // namespace strata
