// Engram table rows off the working tier (issue 26 item 4; v41-architecture.md, Engram).
//
// Each Engram layer looks up, per position and hash column, one row of its table (FP8 E4M3
// [rows, engram_head_dim]) and its scales (UE8M0 [rows, engram_head_dim / 32]). The tables
// are the model's largest sparse state, so where they live is a placement:
//   ram   both tensors copied into process memory at load (resident; the default);
//   mmap  rows read through the checkpoint's file mapping (the page cache holds them, the
//         kernel evicts them under pressure; nothing is copied);
//   disk  rows read from the checkpoint file with pread on demand, kept in a bounded hot-row
//         cache (LRU, --engram-cache-bytes); a step's rows are fetched ahead by a background
//         thread as soon as the step's hashes are known (before layer 0), overlapping the
//         layers before each Engram layer; a row the prefetch has not reached yet is read
//         when the layer needs it.
// Every placement returns the same bytes, so logits are bit-identical (tests).
// Thread safety: gather / prefetch / stats may be called from any thread (one mutex; disk
// reads happen outside it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/safetensors.h"

namespace strata {

enum class EngramPlacement : uint8_t { kRam, kMmap, kDisk };

const char* engram_placement_name(EngramPlacement p);
// "ram" / "mmap" / "disk"; InvalidArgument otherwise.
StatusOr<EngramPlacement> parse_engram_placement(const std::string& s);

struct EngramTableStats {
  int64_t lookups = 0;        // rows asked for by layers
  int64_t hits = 0;           // of those, found in the hot-row cache (disk) / resident (ram, mmap)
  int64_t misses = 0;         // read from the file when the layer needed them (disk)
  int64_t prefetched = 0;     // rows read ahead by the prefetch thread (disk)
  int64_t read_bytes = 0;     // bytes read from the file (disk)
  int64_t cached_rows = 0, cached_bytes = 0, capacity_bytes = 0;  // hot-row cache (disk)
  int64_t table_bytes = 0, table_rows = 0;  // all Engram layers' tables + scales
};

class EngramTableStore {
 public:
  EngramTableStore(EngramPlacement placement, int64_t cache_bytes);
  ~EngramTableStore();
  EngramTableStore(const EngramTableStore&) = delete;
  EngramTableStore& operator=(const EngramTableStore&) = delete;

  EngramPlacement placement() const { return placement_; }
  // Registers Engram layer `layer`'s table ([rows, ed] one byte per element) and scales
  // ([rows, nsc] one byte each). ram: copies them; disk: opens their files (the views must
  // come from files: TensorView::file / file_offset). InvalidArgument for a bad shape,
  // NotFound when a file cannot be opened.
  Status add_layer(int layer, const TensorView& table, const TensorView& scale);
  // Rows rows[0..n) of `layer` into table_out [n, ed] and scale_out [n, nsc].
  void gather(int layer, const int64_t* rows, int64_t n, uint8_t* table_out,
              uint8_t* scale_out);
  // disk: reads the given rows of each layer into the hot-row cache in the background
  // (replacing a prefetch still running); other placements: nothing.
  void prefetch(std::vector<std::pair<int, std::vector<int64_t>>> rows_per_layer);
  EngramTableStats stats() const;

 private:
  struct Impl;
  EngramPlacement placement_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata
