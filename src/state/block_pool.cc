// BlockPool. See block_pool.h.
#include "state/block_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace strata {

BlockPool::BlockPool(int64_t num_blocks, int64_t rows_per_block, int64_t row_bytes,
                     bool with_storage, RowShard shard)
    : rows_per_block_(rows_per_block),
      stored_rows_(rows_per_block / std::max(1, shard.size)),
      shard_(shard),
      row_bytes_(row_bytes),
      refcount_(num_blocks, 0) {
  STRATA_CHECK(num_blocks >= 0 && rows_per_block > 0 && row_bytes >= 0);
  STRATA_CHECK(shard.size >= 1 && shard.rank >= 0 && shard.rank < shard.size &&
               shard.interleave >= 1);
  STRATA_CHECK_MSG(rows_per_block % (shard.interleave * shard.size) == 0,
                   "BlockPool: {} rows per block do not split over {} ranks x interleave {}",
                   rows_per_block, shard.size, shard.interleave);
  free_.reserve(num_blocks);
  // LIFO: lowest ids come out first.
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<BlockId>(b));
  const int64_t bytes = num_blocks * block_bytes();
  if (with_storage && bytes > 0) {
    // Lazy: address space only; the kernel zero-fills a page on first touch.
    void* p = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    STRATA_CHECK_MSG(p != MAP_FAILED, "BlockPool: cannot reserve {} bytes ({} blocks of {}): {}",
                     bytes, num_blocks, block_bytes(), std::strerror(errno));
    arena_ = static_cast<uint8_t*>(p);
    arena_bytes_ = bytes;
  }
}

BlockPool::~BlockPool() {
  if (arena_) munmap(arena_, static_cast<size_t>(arena_bytes_));
}

BlockPool::BlockPool(BlockPool&& o) noexcept
    : rows_per_block_(o.rows_per_block_),
      stored_rows_(o.stored_rows_),
      shard_(o.shard_),
      row_bytes_(o.row_bytes_),
      refcount_(std::move(o.refcount_)),
      free_(std::move(o.free_)),
      arena_(std::exchange(o.arena_, nullptr)),
      arena_bytes_(std::exchange(o.arena_bytes_, 0)) {}

BlockPool& BlockPool::operator=(BlockPool&& o) noexcept {
  if (this != &o) {
    if (arena_) munmap(arena_, static_cast<size_t>(arena_bytes_));
    rows_per_block_ = o.rows_per_block_;
    stored_rows_ = o.stored_rows_;
    shard_ = o.shard_;
    row_bytes_ = o.row_bytes_;
    refcount_ = std::move(o.refcount_);
    free_ = std::move(o.free_);
    arena_ = std::exchange(o.arena_, nullptr);
    arena_bytes_ = std::exchange(o.arena_bytes_, 0);
  }
  return *this;
}

BlockId BlockPool::allocate() {
  STRATA_CHECK_MSG(!free_.empty(), "BlockPool::allocate on an empty pool (plan first)");
  BlockId b = free_.back();
  free_.pop_back();
  STRATA_CHECK(refcount_[b] == 0);
  refcount_[b] = 1;
  return b;
}

void BlockPool::ref(BlockId b) {
  STRATA_CHECK_MSG(refcount_.at(b) > 0, "ref of free block {}", b);
  ++refcount_[b];
}

bool BlockPool::unref(BlockId b) {
  STRATA_CHECK_MSG(refcount_.at(b) > 0, "unref of free block {}", b);
  if (--refcount_[b] == 0) {
    free_.push_back(b);
    return true;
  }
  return false;
}

uint8_t* BlockPool::row(BlockId b, int64_t r) {
  STRATA_CHECK(has_storage() && b >= 0 && b < num_blocks() && r >= 0 && r < rows_per_block_);
  if (!shard_.sharded()) return arena_ + (static_cast<int64_t>(b) * rows_per_block_ + r) * row_bytes_;
  const int64_t S = shard_.interleave;
  const int D = shard_.size;
  STRATA_CHECK_MSG(holds(r), "row {} of a block is stored by DCP rank {}, not rank {}", r,
                   dcp::owner(r, S, D), shard_.rank);
  const int64_t slot = dcp::local_index(r, S, D);
  return arena_ + (static_cast<int64_t>(b) * stored_rows_ + slot) * row_bytes_;
}
uint8_t* BlockPool::block_data(BlockId b) {
  STRATA_CHECK(has_storage() && b >= 0 && b < num_blocks());
  return arena_ + static_cast<int64_t>(b) * stored_rows_ * row_bytes_;
}
const uint8_t* BlockPool::block_data(BlockId b) const {
  return const_cast<BlockPool*>(this)->block_data(b);
}
const uint8_t* BlockPool::row(BlockId b, int64_t r) const {
  return const_cast<BlockPool*>(this)->row(b, r);
}

void BlockPool::copy_block(BlockId dst, BlockId src) {
  if (!has_storage() || dst == src) return;
  std::memcpy(block_data(dst), block_data(src), static_cast<size_t>(block_bytes()));
}

bool BlockPool::check_invariants(std::string* why) const {
  std::vector<char> in_free(refcount_.size(), 0);
  for (BlockId b : free_) {
    if (b < 0 || b >= num_blocks()) {
      if (why) *why = fmt::format("free list holds bad id {}", b);
      return false;
    }
    if (in_free[b]++) {
      if (why) *why = fmt::format("block {} twice on the free list", b);
      return false;
    }
    if (refcount_[b] != 0) {
      if (why) *why = fmt::format("block {} free-listed with refcount {}", b, refcount_[b]);
      return false;
    }
  }
  for (int64_t b = 0; b < num_blocks(); ++b) {
    if (refcount_[b] < 0 || (refcount_[b] == 0 && !in_free[b])) {
      if (why) *why = fmt::format("block {} refcount {} but not free-listed", b, refcount_[b]);
      return false;
    }
  }
  return true;
}

}  // namespace strata
