// SelectedRows: the compressed-KV rows a call's top-k lists select, each decoded once into a
// compact buffer (memory and decode work O(selected rows), not O(context): a decode step at a
// long context selects at most index_topk of them). Used by the V4.1 and V4 attention
// (exec/deepseek_v41/v41_attention.cc, exec/deepseek_v4/v4_attention.cc).
// Thread safety: a plain value; read-only after gather().
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "base/check.h"
#include "base/thread_pool.h"
#include "dist/dcp_comm.h"

namespace strata {

class SelectedRows {
 public:
  // Collects the distinct row ids of `lists` (a range of ranges of int32 ids; negative ids
  // are the reference's "unreachable" marks and are skipped), ascending, and decodes them
  // through read(g0, n, out) (n consecutive rows from g0 into out [n, width]), one call per
  // run of consecutive ids. Errors: STRATA_CHECK when an id is >= `available`.
  //
  // With a `pool` of more than one thread and at least kParallelRows selected rows, the runs
  // are cut into pieces of at most kPieceRows rows that the pool decodes in parallel, so
  // `read` must then be safe to call concurrently (it writes disjoint rows of `out`). The
  // rows are the same either way.
  //
  // With a DcpComm of more than one rank (dist/dcp_comm.h) `read` is called only for the rows
  // this rank owns, and one comm->allgather_rows hands every rank the others' rows: the
  // rows, and every row(g), are then the same as one rank's. Every rank of the group must
  // call gather at the same point with the same lists (it is a collective).
  static constexpr size_t kPieceRows = 16, kParallelRows = 32;
  template <class Lists, class Read>
  void gather(const Lists& lists, int64_t available, int64_t width, Read read,
              ThreadPool* pool = nullptr, DcpComm* comm = nullptr) {
    width_ = width;
    slot_.clear();
    ids_.clear();
    for (const auto& list : lists)
      for (int32_t g : list) {
        if (g < 0) continue;
        STRATA_CHECK_MSG(g < available, "selected row {} of {}", g, available);
        ids_.push_back(g);
      }
    std::sort(ids_.begin(), ids_.end());
    ids_.erase(std::unique(ids_.begin(), ids_.end()), ids_.end());
    // Grows only: every row handed out below is written by `read` first.
    if (rows_.size() < ids_.size() * static_cast<size_t>(width))
      rows_.resize(ids_.size() * static_cast<size_t>(width));
    const bool dcp = comm != nullptr && comm->size() > 1;
    std::vector<int64_t> per_rank;
    if (dcp) {  // rank-major slots: rank r's ids ascending, after every lower rank's
      const int n = comm->size();
      std::vector<int> own(ids_.size());
      per_rank.assign(n, 0);
      for (size_t j = 0; j < ids_.size(); ++j)
        ++per_rank[own[j] = dcp::owner(ids_[j], comm->interleave(), n)];
      std::vector<int64_t> next(n, 0);
      for (int r = 1; r < n; ++r) next[r] = next[r - 1] + per_rank[r - 1];
      slot_.resize(ids_.size());
      for (size_t j = 0; j < ids_.size(); ++j) slot_[j] = next[own[j]]++;
    }
    auto mine = [&](size_t j) { return !dcp || comm->owns(ids_[j]); };
    const bool par = pool != nullptr && pool->num_threads() > 1 && ids_.size() >= kParallelRows;
    const size_t cap = par ? kPieceRows : ids_.size();
    pieces_.clear();
    for (size_t r = 0; r < ids_.size();) {  // runs of consecutive ids, at most `cap` rows
      if (!mine(r)) {
        ++r;
        continue;
      }
      size_t e = r + 1;
      while (e < ids_.size() && e - r < cap && ids_[e] == ids_[e - 1] + 1 && mine(e)) ++e;
      pieces_.push_back({r, e});
      r = e;
    }
    auto run = [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const auto [r, e] = pieces_[static_cast<size_t>(p)];
        read(static_cast<int64_t>(ids_[r]), static_cast<int64_t>(e - r), &rows_[slot(r) * width]);
      }
    };
    if (par) {
      pool->parallel_for(static_cast<int64_t>(pieces_.size()), run);
    } else {
      run(0, static_cast<int64_t>(pieces_.size()));
    }
    if (dcp) comm->allgather_rows(rows_.data(), per_rank, width);
  }
  // Frees the row buffer when it holds more than max_bytes (a long prefill's selection),
  // so a SelectedRows kept as scratch across calls does not pin that memory.
  void trim(size_t max_bytes) {
    if (rows_.capacity() * sizeof(float) > max_bytes) {
      std::vector<float>().swap(rows_);
      ids_.clear();
      slot_.clear();
    }
  }
  // Row g's values [width]. Errors: STRATA_CHECK when g was not selected.
  const float* row(int64_t g) const {
    const auto it = std::lower_bound(ids_.begin(), ids_.end(), static_cast<int32_t>(g));
    STRATA_CHECK_MSG(it != ids_.end() && *it == g, "row {} was not selected", g);
    return &rows_[slot(static_cast<size_t>(it - ids_.begin())) * static_cast<size_t>(width_)];
  }

 private:
  int64_t width_ = 0;
  // Index into rows_ of ids_[j]: j, or with a DcpComm its rank-major slot.
  size_t slot(size_t j) const { return slot_.empty() ? j : static_cast<size_t>(slot_[j]); }

  std::vector<int32_t> ids_;  // ascending
  std::vector<int64_t> slot_;  // empty (identity) or ids_.size() rank-major slots
  std::vector<float> rows_;   // [ids_.size(), width_]
  std::vector<std::pair<size_t, size_t>> pieces_;  // [first, end) indices into ids_
};

}  // namespace strata
