// BlockPool: the MECHANISM that stores state bytes. A fixed number of equal blocks of
// `rows_per_block` rows x `row_bytes` bytes, a LIFO free list and a reference count per block.
// A block is free iff its refcount is 0; it returns to the free list only when its last user
// (sequence table, prefix-cache entry or in-flight step lease) drops it, so a slot is never
// reused before its last consumer finished. Storage (the byte arena) is optional: metadata-only
// pools serve capacity planning, tests and benchmarks.
// The arena is reserved lazily: one anonymous private mapping (mmap, MAP_NORESERVE) of
// num_blocks x block_bytes, so creating a pool costs address space only; a page becomes
// resident (zero-filled by the kernel) when a block on it is first written. Row pointers are
// stable for the pool's lifetime (the mapping never moves). Never-written rows read as zero.
// Row sharding (decode context parallelism, dist/dcp_comm.h): a pool built with a RowShard of
// size D > 1 stores only the rows its rank owns -- row r of a block belongs to rank
// (r / S) mod D (dist/dcp.h's owner map; S * D must divide rows_per_block, so every block
// starts a new ownership period) -- at dense local slots, rows_per_block / D per block.
// rows_per_block() stays the logical count; block_bytes() is what a block stores. Reaching a
// row another rank owns is a CHECK failure naming it (holds() asks first).
// Errors: allocation from an empty pool and unbalanced unref are CHECK failures (callers plan
// first and get a typed out-of-blocks outcome instead); a refused mapping is a CHECK failure
// naming the size. Thread safety: none (owned by one CacheManager, which is single-threaded).
#pragma once

#include <cstdint>
#include <vector>

#include "base/check.h"
#include "dist/dcp.h"

namespace strata {

using BlockId = int32_t;

// Which rows of each block this process stores (size 1: all of them).
// A pipeline stage's backbone layers (CacheOptions::stage): [begin, end) of backbone_layers;
// backbone_layers 0 = no pipeline.
struct StageLayers {
  int begin = 0, end = 0, backbone_layers = 0;
  bool split() const { return backbone_layers > 0 && (begin > 0 || end < backbone_layers); }
};

struct RowShard {
  int rank = 0, size = 1;
  int64_t interleave = 1;  // S: consecutive rows per ownership run
  bool sharded() const { return size > 1; }
};

class BlockPool {
 public:
  BlockPool(int64_t num_blocks, int64_t rows_per_block, int64_t row_bytes, bool with_storage,
            RowShard shard = {});
  ~BlockPool();
  BlockPool(BlockPool&& o) noexcept;
  BlockPool& operator=(BlockPool&& o) noexcept;
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int64_t num_blocks() const { return static_cast<int64_t>(refcount_.size()); }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t rows_per_block() const { return rows_per_block_; }
  int64_t row_bytes() const { return row_bytes_; }
  int64_t block_bytes() const { return stored_rows_ * row_bytes_; }
  // Rows a block stores: rows_per_block, or rows_per_block / D when sharded.
  int64_t stored_rows() const { return stored_rows_; }
  const RowShard& shard() const { return shard_; }
  // Whether this pool stores row r (in-block index) of its blocks.
  bool holds(int64_t r) const {
    return !shard_.sharded() || dcp::owner(r, shard_.interleave, shard_.size) == shard_.rank;
  }
  bool has_storage() const { return arena_ != nullptr; }
  // Bytes of address space reserved for the arena (0 without storage); resident memory is
  // only what has been touched.
  int64_t arena_bytes() const { return arena_bytes_; }

  // Takes a free block (refcount 0 -> 1). CHECKs that one is free.
  BlockId allocate();
  void ref(BlockId b);
  // Drops one reference; returns true if the block became free.
  bool unref(BlockId b);
  int32_t refcount(BlockId b) const { return refcount_.at(b); }

  // Row r (in-block, logical) of block b. CHECKs storage, bounds and holds(r).
  uint8_t* row(BlockId b, int64_t r);
  const uint8_t* row(BlockId b, int64_t r) const;
  // The block's stored bytes (block_bytes() long): its rows in stored order.
  uint8_t* block_data(BlockId b);
  const uint8_t* block_data(BlockId b) const;
  void copy_block(BlockId dst, BlockId src);

  // Free list and refcounts agree (every free-listed block has refcount 0, exactly once;
  // every refcount-0 block is free-listed). Returns false and fills `why` otherwise.
  bool check_invariants(std::string* why) const;

 private:
  int64_t rows_per_block_;
  int64_t stored_rows_;
  RowShard shard_;
  int64_t row_bytes_;
  std::vector<int32_t> refcount_;
  std::vector<BlockId> free_;
  uint8_t* arena_ = nullptr;  // mmap'd, arena_bytes_ long; null = no storage
  int64_t arena_bytes_ = 0;
};

}  // namespace strata
