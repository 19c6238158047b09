// Prefix-cache unit object encoding; see unit_store.h.
#include <cstring>

#include <xxhash.h>

#include "state/unit_store.h"

namespace strata {

namespace {
constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'U', '1'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8 + 8 + 8 + 8 + 4 + 4;

template <typename T>
void put_pod(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

struct Reader {
  const std::vector<uint8_t>& b;
  size_t at = 0;
  template <typename T>
  bool get(T* v) {
    if (b.size() - at < sizeof(T)) return false;
    std::memcpy(v, b.data() + at, sizeof(T));
    at += sizeof(T);
    return true;
  }
};
}  // namespace

std::vector<uint8_t> encode_unit_object(const UnitObject& o) {
  size_t total = kHeaderBytes + 4 * o.tokens.size() + 8;
  for (const auto& s : o.sections) total += 8 + s.size();
  std::vector<uint8_t> out;
  out.reserve(total);
  uint64_t magic;
  std::memcpy(&magic, kMagic, 8);
  put_pod<uint64_t>(out, magic);
  put_pod<uint32_t>(out, kVersion);
  put_pod<uint32_t>(out, o.has_snapshot ? 1u : 0u);
  put_pod<uint64_t>(out, o.identity);
  put_pod<uint64_t>(out, o.key);
  put_pod<uint64_t>(out, o.parent);
  put_pod<int64_t>(out, o.index);
  put_pod<uint32_t>(out, static_cast<uint32_t>(o.tokens.size()));
  put_pod<uint32_t>(out, static_cast<uint32_t>(o.sections.size()));
  const size_t at = out.size();
  out.resize(at + 4 * o.tokens.size());
  if (!o.tokens.empty()) std::memcpy(out.data() + at, o.tokens.data(), 4 * o.tokens.size());
  for (const auto& s : o.sections) {
    put_pod<uint64_t>(out, s.size());
    const size_t at2 = out.size();
    out.resize(at2 + s.size());
    if (!s.empty()) std::memcpy(out.data() + at2, s.data(), s.size());
  }
  put_pod<uint64_t>(out, XXH3_64bits(out.data(), out.size()));
  return out;
}

StatusOr<UnitObject> decode_unit_object(const std::vector<uint8_t>& bytes, uint64_t identity,
                                        uint64_t key, const std::vector<int64_t>& paged_sizes,
                                        const std::vector<int64_t>& snapshot_sizes) {
  if (bytes.size() < kHeaderBytes + 8)
    return data_loss("unit object of {} bytes: shorter than its header", bytes.size());
  uint64_t sum;
  std::memcpy(&sum, bytes.data() + bytes.size() - 8, 8);
  if (XXH3_64bits(bytes.data(), bytes.size() - 8) != sum)
    return data_loss("unit object {:016x}: checksum mismatch ({} bytes)", key, bytes.size());
  if (std::memcmp(bytes.data(), kMagic, 8) != 0) return data_loss("unit object: bad magic");
  Reader r{bytes, 8};
  UnitObject o;
  uint32_t version = 0, flags = 0, n_tokens = 0, n_sections = 0;
  r.get(&version);
  r.get(&flags);
  r.get(&o.identity);
  r.get(&o.key);
  r.get(&o.parent);
  r.get(&o.index);
  r.get(&n_tokens);
  r.get(&n_sections);
  if (version != kVersion)
    return failed_precondition("unit object version {} (this build reads {})", version, kVersion);
  if (o.identity != identity)
    return failed_precondition("unit object {:016x} belongs to another cache (identity {:016x}, "
                               "expected {:016x}: model, formats, unit or layout differ)",
                               key, o.identity, identity);
  if (o.key != key)
    return failed_precondition("unit object stored under {:016x} has key {:016x}", key, o.key);
  o.has_snapshot = (flags & 1u) != 0;
  const size_t want = paged_sizes.size() + (o.has_snapshot ? snapshot_sizes.size() : 0);
  if (n_sections != want)
    return failed_precondition("unit object {:016x}: {} sections, expected {}", key, n_sections,
                               want);
  const size_t body_end = bytes.size() - 8;
  if (body_end - r.at < 4ull * n_tokens) return data_loss("unit object {:016x}: truncated", key);
  o.tokens.resize(n_tokens);
  if (n_tokens) std::memcpy(o.tokens.data(), bytes.data() + r.at, 4ull * n_tokens);
  r.at += 4ull * n_tokens;
  o.sections.resize(n_sections);
  for (uint32_t i = 0; i < n_sections; ++i) {
    const int64_t expect = i < paged_sizes.size() ? paged_sizes[i]
                                                  : snapshot_sizes[i - paged_sizes.size()];
    uint64_t n = 0;
    if (body_end - r.at < 8 || !r.get(&n) || body_end - r.at < n)
      return data_loss("unit object {:016x}: truncated in section {}", key, i);
    if (static_cast<int64_t>(n) != expect)
      return failed_precondition("unit object {:016x}: section {} has {} bytes, expected {}", key,
                                 i, n, expect);
    o.sections[i].assign(bytes.begin() + r.at, bytes.begin() + r.at + n);
    r.at += n;
  }
  if (r.at != body_end) return data_loss("unit object {:016x}: {} trailing bytes", key, body_end - r.at);
  return o;
}

}  // namespace strata
