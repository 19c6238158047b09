#include "model/tokenizer_util.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include <zlib.h>

namespace strata::tok {

int utf8_seq_len(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 1;
}

namespace {

// Allowed range of the second byte of a sequence with lead `c` (Unicode Table 3-7).
inline void second_byte_range(unsigned char c, unsigned char* lo, unsigned char* hi) {
  *lo = 0x80;
  *hi = 0xBF;
  if (c == 0xE0) *lo = 0xA0;
  else if (c == 0xED) *hi = 0x9F;
  else if (c == 0xF0) *lo = 0x90;
  else if (c == 0xF4) *hi = 0x8F;
}

}  // namespace

size_t utf8_repair_append(std::string_view in, bool final, std::string* out) {
  const auto* p = reinterpret_cast<const unsigned char*>(in.data());
  const size_t n = in.size();
  size_t i = 0;
  while (i < n) {
    // Fast path: a run of ASCII.
    size_t j = i;
    while (j < n && p[j] < 0x80) ++j;
    if (j > i) {
      out->append(in.data() + i, j - i);
      i = j;
      continue;
    }
    const unsigned char c = p[i];
    const int len = utf8_seq_len(c);
    if (len == 1) {  // invalid lead byte (continuation, C0/C1, F5..FF)
      out->append(kReplacementChar);
      ++i;
      continue;
    }
    unsigned char lo, hi;
    second_byte_range(c, &lo, &hi);
    int k = 1;  // bytes of the sequence that are valid so far
    while (k < len && i + k < n) {
      const unsigned char b = p[i + k];
      const bool ok = (k == 1) ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
      if (!ok) break;
      ++k;
    }
    if (k == len) {
      out->append(in.data() + i, len);
      i += len;
    } else if (i + k == n && !final) {
      return i;  // incomplete but may still complete: keep it pending
    } else {
      out->append(kReplacementChar);  // maximal subpart of length k
      i += k;
    }
  }
  return i;
}

std::string utf8_repair(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  utf8_repair_append(in, /*final=*/true, &out);
  return out;
}

bool utf8_valid(std::string_view in) {
  const auto* p = reinterpret_cast<const unsigned char*>(in.data());
  const size_t n = in.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    const int len = utf8_seq_len(c);
    if (len == 1 || i + len > n) return false;
    unsigned char lo, hi;
    second_byte_range(c, &lo, &hi);
    if (p[i + 1] < lo || p[i + 1] > hi) return false;
    for (int k = 2; k < len; ++k) {
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return false;
    }
    i += len;
  }
  return true;
}

void utf8_append(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

const ByteLevelTable& byte_level_table() {
  static const ByteLevelTable table = [] {
    ByteLevelTable t;
    t.cp_to_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + extra++);
      utf8_append(cp, &t.byte_to_utf8[b]);
      t.cp_to_byte[cp] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return table;
}

bool byte_level_decode(std::string_view token, std::string* out) {
  const ByteLevelTable& t = byte_level_table();
  const auto* p = reinterpret_cast<const unsigned char*>(token.data());
  size_t i = 0;
  while (i < token.size()) {
    uint32_t cp;
    const unsigned char c = p[i];
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < token.size()) {
      cp = ((c & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu);
      i += 2;
    } else {
      return false;  // 3/4-byte characters are never in the table
    }
    if (cp >= t.cp_to_byte.size() || t.cp_to_byte[cp] < 0) return false;
    out->push_back(static_cast<char>(t.cp_to_byte[cp]));
  }
  return true;
}

StatusOr<std::string> read_file_maybe_gz(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return not_found("cannot open {}: {}", path, std::strerror(errno));
  std::string raw;
  char buf[1 << 16];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0) raw.append(buf, got);
  const bool err = std::ferror(f);
  std::fclose(f);
  if (err) return data_loss("read error on {}", path);
  if (raw.size() < 2 || static_cast<unsigned char>(raw[0]) != 0x1F ||
      static_cast<unsigned char>(raw[1]) != 0x8B) {
    return raw;
  }
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 32) != Z_OK) return internal_error("inflateInit2 failed for {}", path);
  std::string out;
  out.reserve(raw.size() * 4);
  zs.next_in = reinterpret_cast<Bytef*>(raw.data());
  zs.avail_in = static_cast<uInt>(raw.size());
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof(buf);
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&zs);
      return data_loss("corrupt gzip data in {} (zlib error {})", path, rc);
    }
    out.append(buf, sizeof(buf) - zs.avail_out);
    if (rc == Z_OK && zs.avail_in == 0 && zs.avail_out != 0) {
      inflateEnd(&zs);
      return data_loss("truncated gzip data in {}", path);
    }
  }
  inflateEnd(&zs);
  return out;
}

void AddedTokenTrie::add(std::string_view s, int32_t id) {
  if (s.empty()) return;
  first_byte_[static_cast<unsigned char>(s[0])] = true;
  int32_t node = 0;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    auto& next = nodes_[node].next;
    auto it = std::lower_bound(next.begin(), next.end(), c,
                               [](const auto& e, unsigned char v) { return e.first < v; });
    if (it != next.end() && it->first == c) {
      node = it->second;
    } else {
      const auto child = static_cast<int32_t>(nodes_.size());
      next.insert(it, {c, child});
      nodes_.emplace_back();  // may invalidate `next`; not used after this
      node = child;
    }
  }
  nodes_[node].id = id;
}

std::pair<size_t, int32_t> AddedTokenTrie::longest_prefix(std::string_view text) const {
  std::pair<size_t, int32_t> best{0, -1};
  int32_t node = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const auto& next = nodes_[node].next;
    auto it = std::lower_bound(next.begin(), next.end(), c,
                               [](const auto& e, unsigned char v) { return e.first < v; });
    if (it == next.end() || it->first != c) break;
    node = it->second;
    if (nodes_[node].id >= 0) best = {i + 1, nodes_[node].id};
  }
  return best;
}

std::vector<TextSegment> split_added_tokens(std::string_view text, const AddedTokenTrie& trie) {
  std::vector<TextSegment> out;
  if (trie.empty()) {
    if (!text.empty()) out.push_back({text, -1});
    return out;
  }
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    if (trie.may_start(static_cast<unsigned char>(text[i]))) {
      auto [len, id] = trie.longest_prefix(text.substr(i));
      if (len > 0) {
        if (i > start) out.push_back({text.substr(start, i - start), -1});
        out.push_back({text.substr(i, len), id});
        i += len;
        start = i;
        continue;
      }
    }
    ++i;
  }
  if (start < text.size()) out.push_back({text.substr(start), -1});
  return out;
}

}  // namespace strata::tok
