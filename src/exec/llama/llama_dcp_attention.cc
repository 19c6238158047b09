#include "exec/llama/llama_dcp_attention.h"

#include <algorithm>
#include <cstring>

namespace strata {

void dcp_attention(DcpComm& comm, const DcpAttentionShape& s,
                   const std::vector<kernels::KvBlocks>& views, const int32_t* row_item,
                   const int64_t* row_pos, const float* q, ThreadPool* pool,
                   std::vector<float>* buf, float* out) {
  using kernels::kAttnChunk;
  static_assert(kAttnChunk == dcp::kPlainKvRecordTokens);
  const int D = comm.size(), me = comm.rank();
  const int64_t S = comm.interleave(), M = s.M, nh = s.n_heads, hd = s.head_dim, pf = hd + 2;
  const int64_t qd = nh * hd;
  std::vector<int64_t> nc(M);
  for (int64_t r = 0; r < M; ++r) nc[r] = kernels::attention_chunks(row_pos[r] + 1);
  // base[q][r]: where row r's partials start in rank q's segment (in partials); seg[q]: where
  // rank q's segment starts in the buffer.
  std::vector<std::vector<int64_t>> base(D, std::vector<int64_t>(M + 1, 0));
  std::vector<int64_t> per_rank(D), seg(D + 1, 0);
  for (int qr = 0; qr < D; ++qr) {
    for (int64_t r = 0; r < M; ++r)
      base[qr][r + 1] = base[qr][r] + dcp::owned_count(nc[r], qr, S, D) * nh;
    per_rank[qr] = base[qr][M];
    seg[qr + 1] = seg[qr] + per_rank[qr];
  }
  buf->resize(static_cast<size_t>(seg[D] * pf));
  float* B = buf->data();
  int64_t work = 0;
  for (int64_t r = 0; r < M; ++r) work += nc[r];
  const bool threaded = work * nh * hd >= (int64_t{1} << 16);
  auto run = [&](int64_t n, const std::function<void(int64_t, int64_t)>& f) {
    if (threaded) pool->parallel_for(n, f); else f(0, n);
  };
  // This rank's partials: chunk c (owned) of row r, head h at local_index(c) * nh + h.
  run(M * nh, [&](int64_t t0, int64_t t1) {
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t r = task / nh, h = task % nh, T = row_pos[r] + 1;
      float* dst = B + (seg[me] + base[me][r]) * pf;
      dcp::for_owned(0, nc[r], S, D, me, [&](int64_t c) {
        const int64_t l = dcp::local_index(c, S, D);
        kernels::attention_chunk_partial(q + r * qd + h * hd, views[row_item[r]],
                                         static_cast<int>(h / s.group), static_cast<int>(hd),
                                         l * kAttnChunk, std::min(kAttnChunk, T - c * kAttnChunk),
                                         dst + (l * nh + h) * pf);
      });
    }
  });
  comm.allgather_rows(B, per_rank, pf);
  // Every rank merges every chunk in chunk order.
  run(M * nh, [&](int64_t t0, int64_t t1) {
    std::vector<float> parts;
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t r = task / nh, h = task % nh;
      parts.resize(static_cast<size_t>(nc[r] * pf));
      for (int64_t c = 0; c < nc[r]; ++c) {
        const int qr = dcp::owner(c, S, D);
        const float* src =
            B + (seg[qr] + base[qr][r] + dcp::local_index(c, S, D) * nh + h) * pf;
        std::memcpy(parts.data() + c * pf, src, static_cast<size_t>(pf) * sizeof(float));
      }
      kernels::attention_merge(parts.data(), nc[r], pf, static_cast<int>(hd),
                               out + r * qd + h * hd);
    }
  });
}

}  // namespace strata
