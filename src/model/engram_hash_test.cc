// Tests for model/engram_hash against the V4.1-tiny golden cases (made by DeepSeek's
// reference engram.py: engram.multipliers / primes / offsets / token_map and
// case08.engram_hash_ids), plus hand-checkable properties of the numpy generator and primes.
#include "model/engram_hash.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/safetensors.h"
#include "model/tokenizer.h"

namespace strata {
namespace {

std::string src_dir() {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
#ifdef STRATA_SOURCE_DIR
  if (!e) return STRATA_SOURCE_DIR;
#endif
  return e ? e : ".";
}
std::string golden_dir() { return src_dir() + "/testdata/golden/v41-tiny"; }
std::string model_dir() { return src_dir() + "/models/deepseek-v41-tiny"; }

std::vector<int64_t> ints(const TensorView& t) {
  EXPECT_EQ(t.dtype, DType::kI64);
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.data, v.size() * 8);
  return v;
}

EngramHashConfig tiny_config() {
  std::ifstream in(model_dir() + "/inference-config.json");
  EXPECT_TRUE(in.good());
  const nlohmann::json j = nlohmann::json::parse(in);
  EngramHashConfig c;
  c.layer_ids = j["engram_layer_ids"].get<std::vector<int>>();
  c.max_ngram_size = j["engram_max_ngram_size"];
  c.n_heads = j["engram_n_heads"];
  c.engram_vocab_size = j["engram_vocab_size"];
  c.compressed_vocab_size = j["engram_compressed_vocab_size"];
  c.pad_id = j["engram_pad_id"];
  c.num_embeddings = j["engram_num_embeddings"].get<std::vector<int64_t>>();
  return c;
}

class EngramGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    auto f = SafetensorsFile::open(golden_dir() + "/cases.safetensors");
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    file_ = std::move(*f);
  }
  std::vector<int64_t> tensor(const std::string& name) {
    auto it = file_->tensors().find(name);
    EXPECT_NE(it, file_->tensors().end()) << name;
    if (it == file_->tensors().end()) return {};
    return ints(it->second);
  }
  std::unique_ptr<SafetensorsFile> file_;
};

TEST(EngramHash, PrimalityAndSeedSequenceBasics) {
  EXPECT_TRUE(is_prime_u64(2));
  EXPECT_TRUE(is_prime_u64(211));
  EXPECT_FALSE(is_prime_u64(221));  // 13 * 17
  EXPECT_TRUE(is_prime_u64(16000057));
  EXPECT_FALSE(is_prime_u64(16000001));
  EXPECT_TRUE(is_prime_u64(18446744073709551557ULL));  // largest 64-bit prime
  EXPECT_FALSE(is_prime_u64(3215031751ULL));           // strong pseudoprime to bases 2,3,5,7
  // numpy's own reference data (numpy/random/tests/test_seed_sequence.py, first two rows)
  const std::vector<uint32_t> in0 = {3735928559u, 195939070u, 229505742u, 305419896u};
  const std::vector<uint32_t> out0 = {3914649087u, 576849849u, 3593928901u, 2229911004u};
  EXPECT_EQ(numpy_seed_sequence_state_words(in0, 4), out0);
  const std::vector<uint32_t> in1 = {3668361503u, 4165561550u, 1661411377u, 3634257570u};
  const std::vector<uint32_t> out1 = {2240804226u, 3691353228u, 1365957195u, 2654016646u};
  EXPECT_EQ(numpy_seed_sequence_state_words(in1, 4), out1);
}

TEST(EngramHash, Pcg64MatchesNumpyTestVectors) {
  // numpy/random/tests/data/pcg64-testset-1.csv (seed 0xdeadbeaf) and -2.csv (seed 0)
  NumpyPcg64 a(0xdeadbeafULL);
  EXPECT_EQ(a.next_u64(), 0x60d24054e17a0698ULL);
  EXPECT_EQ(a.next_u64(), 0xd5e79d89856e4f12ULL);
  EXPECT_EQ(a.next_u64(), 0xd254972fe64bd782ULL);
  EXPECT_EQ(a.next_u64(), 0xf1e3072a53c72571ULL);
  NumpyPcg64 b(0);
  EXPECT_EQ(b.next_u64(), 0xa30febcfd9c2825fULL);
  EXPECT_EQ(b.next_u64(), 0x4510bdf882d9d721ULL);
  EXPECT_EQ(b.next_u64(), 0xa7d3da94ecde8b8ULL);
  // next_u32 hands out the low half, then the high half, of one 64-bit draw
  NumpyPcg64 c(0);
  EXPECT_EQ(c.next_u32(), 0xd9c2825fu);
  EXPECT_EQ(c.next_u32(), 0xa30febcfu);
}

TEST_F(EngramGolden, ConstantsMatchReference) {
  auto c = compute_engram_constants(tiny_config());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const auto primes = tensor("engram.primes");        // [2, 3, 2]
  const auto offsets = tensor("engram.offsets");      // [2, 6]
  const auto mult = tensor("engram.multipliers");     // [2, 4]
  ASSERT_EQ(primes.size(), 12u);
  ASSERT_EQ(mult.size(), 8u);
  for (size_t l = 0; l < 2; ++l) {
    for (size_t i = 0; i < 6; ++i) {
      EXPECT_EQ(c->primes[l][i], primes[l * 6 + i]) << l << "," << i;
      EXPECT_EQ(c->offsets[l][i], offsets[l * 6 + i]) << l << "," << i;
    }
    for (size_t k = 0; k < 4; ++k) EXPECT_EQ(c->multipliers[l][k], mult[l * 4 + k]) << l << "," << k;
  }
}

TEST(EngramHash, ReleasedConfigPrimesAndMultipliers) {
  // Released V4.1-Flash: layers {1, 14}, 4-grams, 8 heads, vocab 16e6, 99092 compressed ids.
  // Spec §2.9: the first primes above 15,999,999 are 16000057, 16000079, 16000081, the last
  // three of the 48 are 16000877, 16000879, 16000889, and the multipliers quoted there.
  EngramHashConfig c;
  c.layer_ids = {1, 14};
  c.max_ngram_size = 4;
  c.n_heads = 8;
  c.engram_vocab_size = 16000000;
  c.compressed_vocab_size = 99092;
  auto k = compute_engram_constants(c);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->primes[0][0], 16000057);
  EXPECT_EQ(k->primes[0][1], 16000079);
  EXPECT_EQ(k->primes[0][2], 16000081);
  EXPECT_EQ(k->primes[1][21], 16000877);
  EXPECT_EQ(k->primes[1][22], 16000879);
  EXPECT_EQ(k->primes[1][23], 16000889);
  const std::vector<int64_t> m1 = {76632096046245, 4839876093313, 35959672319349, 73987337458391};
  const std::vector<int64_t> m14 = {67716810739261, 51510806800915, 30921347202721, 82619226485591};
  EXPECT_EQ(k->multipliers[0], m1);
  EXPECT_EQ(k->multipliers[1], m14);
}

TEST(EngramHash, ConfigErrors) {
  EngramHashConfig c = tiny_config();
  c.num_embeddings[1] += 1;
  auto k = compute_engram_constants(c);
  EXPECT_FALSE(k.ok());
  c = tiny_config();
  c.max_ngram_size = 1;
  EXPECT_FALSE(compute_engram_constants(c).ok());
}

TEST_F(EngramGolden, TokenMapFromTokenizerMatchesReference) {
  auto tok = load_tokenizer(model_dir() + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  int64_t n = 0;
  auto map = build_compressed_token_map(**tok, &n);
  ASSERT_TRUE(map.ok()) << map.status().to_string();
  EXPECT_EQ(n, tiny_config().compressed_vocab_size);
  const auto golden = tensor("engram.token_map");
  ASSERT_EQ(map->size(), golden.size());
  for (size_t i = 0; i < golden.size(); ++i) ASSERT_EQ((*map)[i], golden[i]) << "token " << i;
}

TEST(EngramHash, NormalizerChain) {
  EXPECT_EQ(*engram_normalize(" TOK1\xC3\x89"), "tok1e");      // " TOK1É"
  EXPECT_EQ(*engram_normalize("\ttok5\xC3\xA9"), "tok5e");     // tab + é
  EXPECT_EQ(*engram_normalize(" "), " ");                      // lone space survives
  EXPECT_EQ(*engram_normalize("\t"), " ");                     // collapses to one space
  EXPECT_EQ(*engram_normalize("  a \n\n b  "), "a b");
  EXPECT_EQ(*engram_normalize("\xEF\xBD\x9C"), "|");           // U+FF5C fullwidth bar
  EXPECT_EQ(*engram_normalize("e\xCC\x81"), "e");              // e + combining acute
  EXPECT_EQ(*engram_normalize("\xC3\x86"), "\xC3\xA6");        // Æ -> æ (no decomposition)
  // U+212B ANGSTROM SIGN: NFKC -> U+00C5, NFD -> A + U+030A, marks dropped, lower-cased.
  // Needs the ICU path (the build always links ICU; the table fallback rejects it).
  EXPECT_EQ(*engram_normalize("\xE2\x84\xAB"), "a");
}

TEST_F(EngramGolden, HashIdsMatchReferenceWholeAndChunked) {
  const auto golden_map = tensor("engram.token_map");
  auto h = EngramHasher::create(tiny_config(), golden_map);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  const auto prompt = tensor("case08.prompt");
  const auto golden = tensor("case08.engram_hash_ids");  // [33, 2, 6]
  const int64_t L = static_cast<int64_t>(prompt.size());
  ASSERT_EQ(static_cast<int64_t>(golden.size()), L * h->n_layers() * h->n_cols());
  for (int64_t chunk : {L, int64_t{1}, int64_t{3}, int64_t{5}}) {
    std::vector<int64_t> out(golden.size());
    std::vector<int64_t> history;
    for (int64_t s = 0; s < L; s += chunk) {
      const int64_t n = std::min(chunk, L - s);
      std::span<const int64_t> toks(prompt.data() + s, static_cast<size_t>(n));
      h->hash(history, toks, s, out.data() + s * h->n_layers() * h->n_cols());
      h->advance_history(&history, toks);
    }
    for (size_t i = 0; i < golden.size(); ++i) ASSERT_EQ(out[i], golden[i]) << "chunk " << chunk << " i " << i;
  }
}

TEST_F(EngramGolden, DeadTokenBlocksLookback) {
  const auto golden_map = tensor("engram.token_map");
  auto h = EngramHasher::create(tiny_config(), golden_map);
  ASSERT_TRUE(h.ok());
  // [a, DEAD, b]: at position 2 every n-gram reaching back over the dead token uses pad, so
  // the hash equals that of [x, y, b] at position 0-style padding, i.e. the same as hashing
  // b at position 0.
  std::vector<int64_t> seq = {10, EngramHasher::kDead, 20};
  std::vector<int64_t> out(3 * h->n_layers() * h->n_cols());
  h->hash({}, seq, 0, out.data());
  std::vector<int64_t> single = {20};
  std::vector<int64_t> out0(h->n_layers() * h->n_cols());
  h->hash({}, single, 0, out0.data());
  for (size_t i = 0; i < out0.size(); ++i) EXPECT_EQ(out[2 * out0.size() + i], out0[i]);
}

TEST_F(EngramGolden, InjectedTokenMapFromSafetensors) {
  auto m = load_token_map(golden_dir() + "/cases.safetensors");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(*m, tensor("engram.token_map"));
  EXPECT_FALSE(load_token_map(golden_dir() + "/missing.json").ok());
}

}  // namespace
}  // namespace strata
