#include "model/bpe_tokenizer.h"

#include <atomic>
#include <queue>

#include <nlohmann/json.hpp>

namespace strata {

StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::load(const nlohmann::json& root,
                                                           const std::string& path) {
  static std::atomic<uint64_t> next_serial{1};
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  t->serial_ = next_serial.fetch_add(1);
  try {
    const auto& model = root.at("model");
    if (model.contains("dropout") && !model.at("dropout").is_null()) {
      return unimplemented("{}: BPE dropout is not supported", path);
    }
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (model.contains(k) && !model.at(k).is_null() && model.at(k) != "") {
        return unimplemented("{}: BPE {} is not supported", path, k);
      }
    }
    t->byte_fallback_ = model.value("byte_fallback", false);
    t->ignore_merges_ = model.value("ignore_merges", false);
    t->fuse_unk_ = model.value("fuse_unk", false);
    for (const auto& [tok, idj] : model.at("vocab").items()) {
      STRATA_ASSIGN_OR_RETURN(const int32_t id, checked_token_id(idj, root, tok, path));
      if (static_cast<size_t>(id) >= t->tokens_.size()) t->tokens_.resize(static_cast<size_t>(id) + 1);
      t->tokens_[id] = tok;
      t->vocab_.emplace(tok, id);
    }
    const auto& merges = model.at("merges");
    t->merges_.reserve(merges.size() * 2);
    int32_t rank = 0;
    for (const auto& m : merges) {
      std::string a, b;
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          return data_loss("{}: malformed merge '{}'", path, s);
        }
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (m.is_array() && m.size() == 2) {
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
      } else {
        return data_loss("{}: malformed merge entry #{}", path, rank);
      }
      auto ia = t->vocab_.find(a), ib = t->vocab_.find(b), iab = t->vocab_.find(a + b);
      if (ia == t->vocab_.end() || ib == t->vocab_.end() || iab == t->vocab_.end()) {
        return data_loss("{}: merge #{} '{}' + '{}' uses a token missing from the vocab", path,
                         rank, a, b);
      }
      t->merges_[pair_key(ia->second, ib->second)] = Merge{rank, iab->second};
      ++rank;
    }
    if (model.contains("unk_token") && model.at("unk_token").is_string()) {
      auto it = t->vocab_.find(model.at("unk_token").get<std::string>());
      if (it != t->vocab_.end()) t->unk_ = it->second;
    }
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument("{}: malformed BPE model: {}", path, e.what());
  }
  STRATA_RETURN_IF_ERROR(t->init_common(root, path).with_context(path));
  t->byte_level_ = t->pre_.byte_level();
  const auto& table = tok::byte_level_table();
  for (int b = 0; b < 256; ++b) {
    auto it = t->vocab_.find(t->byte_level_ ? table.byte_to_utf8[b] : std::string(1, static_cast<char>(b)));
    t->byte_ids_[b] = it == t->vocab_.end() ? -1 : it->second;
  }
  return t;
}

void BpeTokenizer::merge_symbols(std::vector<int32_t>* syms) const {
  const int32_t n = static_cast<int32_t>(syms->size());
  if (n < 2) return;
  struct Sym {
    int32_t id, prev, next;
  };
  std::vector<Sym> s(n);
  for (int32_t i = 0; i < n; ++i) s[i] = {(*syms)[i], i - 1, i + 1 < n ? i + 1 : -1};
  struct Cand {
    int32_t rank, pos, right, lid, rid, merged;
  };
  // Min-heap on (rank, pos): lowest rank first, leftmost on ties (HF Word::merge_all).
  auto worse = [](const Cand& x, const Cand& y) {
    return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
  };
  std::priority_queue<Cand, std::vector<Cand>, decltype(worse)> pq(worse);
  auto push_pair = [&](int32_t l, int32_t r) {
    auto it = merges_.find(pair_key(s[l].id, s[r].id));
    if (it != merges_.end()) pq.push({it->second.rank, l, r, s[l].id, s[r].id, it->second.id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i, i + 1);
  while (!pq.empty()) {
    const Cand c = pq.top();
    pq.pop();
    if (s[c.pos].id != c.lid || s[c.pos].next != c.right || s[c.right].id != c.rid) continue;
    s[c.pos].id = c.merged;
    const int32_t nn = s[c.right].next;
    s[c.pos].next = nn;
    if (nn >= 0) s[nn].prev = c.pos;
    s[c.right].id = -1;
    if (s[c.pos].prev >= 0) push_pair(s[c.pos].prev, c.pos);
    if (nn >= 0) push_pair(c.pos, nn);
  }
  syms->clear();
  for (int32_t i = 0; i >= 0; i = s[i].next) syms->push_back(s[i].id);
}

namespace {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
struct PieceCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
};
constexpr size_t kCacheMaxPiece = 32;
constexpr size_t kCacheMaxEntries = 1 << 16;

}  // namespace

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.size() > kCacheMaxPiece) {
    encode_piece_uncached(piece, out);
    return;
  }
  thread_local PieceCache cache;
  if (cache.owner != serial_) {
    cache.map.clear();
    cache.owner = serial_;
  }
  auto it = cache.map.find(piece);
  if (it != cache.map.end()) {
    out->insert(out->end(), it->second.begin(), it->second.end());
    return;
  }
  const size_t before = out->size();
  encode_piece_uncached(piece, out);
  if (cache.map.size() >= kCacheMaxEntries) cache.map.clear();
  cache.map.emplace(std::string(piece), std::vector<int32_t>(out->begin() + before, out->end()));
}

void BpeTokenizer::encode_piece_uncached(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    std::string key;
    if (byte_level_) {
      const auto& table = tok::byte_level_table();
      for (char ch : piece) key += table.byte_to_utf8[static_cast<unsigned char>(ch)];
    } else {
      key = std::string(piece);
    }
    auto it = vocab_.find(key);
    if (it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> syms;
  syms.reserve(piece.size());
  bool last_unk = false;
  auto push_unk = [&]() {
    if (!unk_) return;
    if (fuse_unk_ && last_unk) return;
    syms.push_back(*unk_);
    last_unk = true;
  };
  if (byte_level_) {
    for (char ch : piece) {
      const int32_t id = byte_ids_[static_cast<unsigned char>(ch)];
      if (id >= 0) {
        syms.push_back(id);
        last_unk = false;
      } else {
        push_unk();
      }
    }
  } else {
    for (size_t i = 0; i < piece.size();) {
      const size_t len = std::min<size_t>(tok::utf8_seq_len(static_cast<unsigned char>(piece[i])),
                                          piece.size() - i);
      auto it = vocab_.find(std::string(piece.substr(i, len)));
      if (it != vocab_.end()) {
        syms.push_back(it->second);
        last_unk = false;
      } else if (byte_fallback_) {
        for (size_t k = 0; k < len; ++k) {
          auto bt = vocab_.find(fmt::format("<0x{:02X}>", static_cast<unsigned char>(piece[i + k])));
          if (bt != vocab_.end()) {
            syms.push_back(bt->second);
            last_unk = false;
          } else {
            push_unk();
          }
        }
      } else {
        push_unk();
      }
      i += len;
    }
  }
  merge_symbols(&syms);
  out->insert(out->end(), syms.begin(), syms.end());
}

}  // namespace strata
