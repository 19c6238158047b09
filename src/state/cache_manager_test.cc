// CacheManager tests: storage API round trips, prefix hits at unit-1/unit/unit+1/2unit+1,
// typed out-of-blocks, cancel during an in-flight step, eviction order, and the randomized
// model-based test against a trivially correct reference (MISSION.md invariants).
#include "state/cache_manager.h"
#include "state/sequence_cache.h"
#include "state/cache_test_fakes.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(CacheManager, StorageRoundTripEveryKind) {
  auto cfg = tiny_v41();
  auto g = StateGraph::from_deepseek(cfg);
  ASSERT_TRUE(g.ok());
  CacheManager cm(*g, CacheOptions{.block_tokens = 8, .max_seqs = 2, .max_tokens = 256});
  std::vector<int32_t> toks(40);
  for (int i = 0; i < 40; ++i) toks[i] = 3 + i;
  cm.add_sequence(1, toks);
  // Chunks crossing window (16), ratio and unit boundaries; every read is verified.
  for (int64_t chunk : {1, 2, 3, 5, 16, 13}) run_step(cm, 1, toks, chunk);
  EXPECT_EQ(cm.num_computed(1), 40);
  // Typed accessors agree with the generic ones.
  std::vector<float> a(64), b(64);
  cm.read_window_row(1, 3, 39, a.data());
  cm.read_row(1, g->find_owner(StateKind::kWindowKv, 3), 39, b.data());
  EXPECT_EQ(a, b);
  std::vector<float> rows(3 * 64);
  cm.read_compressed_rows(1, 2, 5, 3, rows.data());
  cm.read_row(1, g->find_owner(StateKind::kCompressedKv, 2), 6, b.data());
  EXPECT_EQ(std::vector<float>(rows.begin() + 64, rows.begin() + 128), b);
  // Whole ring in slot order: slot s holds position 24 + ((s - 8) mod 16) after 40 tokens.
  std::vector<float> ring(16 * 64);
  cm.read_window(1, 3, ring.data());
  for (int64_t pos = 24; pos < 40; ++pos) {
    cm.read_window_row(1, 3, pos, a.data());
    EXPECT_EQ(std::vector<float>(ring.begin() + (pos % 16) * 64, ring.begin() + (pos % 16 + 1) * 64), a);
  }
  // Batched reads: the rows n single-row reads give, across block boundaries (8 tokens per
  // block: compressed rows 3..19 of layer 2 span several blocks) and around the window ring
  // (positions 30..39 wrap slot 15 -> 0).
  {
    std::vector<float> batch(17 * 64), one(64);
    cm.read_compressed_rows(1, 2, 3, 17, batch.data());
    const OwnerId ck2 = g->find_owner(StateKind::kCompressedKv, 2);
    for (int64_t r = 0; r < 17; ++r) {
      cm.read_row(1, ck2, 3 + r, one.data());
      EXPECT_EQ(std::vector<float>(batch.begin() + r * 64, batch.begin() + (r + 1) * 64), one) << r;
    }
    cm.read_window_rows(1, 3, 30, 10, batch.data());
    for (int64_t r = 0; r < 10; ++r) {
      cm.read_window_row(1, 3, 30 + r, one.data());
      EXPECT_EQ(std::vector<float>(batch.begin() + r * 64, batch.begin() + (r + 1) * 64), one) << r;
    }
  }
  // Raw serving bytes decode to the same row.
  const OwnerId ck6 = g->find_owner(StateKind::kCompressedKv, 6);
  decode_state_row(g->owner(ck6).spec, cm.raw_row(1, ck6, 17), a.data());
  cm.read_row(1, ck6, 17, b.data());
  EXPECT_EQ(a, b);
  int32_t hist[3];
  cm.get_engram_history(1, hist);
  EXPECT_EQ(hist[0], toks[37]);
  EXPECT_EQ(hist[2], toks[39]);
  cm.release(1);
  cm.check_invariants();
}

TEST(CacheManager, FreshCompressorStateAndTypedSetters) {
  auto g = StateGraph::from_deepseek(tiny_v41());
  CacheManager cm(*g, CacheOptions{.block_tokens = 8, .max_seqs = 1, .max_tokens = 64});
  cm.add_sequence(7, std::vector<int32_t>(5, 9));
  StepPlan p = cm.plan_step({{7, 5}});
  cm.commit(p);
  std::vector<float> kv(2 * 64), sc(2 * 64);
  cm.get_compressor_state(7, 2, false, kv.data(), sc.data());
  for (int i = 0; i < 128; ++i) {
    EXPECT_EQ(kv[i], 0.f);
    EXPECT_EQ(sc[i], -INFINITY);
  }
  for (int i = 0; i < 128; ++i) kv[i] = sc[i] = 0.5f * i;
  cm.set_compressor_state(7, 2, false, kv.data(), sc.data());
  std::vector<float> kv2(128), sc2(128);
  cm.get_compressor_state(7, 2, false, kv2.data(), sc2.data());
  EXPECT_EQ(kv, kv2);
  EXPECT_EQ(sc, sc2);
  cm.finish_step(p);
  cm.release(7);
}

// Field bug 1: hits at unit-1, unit, unit+1, 2*unit+1 (the first run stops a chunk at the
// last boundary below its length, as the scheduler is told to).
TEST(CacheManager, PrefixHitAtAlignmentBoundaries) {
  auto g = StateGraph::from_deepseek(tiny_v41());
  const int u = 8;
  for (int len : {u - 1, u, u + 1, 2 * u + 1}) {
    CacheManager cm(*g, CacheOptions{.block_tokens = u, .max_seqs = 4, .max_tokens = 512});
    std::vector<int32_t> toks(len);
    for (int i = 0; i < len; ++i) toks[i] = 100 + (i * 7) % 50;
    cm.add_sequence(1, toks);
    const int64_t boundary = ((len - 1) / u) * u;
    // The scheduler asks for the whole prompt; suggest_chunk cuts it at the first unit
    // boundary (every boundary up to the last cacheable one ends a step).
    EXPECT_EQ(cm.suggest_chunk(1, len), boundary > 0 ? u : len);
    while (cm.num_computed(1) < len) run_step(cm, 1, toks, cm.suggest_chunk(1, len));
    cm.release(1);
    cm.add_sequence(2, toks);
    auto sp = run_step(cm, 2, toks, len);  // fake_forward verifies restored rows
    EXPECT_EQ(sp.hit_tokens, boundary) << "len " << len;
    EXPECT_EQ(cm.num_computed(2), len);
    // A longer prompt sharing the whole first prompt hits the same boundary.
    auto longer = toks;
    longer.insert(longer.end(), {5, 6, 7, 8, 9, 10, 11, 12, 13, 14});
    cm.add_sequence(3, longer);
    sp = run_step(cm, 3, longer, 100);
    // The first run also stopped at `len`; when len is on a boundary that boundary has a
    // snapshot too, and the longer prompt (len <= its length - 1) can use it.
    EXPECT_EQ(sp.hit_tokens, len % u == 0 ? len : boundary) << "len " << len;
    cm.release(2);
    cm.release(3);
    cm.clear_prefix_cache();
    cm.check_invariants();
    EXPECT_EQ(cm.total_free_blocks(), cm.total_blocks());
  }
}

TEST(CacheManager, BasicHitNeedsBoundarySnapshot) {
  auto g = StateGraph::from_deepseek(tiny_v41());
  CacheManager a(*g, CacheOptions{.block_tokens = 8, .prefix_salt = 1});
  std::vector<int32_t> toks(17, 4);
  a.add_sequence(1, toks);
  run_step(a, 1, toks, 17);  // one chunk: units published, but no snapshot at 8 or 16
  a.add_sequence(2, toks);
  EXPECT_EQ(a.plan_step({{2, 17}}).seqs[0].hit_tokens, 0);
  a.release(1);
  a.add_sequence(3, toks);
  run_step(a, 3, toks, 16);  // stops on the boundary: snapshot stored at 16
  run_step(a, 3, toks, 1);
  EXPECT_EQ(a.plan_step({{2, 17}}).seqs[0].hit_tokens, 16);
}

// Issue 22 item 5: stepping each prompt by suggest_chunk stores a snapshot at every unit
// boundary, so a shorter prompt sharing k units with a longer one published before it hits
// k units (and the reverse order too), whatever the two lengths.
TEST(CacheManager, EveryUnitBoundaryHitsWhicheverRequestPublished) {
  auto g = StateGraph::from_deepseek(tiny_v41());
  const int u = 8;
  std::vector<int32_t> q(3 * u);  // 3 shared units
  for (int i = 0; i < 3 * u; ++i) q[i] = 10 + i;
  auto with_tail = [&](int tail, int32_t salt) {
    std::vector<int32_t> t = q;
    for (int i = 0; i < tail; ++i) t.push_back(200 + salt + i);
    return t;
  };
  for (auto [first_tail, second_tail] : {std::pair{19, 5}, std::pair{5, 19}, std::pair{1, u}}) {
    CacheManager cm(*g, CacheOptions{.block_tokens = u, .max_seqs = 4, .max_tokens = 512});
    const auto a = with_tail(first_tail, 0), b = with_tail(second_tail, 50);
    cm.add_sequence(1, a);
    while (cm.num_computed(1) < static_cast<int64_t>(a.size()))
      run_step(cm, 1, a, cm.suggest_chunk(1, static_cast<int64_t>(a.size())));
    cm.release(1);
    cm.add_sequence(2, b);
    const SeqStepPlan sp = run_step(cm, 2, b, static_cast<int64_t>(b.size()));
    // b shares 3 units with a; the last-token rule caps the hit at floor((|b|-1)/u) units.
    const int64_t want = std::min<int64_t>(3, (static_cast<int64_t>(b.size()) - 1) / u) * u;
    EXPECT_EQ(sp.hit_tokens, want) << first_tail << " then " << second_tail;
    cm.release(2);
    cm.check_invariants();
  }
}

// Bounded-replay policy: no boundary snapshots (0 bytes, no snapshot blocks), so a hit may end
// at any published unit, not only where a step ended; ring / fixed owners start fresh.
TEST(CacheManager, ReplayPolicyHitsAnyPublishedUnit) {
  auto g = StateGraph::from_deepseek(tiny_v41());
  CacheOptions o{.block_tokens = 8, .max_seqs = 3, .snapshot_slots = 5, .prefix_salt = 1};
  o.boundary_snapshots = false;
  CacheManager a(*g, o);
  EXPECT_EQ(a.boundary_snapshot_bytes(), 0);
  CacheManager stored(*g, CacheOptions{.block_tokens = 8, .max_seqs = 3, .snapshot_slots = 5});
  // Tiny V4.1: 12 window rings of 16 x (64 + 2) B, 2 compressor tails of 2 x 128 x 4 B, 3 DSpark
  // rings, Engram 3 x 4 B (max_ngram 4).
  EXPECT_EQ(stored.boundary_snapshot_bytes(), 15LL * 16 * 66 + 2LL * 2 * 128 * 4 + 3 * 4);
  // Ring / fixed pools hold max_seqs blocks per owner (no snapshot slots).
  for (const PoolInfo& p : a.pools()) {
    if (p.kind == StateKind::kWindowKv) {
      EXPECT_EQ(p.num_blocks, 3 * static_cast<int64_t>(p.owners.size()));
    }
  }
  std::vector<int32_t> toks(17, 4);
  for (int i = 0; i < 17; ++i) toks[i] = 3 + (i * 5) % 11;
  a.add_sequence(1, toks);
  run_step(a, 1, toks, 17);  // one chunk: units 8 and 16 published, no step ended there
  a.add_sequence(2, toks);
  EXPECT_EQ(a.plan_step({{2, 17}}).seqs[0].hit_tokens, 16);
  EXPECT_EQ(a.plan_step({{2, 17}}).copies, 0);
  const auto sp = run_step(a, 2, toks, 17);  // fake_replay checks fresh ring / fixed state
  EXPECT_EQ(sp.hit_tokens, 16);
  a.release(1);
  a.release(2);
  a.clear_prefix_cache();
  a.check_invariants();
  EXPECT_EQ(a.total_free_blocks(), a.total_blocks());
  EXPECT_EQ(replay_window_tokens(*g), 16);  // window 16, ratios {1, 2}
  EXPECT_EQ(replay_exact_tokens(*g), 182);  // 16 + 11 x 15 = 181 (12 backbone layers), even
}

TEST(CacheManager, ReplayLengthsOfV41Flash) {
  auto c = load_deepseek_config(src_dir() + "/testdata/configs/deepseek-v4.1-flash.config.json");
  if (!c.ok()) GTEST_SKIP();
  auto g = StateGraph::from_deepseek(*c);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(replay_window_tokens(*g), 128);          // W = 128, ratios {1, 2}
  EXPECT_EQ(replay_exact_tokens(*g), 128 + 39 * 127 + 1);  // 40 backbone layers; 5081 -> even
}

TEST(CacheManager, OutOfBlocksIsTypedAndRecoverable) {
  LlamaStateDesc d{.n_layers = 2, .n_kv_heads = 1, .head_dim = 4};
  auto g = StateGraph::from_llama(d);
  // 16-token blocks; capacity ceil(64/16) + 1 = 5 blocks per layer.
  CacheManager cm(*g, CacheOptions{.block_tokens = 16, .max_seqs = 1, .max_tokens = 64,
                                   .allocate_storage = false});
  cm.add_sequence(1, std::vector<int32_t>(80, 1));
  cm.add_sequence(2, std::vector<int32_t>(40, 2));
  StepPlan p = cm.plan_step({{1, 80}});
  EXPECT_EQ(p.outcome, PlanOutcome::kOk);
  cm.commit(p);
  cm.finish_step(p);
  StepPlan q = cm.plan_step({{2, 40}});
  ASSERT_EQ(q.outcome, PlanOutcome::kOutOfBlocks);
  EXPECT_EQ(q.blocks_needed, 2 * 3);
  EXPECT_GE(q.short_pool, 0);
  EXPECT_FALSE(q.shortfall.empty());
  cm.check_invariants();
  cm.release(1);  // preempt: its blocks are now held only by the prefix cache
  cm.clear_prefix_cache();
  StepPlan r = cm.plan_step({{2, 40}});
  EXPECT_EQ(r.outcome, PlanOutcome::kOk);
}

// Field bug 11: cancel while the step is in flight; the blocks stay until the step ends.
TEST(CacheManager, CancelDuringInFlightStep) {
  auto g = StateGraph::from_deepseek(tiny_v41());
  CacheManager cm(*g, CacheOptions{.block_tokens = 8, .max_seqs = 2, .max_tokens = 128});
  std::vector<int32_t> toks(20, 3);
  cm.add_sequence(1, toks);
  const int64_t free0 = cm.total_free_blocks();
  StepPlan p = cm.plan_step({{1, 20}});
  cm.commit(p);
  const int64_t held = free0 - cm.total_free_blocks();
  EXPECT_GT(held, 0);
  cm.release(1);  // cancel
  EXPECT_EQ(free0 - cm.total_free_blocks(), held);  // nothing reused early
  fake_forward(cm, 1, toks, 0, 20);                  // the step may still write
  cm.finish_step(p);
  EXPECT_FALSE(cm.has_sequence(1));
  cm.check_invariants();
  EXPECT_EQ(cm.total_free_blocks(), free0);  // never published: everything back
}

// Field bug 4: blocks freed by finished requests are reused before cached blocks are evicted.
TEST(CacheManager, FreeBlocksBeforeEviction) {
  LlamaStateDesc d{.n_layers = 1, .n_kv_heads = 1, .head_dim = 4};
  auto g = StateGraph::from_llama(d);
  CacheManager cm(*g, CacheOptions{.block_tokens = 16, .max_seqs = 0, .max_tokens = 160,
                                   .allocate_storage = false});
  ASSERT_EQ(cm.total_blocks(), 10);
  std::vector<int32_t> a(65, 1), b(65, 2), c(65, 3);
  for (auto [id, t] : {std::pair{1, a}, std::pair{2, b}}) {
    cm.add_sequence(id, t);
    StepPlan p = cm.plan_step({{id, 65}});
    ASSERT_EQ(p.outcome, PlanOutcome::kOk) << p.shortfall;
    cm.commit(p);
    cm.finish_step(p);
    cm.release(id);
  }
  EXPECT_EQ(cm.num_cache_entries(), 8);  // 4 full units each
  EXPECT_EQ(cm.total_free_blocks(), 2);  // the partial 5th blocks were freed
  // A short request fits in the freed blocks: no eviction.
  cm.add_sequence(3, std::vector<int32_t>(20, 9));
  StepPlan p = cm.plan_step({{3, 20}});
  EXPECT_TRUE(p.evict.empty());
  cm.commit(p);
  cm.finish_step(p);
  cm.release(3);
  EXPECT_EQ(cm.num_cache_entries(), 9);
  // A long one needs eviction: LRU leaves first (b's chain is newer than a's).
  cm.add_sequence(4, c);
  p = cm.plan_step({{4, 65}});
  ASSERT_EQ(p.outcome, PlanOutcome::kOk);
  EXPECT_FALSE(p.evict.empty());
  cm.commit(p);
  cm.finish_step(p);
  cm.check_invariants();
  cm.add_sequence(5, b);
  EXPECT_GT(cm.plan_step({{5, 65}}).seqs[0].hit_tokens, 0);  // b survived
}

// ---- randomized model-based test ----

struct RefSeq {
  std::vector<int32_t> toks;
  int64_t computed = 0;
  bool started = false;
};

void randomized(const StateGraph& g, int unit, bool storage, bool roomy, uint32_t seed,
                int n_ops, bool snapshots = true) {
  CacheOptions o;
  o.boundary_snapshots = snapshots;
  o.block_tokens = unit;
  o.max_seqs = roomy ? 64 : 4;
  o.max_tokens = roomy ? 1 << 15 : 6 * unit;
  o.snapshot_slots = roomy ? 4096 : 3;
  o.allocate_storage = storage;
  CacheManager cm(g, o);
  std::mt19937 rng(seed);
  std::map<CacheSeqId, RefSeq> ref;
  std::map<uint64_t, StepPlan> inflight;  // plan id -> plan
  std::set<CacheSeqId> busy;
  std::set<CacheSeqId> cancelled;  // released while in flight: gone at finish, never published
  // Reference prefix cache (exact in roomy mode: no eviction): unit prefixes published, and
  // the boundaries that carry a snapshot.
  std::set<std::vector<int32_t>> published, snap;
  const bool stateful = cm.boundary_snapshot_bytes() > 0;
  std::vector<std::vector<int32_t>> bases;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> b(5 * unit);
    for (auto& t : b) t = 3 + rng() % 5;
    bases.push_back(b);
  }
  CacheSeqId next = 1;
  int hits = 0, ooms = 0;
  auto finish = [&](uint64_t id) {
    StepPlan p = inflight.at(id);
    inflight.erase(id);
    for (const auto& sp : p.seqs) {
      busy.erase(sp.seq);
      auto it = ref.find(sp.seq);
      if (it == ref.end() || cancelled.count(sp.seq)) continue;
      const RefSeq& r = it->second;
      if (roomy) {
        for (int64_t k = 1; k * unit <= r.computed; ++k)
          published.insert({r.toks.begin(), r.toks.begin() + k * unit});
        if (r.computed % unit == 0 && r.computed > 0)
          snap.insert({r.toks.begin(), r.toks.begin() + r.computed});
      }
    }
    cm.finish_step(p);
    for (auto it = ref.begin(); it != ref.end();) {  // cancelled while in flight: now gone
      if (cm.has_sequence(it->first)) {
        ++it;
      } else {
        EXPECT_TRUE(cancelled.count(it->first));
        cancelled.erase(it->first);
        it = ref.erase(it);
      }
    }
  };
  for (int op = 0; op < n_ops; ++op) {
    const int what = rng() % 10;
    if (what <= 1 && ref.size() < 6) {  // admit
      std::vector<int32_t> t(bases[rng() % bases.size()]);
      t.resize(1 + rng() % t.size());
      for (int k = rng() % 3; k > 0; --k) t.push_back(3 + rng() % 5);
      ref[next] = RefSeq{t, 0, false};
      cm.add_sequence(next++, t);
    } else if (what <= 5) {  // step a random batch of idle sequences
      std::vector<CacheStepItem> items;
      for (auto& [id, r] : ref) {
        if (busy.count(id) || r.computed >= static_cast<int64_t>(r.toks.size())) continue;
        if (rng() % 2) continue;
        int64_t mt = 1 + rng() % (3 * unit);
        if (rng() % 3 == 0 && r.started) {  // end exactly on the next boundary
          int64_t nb = (r.computed / unit + 1) * unit;
          mt = std::max<int64_t>(1, nb - r.computed);
        }
        items.push_back({id, mt});
      }
      if (items.empty()) continue;
      StepPlan p = cm.plan_step(items);
      if (p.outcome == PlanOutcome::kOutOfBlocks) {
        ++ooms;
        ASSERT_GT(p.blocks_needed, p.blocks_available);
        ASSERT_FALSE(roomy) << p.shortfall;
        // Preempt a random idle sequence (it restarts from scratch later).
        std::vector<CacheSeqId> idle;
        for (auto& [id, r] : ref)
          if (!busy.count(id)) idle.push_back(id);
        if (!idle.empty()) {
          CacheSeqId v = idle[rng() % idle.size()];
          auto t = ref[v].toks;
          cm.release(v);
          ref.erase(v);
          ref[next] = RefSeq{t, 0, false};
          cm.add_sequence(next++, t);
        }
        cm.check_invariants();
        continue;
      }
      for (const auto& sp : p.seqs) {
        RefSeq& r = ref.at(sp.seq);
        const int64_t len = static_cast<int64_t>(r.toks.size());
        if (!r.started) {
          ASSERT_TRUE(sp.first_step);
          ASSERT_EQ(sp.hit_tokens % unit, 0);
          ASSERT_LE(sp.hit_tokens, ((len - 1) / unit) * unit);
          if (sp.hit_tokens > 0) {
            ++hits;
            std::vector<int32_t> pre(r.toks.begin(), r.toks.begin() + sp.hit_tokens);
            if (roomy) {
              ASSERT_TRUE(published.count(pre));
            }
          }
          if (roomy) {  // exact: the longest published prefix with a snapshot
            int64_t best = 0;
            for (int64_t k = 1; k * unit <= len - 1; ++k) {
              std::vector<int32_t> pre(r.toks.begin(), r.toks.begin() + k * unit);
              if (!published.count(pre)) break;
              if (!stateful || snap.count(pre)) best = k * unit;
            }
            ASSERT_EQ(sp.hit_tokens, best) << "seq " << sp.seq;
          }
          r.started = true;
          r.computed = sp.hit_tokens;
        }
        ASSERT_EQ(sp.start_pos, r.computed);
        r.computed += sp.num_tokens;
        busy.insert(sp.seq);
      }
      cm.commit(p);
      for (const auto& sp : p.seqs) {
        ASSERT_EQ(cm.num_computed(sp.seq), ref.at(sp.seq).computed);
        if (storage && sp.hit_tokens > 0 && !stateful)
          fake_replay(cm, sp.seq, ref.at(sp.seq).toks, sp.hit_tokens);
        if (storage)
          fake_forward(cm, sp.seq, ref.at(sp.seq).toks, sp.start_pos,
                       sp.start_pos + sp.num_tokens);
      }
      inflight[p.id] = p;
      if (rng() % 3) finish(p.id);
    } else if (what == 6 && !inflight.empty()) {
      finish(inflight.begin()->first);
    } else if (what == 7) {  // decode: a fully computed idle sequence gets one sampled token
      for (auto& [id, r] : ref)
        if (!busy.count(id) && r.started && r.computed == static_cast<int64_t>(r.toks.size())) {
          int32_t t = 3 + rng() % 5;
          r.toks.push_back(t);
          cm.append_tokens(id, {t});
          break;
        }
    } else if (what == 8 && !ref.empty()) {  // cancel (possibly in flight)
      auto it = ref.begin();
      std::advance(it, rng() % ref.size());
      cm.release(it->first);
      if (!busy.count(it->first)) ref.erase(it);
      else cancelled.insert(it->first);
    } else if (what == 9 && !ref.empty()) {  // finish a completed request
      for (auto& [id, r] : ref)
        if (!busy.count(id) && r.computed == static_cast<int64_t>(r.toks.size()) && r.started) {
          cm.release(id);
          ref.erase(id);
          break;
        }
    }
    cm.check_invariants();
    for (auto& [id, r] : ref) {
      ASSERT_TRUE(cm.has_sequence(id));
      ASSERT_EQ(cm.num_computed(id), r.computed);
    }
  }
  while (!inflight.empty()) finish(inflight.begin()->first);
  for (auto& [id, r] : ref) cm.release(id);
  cm.check_invariants();
  cm.clear_prefix_cache();
  cm.check_invariants();
  EXPECT_EQ(cm.total_free_blocks(), cm.total_blocks()) << "leaked blocks";
  EXPECT_GT(hits, 0) << "the test never exercised a prefix hit";
  if (!roomy) {
    EXPECT_GT(ooms, 0) << "the test never exercised out-of-blocks";
  }
}

TEST(CacheManagerRandomized, V41TinyRoomyExactHitsMetadata) {
  auto g = StateGraph::from_deepseek(tiny_v41());
  randomized(*g, 8, /*storage=*/false, /*roomy=*/true, 1, 4000);
}
TEST(CacheManagerRandomized, V41TinyTightWithStorage) {
  auto g = StateGraph::from_deepseek(tiny_v41());
  randomized(*g, 8, /*storage=*/true, /*roomy=*/false, 2, 3000);
}
TEST(CacheManagerRandomized, V41TinyRoomyWithStorage) {
  auto g = StateGraph::from_deepseek(tiny_v41());
  randomized(*g, 8, /*storage=*/true, /*roomy=*/true, 5, 1500);
}
TEST(CacheManagerRandomized, V41TinyReplayPolicy) {
  auto g = StateGraph::from_deepseek(tiny_v41());
  randomized(*g, 8, /*storage=*/false, /*roomy=*/true, 7, 3000, /*snapshots=*/false);
  randomized(*g, 8, /*storage=*/true, /*roomy=*/true, 8, 1500, /*snapshots=*/false);
  randomized(*g, 8, /*storage=*/true, /*roomy=*/false, 9, 3000, /*snapshots=*/false);
}
TEST(CacheManagerRandomized, V4TinyTightWithStorage) {
  auto c = load_deepseek_config(std::string(STRATA_SOURCE_DIR) + "/testdata/golden/v4flash-tiny/config.json");
  if (!c.ok()) GTEST_SKIP();
  auto g = StateGraph::from_deepseek(*c);
  ASSERT_TRUE(g.ok());
  randomized(*g, 16, /*storage=*/true, /*roomy=*/false, 3, 2000);
}
TEST(CacheManagerRandomized, LlamaRoomyAndTight) {
  auto g = StateGraph::from_llama({.n_layers = 3, .n_kv_heads = 2, .head_dim = 4});
  randomized(*g, 4, /*storage=*/true, /*roomy=*/true, 4, 3000);
  randomized(*g, 4, /*storage=*/true, /*roomy=*/false, 6, 3000);
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {
TEST(SequenceCacheTest, StepsAndReset) {
  auto g = StateGraph::from_deepseek(tiny_v41());
  auto sc = SequenceCache::create(*g, 64).value();
  std::vector<int32_t> toks;
  for (int step : {5, 1, 1, 9}) {
    std::vector<int32_t> ids(step, 11);
    const int64_t start = sc->length();
    ASSERT_TRUE(sc->begin_step(ids).ok());
    toks.insert(toks.end(), ids.begin(), ids.end());
    fake_forward(sc->cache(), sc->seq(), toks, start, sc->length());
    sc->end_step();
  }
  EXPECT_EQ(sc->length(), 16);
  EXPECT_EQ(sc->begin_step(std::vector<int32_t>(49, 1)).code(), StatusCode::kResourceExhausted);
  sc->reset();
  EXPECT_EQ(sc->length(), 0);
  ASSERT_TRUE(sc->begin_step({1, 2, 3}).ok());
  fake_forward(sc->cache(), sc->seq(), {1, 2, 3}, 0, 3);  // fresh state verified
  sc->end_step();
  sc->cache().check_invariants();
}
}  // namespace
}  // namespace strata

namespace strata {
namespace {

// Speculative rollback of plain KV: blocks past the cut are freed; a kept block that the
// verify step published is copied, so the cache entry of the rolled-back ids stays intact.
TEST(CacheManagerTruncate, CutsBackAndCopiesAPublishedBlock) {
  auto g = StateGraph::from_llama({.n_layers = 1, .n_kv_heads = 1, .head_dim = 2});
  CacheManager cm(*g, CacheOptions{.block_tokens = 4, .max_seqs = 2, .max_tokens = 64});
  const OwnerId owner = g->owners()[0].id;
  std::vector<int32_t> ids = {5, 6, 7, 8, 9, 10, 11, 12, 13};
  cm.add_sequence(1, ids);
  StepPlan p = cm.plan_step({{1, 9}});
  ASSERT_EQ(p.outcome, PlanOutcome::kOk);
  cm.commit(p);
  for (int64_t pos = 0; pos < 9; ++pos) {
    const float row[4] = {float(pos), 1, 2, 3};
    cm.write_row(1, owner, pos, row);
  }
  cm.finish_step(p);  // units [0,4) and [4,8) published
  const int64_t free_before = cm.total_free_blocks();
  ASSERT_TRUE(cm.truncate(1, 6).ok());  // keeps 0..5: block 1 shared with the cache -> copied
  cm.check_invariants();
  EXPECT_EQ(cm.num_computed(1), 6);
  EXPECT_EQ(cm.num_known(1), 6);
  // block 2 (position 8) freed, one block taken for the copy: the same free count
  EXPECT_EQ(cm.total_free_blocks(), free_before);
  float out[4];
  cm.read_row(1, owner, 5, out);
  EXPECT_EQ(out[0], 5.0f);
  // Other ids from position 6 on: the sequence writes its copy, the entry keeps 6 and 7.
  cm.append_tokens(1, {42, 43, 44});
  StepPlan q = cm.plan_step({{1, 3}});
  cm.commit(q);
  for (int64_t pos = 6; pos < 9; ++pos) {
    const float row[4] = {100.0f + pos, 0, 0, 0};
    cm.write_row(1, owner, pos, row);
  }
  cm.finish_step(q);
  cm.check_invariants();
  cm.add_sequence(2, ids);  // the original ids still hit both units, rows intact
  EXPECT_EQ(cm.cached_prefix_tokens(ids), 8);
  StepPlan h = cm.plan_step({{2, 9}});
  ASSERT_EQ(h.seqs[0].hit_tokens, 8);
  cm.commit(h);
  cm.read_row(2, owner, 6, out);
  EXPECT_EQ(out[0], 6.0f);
  cm.read_row(1, owner, 6, out);
  EXPECT_EQ(out[0], 106.0f);
  cm.finish_step(h);
  cm.release(1);
  cm.release(2);
  cm.clear_prefix_cache();
  cm.check_invariants();
  EXPECT_EQ(cm.total_free_blocks(), cm.total_blocks());
}

// Ring / fixed rows (window ring, compressor tail, Engram history) go back through the undo
// record: after one-token steps past the cut with rows changed, truncate restores exactly
// the bytes each row had after position new_len - 1; rows the record did not cover refuse.
TEST(CacheManagerTruncate, UndoRecordRestoresRingAndFixedRows) {
  auto g = StateGraph::from_deepseek(tiny_v41());
  ASSERT_TRUE(g.ok());
  CacheManager cm(*g, CacheOptions{.block_tokens = 8, .max_seqs = 1, .max_tokens = 256});
  const OwnerId win = g->find_owner(StateKind::kWindowKv, 3);
  const OwnerId eng = g->find_owner(StateKind::kEngramHistory, -1);
  const int64_t we = g->owner(win).spec.row_elems;
  std::vector<int32_t> toks(30, 5);
  cm.add_sequence(1, toks);
  std::map<std::pair<int64_t, float>, std::vector<float>> stored;  // (pos, tag) -> row read back
  auto step = [&](int64_t n, float tag) {
    StepPlan p = cm.plan_step({{1, n}});
    ASSERT_EQ(p.outcome, PlanOutcome::kOk);
    cm.commit(p);
    const int64_t end = cm.num_computed(1);
    for (int64_t pos = end - n; pos < end; ++pos) {
      std::vector<float> row(we);
      for (int64_t e = 0; e < we; ++e) row[e] = std::sin(0.37f * static_cast<float>(pos * we + e) + tag);
      cm.write_row(1, win, pos, row.data());
      cm.read_window_row(1, 3, pos, row.data());
      stored[{pos, tag}] = row;
      const int32_t h[3] = {static_cast<int32_t>(pos), static_cast<int32_t>(pos) + 1, 7};
      cm.set_engram_history(1, h);
    }
    cm.finish_step(p);
  };
  step(20, 0.0f);
  // Without a record, the cut is refused and nothing changes.
  EXPECT_EQ(cm.truncate(1, 20).code(), StatusCode::kOk);  // the current length: nothing to cut
  EXPECT_EQ(cm.truncate(1, 19).code(), StatusCode::kUnimplemented);
  cm.record_undo(1, true);
  for (int i = 0; i < 5; ++i) step(1, 64.0f);  // positions 20..24 (a verify's one-token steps)
  EXPECT_GT(cm.undo_bytes(1), 0);
  // A cut below the record's start is refused.
  EXPECT_EQ(cm.truncate(1, 19).code(), StatusCode::kUnimplemented);
  EXPECT_EQ(cm.num_computed(1), 25);
  // Keep 20..21 (two accepted): slots of 22..24 back to positions 6..8, history as after 21.
  ASSERT_TRUE(cm.truncate(1, 22).ok());
  EXPECT_EQ(cm.num_computed(1), 22);
  std::vector<float> after(16 * we);
  cm.read_window(1, 3, after.data());
  for (int64_t slot = 0; slot < 16; ++slot) {
    const int64_t pos = slot < 6 ? 16 + slot : slot;  // newest position <= 21 in this slot
    const std::vector<float>& want = stored.at({pos, pos >= 20 ? 64.0f : 0.0f});
    EXPECT_TRUE(std::equal(want.begin(), want.end(), after.begin() + slot * we)) << slot;
  }
  int32_t hist[3];
  cm.get_engram_history(1, hist);
  EXPECT_EQ(hist[0], 21);
  EXPECT_EQ(hist[1], 22);
  (void)eng;
  // Multi-token steps recorded: a cut inside one is refused.
  cm.record_undo(1, true);
  cm.append_tokens(1, {5, 5, 5, 5});  // truncate cut the known ids too
  step(4, 64.0f);  // positions 22..25 in one step
  EXPECT_EQ(cm.truncate(1, 24).code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(cm.truncate(1, 22).ok());
  cm.record_undo(1, false);
  EXPECT_EQ(cm.undo_bytes(1), 0);
  cm.release(1);
  cm.check_invariants();
}

TEST(CacheManagerTruncate, RingOrFixedStateIsUnimplemented) {
  auto g = StateGraph::from_deepseek(tiny_v41());
  ASSERT_TRUE(g.ok());
  CacheManager cm(*g, CacheOptions{.max_seqs = 1, .max_tokens = 256, .allocate_storage = false});
  cm.add_sequence(1, std::vector<int32_t>(10, 3));
  StepPlan p = cm.plan_step({{1, 10}});
  cm.commit(p);
  cm.finish_step(p);
  EXPECT_EQ(cm.truncate(1, 5).code(), StatusCode::kUnimplemented);
  EXPECT_EQ(cm.num_computed(1), 10);
}

// Under DCP the compressed-KV and index-key pools of a rank store 1/D of the rows: the
// default unit becomes a multiple of ratio * S * D, a rank writes and reads back the records
// it owns, raw_rows gives null for the others, and its blocks of those kinds are 1/D the bytes
// of one rank's (the window and compressor kinds are replicated, unchanged).
TEST(CacheManager, DcpRanksStoreTheirOwnRecords) {
  auto cfg = tiny_v41();
  auto g = StateGraph::from_deepseek(cfg);
  ASSERT_TRUE(g.ok());
  const int D = 2;
  const int64_t S = 3;
  EXPECT_EQ(dcp_block_tokens(*g, RowShard{}), default_block_tokens(*g));
  const int bt = dcp_block_tokens(*g, RowShard{0, D, S});
  for (int r : g->growth_ratios()) EXPECT_EQ(bt % (r * S * D), 0) << r;
  const OwnerId ck = g->find_owner(StateKind::kCompressedKv, 2);
  ASSERT_GE(ck, 0);
  const int m = g->owner(ck).spec.ratio;
  const int64_t len = 3 * bt + 5;
  std::vector<int32_t> toks(len);
  for (int64_t i = 0; i < len; ++i) toks[i] = static_cast<int32_t>(3 + i % 50);
  CacheManager one(*g, CacheOptions{.block_tokens = bt, .max_seqs = 1, .max_tokens = 4 * bt});
  one.add_sequence(1, toks);
  StepPlan p1 = one.plan_step({{1, len}});
  ASSERT_EQ(p1.outcome, PlanOutcome::kOk);
  one.commit(p1);
  const int64_t rows = len / m;
  for (int rank = 0; rank < D; ++rank) {
    CacheManager cm(*g, CacheOptions{.max_seqs = 1, .max_tokens = 4 * bt,
                                     .dcp = RowShard{rank, D, S}});
    EXPECT_EQ(cm.block_tokens(), bt);
    cm.add_sequence(1, toks);
    StepPlan p = cm.plan_step({{1, len}});
    ASSERT_EQ(p.outcome, PlanOutcome::kOk);
    cm.commit(p);
    std::vector<float> x(g->owner(ck).spec.row_elems), y(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      if ((r / S) % D != rank) continue;
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((r * 7 + i) % 5) - 2.0f;
      cm.write_row(1, ck, r, x.data());
    }
    std::vector<const uint8_t*> raw(rows);
    cm.raw_rows(1, ck, 0, rows, raw.data());
    for (int64_t r = 0; r < rows; ++r) {
      const bool mine = (r / S) % D == rank;
      EXPECT_EQ(raw[r] != nullptr, mine) << "rank " << rank << " row " << r;
      if (!mine) continue;
      cm.read_row(1, ck, r, y.data());
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((r * 7 + i) % 5) - 2.0f;
      qdq_state_row(g->owner(ck).spec, x.data());  // the serving format's value
      ASSERT_EQ(y, x) << r;
    }
    const auto mine = cm.pools(), full = one.pools();
    ASSERT_EQ(mine.size(), full.size());
    for (size_t q = 0; q < mine.size(); ++q) {
      const bool sharded =
          mine[q].kind == StateKind::kCompressedKv || mine[q].kind == StateKind::kIndexKeys;
      EXPECT_EQ(mine[q].block_bytes() * (sharded ? D : 1), full[q].block_bytes())
          << state_kind_name(mine[q].kind);
    }
    cm.finish_step(p);
  }
  one.finish_step(p1);
}

// Under pipeline parallelism a stage stores only the state its layers write or read (plus
// request-global, drafter and index-key owners): tiny V4.1 (12 layers; KV sources 2, 4, 6 read
// by the layers up to the next source) on stage [6, 12) keeps layer 6's compressed rows and the
// windows of 6-11, drops the windows of 0-5 and the compressed rows of 2 and 4; on stage
// [3, 6) it keeps layer 2's compressed rows (read by 3) and drops layer 6's. Pools shrink
// accordingly, and a dropped owner's rows are "no storage".
TEST(CacheManager, PipelineStageStoresOnlyItsLayersState) {
  auto cfg = tiny_v41();
  auto g = StateGraph::from_deepseek(cfg);
  ASSERT_TRUE(g.ok());
  const int n = cfg.n_layers;
  ASSERT_EQ(n, 12);
  auto stored = [&](const CacheManager& cm) {
    std::set<OwnerId> s;
    for (const PoolInfo& p : cm.pools()) s.insert(p.owners.begin(), p.owners.end());
    return s;
  };
  auto total_blocks_bytes = [](const CacheManager& cm) {
    int64_t b = 0;
    for (const PoolInfo& p : cm.pools()) b += p.block_bytes() * p.num_blocks;
    return b;
  };
  const CacheManager all(*g, CacheOptions{.max_seqs = 1, .max_tokens = 512});
  const CacheManager late(*g, CacheOptions{.max_seqs = 1, .max_tokens = 512,
                                           .stage = StageLayers{6, 12, n}});
  const CacheManager mid(*g, CacheOptions{.max_seqs = 1, .max_tokens = 512,
                                          .stage = StageLayers{3, 6, n}});
  const std::set<OwnerId> a = stored(all), l = stored(late), m = stored(mid);
  auto owner = [&](StateKind k, int layer) { return g->find_owner(k, layer); };
  for (int layer = 0; layer < n; ++layer) {
    const OwnerId w = owner(StateKind::kWindowKv, layer);
    ASSERT_GE(w, 0) << layer;
    EXPECT_TRUE(a.count(w));
    EXPECT_EQ(l.count(w) == 1, layer >= 6) << "window of layer " << layer;
    EXPECT_EQ(m.count(w) == 1, layer >= 3 && layer < 6) << "window of layer " << layer;
  }
  for (int src : {2, 4, 6}) {
    const OwnerId ck = owner(StateKind::kCompressedKv, src);
    ASSERT_GE(ck, 0) << src;
    EXPECT_EQ(l.count(ck) == 1, src == 6) << "compressed rows of layer " << src;
    EXPECT_EQ(m.count(ck) == 1, src == 2 || src == 4) << "compressed rows of layer " << src;
    const OwnerId ik = owner(StateKind::kIndexKeys, src);
    if (ik >= 0) {
      EXPECT_TRUE(l.count(ik) && m.count(ik)) << "index keys of layer " << src;
    }
  }
  // Request-global (Engram history) and drafter (DSpark rings) owners on every stage.
  for (const StateOwnerInfo& o : g->owners())
    if ((o.layer < 0 || o.layer >= n) && a.count(o.id)) {
      EXPECT_TRUE(l.count(o.id) && m.count(o.id)) << o.label;
    }
  EXPECT_LT(total_blocks_bytes(late), total_blocks_bytes(all));
  EXPECT_LT(total_blocks_bytes(mid), total_blocks_bytes(all));
  // A dropped owner has no rows on that stage.
  CacheManager cm(*g, CacheOptions{.max_seqs = 1, .max_tokens = 512, .stage = StageLayers{6, 12, n}});
  cm.add_sequence(1, {5, 6, 7, 8});
  StepPlan p = cm.plan_step({{1, 4}});
  ASSERT_EQ(p.outcome, PlanOutcome::kOk);
  cm.commit(p);
  std::vector<float> row(g->owner(owner(StateKind::kWindowKv, 6)).spec.row_elems);
  cm.read_row(1, owner(StateKind::kWindowKv, 6), 0, row.data());  // kept: fine
  EXPECT_DEATH(cm.read_row(1, owner(StateKind::kWindowKv, 0), 0, row.data()), "has no storage");
  cm.finish_step(p);
}

}  // namespace
}  // namespace strata
