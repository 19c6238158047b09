// Expert-parallel MoE dispatch / compute / combine; see ep_moe.h.
#include "exec/ep_moe.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "dist/expert_dispatch.h"
#include "kernels/act_quant.h"
#include "kernels/quant_formats.h"
#include "model/dtype.h"

namespace strata {

Status check_expert_parallel_layer(int layer, int64_t n_experts, int ranks) {
  if (n_experts > 0 && n_experts < ranks)
    return failed_precondition("--enable-expert-parallel: layer {} has {} routed experts, fewer "
                               "than the {} ranks", layer, n_experts, ranks);
  return ok_status();
}

void moe_expert_parallel(ExpertComm& comm, const std::vector<std::vector<int32_t>>& sel,
                         const std::vector<std::vector<float>>& wts, int64_t E, const float* x,
                         int64_t S, const EpMoeExperts& ex, float* out) {
  const int64_t D = ex.dim, blk = ex.act_block;
  STRATA_CHECK(static_cast<int64_t>(sel.size()) == S && D > 0 && blk > 0 && D % blk == 0);
  const int n = comm.size();
  const ExpertDispatchPlan p = plan_expert_dispatch(sel, wts, E, n, comm.rank());
  const int64_t t0 = p.own_begin(), own = p.own_end() - t0, nkb = D / blk;
  const int64_t row_bytes = D + nkb;  // E4M3 codes, then UE8M0 scale bytes

  // 1. Quantize this rank's rows once and dispatch each to the ranks that need it.
  std::vector<uint8_t> codes(static_cast<size_t>(own * D));
  std::vector<float> scales(static_cast<size_t>(own * nkb));
  if (own > 0)
    kernels::act_quant_fp8(x + t0 * D, own, D, static_cast<int>(blk), kernels::ScaleFmt::kUe8m0,
                           codes.data(), nullptr, scales.data());
  std::vector<int64_t> send_rows(n), recv_rows(n);
  int64_t nsend = 0, nrecv = 0;
  for (int r = 0; r < n; ++r) {
    nsend += send_rows[r] = static_cast<int64_t>(p.send_toks[r].size());
    nrecv += recv_rows[r] = static_cast<int64_t>(p.recv_toks[r].size());
  }
  std::vector<uint8_t> sendb(static_cast<size_t>(nsend * row_bytes));
  uint8_t* w = sendb.data();
  for (int d = 0; d < n; ++d)
    for (int64_t t : p.send_toks[d]) {
      const int64_t i = t - t0;
      std::memcpy(w, &codes[i * D], D);
      for (int64_t b = 0; b < nkb; ++b) w[D + b] = quant::ue8m0_encode(scales[i * nkb + b]);
      w += row_bytes;
    }
  std::vector<uint8_t> recvb(static_cast<size_t>(nrecv * row_bytes));
  comm.alltoallv_rows(sendb.data(), send_rows, recvb.data(), recv_rows, row_bytes);

  // 2. This rank's experts on the received rows (in rank order: ascending token id).
  std::vector<int64_t> slot(S, -1);  // token -> received row
  int64_t at = 0;
  for (int s = 0; s < n; ++s)
    for (int64_t t : p.recv_toks[s]) slot[t] = at++;
  std::vector<int64_t> call_off(p.calls.size() + 1, 0);
  for (size_t c = 0; c < p.calls.size(); ++c)
    call_off[c + 1] = call_off[c] + static_cast<int64_t>(p.calls[c].toks.size());
  // Each received row decoded once (a token that picked several of this rank's experts
  // arrives once), then gathered per call.
  std::vector<float> rq(static_cast<size_t>(nrecv * D)), rs(static_cast<size_t>(nrecv * nkb));
  for (int64_t i = 0; i < nrecv; ++i) {
    const uint8_t* row = &recvb[i * row_bytes];
    for (int64_t d = 0; d < D; ++d) rq[i * D + d] = quant::e4m3_decode(row[d]);
    for (int64_t b = 0; b < nkb; ++b) rs[i * nkb + b] = quant::ue8m0_decode(row[D + b]);
  }
  std::vector<float> eo(static_cast<size_t>(call_off.back() * D)), q, sc;
  for (size_t c = 0; c < p.calls.size(); ++c) {
    const ExpertDispatchPlan::Call& call = p.calls[c];
    const int64_t m = static_cast<int64_t>(call.toks.size());
    q.resize(static_cast<size_t>(m * D));
    sc.resize(static_cast<size_t>(m * nkb));
    for (int64_t r = 0; r < m; ++r) {
      const int64_t s = slot[call.toks[r]];
      STRATA_CHECK(s >= 0);
      std::copy_n(&rq[s * D], D, &q[r * D]);
      std::copy_n(&rs[s * nkb], nkb, &sc[r * nkb]);
    }
    ex.routed(call.e, kernels::QuantActs{q.data(), sc.data(), m, D, static_cast<int>(blk)},
              call.rw.data(), &eo[call_off[c] * D]);
  }

  // 3. Each output row back to its token's origin: per origin, the calls' rows in order.
  std::vector<int64_t> ret_rows(n);
  int64_t nret = 0;
  for (int r = 0; r < n; ++r) nret += ret_rows[r] = static_cast<int64_t>(p.ret_toks[r].size());
  std::vector<float> backb(static_cast<size_t>(call_off.back() * D));
  float* bw = backb.data();
  for (int o = 0; o < n; ++o)
    for (size_t c = 0; c < p.calls.size(); ++c)
      for (size_t r = 0; r < p.calls[c].toks.size(); ++r) {
        const int64_t t = p.calls[c].toks[r];
        if (t < p.tok_begin[o] || t >= p.tok_begin[o + 1]) continue;
        std::memcpy(bw, &eo[(call_off[c] + static_cast<int64_t>(r)) * D], D * sizeof(float));
        bw += D;
      }
  std::vector<float> retb(static_cast<size_t>(nret * D));
  comm.alltoallv_rows(backb.data(), p.back_rows, retb.data(), ret_rows,
                      D * static_cast<int64_t>(sizeof(float)));

  // Σ routed in ascending expert id (rank order = expert order), + shared, bf16.
  std::vector<float> y(static_cast<size_t>(own * D), 0.0f), se(static_cast<size_t>(own * D));
  const float* rr = retb.data();
  for (int r = 0; r < n; ++r)
    for (int64_t t : p.ret_toks[r]) {
      float* __restrict dst = &y[(t - t0) * D];
      const float* __restrict src = rr;
      for (int64_t d = 0; d < D; ++d) dst[d] += src[d];
      rr += D;
    }
  if (own > 0) ex.shared(x + t0 * D, own, se.data());
  std::vector<int64_t> own_rows(n);
  for (int r = 0; r < n; ++r) own_rows[r] = p.tok_begin[r + 1] - p.tok_begin[r];
  std::vector<uint16_t> done(static_cast<size_t>(S * D));
  for (int64_t i = 0; i < own * D; ++i)
    done[t0 * D + i] = f32_to_bf16(y[i] + se[i]);  // round_to_bf16's bits

  // 4. Every token's finished row to every rank.
  comm.allgatherv_rows(done.data(), own_rows, D * static_cast<int64_t>(sizeof(uint16_t)));
  for (int64_t i = 0; i < S * D; ++i) out[i] = bf16_to_f32(done[i]);
}

}  // namespace strata
