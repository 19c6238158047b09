// Llama attention under decode context parallelism (issue 25 item 2, plain KV): every rank
// holds the KV of the position records it owns (dist/dcp.h; a record is a chunk of
// dcp::kPlainKvRecordTokens = kernels::kAttnChunk positions), computes the chunk partials
// (m, z, U) of those chunks for every query row and head, and one all-gather hands every
// rank every chunk's partials; each rank merges them in chunk order -- the arithmetic of
// kernels::attention_head on one rank, so the output is bit-identical to one rank.
//
// Shapes: q [M, n_heads * head_dim] (post-RoPE), out the same; views[item] is the sequence's
// KvBlocks of this rank (LlamaKvState::view, dense local rows); row_item[r] / row_pos[r] the
// row's sequence index and absolute position (it attends positions [0, row_pos[r]]).
// Gather volume per layer: sum over rows of ceil((pos + 1) / 16) x n_heads x (head_dim + 2)
// floats. Every rank must call it with the same rows (the mirrored step guarantees it); a
// rank with no owned chunk sends nothing.
// Thread safety: as the runner (one step at a time); `pool` splits the rows' heads.
#pragma once

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "dist/dcp_comm.h"
#include "kernels/attention.h"

namespace strata {

struct DcpAttentionShape {
  int64_t M = 0;       // query rows
  int n_heads = 0, group = 1, head_dim = 0;
};

void dcp_attention(DcpComm& comm, const DcpAttentionShape& s,
                   const std::vector<kernels::KvBlocks>& views, const int32_t* row_item,
                   const int64_t* row_pos, const float* q, ThreadPool* pool,
                   std::vector<float>* buf, float* out);

}  // namespace strata
