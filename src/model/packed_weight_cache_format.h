// Internal to the packed-weight cache (packed_weight_cache.cc reads files, _write.cc writes
// them, _key.cc names them): the file format's constants and encoding.
//
// File layout (little-endian):
//   "STRPACK1" | u64 meta_bytes | meta (meta_bytes) | zero padding to 4096 | data
//   meta: key (u64 length + bytes) | u64 scanned count, each name (u64 length + bytes)
//         | u64 data_bytes | u64 chunk_bytes | u64 chunks | u64 XXH3-64 per chunk
//         | u64 slot count, each slot | u64 XXH3-64 of the meta before this field
//   slot: u8 tag (0 empty, 1 linear, 2 seq); linear: fp8 (n, k, block_k), fp4 (n, k), seq
//         (n, k, u8 bf16), then its 9 arrays: fp8 codes, scales, scales_e8m0,
//         subnormal_blocks, fp4 codes, scales, scales_e8m0, seq data16, data32; seq: n, k,
//         u8 bf16, data16, data32. Each array = u64 offset in data (64-aligned), u64 count.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "model/packed_weight_cache.h"

namespace strata::pwc {

constexpr char kMagic[8] = {'S', 'T', 'R', 'P', 'A', 'C', 'K', '1'};
constexpr int64_t kChunkBytes = int64_t{64} << 20;
constexpr int64_t kDataAlign = 4096;
constexpr int64_t kArrayAlign = 64;
constexpr int kFormatVersion = 2;

// "[load] packed-weight cache: <msg>" on stderr.
void warn(const std::string& msg);

// The key's parts (packed_weight_cache_key.cc): what identifies the packing code (the
// executable's GNU build id, else its size and modify time), and the model directory's
// .safetensors / .json files (name, size, mtime, inode, device; config.json's XXH3-64) with
// their total size. NotFound for an unreadable directory.
std::string code_identity();
StatusOr<std::string> model_files_identity(const std::string& dir, int64_t* total_bytes);

inline int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

struct Writer {
  std::string out;
  void u64(uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }
  void u8(uint8_t v) { out.push_back(static_cast<char>(v)); }
  void str(const std::string& s) {
    u64(s.size());
    out += s;
  }
};

struct Reader {
  const uint8_t* p;
  const uint8_t* end;
  bool ok = true;
  uint64_t u64() {
    uint64_t v = 0;
    if (end - p < 8) return ok = false, 0;
    std::memcpy(&v, p, 8);
    p += 8;
    return v;
  }
  uint8_t u8() {
    if (p >= end) return ok = false, 0;
    return *p++;
  }
  std::string str() {
    const uint64_t n = u64();
    if (!ok || static_cast<uint64_t>(end - p) < n) return ok = false, std::string();
    std::string s(reinterpret_cast<const char*>(p), n);
    p += n;
    return s;
  }
};

// The arrays of a slot's packed weight, in file order, as (pointer, bytes, element size).
struct ArrayRef {
  const void* data;
  int64_t count;
  int elem;
};

template <class T>
inline ArrayRef ref(const kernels::WeightBuffer<T>& b) {
  return {b.data(), static_cast<int64_t>(b.size()), static_cast<int>(sizeof(T))};
}

inline void arrays_of(const kernels::PackedSeqWeight& w, std::vector<ArrayRef>* out) {
  out->push_back(ref(w.data16));
  out->push_back(ref(w.data32));
}
inline void arrays_of(const V41PackedLinear& w, std::vector<ArrayRef>* out) {
  for (ArrayRef r : {ref(w.fp8.codes), ref(w.fp8.scales), ref(w.fp8.scales_e8m0),
                     ref(w.fp8.subnormal_blocks), ref(w.fp4.codes), ref(w.fp4.scales),
                     ref(w.fp4.scales_e8m0)})
    out->push_back(r);
  arrays_of(w.seq, out);
}

inline void encode_seq_header(const kernels::PackedSeqWeight& w, Writer* m) {
  m->u64(w.n);
  m->u64(w.k);
  m->u8(w.bf16 ? 1 : 0);
}

// Slot tag and the scalar fields; the arrays follow as (offset, count) pairs.
inline void encode_slot(const PackSlot& s, Writer* m, std::vector<ArrayRef>* arrays) {
  if (auto* lin = std::get_if<std::shared_ptr<const V41PackedLinear>*>(&s.slot)) {
    const V41PackedLinear* w = (*lin)->get();
    if (w == nullptr) return m->u8(0);
    m->u8(1);
    m->u64(w->fp8.n);
    m->u64(w->fp8.k);
    m->u64(static_cast<uint64_t>(w->fp8.block_k));
    m->u64(w->fp4.n);
    m->u64(w->fp4.k);
    encode_seq_header(w->seq, m);
    arrays_of(*w, arrays);
    return;
  }
  const kernels::PackedSeqWeight* w =
      std::get<std::shared_ptr<const kernels::PackedSeqWeight>*>(s.slot)->get();
  if (w == nullptr) return m->u8(0);
  m->u8(2);
  encode_seq_header(*w, m);
  arrays_of(*w, arrays);
}

// The packed bytes a filled slot holds (0 when empty).
inline int64_t slot_bytes(const PackSlot& s) {
  if (auto* lin = std::get_if<std::shared_ptr<const V41PackedLinear>*>(&s.slot))
    return **lin ? (**lin)->bytes() : 0;
  const auto* seq = std::get<std::shared_ptr<const kernels::PackedSeqWeight>*>(s.slot);
  return *seq ? (*seq)->bytes() : 0;
}

}  // namespace strata::pwc
