// Safetensors checkpoints: mmap-based, zero-copy tensor views.
//
// SafetensorsFile opens one .safetensors file (8-byte LE header length, JSON header,
// data); SafetensorsCheckpoint opens a directory holding either `model.safetensors` or a
// sharded set described by `model.safetensors.index.json`.
//
// Errors (Status, naming the file and tensor): missing file, truncated file, header length
// past the end, malformed JSON, unknown dtype, data offsets that overlap, run past the end,
// or disagree with shape × dtype size; a missing tensor; a shape that disagrees with what
// the caller expects (`expect_shape`).
// Status codes: kNotFound = missing file / directory / shard / tensor (also a tensor listed
// in the index but absent from its shard); kDataLoss = file shorter than 8 bytes, header
// length past the end, malformed JSON or index, bad data_offsets (begin > end, overlap, past
// the end of the data section), byte size != numel x dtype size; kUnimplemented = unknown
// dtype string; kFailedPrecondition = dtype/shape mismatch in get(name, dtype, shape).
// Byte-size exception: I8/U8 tensors may also hold ceil(numel/2) bytes (packed FP4 E2M1
// stored with its logical shape); the usual DeepSeek layout [out, in/2] needs no exception.
// write_safetensors: kInvalidArgument for duplicate names or bytes that disagree with the
// shape; kInternal for I/O errors. Writes via `path.tmp` + rename; header padded with
// spaces to a multiple of 8 bytes (HF layout).
//
// Lifetime: TensorView points into the mapping; it is valid while the owning file /
// checkpoint object lives. Objects are movable, not copyable.
// Thread safety: all const methods are safe to call concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/dtype.h"

namespace strata {

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // points into the mmap; not owned
  size_t num_bytes = 0;
  std::string file;               // path of the file it came from (for error messages)
  int64_t file_offset = -1;       // byte offset of the data in that file (-1: not from a file)
  bool mapped = false;            // data points into a read-only file mapping (not a copy)

  int64_t numel() const;
  // Typed access; CHECKs the dtype matches.
  const float* f32() const;
  const uint16_t* u16() const;  // BF16 / F16 raw bits
};

class SafetensorsFile {
 public:
  // Opens and validates the header. `progress`: print a progress line to stderr while
  // pre-faulting pages of large files (>64 MiB).
  static StatusOr<std::unique_ptr<SafetensorsFile>> open(const std::string& path,
                                                         bool progress = false);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Drops this process's resident pages of the mapping (madvise MADV_DONTNEED on a
  // read-only private file mapping): views stay valid, a later read faults its page back in
  // from the page cache. For loaders that have copied (packed) what they use on the hot
  // path, so the file's pages stop counting twice in the resident set.
  void release_resident_pages() const;
  // count_nonfinite of a view into this file's mapping, read through the file descriptor (kept
  // open with the mapping)
  // (pread, 4 MiB at a time: no page of the mapping is faulted in); -1 when the view is not
  // in this mapping or a read fails.
  int64_t scan_nonfinite(const TensorView& t) const;

 private:
  SafetensorsFile() = default;
  int fd_ = -1;
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
  // Tensors whose data in the mapping is not aligned to their element size, copied (open()).
  std::vector<std::unique_ptr<uint64_t[]>> aligned_copies_;
};

class SafetensorsCheckpoint {
 public:
  // `dir` holds model.safetensors or model.safetensors.index.json (+ shards); `dir` may
  // also be a path to a single .safetensors file.
  static StatusOr<std::unique_ptr<SafetensorsCheckpoint>> open(const std::string& dir,
                                                               bool progress = false);

  bool has(const std::string& name) const;
  // NotFound naming the checkpoint and tensor if absent.
  StatusOr<TensorView> get(const std::string& name) const;
  // Like get(), and also checks dtype and shape: FailedPrecondition naming the tensor,
  // the file, the expected and the actual shape/dtype. A floating-point tensor holding NaN
  // or Inf values (count_nonfinite) is DataLoss naming the tensor, the file and the count:
  // every model loader reads its weights through this call, so a corrupt checkpoint is
  // refused at load (each tensor is scanned once per checkpoint object).
  StatusOr<TensorView> get(const std::string& name, DType dtype,
                           const std::vector<int64_t>& expect_shape) const;
  // DataLoss (as above) when `t` holds NaN/Inf values; loaders that read tensors through
  // the untyped get() call it for every weight.
  Status check_finite(const TensorView& t) const;
  std::vector<std::string> names() const;
  const std::string& dir() const { return dir_; }
  // SafetensorsFile::release_resident_pages for every file.
  void release_resident_pages() const;
  // A pipeline stage reads only its own decoder layers: the typed get() then skips the
  // NaN/Inf scan of tensors of layers outside [begin, end) (tensor_layer(); the stage that
  // runs them scans them), so their pages are never faulted in here. Call before loading.
  void skip_scans_outside_layers(int begin, int end);
  // The tensors check_finite has found finite so far, sorted; and marking tensors found
  // finite without reading them (a packed-weight cache written by a load of these same files
  // lists them: model/packed_weight_cache.h). Names not in the checkpoint are ignored.
  std::vector<std::string> scanned_tensors() const;
  void mark_scanned(const std::vector<std::string>& names);

 private:
  int scan_begin_ = 0, scan_end_ = 1 << 30;
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
  mutable std::mutex scanned_mu_;
  mutable std::set<std::string> scanned_;  // tensors found finite by the typed get()
};

// Drops this process's resident pages that lie wholly inside a mapped view's bytes
// (madvise MADV_DONTNEED; nothing for a view that is not `mapped`): the view stays valid and
// a later read faults the pages back from the page cache. Loaders call it once a tensor has
// been scanned or packed, so the load's peak resident set stays near the packed weights.
// Thread safety: safe from any thread.
void release_view_pages(const TensorView& t);

// The decoder layer a tensor belongs to: N for names starting "layers.N." (DeepSeek) or
// "model.layers.N." (Hugging Face Llama); -1 for every other tensor (embeddings, head, norms,
// MTP / drafter blocks).
int tensor_layer(const std::string& name);

// Writes tensors to one .safetensors file (used by `strata convert` and test fixtures).
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;
};
Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace strata
