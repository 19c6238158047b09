// Engram n-gram hashing (see engram_hash.h; reference inference/engram.py of V4.1).
#include "model/engram_hash.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#if defined(STRATA_HAVE_ICU)
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>
#endif

#include "base/check.h"
#include "model/safetensors.h"
#include "model/tokenizer.h"

namespace strata {
namespace {

// numpy SeedSequence constants (numpy/random/bit_generator.pyx).
constexpr uint32_t kInitA = 0x43b0d7e5u;
constexpr uint32_t kMultA = 0x931e8875u;
constexpr uint32_t kInitB = 0x8b51f9ddu;
constexpr uint32_t kMultB = 0x58f38dedu;
constexpr uint32_t kMixMultL = 0xca01f9ddu;
constexpr uint32_t kMixMultR = 0x4973f715u;
constexpr int kXShift = 16;
constexpr int kPoolSize = 4;

uint32_t hashmix(uint32_t value, uint32_t* hash_const) {
  value ^= *hash_const;
  *hash_const *= kMultA;
  value *= *hash_const;
  value ^= value >> kXShift;
  return value;
}
uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t r = kMixMultL * x - kMixMultR * y;
  r ^= r >> kXShift;
  return r;
}

// PCG64 (XSL-RR 128/64) multiplier.
const unsigned __int128 kPcgMult =
    (static_cast<unsigned __int128>(2549297995355413924ULL) << 64) | 4865540595714422341ULL;

}  // namespace

std::vector<uint32_t> numpy_seed_sequence_state(uint64_t seed, int n_words) {
  // entropy as little-endian uint32 words (0 -> [0])
  std::vector<uint32_t> entropy;
  if (seed == 0) entropy.push_back(0);
  for (uint64_t n = seed; n > 0; n >>= 32) entropy.push_back(static_cast<uint32_t>(n & 0xffffffffu));
  return numpy_seed_sequence_state_words(entropy, n_words);
}

std::vector<uint32_t> numpy_seed_sequence_state_words(std::span<const uint32_t> entropy,
                                                      int n_words) {
  uint32_t pool[kPoolSize];
  uint32_t hc = kInitA;
  for (int i = 0; i < kPoolSize; ++i) {
    pool[i] = hashmix(i < static_cast<int>(entropy.size()) ? entropy[i] : 0u, &hc);
  }
  for (int s = 0; s < kPoolSize; ++s) {
    for (int d = 0; d < kPoolSize; ++d) {
      if (s != d) pool[d] = mix(pool[d], hashmix(pool[s], &hc));
    }
  }
  for (size_t s = kPoolSize; s < entropy.size(); ++s) {
    for (int d = 0; d < kPoolSize; ++d) pool[d] = mix(pool[d], hashmix(entropy[s], &hc));
  }
  std::vector<uint32_t> out(static_cast<size_t>(n_words));
  uint32_t hb = kInitB;
  for (int i = 0; i < n_words; ++i) {
    uint32_t v = pool[i % kPoolSize];
    v ^= hb;
    hb *= kMultB;
    v *= hb;
    v ^= v >> kXShift;
    out[static_cast<size_t>(i)] = v;
  }
  return out;
}

NumpyPcg64::NumpyPcg64(uint64_t seed) {
  // generate_state(4, uint64): 8 uint32 words viewed little-endian as 4 uint64
  const std::vector<uint32_t> w = numpy_seed_sequence_state(seed, 8);
  uint64_t v[4];
  for (int i = 0; i < 4; ++i) v[i] = static_cast<uint64_t>(w[2 * i]) | (static_cast<uint64_t>(w[2 * i + 1]) << 32);
  const unsigned __int128 initstate = (static_cast<unsigned __int128>(v[0]) << 64) | v[1];
  const unsigned __int128 initseq = (static_cast<unsigned __int128>(v[2]) << 64) | v[3];
  // pcg_setseq_128_srandom_r
  state_ = 0;
  inc_ = (initseq << 1) | 1;
  state_ = state_ * kPcgMult + inc_;
  state_ += initstate;
  state_ = state_ * kPcgMult + inc_;
  has_u32_ = false;
  u32_ = 0;
}

uint64_t NumpyPcg64::next_u64() {
  state_ = state_ * kPcgMult + inc_;
  const uint64_t hi = static_cast<uint64_t>(state_ >> 64);
  const uint64_t lo = static_cast<uint64_t>(state_);
  const unsigned rot = static_cast<unsigned>(state_ >> 122);
  const uint64_t x = hi ^ lo;
  return (x >> rot) | (x << ((64 - rot) & 63));
}

uint32_t NumpyPcg64::next_u32() {
  if (has_u32_) {
    has_u32_ = false;
    return u32_;
  }
  const uint64_t n = next_u64();
  has_u32_ = true;
  u32_ = static_cast<uint32_t>(n >> 32);
  return static_cast<uint32_t>(n & 0xffffffffu);
}

int64_t NumpyPcg64::integers(int64_t low, int64_t high) {
  STRATA_CHECK(high > low);
  const uint64_t rng = static_cast<uint64_t>(high - 1) - static_cast<uint64_t>(low);
  const uint64_t off = static_cast<uint64_t>(low);
  if (rng == 0) return low;
  if (rng <= 0xffffffffULL) {
    if (rng == 0xffffffffULL) return static_cast<int64_t>(off + next_u32());
    const uint32_t r32 = static_cast<uint32_t>(rng);
    const uint32_t excl = r32 + 1;
    uint64_t m = static_cast<uint64_t>(next_u32()) * excl;
    uint32_t leftover = static_cast<uint32_t>(m & 0xffffffffu);
    if (leftover < excl) {
      const uint32_t threshold = (0xffffffffu - r32) % excl;
      while (leftover < threshold) {
        m = static_cast<uint64_t>(next_u32()) * excl;
        leftover = static_cast<uint32_t>(m & 0xffffffffu);
      }
    }
    return static_cast<int64_t>(off + (m >> 32));
  }
  if (rng == ~0ULL) return static_cast<int64_t>(off + next_u64());
  const uint64_t excl = rng + 1;
  unsigned __int128 m = static_cast<unsigned __int128>(next_u64()) * excl;
  uint64_t leftover = static_cast<uint64_t>(m);
  if (leftover < excl) {
    const uint64_t threshold = (~0ULL - rng) % excl;
    while (leftover < threshold) {
      m = static_cast<unsigned __int128>(next_u64()) * excl;
      leftover = static_cast<uint64_t>(m);
    }
  }
  return static_cast<int64_t>(off + static_cast<uint64_t>(m >> 64));
}

namespace {
uint64_t mulmod(uint64_t a, uint64_t b, uint64_t m) {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(a) * b % m);
}
uint64_t powmod(uint64_t a, uint64_t e, uint64_t m) {
  uint64_t r = 1;
  a %= m;
  while (e) {
    if (e & 1) r = mulmod(r, a, m);
    a = mulmod(a, a, m);
    e >>= 1;
  }
  return r;
}
}  // namespace

bool is_prime_u64(uint64_t n) {
  if (n < 2) return false;
  for (uint64_t p : {2ULL, 3ULL, 5ULL, 7ULL, 11ULL, 13ULL, 17ULL, 19ULL, 23ULL, 29ULL, 31ULL, 37ULL}) {
    if (n % p == 0) return n == p;
  }
  uint64_t d = n - 1;
  int s = 0;
  while ((d & 1) == 0) {
    d >>= 1;
    ++s;
  }
  // deterministic for all 64-bit n with these bases
  for (uint64_t a : {2ULL, 3ULL, 5ULL, 7ULL, 11ULL, 13ULL, 17ULL, 19ULL, 23ULL, 29ULL, 31ULL, 37ULL}) {
    uint64_t x = powmod(a, d, n);
    if (x == 1 || x == n - 1) continue;
    bool composite = true;
    for (int r = 1; r < s; ++r) {
      x = mulmod(x, x, n);
      if (x == n - 1) {
        composite = false;
        break;
      }
    }
    if (composite) return false;
  }
  return true;
}

StatusOr<EngramHashConstants> compute_engram_constants(const EngramHashConfig& cfg) {
  if (cfg.layer_ids.empty()) return invalid_argument("engram: engram_layer_ids is empty");
  if (cfg.max_ngram_size < 2) {
    return invalid_argument("engram: engram_max_ngram_size must be >= 2, got {}", cfg.max_ngram_size);
  }
  if (cfg.n_heads < 1) return invalid_argument("engram: engram_n_heads must be >= 1, got {}", cfg.n_heads);
  if (cfg.engram_vocab_size < 1) {
    return invalid_argument("engram: engram_vocab_size must be >= 1, got {}", cfg.engram_vocab_size);
  }
  if (cfg.compressed_vocab_size < 1) {
    return invalid_argument("engram: engram_compressed_vocab_size must be >= 1, got {}",
                            cfg.compressed_vocab_size);
  }
  if (!cfg.num_embeddings.empty() && cfg.num_embeddings.size() != cfg.layer_ids.size()) {
    return invalid_argument("engram: engram_num_embeddings has {} entries for {} layers",
                            cfg.num_embeddings.size(), cfg.layer_ids.size());
  }
  EngramHashConstants c;
  std::set<int64_t> seen;
  for (size_t l = 0; l < cfg.layer_ids.size(); ++l) {
    if (cfg.layer_ids[l] < 0) return invalid_argument("engram: negative layer id {}", cfg.layer_ids[l]);
    std::vector<int64_t> primes;
    for (int n = 0; n < cfg.max_ngram_size - 1; ++n) {
      int64_t current = cfg.engram_vocab_size - 1;
      for (int h = 0; h < cfg.n_heads; ++h) {
        int64_t cand = current + 1;
        while (!is_prime_u64(static_cast<uint64_t>(cand)) || seen.count(cand)) ++cand;
        current = cand;
        seen.insert(cand);
        primes.push_back(cand);
      }
    }
    std::vector<int64_t> offsets(primes.size());
    int64_t sum = 0;
    for (size_t i = 0; i < primes.size(); ++i) {
      offsets[i] = sum;
      sum += primes[i];
    }
    if (!cfg.num_embeddings.empty() && cfg.num_embeddings[l] != sum) {
      return failed_precondition(
          "engram: layer {} table has {} rows in the config but its hash primes sum to {}",
          cfg.layer_ids[l], cfg.num_embeddings[l], sum);
    }
    const int64_t bound =
        std::max<int64_t>(1, (std::numeric_limits<int64_t>::max() / cfg.compressed_vocab_size) / 2);
    NumpyPcg64 rng(static_cast<uint64_t>(10007) * static_cast<uint64_t>(cfg.layer_ids[l]));
    std::vector<int64_t> mult(static_cast<size_t>(cfg.max_ngram_size));
    for (auto& m : mult) m = rng.integers(0, bound) * 2 + 1;
    c.primes.push_back(std::move(primes));
    c.offsets.push_back(std::move(offsets));
    c.multipliers.push_back(std::move(mult));
  }
  return c;
}

// ---------------------------------------------------------------------------------------
// Token normalization (subset of NFKC -> NFD -> StripAccents -> Lowercase -> whitespace).
namespace {

bool decode_utf8(const std::string& s, std::vector<char32_t>* out) {
  out->clear();
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    char32_t cp;
    int len;
    if (c < 0x80) {
      cp = c;
      len = 1;
    } else if ((c & 0xe0) == 0xc0) {
      cp = c & 0x1f;
      len = 2;
    } else if ((c & 0xf0) == 0xe0) {
      cp = c & 0x0f;
      len = 3;
    } else if ((c & 0xf8) == 0xf0) {
      cp = c & 0x07;
      len = 4;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (int k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      return false;
    }
    out->push_back(cp);
    i += static_cast<size_t>(len);
  }
  return true;
}

void append_utf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

bool is_unicode_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

#if defined(STRATA_HAVE_ICU)
// Full Unicode path (ICU): NFKC, NFD, drop General_Category=Mark (Mn/Mc/Me, as tokenizers'
// is_combining_mark), then per-code-point full lowercase (Rust char::to_lowercase has no
// context, so each code point is lowercased alone).
StatusOr<std::vector<char32_t>> nfkc_nfd_strip_lower(const std::string& utf8) {
  UErrorCode err = U_ZERO_ERROR;
  std::vector<UChar> u16(utf8.size() * 2 + 8);
  int32_t n16 = 0;
  u_strFromUTF8(u16.data(), static_cast<int32_t>(u16.size()), &n16, utf8.data(),
                static_cast<int32_t>(utf8.size()), &err);
  if (U_FAILURE(err)) return invalid_argument("engram_normalize: invalid UTF-8");
  auto normalize = [](const UNormalizer2* norm, const std::vector<UChar>& in, int32_t n,
                      std::vector<UChar>* out) -> int32_t {
    UErrorCode e = U_ZERO_ERROR;
    out->assign(static_cast<size_t>(n) * 18 + 8, 0);
    const int32_t r = unorm2_normalize(norm, in.data(), n, out->data(),
                                       static_cast<int32_t>(out->size()), &e);
    return U_FAILURE(e) ? -1 : r;
  };
  UErrorCode e1 = U_ZERO_ERROR, e2 = U_ZERO_ERROR;
  const UNormalizer2* nfkc = unorm2_getNFKCInstance(&e1);
  const UNormalizer2* nfd = unorm2_getNFDInstance(&e2);
  if (U_FAILURE(e1) || U_FAILURE(e2)) return internal_error("engram_normalize: ICU normalizers unavailable");
  std::vector<UChar> a, b;
  const int32_t na = normalize(nfkc, u16, n16, &a);
  if (na < 0) return internal_error("engram_normalize: NFKC failed");
  const int32_t nb = normalize(nfd, a, na, &b);
  if (nb < 0) return internal_error("engram_normalize: NFD failed");
  std::vector<char32_t> out;
  for (int32_t i = 0; i < nb;) {
    UChar32 cp;
    U16_NEXT(b.data(), i, nb, cp);
    const int8_t t = u_charType(cp);
    if (t == U_NON_SPACING_MARK || t == U_ENCLOSING_MARK || t == U_COMBINING_SPACING_MARK) continue;
    UChar one[2];
    int32_t len = 0;
    U16_APPEND_UNSAFE(one, len, cp);
    UChar low[8];
    UErrorCode e = U_ZERO_ERROR;
    const int32_t nl = u_strToLower(low, 8, one, len, "", &e);
    if (U_FAILURE(e)) return internal_error("engram_normalize: lowercase failed");
    for (int32_t j = 0; j < nl;) {
      UChar32 lc;
      U16_NEXT(low, j, nl, lc);
      out.push_back(static_cast<char32_t>(lc));
    }
  }
  return out;
}
#else
// Table path (no ICU): ASCII, Latin-1, combining diacritics, fullwidth ASCII forms and a
// few case-less invariant blocks; anything else is reported.
StatusOr<std::vector<char32_t>> nfkc_nfd_strip_lower(const std::string& utf8) {
  std::vector<char32_t> cps;
  if (!decode_utf8(utf8, &cps)) return invalid_argument("engram_normalize: invalid UTF-8");
  std::vector<char32_t> a;
  for (char32_t c : cps) {
    if (c < 0x80) {
      a.push_back(c >= 'A' && c <= 'Z' ? c + 0x20 : c);
    } else if (c >= 0x300 && c <= 0x36f) {
      // combining diacritical marks (Mn): stripped
    } else if (c >= 0xc0 && c <= 0xff) {
      const char32_t base = latin1_base(c);
      if (base) {
        a.push_back(base >= 'A' && base <= 'Z' ? base + 0x20 : base);
      } else if (c == 0xc6 || c == 0xd0 || c == 0xd8 || c == 0xde) {
        a.push_back(c + 0x20);  // Æ Ð Ø Þ -> lowercase
      } else {
        a.push_back(c);  // × ß æ ð ÷ ø þ unchanged
      }
    } else if (c >= 0xff01 && c <= 0xff5e) {
      const char32_t ascii = c - 0xff01 + 0x21;  // fullwidth forms (NFKC)
      a.push_back(ascii >= 'A' && ascii <= 'Z' ? ascii + 0x20 : ascii);
    } else if (c == 0xa0) {
      a.push_back(0x20);  // NO-BREAK SPACE -> SPACE (NFKC)
    } else if ((c >= 0x2500 && c <= 0x259f) || (c >= 0x4e00 && c <= 0x9fff) ||
               (c >= 0xe000 && c <= 0xf8ff) || c == 0xfffd) {
      a.push_back(c);  // box drawing / block elements / CJK / private use: invariant
    } else {
      return invalid_argument(
          "engram_normalize: code point U+{:04X} needs Unicode normalization data this build "
          "lacks (built without ICU); inject the Engram token map from a file instead",
          static_cast<uint32_t>(c));
    }
  }
  return a;
}
#endif

}  // namespace

StatusOr<std::string> engram_normalize(const std::string& utf8) {
  auto mapped = nfkc_nfd_strip_lower(utf8);
  if (!mapped.ok()) return mapped.status();
  const std::vector<char32_t>& a = *mapped;
  // Replace [ \t\r\n]+ with a single space.
  std::vector<char32_t> b;
  for (char32_t c : a) {
    const bool ws = c == ' ' || c == '\t' || c == '\r' || c == '\n';
    if (ws) {
      if (b.empty() || b.back() != 0x110000) b.push_back(0x110000);  // run marker
    } else {
      b.push_back(c);
    }
  }
  for (auto& c : b) {
    if (c == 0x110000) c = ' ';
  }
  // "^ $" -> sentinel, Strip, sentinel -> " ".
  if (b.size() == 1 && b[0] == ' ') b[0] = 0xe000;
  size_t lo = 0, hi = b.size();
  while (lo < hi && is_unicode_whitespace(b[lo])) ++lo;
  while (hi > lo && is_unicode_whitespace(b[hi - 1])) --hi;
  std::string out;
  for (size_t i = lo; i < hi; ++i) append_utf8(b[i] == 0xe000 ? U' ' : b[i], &out);
  return out;
}

StatusOr<std::vector<int64_t>> build_compressed_token_map(const Tokenizer& tok,
                                                          int64_t* n_compressed) {
  const int32_t v = tok.vocab_size();
  std::vector<int64_t> map(static_cast<size_t>(v));
  std::unordered_map<std::string, int64_t> key_to_new;
  std::vector<char32_t> scratch;
  for (int32_t id = 0; id < v; ++id) {
    const std::string text = tok.token_bytes(id);
    std::string key;
    // HF decode replaces invalid UTF-8 with U+FFFD; such tokens are keyed by their raw form
    if (!decode_utf8(text, &scratch) ||
        std::find(scratch.begin(), scratch.end(), char32_t{0xfffd}) != scratch.end()) {
      key = tok.id_to_token(id);
    } else {
      auto norm = engram_normalize(text);
      if (!norm.ok()) return norm.status().with_context(fmt::format("token {}", id));
      key = norm->empty() ? text : *norm;
    }
    auto it = key_to_new.find(key);
    if (it == key_to_new.end()) {
      const int64_t nid = static_cast<int64_t>(key_to_new.size());
      it = key_to_new.emplace(key, nid).first;
    }
    map[static_cast<size_t>(id)] = it->second;
  }
  if (n_compressed) *n_compressed = static_cast<int64_t>(key_to_new.size());
  return map;
}

StatusOr<std::vector<int64_t>> load_token_map(const std::string& path) {
  const bool is_json = path.size() >= 5 && path.substr(path.size() - 5) == ".json";
  if (is_json) {
    std::ifstream in(path);
    if (!in) return not_found("engram token map {}: cannot open", path);
    try {
      nlohmann::json j = nlohmann::json::parse(in);
      if (j.is_object() && j.contains("engram.token_map")) j = j["engram.token_map"];
      if (!j.is_array()) return invalid_argument("engram token map {}: expected a JSON array", path);
      std::vector<int64_t> m;
      m.reserve(j.size());
      for (const auto& e : j) {
        if (!e.is_number_integer()) {
          return invalid_argument("engram token map {}: non-integer entry", path);
        }
        m.push_back(e.get<int64_t>());
      }
      return m;
    } catch (const std::exception& e) {
      return invalid_argument("engram token map {}: {}", path, e.what());
    }
  }
  auto file = SafetensorsFile::open(path);
  if (!file.ok()) return file.status();
  const auto& tensors = (*file)->tensors();
  const TensorView* t = nullptr;
  auto it = tensors.find("engram.token_map");
  if (it != tensors.end()) {
    t = &it->second;
  } else if (tensors.size() == 1) {
    t = &tensors.begin()->second;
  } else {
    return not_found("engram token map {}: no tensor 'engram.token_map'", path);
  }
  std::vector<int64_t> m(static_cast<size_t>(t->numel()));
  if (t->dtype == DType::kI64) {
    std::memcpy(m.data(), t->data, m.size() * 8);
  } else if (t->dtype == DType::kI32) {
    for (size_t i = 0; i < m.size(); ++i) {
      int32_t x;
      std::memcpy(&x, t->data + i * 4, 4);
      m[i] = x;
    }
  } else {
    return invalid_argument("engram token map {}: tensor {} has dtype {}, expected I64 or I32",
                            path, t->name, dtype_name(t->dtype));
  }
  return m;
}

// ---------------------------------------------------------------------------------------

StatusOr<EngramHasher> EngramHasher::create(const EngramHashConfig& cfg,
                                            std::vector<int64_t> token_map) {
  auto consts = compute_engram_constants(cfg);
  if (!consts.ok()) return consts.status();
  if (cfg.pad_id < 0 || cfg.pad_id >= static_cast<int64_t>(token_map.size())) {
    return invalid_argument("engram: pad id {} outside the token map ({} entries)", cfg.pad_id,
                            token_map.size());
  }
  for (size_t i = 0; i < token_map.size(); ++i) {
    if (token_map[i] < 0 || token_map[i] >= cfg.compressed_vocab_size) {
      return invalid_argument("engram: token map entry {} = {} outside [0, {})", i, token_map[i],
                              cfg.compressed_vocab_size);
    }
  }
  EngramHasher h;
  h.cfg_ = cfg;
  h.consts_ = std::move(*consts);
  h.token_map_ = std::move(token_map);
  h.mapped_pad_ = h.token_map_[static_cast<size_t>(cfg.pad_id)];
  return h;
}

int64_t EngramHasher::map_token(int64_t token) const {
  if (token == kDead) return kDead;
  STRATA_CHECK(token >= 0 && token < static_cast<int64_t>(token_map_.size()));
  return token_map_[static_cast<size_t>(token)];
}

void EngramHasher::hash(std::span<const int64_t> history, std::span<const int64_t> tokens,
                        int64_t start_pos, int64_t* out) const {
  const int hl = history_len();
  const int64_t hist_n = std::min<int64_t>(start_pos, hl);
  STRATA_CHECK(static_cast<int64_t>(history.size()) == hist_n);
  const int64_t n = static_cast<int64_t>(tokens.size());
  // window of mapped ids: [history..., mapped tokens...], index 0 = position start_pos - hist_n
  std::vector<int64_t> win(history.begin(), history.end());
  for (int64_t t : tokens) win.push_back(map_token(t));
  const int ng = cfg_.max_ngram_size, nh = cfg_.n_heads, cols = n_cols(), nl = n_layers();
  std::vector<int64_t> u(static_cast<size_t>(ng));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pos = start_pos + i;
    const int64_t wi = hist_n + i;
    bool blocked = false;
    for (int k = 0; k < ng; ++k) {
      int64_t src = 0;
      if (pos < k) {
        blocked = true;
      } else {
        src = win[static_cast<size_t>(wi - k)];
        if (src == kDead) blocked = true;
      }
      u[static_cast<size_t>(k)] = blocked ? mapped_pad_ : src;
    }
    for (int l = 0; l < nl; ++l) {
      const auto& mult = consts_.multipliers[static_cast<size_t>(l)];
      const auto& primes = consts_.primes[static_cast<size_t>(l)];
      const auto& offs = consts_.offsets[static_cast<size_t>(l)];
      int64_t* o = out + (i * nl + l) * cols;
      uint64_t rolling = static_cast<uint64_t>(u[0]) * static_cast<uint64_t>(mult[0]);
      for (int k = 1; k < ng; ++k) {
        rolling ^= static_cast<uint64_t>(u[static_cast<size_t>(k)]) *
                   static_cast<uint64_t>(mult[static_cast<size_t>(k)]);
        const int64_t r = static_cast<int64_t>(rolling);
        for (int h = 0; h < nh; ++h) {
          const size_t c = static_cast<size_t>((k - 1) * nh + h);
          const int64_t p = primes[c];
          int64_t m = r % p;
          if (m < 0) m += p;  // Python-style modulo
          o[c] = m + offs[c];
        }
      }
    }
  }
}

void EngramHasher::advance_history(std::vector<int64_t>* history,
                                   std::span<const int64_t> tokens) const {
  for (int64_t t : tokens) history->push_back(map_token(t));
  const size_t hl = static_cast<size_t>(history_len());
  if (history->size() > hl) history->erase(history->begin(), history->end() - static_cast<long>(hl));
}

}  // namespace strata
