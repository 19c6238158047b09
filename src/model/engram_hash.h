// Engram n-gram hashing of DeepSeek-V4.1 (reference inference/engram.py: EngramLayout,
// compute_hash_multipliers, build_compressed_token_map, NgramHashState); spec
// docs/v41-architecture.md §2.9.
//
// Constants (derived exactly as the reference, for any config / layer ids):
//   primes [layer][n-2][head]: for each Engram layer in order, for each n-gram size
//     n = 2..max_ngram, start at engram_vocab_size - 1 and take, per head, the smallest prime
//     above the previous one that no earlier (layer, n, head) has taken.
//   offsets [layer][col]: exclusive cumulative sum of that layer's flattened primes
//     (col = (n-2)*n_heads + head).
//   multipliers [layer][k], k < max_ngram: numpy.random.default_rng(10007*layer_id)
//     .integers(0, max(1, (INT64_MAX // compressed_vocab) // 2), size=max_ngram) * 2 + 1,
//     reproduced with a C++ numpy SeedSequence + PCG64 + Lemire bounded draw.
// Token map: token id -> compressed id; tokens whose decoded text normalizes alike share an
//   id. Normalizer chain (HF tokenizers): NFKC, NFD, StripAccents, Lowercase, collapse
//   [ \t\r\n]+ to " ", a lone " " is kept, Strip. Keys containing U+FFFD use the raw token
//   string. Ids are assigned in order of first appearance. Built with ICU (STRATA_HAVE_ICU,
//   linked to icu-uc) the chain covers all of Unicode (ICU's Unicode version may differ from
//   the tokenizers crate's in rare code points); without ICU a table covers ASCII, Latin-1,
//   combining diacritics, fullwidth ASCII forms and a few case-less blocks (enough for the
//   golden stand-in tokenizer) and InvalidArgument names any other code point: load the
//   map from a file instead (load_token_map).
// Hash ids, per position p (absolute) and Engram layer l:
//   u_k = map[token at p-k] for k < max_ngram; blocked from the first k where p-k < 0 or the
//   token is DEAD (-1, image span), after which u_k = map[pad_id];
//   P_k = u_k * mult[l][k] (int64, wraps like torch); R = P_0; for n = 2..max_ngram:
//   R ^= P_{n-1}; id[(n-2)*H + h] = (R mod prime[l][n-2][h]) + offset[l][(n-2)*H + h]
//   (Python-style mod: non-negative result).
//   Output layout [n_tok, n_layers, (max_ngram-1)*n_heads] int64.
// Thread safety: EngramHasher is immutable after construction; hashing is a pure function
// of (history, tokens).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace strata {

class Tokenizer;

// numpy.random.Generator(PCG64(SeedSequence(seed))) subset.
class NumpyPcg64 {
 public:
  explicit NumpyPcg64(uint64_t seed);  // SeedSequence(entropy=seed), pool size 4
  uint64_t next_u64();
  uint32_t next_u32();  // numpy's buffered 32-bit draw (low half first)
  // Generator.integers(low, high, dtype=int64) for one value, high exclusive, high > low.
  int64_t integers(int64_t low, int64_t high);

 private:
  unsigned __int128 state_ = 0;
  unsigned __int128 inc_ = 0;
  bool has_u32_ = false;
  uint32_t u32_ = 0;
};

// SeedSequence(entropy=seed).generate_state(n_words, uint32).
std::vector<uint32_t> numpy_seed_sequence_state(uint64_t seed, int n_words);
// SeedSequence(entropy=[words...]) (a list of uint32 words, at least one).
std::vector<uint32_t> numpy_seed_sequence_state_words(std::span<const uint32_t> entropy,
                                                      int n_words);

struct EngramHashConfig {
  std::vector<int> layer_ids;          // engram_layer_ids
  int max_ngram_size = 0;              // engram_max_ngram_size (>= 2)
  int n_heads = 0;                     // engram_n_heads
  int64_t engram_vocab_size = 0;       // prime search start (+1)
  int64_t compressed_vocab_size = 0;   // engram_compressed_vocab_size
  int64_t pad_id = 2;                  // engram_pad_id (raw token id)
  std::vector<int64_t> num_embeddings; // engram_num_embeddings (checked vs the primes' sums)
};

struct EngramHashConstants {
  // primes[l][(n-2)*n_heads + h], offsets[l][same], multipliers[l][k]
  std::vector<std::vector<int64_t>> primes;
  std::vector<std::vector<int64_t>> offsets;
  std::vector<std::vector<int64_t>> multipliers;
};

// Deterministic primality for 64-bit values.
bool is_prime_u64(uint64_t n);
// InvalidArgument for a bad config; FailedPrecondition when num_embeddings is given and
// disagrees with the sum of a layer's primes.
StatusOr<EngramHashConstants> compute_engram_constants(const EngramHashConfig& cfg);

// build_compressed_token_map over every id in [0, tok.vocab_size()). Returns the map and
// sets *n_compressed to the number of distinct keys.
StatusOr<std::vector<int64_t>> build_compressed_token_map(const Tokenizer& tok,
                                                          int64_t* n_compressed);
// The normalizer chain on one UTF-8 string (exposed for tests). InvalidArgument for a code
// point outside the supported tables (see above).
StatusOr<std::string> engram_normalize(const std::string& utf8);
// Loads an injected map: a .safetensors file holding an integer tensor "engram.token_map"
// (or a single integer tensor), or a JSON array of integers.
StatusOr<std::vector<int64_t>> load_token_map(const std::string& path);

class EngramHasher {
 public:
  static constexpr int64_t kDead = -1;  // a token that takes no part in n-grams (image span)
  // `token_map` must cover the vocabulary; every value < cfg.compressed_vocab_size.
  static StatusOr<EngramHasher> create(const EngramHashConfig& cfg,
                                       std::vector<int64_t> token_map);

  int n_layers() const { return static_cast<int>(cfg_.layer_ids.size()); }
  int n_cols() const { return (cfg_.max_ngram_size - 1) * cfg_.n_heads; }
  int history_len() const { return cfg_.max_ngram_size - 1; }
  const EngramHashConstants& constants() const { return consts_; }
  const std::vector<int64_t>& token_map() const { return token_map_; }
  int64_t mapped_pad() const { return mapped_pad_; }

  // Compressed id of a raw token (kDead stays kDead).
  int64_t map_token(int64_t token) const;

  // Hashes `tokens` (raw ids; kDead allowed) at positions [start_pos, start_pos+n).
  // `history` holds the MAPPED ids of positions [start_pos - h, start_pos) with
  // h = min(start_pos, history_len()) (oldest first; kDead allowed); out has
  // n * n_layers() * n_cols() entries. Chunking-invariant by construction.
  void hash(std::span<const int64_t> history, std::span<const int64_t> tokens, int64_t start_pos,
            int64_t* out) const;
  // Updates a history window (mapped ids, oldest first, at most history_len()) with tokens.
  void advance_history(std::vector<int64_t>* history, std::span<const int64_t> tokens) const;

 private:
  EngramHashConfig cfg_;
  EngramHashConstants consts_;
  std::vector<int64_t> token_map_;
  int64_t mapped_pad_ = 0;
};

}  // namespace strata
