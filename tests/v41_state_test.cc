// DeepSeek-V4.1 forward over the state module (issue 4: the forward reads and writes inference
// state only through the state graph of issue 3). On the tiny model (window 16, ratios 0/2/1,
// index_topk 8, candidate blocks 6 x 4):
//   * the state-module path is bit-identical to the interim f32 mirror it replaced (logits
//     and routes, golden cases' prefill + teacher-forced decode, and chunked prefill), i.e.
//     storing rows in the serving format and decoding them back loses nothing the forward had
//     not already QDQ'd;
//   * chunked prefill == whole prefill bit-identically through the state module, for prompt
//     lengths around the ratio, the window, 2W+1 and past the top-k / candidate activation,
//     at chunk sizes 1, 2, 3, 4, 5, 16 and whole;
//   * a cross-layer owner (compressed KV of a kv source, index keys of an index-key owner)
//     exists once, consumers have none of their own and read the source's; byte totals count
//     owners once (hand-derived from the row formats);
//   * a prefix-cache hit (boundary snapshot + shared blocks) then the rest of the prompt is
//     bit-identical to a cold whole prefill at unit-1, unit, unit+1 and 2 unit+1.
// The golden parity itself (reference logits) is tests/v41_golden_test.cc, which runs through
// DeepseekV41Model::new_sequence(), i.e. the state module.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "base/check.h"
#include "exec/deepseek_v41/deepseek_v41_model.h"
#include "exec/golden_validator.h"
#include "state/cache_manager.h"
#include "state/state_graph.h"

namespace strata {
namespace {

std::string src_dir() {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  return e ? e : STRATA_SOURCE_DIR;
}
std::string model_dir() { return src_dir() + "/models/deepseek-v41-tiny"; }
std::string golden_dir() { return src_dir() + "/testdata/golden/v41-tiny"; }

const DeepseekV41Model& model() {
  static std::unique_ptr<DeepseekV41Model> m = [] {
    V41LoadOptions o;
    o.state_max_tokens = 512;
    auto r = DeepseekV41Model::load(model_dir(), o);
    STRATA_CHECK_MSG(r.ok(), "{}", r.status().to_string());
    return std::move(r).value();
  }();
  return *m;
}

std::vector<int32_t> make_prompt(int64_t n, uint32_t seed) {
  std::vector<int32_t> p(n);
  uint32_t x = seed * 2654435761u + 12345u;
  for (auto& t : p) {
    x = x * 1664525u + 1013904223u;
    t = static_cast<int32_t>(3 + (x >> 8) % 2000);  // avoid bos/eos/pad and the image id
  }
  return p;
}

// Runs `prompt` in chunks (0 = whole) with the prompt length known; returns all logits rows.
std::vector<float> prefill(V41SequenceState* s, const std::vector<int32_t>& prompt, int64_t chunk) {
  const int64_t L = static_cast<int64_t>(prompt.size());
  if (chunk <= 0) chunk = L;
  std::vector<float> all, part;
  V41ForwardOptions o;
  o.all_logits = true;
  o.prompt_len = L;
  for (int64_t s0 = 0; s0 < L; s0 += chunk) {
    const int64_t n = std::min(chunk, L - s0);
    Status st = model().forward(s, std::span<const int32_t>(prompt.data() + s0, n), o, &part);
    EXPECT_TRUE(st.ok()) << st.to_string();
    if (!st.ok()) return all;
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 1e30;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return 1e30;
    m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  }
  return m;
}

TEST(V41State, NewSequenceUsesStateModule) {
  auto s = model().new_sequence();
  EXPECT_TRUE(s->uses_state_graph());
  EXPECT_FALSE(model().new_legacy_sequence()->uses_state_graph());
}

// Past the sequence's state capacity (V41LoadOptions::state_max_tokens) a call is refused
// before anything is computed or stored.
TEST(V41State, CapacityExceededIsResourceExhausted) {
  V41LoadOptions o;
  o.state_max_tokens = 8;
  auto m = DeepseekV41Model::load(model_dir(), o);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ((*m)->state_max_tokens(), 8);
  auto s = (*m)->new_sequence();
  std::vector<float> lg;
  const std::vector<int32_t> prompt = make_prompt(9, 5);
  Status st = (*m)->forward(s.get(), prompt, V41ForwardOptions{}, &lg);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
  EXPECT_EQ(s->length(), 0);
  ASSERT_TRUE((*m)->forward(s.get(), std::span<const int32_t>(prompt.data(), 8),
                            V41ForwardOptions{}, &lg).ok());
  st = (*m)->forward(s.get(), std::span<const int32_t>(prompt.data() + 8, 1), V41ForwardOptions{}, &lg);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
  EXPECT_EQ(s->length(), 8);
}

// Serving-format state vs the f32 mirror it replaced, on golden cases (whole prompt, then
// the cases' teacher-forced decode steps): every logits row and every route (MoE ids, indexer
// selections) identical, so the golden pass/fail set cannot change. case03 / case09 are the
// cases with a known decode route divergence from the reference, case08 has Reuse layers
// past the top-k activation.
TEST(V41State, BitIdenticalToF32MirrorOnGoldenCases) {
  auto cases = load_golden_cases(golden_dir() + "/cases.safetensors", "");
  ASSERT_TRUE(cases.ok()) << cases.status().to_string();
  int ran = 0;
  for (const GoldenCase& gc : *cases) {
    if (gc.name != "case03" && gc.name != "case08" && gc.name != "case09") continue;
    ++ran;
    auto a = model().new_sequence();
    auto b = model().new_legacy_sequence();
    auto run = [&](V41SequenceState* s, std::span<const int32_t> toks, bool decode,
                   std::vector<float>* lg, V41Routes* routes) {
      V41ForwardOptions o;
      o.decode_step = decode;
      o.routes = routes;
      Status st = model().forward(s, toks, o, lg);
      EXPECT_TRUE(st.ok()) << st.to_string();
    };
    std::vector<float> la, lb;
    V41Routes ra, rb;
    run(a.get(), gc.prompt, false, &la, &ra);
    run(b.get(), gc.prompt, false, &lb, &rb);
    EXPECT_EQ(max_abs_diff(la, lb), 0.0) << gc.name << " prefill";
    EXPECT_EQ(ra.moe, rb.moe) << gc.name;
    EXPECT_EQ(ra.index, rb.index) << gc.name;
    for (size_t k = 0; k < gc.decode_tokens.size(); ++k) {
      std::span<const int32_t> t(&gc.decode_tokens[k], 1);
      run(a.get(), t, true, &la, &ra);
      run(b.get(), t, true, &lb, &rb);
      EXPECT_EQ(max_abs_diff(la, lb), 0.0) << gc.name << " decode " << k;
      EXPECT_EQ(ra.moe, rb.moe) << gc.name << " decode " << k;
      EXPECT_EQ(ra.index, rb.index) << gc.name << " decode " << k;
    }
    EXPECT_EQ(a->length(), static_cast<int64_t>(gc.prompt.size() + gc.decode_tokens.size()));
  }
  EXPECT_EQ(ran, 3);
}

// The same with chunked prefill (chunk 3) on a synthetic prompt past the window.
TEST(V41State, BitIdenticalToF32MirrorChunked) {
  const std::vector<int32_t> prompt = make_prompt(33 + 4, 33);
  const std::vector<int32_t> head(prompt.begin(), prompt.begin() + 33);
  auto a = model().new_sequence();
  auto b = model().new_legacy_sequence();
  EXPECT_EQ(max_abs_diff(prefill(a.get(), head, 3), prefill(b.get(), head, 3)), 0.0);
  V41ForwardOptions o;
  o.decode_step = true;
  for (int64_t p = 33; p < 37; ++p) {
    std::vector<float> da, db;
    ASSERT_TRUE(model().forward(a.get(), std::span<const int32_t>(&prompt[p], 1), o, &da).ok());
    ASSERT_TRUE(model().forward(b.get(), std::span<const int32_t>(&prompt[p], 1), o, &db).ok());
    EXPECT_EQ(max_abs_diff(da, db), 0.0) << "decode pos " << p;
  }
}

// Chunked == whole prefill through the state module.
TEST(V41State, ChunkedPrefillBitIdenticalToWhole) {
  const DeepseekConfig& c = model().config();
  ASSERT_EQ(c.window_size, 16);
  ASSERT_EQ(c.index_topk, 8);
  const int64_t W = c.window_size;
  // ratio-2 top-k drops entries once L/2 > index_topk (L >= 18); candidates matter once
  // the ratio-1 candidate source has more than 6 blocks of 4 rows (L > 24): 2W+1 = 33.
  const std::vector<int64_t> lens = {1, 2, 3, W - 1, W, W + 1, 2 * c.index_topk + 2, 2 * W + 1};
  for (int64_t L : lens) {
    const std::vector<int32_t> prompt = make_prompt(L, static_cast<uint32_t>(100 + L));
    auto w = model().new_sequence();
    const std::vector<float> whole = prefill(w.get(), prompt, 0);
    ASSERT_EQ(static_cast<int64_t>(whole.size()), L * c.vocab_size);
    for (int64_t chunk : {1, 2, 3, 4, 5, 16}) {
      if (chunk >= L && chunk != 1) continue;  // same as whole
      auto s = model().new_sequence();
      EXPECT_EQ(max_abs_diff(prefill(s.get(), prompt, chunk), whole), 0.0)
          << "L=" << L << " chunk=" << chunk;
      EXPECT_EQ(s->length(), L);
    }
  }
}

// Owners once: per kind, one owner per physical source layer; consumers read the source's.
TEST(V41State, CrossLayerOwnersAllocatedOnce) {
  const DeepseekConfig& c = model().config();
  const StateGraph& g = model().state_graph();
  std::set<int> kv_sources, key_owners;
  int reusers = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerSchedule& ls = c.layers[l];
    if (ls.ratio == 0) {
      EXPECT_LT(g.owner_read_by(l, StateKind::kCompressedKv), 0) << l;
      continue;
    }
    kv_sources.insert(ls.kv_owner);
    const OwnerId src = g.find_owner(StateKind::kCompressedKv, ls.kv_owner);
    ASSERT_GE(src, 0) << l;
    EXPECT_EQ(g.owner_read_by(l, StateKind::kCompressedKv), src) << l;
    if (ls.kv_owner != l) {
      ++reusers;
      EXPECT_LT(g.find_owner(StateKind::kCompressedKv, l), 0) << "layer " << l << " reuses " << ls.kv_owner;
      const auto& cons = g.owner(src).consumer_layers;
      EXPECT_NE(std::find(cons.begin(), cons.end(), l), cons.end()) << l;
    }
    if (ls.has_indexer) {
      key_owners.insert(ls.index_key_owner);
      EXPECT_EQ(g.owner_read_by(l, StateKind::kIndexKeys),
                g.find_owner(StateKind::kIndexKeys, ls.index_key_owner)) << l;
    }
  }
  EXPECT_GT(reusers, 0);  // the tiny schedule has Reuse layers
  // The tiny config: kv sources are layers 2, 4, 6 (config.json kv_source_layers).
  EXPECT_EQ(kv_sources, (std::set<int>{2, 4, 6}));
  int n_ckv = 0, n_keys = 0;
  for (const auto& o : g.owners()) {
    if (o.kind == StateKind::kCompressedKv && o.stage == Stage::kBackbone) ++n_ckv;
    if (o.kind == StateKind::kIndexKeys && o.stage == Stage::kBackbone) ++n_keys;
  }
  EXPECT_EQ(n_ckv, 3);
  EXPECT_EQ(n_keys, static_cast<int>(key_owners.size()));
  // Bytes per token of compressed KV, owners once: head_dim 64 -> 32 FP4 bytes + 4 E4M3
  // scales = 36 B/row; sources at ratios 2 (layers 2, 4) and 1 (layer 6): 18 + 18 + 36.
  EXPECT_DOUBLE_EQ(g.bytes_per_token(StateKind::kCompressedKv), 72.0);
  // The manager allocates paged blocks per owner, not per consumer layer.
  CacheOptions co;
  co.allocate_storage = false;
  co.max_tokens = 256;
  co.block_tokens = 8;
  CacheManager cm(g, co);
  int pool_ckv_owners = 0;
  for (const auto& p : cm.pools())
    if (p.kind == StateKind::kCompressedKv) pool_ckv_owners += static_cast<int>(p.owners.size());
  EXPECT_EQ(pool_ckv_owners, n_ckv);
  // And a forward whose Reuse layers read the sources' rows runs (a consumer reading its own
  // storage would CHECK-fail: it has none).
  auto s = model().new_sequence();
  EXPECT_FALSE(prefill(s.get(), make_prompt(12, 7), 0).empty());
}

// Prefix-cache hit vs cold prefill through a CacheManager with the prefix cache on.
void prefix_case(int unit, int64_t L) {
  const DeepseekConfig& c = model().config();
  CacheOptions co;
  co.block_tokens = unit;
  co.max_seqs = 2;
  co.max_tokens = 1024;
  co.snapshot_slots = 8;
  co.prefix_cache = true;
  CacheManager cm(model().state_graph(), co);
  ASSERT_EQ(cm.block_tokens(), unit);
  const std::vector<int32_t> prompt = make_prompt(L, static_cast<uint32_t>(1000 + L + unit));
  V41ForwardOptions o;
  o.prompt_len = L;
  std::vector<float> lg;
  // Warm: the same prompt, cut at the last cacheable boundary (CacheManager::suggest_chunk),
  // so its boundary snapshot is published.
  cm.add_sequence(1, prompt);
  std::unique_ptr<V41SequenceState> st;
  for (bool first = true; cm.num_computed(1) < L; first = false) {
    const int64_t n = cm.suggest_chunk(1, L);
    StepPlan plan = cm.plan_step({{1, n}});
    ASSERT_EQ(plan.outcome, PlanOutcome::kOk);
    cm.commit(plan);
    const SeqStepPlan& sp = plan.seqs[0];
    if (first) {
      EXPECT_EQ(sp.hit_tokens, 0);
    }
    if (first) st = std::make_unique<V41SequenceState>(c, &cm, 1, sp.start_pos);
    ASSERT_TRUE(model().forward(st.get(), std::span<const int32_t>(prompt.data() + sp.start_pos,
                                                                   sp.num_tokens), o, &lg).ok());
    cm.finish_step(plan);
  }
  EXPECT_EQ(st->length(), L);
  st.reset();
  cm.release(1);
  cm.check_invariants();
  // Hit: the re-sent prompt restores state up to floor((L-1)/unit)*unit (docs/state.md §5).
  cm.add_sequence(2, prompt);
  StepPlan plan = cm.plan_step({{2, L}});
  ASSERT_EQ(plan.outcome, PlanOutcome::kOk);
  cm.commit(plan);
  const SeqStepPlan& sp = plan.seqs[0];
  EXPECT_EQ(sp.hit_tokens, ((L - 1) / unit) * unit) << "L=" << L;
  EXPECT_EQ(sp.start_pos, sp.hit_tokens);
  V41SequenceState hit(c, &cm, 2, sp.start_pos);
  std::vector<float> warm;
  ASSERT_TRUE(model().forward(&hit, std::span<const int32_t>(prompt.data() + sp.start_pos,
                                                             sp.num_tokens), o, &warm).ok());
  cm.finish_step(plan);
  EXPECT_EQ(hit.length(), L);
  // Cold.
  auto cold = model().new_sequence();
  std::vector<float> ref;
  V41ForwardOptions oc;
  ASSERT_TRUE(model().forward(cold.get(), prompt, oc, &ref).ok());
  EXPECT_EQ(max_abs_diff(warm, ref), 0.0) << "unit=" << unit << " L=" << L;
  // Generation continues identically (decode reads the restored rings / compressor tails).
  const std::vector<int32_t> more = make_prompt(2, static_cast<uint32_t>(L));
  V41ForwardOptions od;
  od.decode_step = true;
  for (int k = 0; k < 2; ++k) {
    StepPlan dp = (cm.append_tokens(2, {more[k]}), cm.plan_step({{2, 1}}));
    ASSERT_EQ(dp.outcome, PlanOutcome::kOk);
    cm.commit(dp);
    ASSERT_TRUE(model().forward(&hit, std::span<const int32_t>(&more[k], 1), od, &warm).ok());
    cm.finish_step(dp);
    ASSERT_TRUE(model().forward(cold.get(), std::span<const int32_t>(&more[k], 1), od, &ref).ok());
    EXPECT_EQ(max_abs_diff(warm, ref), 0.0) << "unit=" << unit << " L=" << L << " decode " << k;
  }
  cm.release(2);
  cm.check_invariants();
}

TEST(V41State, PrefixHitBitIdenticalToCold) {
  // A small explicit unit (a multiple of every ratio, smaller than the window: the ring is
  // restored from the snapshot) and the default unit.
  for (int unit : {8, 0}) {
    CacheOptions probe;
    probe.allocate_storage = false;
    probe.block_tokens = unit;
    const int u = CacheManager(model().state_graph(), probe).block_tokens();
    if (unit == 0) {
      EXPECT_EQ(u, 64);  // smallest multiple of ratios {1, 2} >= 64
    }
    for (int64_t L : {u - 1, u, u + 1, 2 * u + 1}) prefix_case(u, L);
  }
}

}  // namespace
}  // namespace strata
