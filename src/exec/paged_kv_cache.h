// PagedKvCache: per-sequence K/V rows for a Llama/GQA model, in fixed-size blocks.
//
// This is the runner's private KV store until the state graph's pools (src/state) take
// over; LlamaRunner only uses the small interface below (reserve / commit / row pointers /
// KvBlocks views), so swapping the storage is local to this file.
//
// Layout: a block holds `block_size` positions for every layer: [layer][K|V][pos][kv_dim]
// f32. Blocks are allocated lazily up to `capacity_tokens / block_size` blocks and
// recycled on release. A sequence's positions [0, length) are valid.
// Errors: reserve() returns ResourceExhausted when the block budget is spent and
// OutOfRange past max_context; on error nothing changes.
// Thread safety: not thread-safe (one engine thread); the row pointers and views returned
// may be used concurrently for reading/writing disjoint rows.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "base/status.h"
#include "exec/model_runner.h"
#include "kernels/attention.h"

namespace strata {

class PagedKvCache {
 public:
  PagedKvCache(int64_t num_layers, int64_t kv_dim, int64_t max_context, int64_t capacity_tokens,
               int64_t block_size = 16);

  Status add(SeqId seq);
  void release(SeqId seq);
  bool has(SeqId seq) const { return seqs_.count(seq.value) != 0; }
  int64_t length(SeqId seq) const;
  int64_t capacity_left(SeqId seq) const;
  // Makes room for positions [0, new_len) (allocating blocks); length() is unchanged.
  Status reserve(SeqId seq, int64_t new_len);
  // Frees blocks not needed for `length(seq)` positions (undo of a reserve).
  void shrink(SeqId seq);
  // Sets the committed length (<= reserved positions).
  void set_length(SeqId seq, int64_t len);

  float* k_row(SeqId seq, int64_t layer, int64_t pos);
  float* v_row(SeqId seq, int64_t layer, int64_t pos);
  // View for attention over `layer`; valid until the next reserve/shrink/release of `seq`.
  kernels::KvBlocks view(SeqId seq, int64_t layer) const;

  CacheUsage usage() const;
  int64_t block_size() const { return block_size_; }
  int64_t bytes_per_token() const { return num_layers_ * 2 * kv_dim_ * 4; }

 private:
  struct Seq {
    int64_t length = 0;
    std::vector<int32_t> blocks;
    std::vector<std::vector<const float*>> k_ptrs, v_ptrs;  // [layer][block]
  };
  float* block_base(int32_t b) const { return storage_[b].get(); }
  const Seq& seq_ref(SeqId s) const;
  Seq& seq_ref(SeqId s);

  int64_t num_layers_, kv_dim_, max_context_, max_blocks_, block_size_;
  std::vector<std::unique_ptr<float[]>> storage_;
  std::vector<int32_t> free_;
  int64_t blocks_in_use_ = 0;
  std::map<int64_t, Seq> seqs_;
};

}  // namespace strata
