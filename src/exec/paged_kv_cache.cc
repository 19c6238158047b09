#include "exec/paged_kv_cache.h"

#include <algorithm>

#include "base/check.h"

namespace strata {

PagedKvCache::PagedKvCache(int64_t num_layers, int64_t kv_dim, int64_t max_context,
                           int64_t capacity_tokens, int64_t block_size)
    : num_layers_(num_layers),
      kv_dim_(kv_dim),
      max_context_(max_context),
      max_blocks_((capacity_tokens + block_size - 1) / block_size),
      block_size_(block_size) {
  STRATA_CHECK(block_size > 0 && num_layers > 0 && kv_dim > 0);
}

const PagedKvCache::Seq& PagedKvCache::seq_ref(SeqId s) const {
  auto it = seqs_.find(s.value);
  STRATA_CHECK_MSG(it != seqs_.end(), "unknown sequence {}", s.value);
  return it->second;
}
PagedKvCache::Seq& PagedKvCache::seq_ref(SeqId s) {
  auto it = seqs_.find(s.value);
  STRATA_CHECK_MSG(it != seqs_.end(), "unknown sequence {}", s.value);
  return it->second;
}

Status PagedKvCache::add(SeqId seq) {
  if (has(seq)) return invalid_argument("sequence {} already exists", seq.value);
  Seq s;
  s.k_ptrs.resize(num_layers_);
  s.v_ptrs.resize(num_layers_);
  seqs_.emplace(seq.value, std::move(s));
  return ok_status();
}

void PagedKvCache::release(SeqId seq) {
  auto it = seqs_.find(seq.value);
  if (it == seqs_.end()) return;
  for (int32_t b : it->second.blocks) free_.push_back(b);
  blocks_in_use_ -= static_cast<int64_t>(it->second.blocks.size());
  seqs_.erase(it);
}

int64_t PagedKvCache::length(SeqId seq) const {
  auto it = seqs_.find(seq.value);
  return it == seqs_.end() ? 0 : it->second.length;
}

int64_t PagedKvCache::capacity_left(SeqId seq) const {
  auto it = seqs_.find(seq.value);
  if (it == seqs_.end()) return 0;
  const Seq& s = it->second;
  const int64_t held = static_cast<int64_t>(s.blocks.size()) * block_size_;
  const int64_t by_pool = held + (max_blocks_ - blocks_in_use_) * block_size_ - s.length;
  return std::max<int64_t>(0, std::min(max_context_ - s.length, by_pool));
}

Status PagedKvCache::reserve(SeqId seq, int64_t new_len) {
  Seq& s = seq_ref(seq);
  if (new_len > max_context_)
    return out_of_range("sequence {} would reach {} positions; the model's context is {}",
                        seq.value, new_len, max_context_);
  const int64_t need = (new_len + block_size_ - 1) / block_size_;
  const int64_t extra = need - static_cast<int64_t>(s.blocks.size());
  if (extra <= 0) return ok_status();
  if (blocks_in_use_ + extra > max_blocks_)
    return Status(StatusCode::kResourceExhausted,
                  fmt::format("KV cache full: sequence {} needs {} more blocks, {} of {} free",
                              seq.value, extra, max_blocks_ - blocks_in_use_, max_blocks_));
  const int64_t block_floats = num_layers_ * 2 * block_size_ * kv_dim_;
  for (int64_t i = 0; i < extra; ++i) {
    int32_t b;
    if (!free_.empty()) {
      b = free_.back();
      free_.pop_back();
    } else {
      b = static_cast<int32_t>(storage_.size());
      storage_.emplace_back(new float[block_floats]());
    }
    ++blocks_in_use_;
    s.blocks.push_back(b);
    float* base = block_base(b);
    for (int64_t l = 0; l < num_layers_; ++l) {
      s.k_ptrs[l].push_back(base + (l * 2 + 0) * block_size_ * kv_dim_);
      s.v_ptrs[l].push_back(base + (l * 2 + 1) * block_size_ * kv_dim_);
    }
  }
  return ok_status();
}

void PagedKvCache::shrink(SeqId seq) {
  Seq& s = seq_ref(seq);
  const size_t need = static_cast<size_t>((s.length + block_size_ - 1) / block_size_);
  while (s.blocks.size() > need) {
    free_.push_back(s.blocks.back());
    s.blocks.pop_back();
    --blocks_in_use_;
    for (int64_t l = 0; l < num_layers_; ++l) {
      s.k_ptrs[l].pop_back();
      s.v_ptrs[l].pop_back();
    }
  }
}

void PagedKvCache::set_length(SeqId seq, int64_t len) {
  Seq& s = seq_ref(seq);
  STRATA_CHECK(len <= static_cast<int64_t>(s.blocks.size()) * block_size_);
  s.length = len;
}

float* PagedKvCache::k_row(SeqId seq, int64_t layer, int64_t pos) {
  Seq& s = seq_ref(seq);
  return block_base(s.blocks[pos / block_size_]) +
         ((layer * 2 + 0) * block_size_ + pos % block_size_) * kv_dim_;
}

float* PagedKvCache::v_row(SeqId seq, int64_t layer, int64_t pos) {
  Seq& s = seq_ref(seq);
  return block_base(s.blocks[pos / block_size_]) +
         ((layer * 2 + 1) * block_size_ + pos % block_size_) * kv_dim_;
}

kernels::KvBlocks PagedKvCache::view(SeqId seq, int64_t layer) const {
  const Seq& s = seq_ref(seq);
  return kernels::KvBlocks{s.k_ptrs[layer].data(), s.v_ptrs[layer].data(), block_size_, kv_dim_};
}

CacheUsage PagedKvCache::usage() const {
  const int64_t block_bytes = num_layers_ * 2 * block_size_ * kv_dim_ * 4;
  return CacheUsage{"kv", "host", blocks_in_use_ * block_bytes, max_blocks_ * block_bytes};
}

}  // namespace strata
