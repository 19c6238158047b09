// Unit objects (unit_store.h) and the CacheManager over a unit store: an object round-trips;
// corrupt, truncated and foreign objects are refused; a fresh manager (a restarted server)
// restores every state kind of a prefix from the store alone, verified row by row against
// what a cold run writes (the fake forward), for V4.1, V4 and a plain-KV graph, at prompt
// lengths around the unit boundaries; a rejected object stops the hit there.
#include <cstring>
#include <map>

#include <xxhash.h>

#include <gtest/gtest.h>

#include "state/cache_manager.h"
#include "state/cache_test_fakes.h"
#include "state/unit_store.h"

namespace strata {
namespace {

// An in-memory store (the tiers themselves are tested in src/tiers).
class MapStore : public UnitStore {
 public:
  bool contains(uint64_t key) override { return objs.count(key) > 0; }
  std::optional<std::vector<uint8_t>> get(uint64_t key) override {
    ++gets;
    auto it = objs.find(key);
    if (it == objs.end()) return std::nullopt;
    return it->second;
  }
  void put(uint64_t key, const std::vector<uint8_t>& b) override { objs[key] = b; }
  void reject(uint64_t key) override { rejected += objs.erase(key); }
  std::vector<TierStats> stats() const override { return {}; }
  std::map<uint64_t, std::vector<uint8_t>> objs;
  int64_t gets = 0, rejected = 0;
};

UnitObject sample_object() {
  UnitObject o;
  o.identity = 0x1234;
  o.key = 0xabcdef;
  o.parent = 0x99;
  o.index = 3;
  o.has_snapshot = true;
  o.tokens = {5, 6, 7, 8};
  o.sections = {{1, 2, 3}, {4, 5}, {6}};
  return o;
}

TEST(UnitObject, RoundTripAndRefusals) {
  const UnitObject o = sample_object();
  const std::vector<uint8_t> b = encode_unit_object(o);
  auto d = decode_unit_object(b, 0x1234, 0xabcdef, {3, 2}, {1});
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->parent, o.parent);
  EXPECT_EQ(d->index, o.index);
  EXPECT_TRUE(d->has_snapshot);
  EXPECT_EQ(d->tokens, o.tokens);
  EXPECT_EQ(d->sections, o.sections);
  // Every single-byte corruption is caught (checksum or structure).
  for (size_t i = 0; i < b.size(); ++i) {
    auto c = b;
    c[i] ^= 0x40;
    EXPECT_EQ(decode_unit_object(c, 0x1234, 0xabcdef, {3, 2}, {1}).status().code(),
              StatusCode::kDataLoss) << "byte " << i;
  }
  for (size_t n : {size_t{0}, size_t{10}, b.size() - 1}) {
    std::vector<uint8_t> t(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_EQ(decode_unit_object(t, 0x1234, 0xabcdef, {3, 2}, {1}).status().code(),
              StatusCode::kDataLoss) << "truncated to " << n;
  }
  // Foreign: another cache's identity, another key, another layout.
  EXPECT_EQ(decode_unit_object(b, 0x1235, 0xabcdef, {3, 2}, {1}).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(decode_unit_object(b, 0x1234, 0xabcdee, {3, 2}, {1}).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(decode_unit_object(b, 0x1234, 0xabcdef, {3, 3}, {1}).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(decode_unit_object(b, 0x1234, 0xabcdef, {3, 2}, {1, 1}).status().code(),
            StatusCode::kFailedPrecondition);
}

// Runs `toks` through `cm` as the scheduler would (suggest_chunk), then releases it.
void run_prompt(CacheManager& cm, CacheSeqId seq, const std::vector<int32_t>& toks) {
  cm.add_sequence(seq, toks);
  const int64_t len = static_cast<int64_t>(toks.size());
  while (cm.num_computed(seq) < len) run_step(cm, seq, toks, cm.suggest_chunk(seq, len));
  cm.release(seq);
}

std::vector<int32_t> prompt(int len, int salt) {
  std::vector<int32_t> t(len);
  for (int i = 0; i < len; ++i) t[i] = 3 + (i * 7 + salt * 13) % 97;
  return t;
}

// A restarted manager on the same store: the hit is the cold run's boundary and every
// restored row equals the cold run's (fake_forward asserts each one).
void check_reload(const StateGraph& g, int u) {
  for (int len : {u - 1, u, u + 1, 2 * u - 1, 2 * u, 2 * u + 1, 3 * u + 1}) {
    auto store = std::make_shared<MapStore>();
    const CacheOptions opts{.block_tokens = u, .max_seqs = 2, .max_tokens = 512,
                            .unit_store = store};
    const auto toks = prompt(len, len);
    const int64_t boundary = ((len - 1) / u) * u;
    {
      CacheManager a(g, opts);
      run_prompt(a, 1, toks);
      EXPECT_EQ(a.units_stored(), len / u) << "len " << len;
    }
    EXPECT_EQ(static_cast<int64_t>(store->objs.size()), len / u);
    CacheManager b(g, opts);
    EXPECT_EQ(b.cached_prefix_tokens(toks), boundary) << "len " << len;
    b.add_sequence(2, toks);
    const SeqStepPlan sp = run_step(b, 2, toks, len);  // verifies the restored rows
    EXPECT_EQ(sp.hit_tokens, boundary) << "len " << len;
    EXPECT_EQ(b.units_loaded(), boundary / u);
    b.release(2);
    b.check_invariants();
    // The loaded units are working-pool entries now: a third prompt hits without the store.
    const int64_t gets = store->gets;
    b.add_sequence(3, toks);
    EXPECT_EQ(run_step(b, 3, toks, len).hit_tokens, boundary);
    EXPECT_EQ(store->gets, gets) << "len " << len;
    b.release(3);
    b.clear_prefix_cache();
    EXPECT_EQ(b.total_free_blocks(), b.total_blocks());
  }
}

TEST(CacheManagerStore, ReloadRestoresEveryKindV41) {
  auto g = StateGraph::from_deepseek(tiny_v41());
  check_reload(*g, 8);
}

TEST(CacheManagerStore, ReloadRestoresEveryKindV4) {
  auto c = load_deepseek_config(src_dir() + "/testdata/golden/v4flash-tiny/config.json");
  ASSERT_TRUE(c.ok());
  auto g = StateGraph::from_deepseek(*c);
  check_reload(*g, 16);
}

TEST(CacheManagerStore, ReloadRestoresPlainKv) {
  auto g = StateGraph::from_llama(LlamaStateDesc{.n_layers = 2, .n_kv_heads = 1, .head_dim = 4});
  check_reload(*g, 16);
}

// A corrupt or foreign object is rejected (dropped from the store) and the hit stops before
// it; the positions after are recomputed, so the run still verifies.
TEST(CacheManagerStore, RejectedObjectStopsTheHit) {
  auto g = StateGraph::from_deepseek(tiny_v41());
  const int u = 8, len = 3 * u + 1;
  const auto toks = prompt(len, 1);
  for (int mode = 0; mode < 3; ++mode) {
    auto store = std::make_shared<MapStore>();
    const CacheOptions opts{.block_tokens = u, .max_seqs = 2, .max_tokens = 512,
                            .unit_store = store};
    uint64_t second = 0;  // key of unit 1
    {
      CacheManager a(*g, opts);
      run_prompt(a, 1, toks);
      ASSERT_EQ(store->objs.size(), 3u);
      // Unit 1: the low byte of the header's i64 index (offset 40, little-endian).
      for (auto& [k, b] : store->objs)
        if (b[8 + 4 + 4 + 8 + 8 + 8] == 1) second = k;  // i64 index, little-endian low byte
    }
    ASSERT_NE(second, 0u);
    std::vector<uint8_t>& obj = store->objs[second];
    if (mode == 0) obj[obj.size() / 2] ^= 1;          // corrupt payload
    if (mode == 1) obj.resize(obj.size() - 9);         // truncated
    if (mode == 2) obj[16] ^= 1;                       // another identity (checksum fixed below)
    if (mode == 2) {
      uint64_t sum = XXH3_64bits(obj.data(), obj.size() - 8);
      std::memcpy(obj.data() + obj.size() - 8, &sum, 8);
    }
    CacheManager b(*g, opts);
    b.add_sequence(2, toks);
    EXPECT_EQ(run_step(b, 2, toks, len).hit_tokens, u) << "mode " << mode;
    EXPECT_EQ(store->rejected, 1) << "mode " << mode;
    // The recomputed unit was published again: a valid object replaces the bad one.
    ASSERT_EQ(store->objs.count(second), 1u);
    EXPECT_TRUE(decode_unit_object(store->objs[second], b.store_identity(), second,
                                   {}, {}).status().code() != StatusCode::kDataLoss);
    EXPECT_EQ(b.units_stored(), 1);  // unit 2's object was valid: kept
    b.release(2);
    b.check_invariants();
  }
}

// Two new sequences in one plan whose hits come from the store: one ends on a unit the other
// restores as an intermediate unit, the other ends earlier (a different boundary): both are
// restored row for row.
TEST(CacheManagerStore, TwoFirstStepsInOnePlan) {
  auto g = StateGraph::from_deepseek(tiny_v41());
  const int u = 8;
  auto store = std::make_shared<MapStore>();
  const CacheOptions opts{.block_tokens = u, .max_seqs = 4, .max_tokens = 512, .unit_store = store};
  const auto longp = prompt(4 * u + 1, 3);
  std::vector<int32_t> shortp(longp.begin(), longp.begin() + 2 * u + 3);
  {
    CacheManager a(*g, opts);
    run_prompt(a, 1, longp);
  }
  CacheManager b(*g, opts);
  b.add_sequence(2, longp);
  b.add_sequence(3, shortp);
  StepPlan p = b.plan_step({{2, 4 * u + 1}, {3, 2 * u + 3}});
  ASSERT_EQ(p.outcome, PlanOutcome::kOk) << p.shortfall;
  EXPECT_EQ(p.seqs[0].hit_tokens, 4 * u);
  EXPECT_EQ(p.seqs[1].hit_tokens, 2 * u);
  b.commit(p);
  fake_forward(b, 2, longp, p.seqs[0].start_pos, p.seqs[0].start_pos + p.seqs[0].num_tokens);
  fake_forward(b, 3, shortp, p.seqs[1].start_pos, p.seqs[1].start_pos + p.seqs[1].num_tokens);
  b.finish_step(p);
  b.check_invariants();
}

// Units evicted from a small working pool are found in the store again.
TEST(CacheManagerStore, EvictedUnitsComeBackFromTheStore) {
  auto g = StateGraph::from_deepseek(tiny_v41());
  const int u = 8;
  auto store = std::make_shared<MapStore>();
  CacheManager cm(*g, CacheOptions{.block_tokens = u, .max_seqs = 1, .max_tokens = 64,
                                   .snapshot_slots = 2, .unit_store = store});
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(prompt(4 * u + 1, 100 + i));
  for (size_t i = 0; i < prompts.size(); ++i) run_prompt(cm, 10 + i, prompts[i]);
  cm.check_invariants();
  // The pool holds 64 tokens of paged rows: the first prompt's units were evicted.
  cm.add_sequence(1, prompts[0]);
  const int64_t loaded = cm.units_loaded();
  EXPECT_EQ(run_step(cm, 1, prompts[0], 4 * u + 1).hit_tokens, 4 * u);
  EXPECT_GT(cm.units_loaded(), loaded);
  cm.release(1);
  cm.check_invariants();
}

}  // namespace
}  // namespace strata
