// Prefix cache of the Llama runner (LlamaKvState over the state graph's CacheManager), on the
// embedded stories260K model:
//  * a prefix hit followed by the rest of the prompt gives bit-identical next-token logits to
//    a cold run of the whole prompt, at prompt lengths unit-1, unit, unit+1, 2*unit+1 (the
//    kernels are batch- and chunk-invariant, so the different chunking must not matter);
//  * the hit length is floor((len-1)/unit)*unit (at least one token is always computed);
//  * a block shared by a cache entry and running sequences stays valid after the sequence
//    that wrote it is released, and everything held by requests is freed on release
//    (refcounts re-checked by CacheManager::check_invariants).
// Expected values: hit lengths are hand-derived from the contract in model_runner.h; logits
// come from independent cold runs on a fresh runner (no cache).
#include <gtest/gtest.h>

#include <cstring>

#include "exec/llama/llama_runner.h"
#include "exec/runner_factory.h"

namespace strata {
namespace {

std::string model_dir() {
  const char* env = std::getenv("STRATA_SOURCE_DIR");
  return std::string(env != nullptr && *env != 0 ? env : STRATA_SOURCE_DIR) + "/models/stories260K";
}

std::unique_ptr<LlamaRunner> make_runner() {
  RunnerOptions ro;
  ro.threads = 2;
  auto r = LlamaRunner::create(model_dir(), ro);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return std::move(*r);
}

std::vector<int32_t> prompt_of(int64_t n, uint32_t seed) {
  std::vector<int32_t> p = {1};
  uint32_t x = seed;
  while (static_cast<int64_t>(p.size()) < n) {
    x = x * 1664525u + 1013904223u;
    p.push_back(static_cast<int32_t>(3 + (x >> 8) % 500));
  }
  return p;
}

std::vector<float> step(ModelRunner& r, int64_t seq, std::span<const int32_t> toks) {
  std::vector<float> out;
  StepItem it{SeqId{seq}, toks, true};
  Status st = r.step({&it, 1}, &out);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

std::vector<float> cold_logits(const std::vector<int32_t>& prompt) {
  auto r = make_runner();
  EXPECT_TRUE(r->add_sequence(SeqId{1}).ok());
  return step(*r, 1, prompt);
}

int64_t used(const LlamaRunner& r, const std::string& kind) {
  for (const LlamaKvUsage& u : r.kv_state().usage())
    if (u.kind == kind) return u.used_bytes;
  return -1;
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && !a.empty() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(LlamaPrefixCache, AlignmentUnitIs16) {
  auto r = make_runner();
  EXPECT_EQ(r->prefix_alignment(), 16);
}

TEST(LlamaPrefixCache, HitVsColdBitIdenticalAtUnitBoundaries) {
  const int64_t u = 16;
  // len -> expected hit = floor((len-1)/u)*u, by hand.
  const std::vector<std::pair<int64_t, int64_t>> cases = {
      {u - 1, 0}, {u, 0}, {u + 1, u}, {2 * u + 1, 2 * u}};
  for (auto [len, want_hit] : cases) {
    const auto prompt = prompt_of(len, 7);
    const auto cold = cold_logits(prompt);
    auto r = make_runner();
    // Seq 1 computes a longer prompt sharing the first `len` tokens, in odd chunks.
    auto longer = prompt;
    const auto tail = prompt_of(50, 99);
    longer.insert(longer.end(), tail.begin() + 1, tail.end());
    ASSERT_TRUE(r->add_sequence(SeqId{1}).ok());
    EXPECT_EQ(r->attach_cached_prefix(SeqId{1}, longer), 0);  // empty cache
    for (size_t p = 0; p < longer.size(); p += 7)
      step(*r, 1, std::span<const int32_t>(longer).subspan(p, std::min<size_t>(7, longer.size() - p)));
    r->release_sequence(SeqId{1});
    // Seq 2 hits the shared prefix and computes the rest.
    ASSERT_TRUE(r->add_sequence(SeqId{2}).ok());
    const int64_t hit = r->attach_cached_prefix(SeqId{2}, prompt);
    EXPECT_EQ(hit, want_hit) << "len " << len;
    EXPECT_EQ(r->sequence_length(SeqId{2}), hit);
    const auto warm = step(*r, 2, std::span<const int32_t>(prompt).subspan(hit));
    EXPECT_TRUE(same(warm, cold)) << "len " << len << " hit " << hit;
    r->kv_state().check_invariants();
    r->release_sequence(SeqId{2});
    EXPECT_EQ(used(*r, "kv"), 0);
    r->kv_state().check_invariants();
  }
}

TEST(LlamaPrefixCache, DivergingPromptHitsOnlyTheCommonUnits) {
  auto a = prompt_of(40, 3);
  auto b = a;
  b[20] = (b[20] + 1) % 500 + 3;  // differs inside the second unit
  auto r = make_runner();
  ASSERT_TRUE(r->add_sequence(SeqId{1}).ok());
  r->attach_cached_prefix(SeqId{1}, a);
  step(*r, 1, a);
  ASSERT_TRUE(r->add_sequence(SeqId{2}).ok());
  const int64_t hit = r->attach_cached_prefix(SeqId{2}, b);
  EXPECT_EQ(hit, 16);
  EXPECT_TRUE(same(step(*r, 2, std::span<const int32_t>(b).subspan(hit)), cold_logits(b)));
}

TEST(LlamaPrefixCache, SharedBlocksOutliveTheirWriterAndDecodeStaysExact) {
  const auto prompt = prompt_of(33, 11);
  auto r = make_runner();
  ASSERT_TRUE(r->add_sequence(SeqId{1}).ok());
  step(*r, 1, prompt);
  // Seq 2 shares two blocks with seq 1 (still running) and the cache entries.
  ASSERT_TRUE(r->add_sequence(SeqId{2}).ok());
  ASSERT_EQ(r->attach_cached_prefix(SeqId{2}, prompt), 32);
  r->release_sequence(SeqId{1});  // the writer goes; the blocks must stay for seq 2
  r->kv_state().check_invariants();
  std::vector<int32_t> seq = prompt;
  auto warm = step(*r, 2, std::span<const int32_t>(prompt).subspan(32));
  // Decode a few tokens (ids chosen by hand, not sampled) and compare with cold runs.
  for (int32_t t : {42, 7, 300, 5}) {
    seq.push_back(t);
    const int32_t one[] = {t};
    warm = step(*r, 2, one);
  }
  EXPECT_TRUE(same(warm, cold_logits(seq)));
  r->release_sequence(SeqId{2});
  EXPECT_EQ(used(*r, "kv"), 0);
  EXPECT_EQ(r->cache_usage().at(0).used_bytes, 0);
  // 33 + 4 = 37 positions: only units 0 and 1 are full; both stay cached, each one block of
  // 16 positions x 5 layers x [K|V] 2 x 32 f32 (stories260K: 4 kv heads x head_dim 8).
  EXPECT_EQ(used(*r, "kv_prefix_cache"), 2 * 16 * 5 * 2 * 32 * 4);
  r->kv_state().check_invariants();
}

TEST(LlamaPrefixCache, CancelAfterAttachFreesEverythingAndTokensMustMatch) {
  const auto prompt = prompt_of(40, 5);
  auto r = make_runner();
  ASSERT_TRUE(r->add_sequence(SeqId{1}).ok());
  step(*r, 1, prompt);
  r->release_sequence(SeqId{1});
  ASSERT_TRUE(r->add_sequence(SeqId{2}).ok());
  ASSERT_EQ(r->attach_cached_prefix(SeqId{2}, prompt), 32);
  EXPECT_GT(used(*r, "kv"), 0);
  // Feeding other ids than announced at admission is refused, changing nothing.
  std::vector<int32_t> other(prompt.begin() + 32, prompt.end());
  other[0] = other[0] == 3 ? 4 : 3;
  std::vector<float> out;
  StepItem it{SeqId{2}, other, true};
  EXPECT_EQ(r->step({&it, 1}, &out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r->sequence_length(SeqId{2}), 32);
  r->release_sequence(SeqId{2});  // cancel before its first step
  EXPECT_EQ(used(*r, "kv"), 0);
  r->kv_state().check_invariants();
}

}  // namespace
}  // namespace strata
