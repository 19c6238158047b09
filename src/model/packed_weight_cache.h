// Packed-weight cache: the kernels' packed layouts of a checkpoint (DeepseekV41Weights /
// DeepseekV4Weights::pack_for_kernels), persisted once to a file and mapped read-only at
// later starts instead of repacked (issue 29 goal 4: a 2 GB V4.1-shaped model started in
// 3-6 s, nearly all of it packing into fresh anonymous memory).
//
// One file per (model directory, layout) under the cache directory, named by the XXH3-64 of
// the directory's real path and the layout string (model kind, layer range, expert share).
// The file's header holds its full key; a file whose key differs (another build of strata,
// changed checkpoint files, another CPU feature set) is a miss and is replaced. The key:
//   - the cache format version and the running executable's GNU build id (a rebuilt strata
//     whose packers might lay bytes out differently never reads an older file);
//   - the CPU's vector capabilities (AVX2, AVX-512, its extensions);
//   - the layout string;
//   - config.json's bytes (XXH3-64) and, for every .safetensors / .json file in the model
//     directory, its name, size, modify and change times (ns), inode and device: an edited or
//     replaced checkpoint misses (a write that restores the modify time still moves the change
//     time). A bit flip that changes none of these (disk rot) is not detected.
// The header carries an XXH3-64 (checked at every open), and so does each 64 MiB chunk of the
// data. The chunks are checked (over the pool) the first time a file is opened, and again
// whenever the file's identity (inode, size, modify and change times) differs from the one
// recorded in <name>.verified at the last full check: a start after that maps the file
// without reading every byte (the same trust in file identity that skips the checkpoint's
// NaN / Inf scan, below). Not noticed: a change that keeps all four (bit rot under an
// unchanged inode, or a write within the same timestamp tick as the check, a few ms on
// kernels without fine-grained timestamps). A file that fails any check is ignored with a
// warning on stderr and rewritten; the cache never fails a load.
//
// The file also lists the checkpoint tensors the writing load found finite (the NaN / Inf
// scan, SafetensorsCheckpoint::check_finite): since the key pins the files' identity, a load
// that hits marks them scanned instead of reading every byte of the checkpoint again.
//
// Writing: <name>.tmp.<pid> then fdatasync and rename, so readers (and several ranks with the
// same layout) only ever see complete files; temporaries of writers that no longer run are
// removed first; skipped with a warning when the file system has less free space than the
// file plus 1 GiB. Nothing evicts files: delete the directory to reclaim the space.
// A hit prints "[load] packed weights mapped from <path>" on stderr.
//
// Thread safety: one object per model load, used by one thread (its pool verifies in parallel).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "base/status.h"
#include "kernels/seq_gemm.h"
#include "model/deepseek_v41_weights.h"

namespace strata {

class ThreadPool;

// Where the cache lives and when it is used. dir "" = off. A checkpoint whose files total
// fewer than min_checkpoint_bytes is packed every time (small models pack in milliseconds).
struct WeightCacheSettings {
  std::string dir;
  int64_t min_checkpoint_bytes = 0;
};

// The process-wide settings model loads use (set by the CLI's --weight-cache-dir). Until set:
// $STRATA_WEIGHT_CACHE_DIR if set (cached whatever the size; "none" = off), else
// $XDG_CACHE_HOME/strata/packed-weights or ~/.cache/strata/packed-weights for checkpoints of
// at least 1 GiB. Thread safety: set before loading models.
WeightCacheSettings process_weight_cache_settings();
void set_process_weight_cache_settings(const WeightCacheSettings& s);
// The CLI flag's value: "none" = off, else that directory for every checkpoint size.
WeightCacheSettings weight_cache_settings_from_flag(const std::string& dir);

// The layout string of a load: the model kind ("v4.1", "v4"), the backbone layers packed and
// the routed-expert share.
std::string pack_layout(const std::string& kind, int layer_begin, int layer_end,
                        ExpertShare experts);

// One packed slot a pack job fills, and the shape [n, k] its packed weight must have.
struct PackSlot {
  std::variant<std::shared_ptr<const V41PackedLinear>*,
               std::shared_ptr<const kernels::PackedSeqWeight>*>
      slot;
  int64_t n = 0, k = 0;
};
// A pack job: `pack` fills `slots` (some may stay null) and returns the bytes it packed.
struct PackJob {
  std::function<int64_t()> pack;
  std::vector<PackSlot> slots;
};

class PackedWeightCache {
 public:
  // Null when `settings` turn the cache off for this checkpoint (or the directory cannot be
  // created: warned). Otherwise validates the file for (model_dir, layout), if any: hit() tells.
  static std::unique_ptr<PackedWeightCache> open(const std::string& model_dir,
                                                 const std::string& layout,
                                                 const WeightCacheSettings& settings,
                                                 ThreadPool* pool);
  ~PackedWeightCache();

  bool hit() const { return mapping_ != nullptr; }
  const std::string& path() const { return path_; }
  // The tensors the writing load found finite (hit() only).
  const std::vector<std::string>& scanned_tensors() const { return scanned_; }

  // Fills every job's slots: from the file on a hit (views of the mapping); otherwise (a miss,
  // or a file whose slots disagree with `jobs`: warned) runs the jobs over `pool` and keeps
  // their slots for finish(). Returns the packed bytes.
  int64_t pack(const std::vector<PackJob>& jobs, ThreadPool* pool);
  // After a successful load: writes the file if pack() packed, listing `scanned_tensors` (the
  // checkpoint's SafetensorsCheckpoint::scanned_tensors()). Failures are warnings.
  void finish(const std::vector<std::string>& scanned_tensors);

  struct Mapping;

 private:
  PackedWeightCache() = default;
  bool restore(const std::vector<PackJob>& jobs, std::string* why);
  Status store(const std::vector<std::string>& scanned);

  std::string path_, key_;
  std::shared_ptr<const Mapping> mapping_;
  std::vector<std::string> scanned_;
  std::vector<PackSlot> pending_;  // slots to write at finish()
  bool packed_ = false;
};

// Runs every job over `pool` (may be null); returns the total bytes. (No cache.)
int64_t run_pack_jobs(const std::vector<PackJob>& jobs, ThreadPool* pool);

}  // namespace strata
