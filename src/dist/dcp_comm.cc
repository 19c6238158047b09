// DCP communicator helpers; see dcp_comm.h.
#include "dist/dcp_comm.h"

#include "base/check.h"
#include "base/process_slot.h"

namespace strata {

void exchange_owned_columns(DcpComm& comm, float* scores, int64_t rows, int64_t stride,
                            int64_t ncols) {
  const int n = comm.size(), me = comm.rank();
  const int64_t S = comm.interleave();
  STRATA_CHECK(ncols <= stride && rows >= 0);
  std::vector<int64_t> per_rank(n);
  int64_t total = 0;
  for (int r = 0; r < n; ++r) total += per_rank[r] = rows * dcp::owned_count(ncols, r, S, n);
  if (total == 0) return;
  std::vector<float> buf(total);
  // Segment of rank r: row-major over (row, r's columns ascending).
  auto walk = [&](int r, int64_t at, auto&& f) {
    for (int64_t i = 0; i < rows; ++i)
      dcp::for_owned(0, ncols, S, n, r, [&](int64_t g) { f(at++, i * stride + g); });
  };
  int64_t at = 0;
  for (int r = 0; r < me; ++r) at += per_rank[r];
  walk(me, at, [&](int64_t b, int64_t s) { buf[b] = scores[s]; });
  comm.allgather_rows(buf.data(), per_rank, 1);
  at = 0;
  for (int r = 0; r < n; ++r) {
    if (r != me) walk(r, at, [&](int64_t b, int64_t s) { scores[s] = buf[b]; });
    at += per_rank[r];
  }
}

namespace {
ProcessSlot<DcpComm> g_comm;
}  // namespace

void set_process_dcp_comm(std::shared_ptr<DcpComm> c) { g_comm.set(std::move(c)); }
std::shared_ptr<DcpComm> process_dcp_comm() { return g_comm.get(); }

}  // namespace strata
