// Decode context parallelism (DCP) building blocks: which rank owns a record, the one total
// order every top-k uses, the global top-k over per-rank candidates, and the merge of per-rank
// partial attention with the sink applied once. Semantics: ../shared/docs/pd-dcp-ep.md §3
// (vLLM's interleaved ownership, ATOM / vLLM's candidate exchange, FlashMLA's natural-log LSE
// and sink formula); reference attention with a sink: DeepSeek inference/model.py (the
// softmax denominator is sum(exp(z)) + exp(sink)).
//
// Records are compressed rows (or index keys) by absolute record index g; both caches of a
// layer use the same map. For plain KV a record is a chunk of kPlainKvRecordTokens positions. Thread safety: pure functions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace strata::dcp {

// A plain-KV (Llama) record: a run of this many positions, the attention's canonical chunk
// (kernels/attention.h kAttnChunk), so a rank holds whole chunks and computes their partials.
inline constexpr int64_t kPlainKvRecordTokens = 16;

// Ownership with interleave S over Wd ranks: owner(g) = (g / S) mod Wd; a rank's records are
// stored densely: local(g) = (g / (S * Wd)) * S + g mod S. global() inverts it.
// Preconditions (CHECKed): S >= 1, Wd >= 1, g >= 0, 0 <= rank < Wd.
int owner(int64_t g, int64_t S, int Wd);
int64_t local_index(int64_t g, int64_t S, int Wd);
int64_t global_index(int rank, int64_t local, int64_t S, int Wd);
// Records of [0, n) that `rank` owns (= local indices [0, count)).
int64_t owned_count(int64_t n, int rank, int64_t S, int Wd);
// Calls f(g) for every record g in [g0, g1) that `rank` owns, ascending, without a division
// per record (runs of S records every S * Wd).
template <class F>
void for_owned(int64_t g0, int64_t g1, int64_t S, int Wd, int rank, F&& f) {
  const int64_t period = S * Wd;
  for (int64_t base = (g0 / period) * period + rank * S; base < g1; base += period)
    for (int64_t g = std::max(base, g0), e = std::min(base + S, g1); g < e; ++g) f(g);
}

// A top-k candidate: score (relu'd index score, or -inf = invalid) and absolute position.
struct Candidate {
  float score = -std::numeric_limits<float>::infinity();
  int64_t pos = -1;
};
// The one total order of every selection, single-rank included: score descending, then
// position ascending. (A rank preferring larger positions locally while the merge prefers
// smaller ones selects a different set; pd-dcp-ep.md §3.3.)
inline bool ranks_before(const Candidate& a, const Candidate& b) {
  if (a.score != b.score) return a.score > b.score;
  return a.pos < b.pos;
}
// The k best of `c` by ranks_before, padded to exactly k with (-inf, -1) (a static size for
// the exchange). Input order does not matter.
std::vector<Candidate> local_topk(std::vector<Candidate> c, int64_t k);
// The global selection from every rank's local_topk: the k best by ranks_before over all of
// them, invalid (-inf) ones dropped, then sorted by position ascending (the reference's
// order of the selected rows). Equals local_topk over the union (the single-rank selection).
std::vector<int64_t> merge_topk(const std::vector<std::vector<Candidate>>& per_rank, int64_t k);

// One rank's partial attention of a query over its rows, without the sink: o = sum_j
// softmax_j(z) v_j, lse = ln sum_j exp(z_j) (natural log); no rows: o = 0, lse = -inf.
struct Partial {
  std::vector<float> o;
  float lse = -std::numeric_limits<float>::infinity();
};
// z_j = scale * <q, k_j>; keys / values [n, dim] row-major. Reference loop (f64 sums).
Partial partial_attention(std::span<const float> q, std::span<const float> keys,
                          std::span<const float> values, int64_t n, int64_t dim, float scale);
// Merges partials: L = ln sum_r exp(lse_r), o = sum_r exp(lse_r - L) o_r, then the sink once:
// out = o * sigmoid(L - sink). Shards with lse = -inf contribute nothing (never NaN); all
// empty: out = 0. out has dim elements.
void merge_partials(std::span<const Partial> parts, int64_t dim, float sink, float* out);

}  // namespace strata::dcp
