#include "state/handoff.h"

#include <algorithm>
#include <cstring>
#include <map>

#include <fmt/format.h>
#include <xxhash.h>

#include "base/check.h"

namespace strata {

namespace {
bool has_storage(const CacheManager& cm, OwnerId id) {
  for (const PoolInfo& p : cm.pools())
    if (std::find(p.owners.begin(), p.owners.end(), id) != p.owners.end()) return true;
  return false;
}

// Whether the owner carries rows in a handoff at all (storage-bearing, transfer policy).
bool travels(const StateOwnerInfo& o) {
  if (o.spec.transient() || o.spec.row_bytes == 0) return false;
  if (o.spec.fixed() && o.spec.rows_fixed == 0) return false;
  return o.spec.handoff == HandoffPolicy::kTransfer;
}
}  // namespace

int64_t HandoffState::payload_bytes() const {
  int64_t b = 0;
  for (const HandoffRun& r : runs) b += static_cast<int64_t>(r.bytes.size());
  return b;
}

std::vector<HandoffRowRange> handoff_rows(const StateGraph& g, int64_t n, int64_t from_pos) {
  STRATA_CHECK_MSG(from_pos >= 0 && from_pos <= n, "handoff from {} of {} positions", from_pos, n);
  for (int r : g.growth_ratios())
    STRATA_CHECK_MSG(from_pos % r == 0, "handoff from {} is not a multiple of ratio {}",
                     from_pos, r);
  std::vector<HandoffRowRange> out;
  for (const StateOwnerInfo& o : g.owners()) {
    if (!travels(o)) continue;
    HandoffRowRange r{o.id, 0, 0};
    if (o.spec.grows()) {
      r.row0 = from_pos / o.spec.ratio;
      r.n_rows = n / o.spec.ratio - r.row0;
    } else if (o.spec.granularity == Granularity::kRing) {
      r.row0 = std::max<int64_t>(0, n - o.spec.rows_fixed);
      r.n_rows = n - r.row0;
    } else if (o.kind == StateKind::kCompressorState ||
               o.kind == StateKind::kIndexCompressorState) {
      // Only the slots a later position reads: the open group's positions [g0, n) and, for
      // an overlapping compressor, the previous complete group (fresh before the first).
      const int64_t m = o.spec.ratio, g0 = n / m * m;
      const bool overlap = o.spec.rows_fixed == 2 * m;
      if (overlap && g0 >= m) out.push_back({o.id, 0, m});
      r.row0 = overlap ? m : 0;
      r.n_rows = n - g0;
    } else {  // other fixed state: every slot
      r.n_rows = n > 0 ? o.spec.rows_fixed : 0;
    }
    if (r.n_rows > 0) out.push_back(r);
  }
  return out;
}

HandoffBytes handoff_bytes(const StateGraph& g, int64_t n, int64_t from_pos) {
  HandoffBytes hb;
  std::map<StateKind, int64_t> by_kind;
  for (const StateOwnerInfo& o : g.owners())
    if (!o.spec.transient()) by_kind.emplace(o.kind, 0);
  for (const HandoffRowRange& r : handoff_rows(g, n, from_pos)) {
    const int64_t b = r.n_rows * g.owner(r.owner).spec.row_bytes;
    by_kind[g.owner(r.owner).kind] += b;
    hb.total += b;
  }
  for (const auto& [k, b] : by_kind) hb.per_kind.emplace_back(state_kind_name(k), b);
  hb.token_id_bytes = 4 * n;
  return hb;
}

uint64_t handoff_checksum(const uint8_t* data, size_t n) { return XXH3_64bits(data, n); }

HandoffState export_handoff_rows(const CacheManager& cm, CacheSeqId seq, int64_t from_pos,
                                 std::vector<int32_t> token_ids) {
  HandoffState st;
  st.num_tokens = cm.num_computed(seq);
  STRATA_CHECK_MSG(static_cast<int64_t>(token_ids.size()) == st.num_tokens,
                   "export_handoff: {} ids for {} computed positions", token_ids.size(),
                   st.num_tokens);
  st.from_pos = from_pos;
  st.token_ids = std::move(token_ids);
  const StateGraph& g = cm.graph();
  for (const HandoffRowRange& r : handoff_rows(g, st.num_tokens, from_pos)) {
    const StateOwnerInfo& o = g.owner(r.owner);
    STRATA_CHECK_MSG(has_storage(cm, r.owner), "export_handoff: {} has no storage", o.label);
    HandoffRun run;
    run.owner = r.owner;
    run.kind = o.kind;
    run.row0 = r.row0;
    run.n_rows = r.n_rows;
    run.row_bytes = o.spec.row_bytes;
    run.bytes.resize(static_cast<size_t>(r.n_rows * run.row_bytes));
    for (int64_t i = 0; i < r.n_rows; ++i)
      std::memcpy(run.bytes.data() + i * run.row_bytes, cm.raw_row(seq, r.owner, r.row0 + i),
                  static_cast<size_t>(run.row_bytes));
    run.checksum = handoff_checksum(run.bytes.data(), run.bytes.size());
    st.runs.push_back(std::move(run));
  }
  return st;
}

Status verify_handoff(const StateGraph& g, const HandoffState& st) {
  if (st.num_tokens < 0 || st.from_pos < 0 || st.from_pos > st.num_tokens)
    return Status(StatusCode::kDataLoss,
                  fmt::format("handoff: from {} of {} positions", st.from_pos, st.num_tokens));
  for (int r : g.growth_ratios())
    if (st.from_pos % r != 0)
      return Status(StatusCode::kDataLoss,
                    fmt::format("handoff: from {} is not a multiple of ratio {}", st.from_pos, r));
  if (static_cast<int64_t>(st.token_ids.size()) != st.num_tokens)
    return Status(StatusCode::kDataLoss, fmt::format("handoff: {} token ids for {} positions",
                                                     st.token_ids.size(), st.num_tokens));
  const std::vector<HandoffRowRange> want = handoff_rows(g, st.num_tokens, st.from_pos);
  if (st.runs.size() != want.size())
    return Status(StatusCode::kDataLoss, fmt::format("handoff: {} runs, expected {}",
                                                     st.runs.size(), want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    const HandoffRun& r = st.runs[i];
    const StateOwnerInfo& o = g.owner(want[i].owner);
    if (r.owner != want[i].owner || r.kind != o.kind || r.row0 != want[i].row0 ||
        r.n_rows != want[i].n_rows || r.row_bytes != o.spec.row_bytes)
      return Status(StatusCode::kDataLoss,
                    fmt::format("handoff run {}: owner {} rows [{}, +{}) x {} B; expected {} "
                                "rows [{}, +{}) x {} B",
                                i, r.owner, r.row0, r.n_rows, r.row_bytes, o.label,
                                want[i].row0, want[i].n_rows, o.spec.row_bytes));
    if (static_cast<int64_t>(r.bytes.size()) != r.n_rows * r.row_bytes)
      return Status(StatusCode::kDataLoss,
                    fmt::format("handoff run {} ({}): {} bytes, expected {}", i, o.label,
                                r.bytes.size(), r.n_rows * r.row_bytes));
    if (handoff_checksum(r.bytes.data(), r.bytes.size()) != r.checksum)
      return Status(StatusCode::kDataLoss,
                    fmt::format("handoff run {} ({} rows [{}, +{})): checksum mismatch", i,
                                o.label, r.row0, r.n_rows));
  }
  return ok_status();
}

Status check_handoff_ids(std::span<const int32_t> tokens, const HandoffState& st) {
  if (st.num_tokens < 0 || st.num_tokens >= static_cast<int64_t>(tokens.size()))
    return invalid_argument("handoff of {} positions for a request of {} tokens (at most {})",
                            st.num_tokens, tokens.size(),
                            tokens.empty() ? 0 : tokens.size() - 1);
  if (static_cast<int64_t>(st.token_ids.size()) != st.num_tokens)
    return invalid_argument("handoff carries {} token ids for {} positions", st.token_ids.size(),
                            st.num_tokens);
  for (int64_t i = 0; i < st.num_tokens; ++i)
    if (st.token_ids[static_cast<size_t>(i)] != tokens[static_cast<size_t>(i)])
      return invalid_argument(
          "handoff token id {} at position {} differs from the request's {} (the prefill and "
          "decode servers tokenized the prompt differently)",
          st.token_ids[static_cast<size_t>(i)], i, tokens[static_cast<size_t>(i)]);
  return ok_status();
}

void write_handoff_rows(CacheManager& cm, CacheSeqId seq, const HandoffState& st, int64_t held) {
  const StateGraph& g = cm.graph();
  for (const HandoffRun& r : st.runs) {
    const StateSpec& s = g.owner(r.owner).spec;
    const int64_t first = s.grows() ? std::max(r.row0, held / s.ratio) : r.row0;
    for (int64_t row = first; row < r.row0 + r.n_rows; ++row)
      cm.write_raw_row(seq, r.owner, row, r.bytes.data() + (row - r.row0) * r.row_bytes);
  }
}

}  // namespace strata
