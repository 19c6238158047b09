// DeepseekV41Runner prefix caching through the ModelRunner API (the scheduler's view):
//   * one shared CacheManager; attach_cached_prefix restores floor((L-1)/unit)*unit tokens of
//     a prompt the runner has served before (docs/state.md §5), a multiple of
//     prefix_alignment() and < L;
//   * hit + rest of prompt + 2 decode steps are bit-identical to a cold run of the same
//     tokens on an independent path (DeepseekV41Model::new_sequence, a private SequenceCache,
//     whole prompt in one call) at L = unit-1, unit, unit+1, 2unit+1 (units 8 and 16);
//   * the runner's own boundary split of a prompt (to publish the snapshot) changes nothing;
//   * cancel after attach leaves zero bytes used in every state kind, and with the prefix
//     cache cleared every block is free again;
//   * two sequences sharing a cached prefix run at once (one step()) and each matches cold.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "base/check.h"
#include "exec/deepseek_v41/deepseek_v41_runner.h"

namespace strata {
namespace {

std::string model_dir() {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  return std::string(e ? e : STRATA_SOURCE_DIR) + "/models/deepseek-v41-tiny";
}

std::unique_ptr<DeepseekV41Runner> make_runner(int unit) {
  V41LoadOptions lo;
  lo.state_max_tokens = 128;
  V41RunnerCacheOptions co;
  co.block_tokens = unit;
  co.max_seqs = 4;
  co.max_tokens = 2048;
  co.snapshot_slots = 16;
  auto r = DeepseekV41Runner::create(model_dir(), lo, "", co);
  STRATA_CHECK_MSG(r.ok(), "{}", r.status().to_string());
  return std::move(r).value();
}

std::vector<int32_t> make_prompt(int64_t n, uint32_t seed) {
  std::vector<int32_t> p(n);
  uint32_t x = seed * 2654435761u + 777u;
  for (auto& t : p) {
    x = x * 1664525u + 1013904223u;
    t = static_cast<int32_t>(3 + (x >> 8) % 2000);  // avoid bos/eos/pad and the image id
  }
  return p;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || a.empty()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::isnan(a[i]) || a[i] != b[i]) return false;
  return true;
}

// Cold reference: prompt in one call, then one-token decode steps; last-token logits each.
std::vector<std::vector<float>> cold(const DeepseekV41Model& m, const std::vector<int32_t>& prompt,
                                     const std::vector<int32_t>& decode) {
  auto s = m.new_sequence();
  std::vector<std::vector<float>> out(1 + decode.size());
  V41ForwardOptions o;
  o.prompt_len = static_cast<int64_t>(prompt.size());
  EXPECT_TRUE(m.forward(s.get(), prompt, o, &out[0]).ok());
  V41ForwardOptions od;
  od.decode_step = true;
  for (size_t k = 0; k < decode.size(); ++k)
    EXPECT_TRUE(m.forward(s.get(), std::span<const int32_t>(&decode[k], 1), od, &out[1 + k]).ok());
  return out;
}

// Runs `rest` of each sequence's prompt in one step, then the decode tokens one per step.
std::vector<std::vector<std::vector<float>>> run(DeepseekV41Runner& r, std::vector<SeqId> seqs,
                                                 const std::vector<std::vector<int32_t>>& prompts,
                                                 const std::vector<std::vector<int32_t>>& decode) {
  const size_t n = seqs.size();
  std::vector<std::vector<std::vector<float>>> out(n);
  std::vector<StepItem> items(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t at = r.sequence_length(seqs[i]);
    items[i].seq = seqs[i];
    items[i].tokens = std::span<const int32_t>(prompts[i]).subspan(static_cast<size_t>(at));
    items[i].prompt_len = static_cast<int64_t>(prompts[i].size());
  }
  const int64_t V = r.info().vocab_size;
  std::vector<float> lg;
  for (size_t k = 0; k <= decode[0].size(); ++k) {
    if (k > 0)
      for (size_t i = 0; i < n; ++i) items[i].tokens = std::span<const int32_t>(&decode[i][k - 1], 1);
    Status st = r.step(items, &lg);
    EXPECT_TRUE(st.ok()) << st.to_string();
    if (!st.ok() || static_cast<int64_t>(lg.size()) != static_cast<int64_t>(n) * V) return out;
    for (size_t i = 0; i < n; ++i) out[i].emplace_back(lg.begin() + i * V, lg.begin() + (i + 1) * V);
  }
  return out;
}

int64_t used_by_requests(const DeepseekV41Runner& r) {
  int64_t u = 0;
  for (const CacheUsage& c : r.cache_usage())
    if (c.kind != "v41_prefix_cache") u += c.used_bytes;
  return u;
}

TEST(V41RunnerPrefix, HitBitIdenticalToCold) {
  for (int unit : {8, 16}) {
    auto r = make_runner(unit);
    ASSERT_EQ(r->prefix_alignment(), unit);
    int64_t id = 1;
    for (int64_t L : {unit - 1, unit, unit + 1, 2 * unit + 1}) {
      const std::vector<int32_t> prompt = make_prompt(L, static_cast<uint32_t>(L * 31 + unit));
      const std::vector<int32_t> dec = make_prompt(2, static_cast<uint32_t>(L + 99));
      const auto ref = cold(r->model(), prompt, dec);
      // Warm: first time, no hit; the runner publishes the last cacheable boundary.
      const SeqId a{id++};
      ASSERT_TRUE(r->add_sequence(a).ok());
      EXPECT_EQ(r->attach_cached_prefix(a, prompt), 0) << "L=" << L;
      const auto wa = run(*r, {a}, {prompt}, {dec});
      ASSERT_EQ(wa[0].size(), 3u);
      for (size_t k = 0; k < 3; ++k)
        EXPECT_TRUE(same_bits(wa[0][k], ref[k])) << "warm unit=" << unit << " L=" << L << " k=" << k;
      r->release_sequence(a);
      EXPECT_EQ(used_by_requests(*r), 0);
      // Hit.
      const SeqId b{id++};
      ASSERT_TRUE(r->add_sequence(b).ok());
      const int64_t hit = r->attach_cached_prefix(b, prompt);
      EXPECT_EQ(hit, ((L - 1) / unit) * unit) << "unit=" << unit << " L=" << L;
      EXPECT_EQ(r->sequence_length(b), hit);
      const auto wb = run(*r, {b}, {prompt}, {dec});
      ASSERT_EQ(wb[0].size(), 3u);
      for (size_t k = 0; k < 3; ++k)
        EXPECT_TRUE(same_bits(wb[0][k], ref[k])) << "hit unit=" << unit << " L=" << L << " k=" << k;
      EXPECT_EQ(r->sequence_length(b), L + 2);
      r->release_sequence(b);
      r->shared_cache().check_invariants();
    }
  }
}

TEST(V41RunnerPrefix, CancelAfterAttachFreesEverything) {
  auto r = make_runner(8);
  const std::vector<int32_t> prompt = make_prompt(21, 5);
  const SeqId a{1};
  ASSERT_TRUE(r->add_sequence(a).ok());
  EXPECT_EQ(r->attach_cached_prefix(a, prompt), 0);
  ASSERT_EQ(run(*r, {a}, {prompt}, {{}})[0].size(), 1u);
  EXPECT_GT(used_by_requests(*r), 0);
  r->release_sequence(a);
  const SeqId b{2};
  ASSERT_TRUE(r->add_sequence(b).ok());
  EXPECT_EQ(r->attach_cached_prefix(b, prompt), 16);
  EXPECT_GT(used_by_requests(*r), 0);  // the attached state counts while b holds it
  r->release_sequence(b);             // cancel before any step
  r->release_sequence(b);             // idempotent
  EXPECT_EQ(r->sequence_length(b), 0);
  for (const CacheUsage& c : r->cache_usage()) {
    if (c.kind != "v41_prefix_cache") {
      EXPECT_EQ(c.used_bytes, 0) << c.kind;
    }
  }
  r->shared_cache().check_invariants();
  EXPECT_GT(r->shared_cache().num_cache_entries(), 0);
  r->shared_cache().clear_prefix_cache();
  EXPECT_EQ(r->shared_cache().total_free_blocks(), r->shared_cache().total_blocks());
  for (const CacheUsage& c : r->cache_usage()) EXPECT_EQ(c.used_bytes, 0) << c.kind;
}

TEST(V41RunnerPrefix, TwoSequencesShareAPrefixAtOnce) {
  const int unit = 8;
  auto r = make_runner(unit);
  const std::vector<int32_t> base = make_prompt(2 * unit + 5, 11);
  const SeqId w{1};
  ASSERT_TRUE(r->add_sequence(w).ok());
  r->attach_cached_prefix(w, base);
  ASSERT_EQ(run(*r, {w}, {base}, {{}})[0].size(), 1u);
  r->release_sequence(w);
  std::vector<std::vector<int32_t>> prompts(2), dec(2);
  for (int i = 0; i < 2; ++i) {
    prompts[i].assign(base.begin(), base.begin() + 2 * unit);
    const auto tail = make_prompt(3 + i, 40 + i);
    prompts[i].insert(prompts[i].end(), tail.begin(), tail.end());
    dec[i] = make_prompt(2, 70 + i);
  }
  const SeqId e{2}, f{3};
  ASSERT_TRUE(r->add_sequence(e).ok());
  ASSERT_TRUE(r->add_sequence(f).ok());
  EXPECT_EQ(r->attach_cached_prefix(e, prompts[0]), 2 * unit);
  EXPECT_EQ(r->attach_cached_prefix(f, prompts[1]), 2 * unit);
  const auto out = run(*r, {e, f}, prompts, dec);
  for (int i = 0; i < 2; ++i) {
    const auto ref = cold(r->model(), prompts[i], dec[i]);
    ASSERT_EQ(out[i].size(), 3u);
    for (size_t k = 0; k < 3; ++k) EXPECT_TRUE(same_bits(out[i][k], ref[k])) << i << " k=" << k;
  }
  r->shared_cache().check_invariants();
  r->release_sequence(e);
  r->release_sequence(f);
  EXPECT_EQ(used_by_requests(*r), 0);
  r->shared_cache().clear_prefix_cache();
  EXPECT_EQ(r->shared_cache().total_free_blocks(), r->shared_cache().total_blocks());
}

}  // namespace
}  // namespace strata
