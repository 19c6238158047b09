#include "model/llama2c_tokenizer.h"

#include <cstring>
#include <queue>

namespace strata {

StatusOr<std::unique_ptr<Llama2cTokenizer>> Llama2cTokenizer::parse(const std::string& data,
                                                                   const std::string& path) {
  std::unique_ptr<Llama2cTokenizer> t(new Llama2cTokenizer());
  size_t off = 0;
  auto read_bytes = [&](void* dst, size_t n) {
    if (data.size() - off < n) return false;
    std::memcpy(dst, data.data() + off, n);
    off += n;
    return true;
  };
  if (!read_bytes(&t->max_token_length_, 4)) return data_loss("{}: too short for a llama2.c tokenizer", path);
  if (t->max_token_length_ <= 0 || t->max_token_length_ > (1 << 16)) {
    return data_loss("{}: implausible max_token_length {}", path, t->max_token_length_);
  }
  while (off < data.size()) {
    float score;
    int32_t len;
    if (!read_bytes(&score, 4) || !read_bytes(&len, 4)) {
      return data_loss("{}: truncated entry for token {}", path, t->pieces_.size());
    }
    if (len < 0 || static_cast<size_t>(len) > data.size() - off) {
      return data_loss("{}: bad length {} for token {}", path, len, t->pieces_.size());
    }
    std::string piece = data.substr(off, static_cast<size_t>(len));
    off += static_cast<size_t>(len);
    t->lookup_.emplace(piece, static_cast<int32_t>(t->pieces_.size()));
    t->pieces_.push_back(std::move(piece));
    t->scores_.push_back(score);
  }
  if (t->pieces_.size() < 3) return data_loss("{}: only {} tokens", path, t->pieces_.size());
  return t;
}

std::vector<int32_t> Llama2cTokenizer::encode(std::string_view text, bool /*parse_special*/) const {
  std::vector<int32_t> toks;
  if (text.empty()) return toks;
  toks.reserve(text.size() + 1);
  if (auto sp = lookup_.find(" "); sp != lookup_.end()) {
    toks.push_back(sp->second);
  }  // run.c would push -1 here; a vocabulary without " " simply gets no prefix
  std::string buf;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) != 0x80) buf.clear();
    buf.push_back(static_cast<char>(c));
    const bool next_cont = i + 1 < text.size() && (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80;
    if (next_cont && buf.size() < 4) continue;
    auto it = lookup_.find(buf);
    if (it != lookup_.end()) {
      toks.push_back(it->second);
    } else {
      for (char b : buf) toks.push_back(static_cast<unsigned char>(b) + 3);
    }
    buf.clear();
  }

  // Greedy merging: best score first, leftmost on ties (run.c scans left to right with '>').
  const int32_t n = static_cast<int32_t>(toks.size());
  struct Sym {
    int32_t id, prev, next;
  };
  std::vector<Sym> s(n);
  for (int32_t i = 0; i < n; ++i) s[i] = {toks[i], i - 1, i + 1 < n ? i + 1 : -1};
  struct Cand {
    float score;
    int32_t pos, right, lid, rid, merged;
  };
  auto worse = [](const Cand& x, const Cand& y) {
    return x.score != y.score ? x.score < y.score : x.pos > y.pos;
  };
  std::priority_queue<Cand, std::vector<Cand>, decltype(worse)> pq(worse);
  std::string cat;
  auto push_pair = [&](int32_t l, int32_t r) {
    const int32_t a = s[l].id, b = s[r].id;
    if (a < 0 || b < 0 || a >= vocab_size() || b >= vocab_size()) return;
    cat.assign(pieces_[a]);
    cat.append(pieces_[b]);
    auto it = lookup_.find(cat);
    if (it == lookup_.end()) return;
    const float sc = scores_[it->second];
    if (!(sc > -1e10f)) return;
    pq.push({sc, l, r, a, b, it->second});
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
  toks.clear();
  for (int32_t i = 0; i >= 0; i = s[i].next) toks.push_back(s[i].id);
  return toks;
}

std::string Llama2cTokenizer::token_bytes(int32_t id, int32_t prev_id) const {
  if (id < 0 || id >= vocab_size()) return {};
  std::string_view p = pieces_[id];
  if (prev_id == kBos && !p.empty() && p[0] == ' ') p.remove_prefix(1);
  if (p.size() == 6 && p.substr(0, 3) == "<0x" && p[5] == '>') {
    auto hex = [](char ch) -> int {
      if (ch >= '0' && ch <= '9') return ch - '0';
      if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
      if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
      return -1;
    };
    const int hi = hex(p[3]), lo = hex(p[4]);
    if (hi >= 0 && lo >= 0) return std::string(1, static_cast<char>(hi * 16 + lo));
  }
  return std::string(p);
}

std::optional<int32_t> Llama2cTokenizer::token_to_id(std::string_view token) const {
  auto it = lookup_.find(std::string(token));
  if (it == lookup_.end()) return std::nullopt;
  return it->second;
}

std::string Llama2cTokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return pieces_[id];
}

}  // namespace strata
