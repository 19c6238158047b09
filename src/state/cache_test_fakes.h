// Test helpers of the state module: a deterministic fake forward whose every stored row is a
// function of the token prefix, so any restored row (prefix hit, store load, rollback) can be
// checked against what a cold run writes. Test-only header.
#pragma once

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/deepseek_config.h"
#include "state/cache_manager.h"

namespace strata {
namespace {

std::string src_dir() {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  return e ? e : STRATA_SOURCE_DIR;
}

DeepseekConfig tiny_v41() {
  auto c = load_deepseek_config(src_dir() + "/models/deepseek-v41-tiny/config.json");
  STRATA_CHECK_MSG(c.ok(), "{}", c.status().to_string());
  return c.value();
}

// ---- deterministic fake forward: every stored row is a function of the token prefix ----

uint64_t prefix_hash(const std::vector<int32_t>& t, int64_t n, uint64_t salt) {
  uint64_t h = 1469598103934665603ull ^ salt;
  for (int64_t i = 0; i < n; ++i) h = (h ^ static_cast<uint32_t>(t[i])) * 1099511628211ull;
  return h;
}

std::vector<float> fake_row(uint64_t h, int n) {
  std::mt19937_64 rng(h);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(n);
  for (auto& v : x) v = g(rng);
  return x;
}

std::vector<float> expect_row(const StateSpec& s, uint64_t h) {
  auto x = fake_row(h, s.row_elems);
  qdq_state_row(s, x.data());
  return x;
}

// Verifies what a step at [start, end) would read, then writes what it produces.
void fake_forward(CacheManager& cm, CacheSeqId seq, const std::vector<int32_t>& toks, int64_t start,
                  int64_t end) {
  const StateGraph& g = cm.graph();
  for (const auto& o : g.owners()) {
    const StateSpec& s = o.spec;
    std::vector<float> got(std::max(1, s.row_elems));
    const uint64_t salt = static_cast<uint64_t>(o.id) * 7919u;
    if (o.kind == StateKind::kWindowKv) {
      for (int64_t p = std::max<int64_t>(0, start - s.rows_fixed); p < start; ++p) {
        cm.read_row(seq, o.id, p, got.data());
        ASSERT_EQ(got, expect_row(s, prefix_hash(toks, p + 1, salt)))
            << o.label << " pos " << p << " start " << start;
      }
      for (int64_t p = std::max(start, end - s.rows_fixed); p < end; ++p) {
        auto x = fake_row(prefix_hash(toks, p + 1, salt), s.row_elems);
        cm.write_row(seq, o.id, p, x.data());
      }
    } else if (o.kind == StateKind::kCompressedKv || o.kind == StateKind::kIndexKeys ||
               o.kind == StateKind::kPlainKv) {
      const int m = s.ratio;
      for (int64_t gr = 0; gr < start / m; ++gr) {
        cm.read_row(seq, o.id, gr, got.data());
        ASSERT_EQ(got, expect_row(s, prefix_hash(toks, (gr + 1) * m, salt)))
            << o.label << " row " << gr << " start " << start;
      }
      for (int64_t gr = start / m; gr < end / m; ++gr) {
        auto x = fake_row(prefix_hash(toks, (gr + 1) * m, salt), s.row_elems);
        cm.write_row(seq, o.id, gr, x.data());
      }
    } else if (o.kind == StateKind::kCompressorState ||
               o.kind == StateKind::kIndexCompressorState) {
      for (int r = 0; r < s.rows_fixed; ++r) {
        cm.read_row(seq, o.id, r, got.data());
        if (start == 0) {
          for (int i = 0; i < s.row_elems; ++i)
            ASSERT_EQ(got[i], i < s.row_elems / 2 ? 0.f : -INFINITY) << o.label;
        } else {
          ASSERT_EQ(got, expect_row(s, prefix_hash(toks, start, salt + r))) << o.label;
        }
        auto x = fake_row(prefix_hash(toks, end, salt + r), s.row_elems);
        cm.write_row(seq, o.id, r, x.data());
      }
    } else if (o.kind == StateKind::kEngramHistory) {
      cm.read_row(seq, o.id, 0, got.data());
      for (int i = 0; i < s.row_elems; ++i) {
        int64_t p = start - s.row_elems + i;
        ASSERT_EQ(got[i], p < 0 ? -2.f : static_cast<float>(toks[p])) << "engram " << i;
      }
      std::vector<float> h(s.row_elems);
      for (int i = 0; i < s.row_elems; ++i) {
        int64_t p = end - s.row_elems + i;
        h[i] = p < 0 ? -2.f : static_cast<float>(toks[p]);
      }
      cm.write_row(seq, o.id, 0, h.data());
    }
  }
}

// Bounded-replay restore (CacheOptions::boundary_snapshots = false) after a hit of `hit`
// tokens: the ring / fixed owners must start fresh (window 0, compressor kv 0 / score -inf,
// Engram -2); the caller then rebuilds them -- here by writing what a cold run holds at
// `hit`, so the fake forward that follows verifies every restored paged row as usual.
void fake_replay(CacheManager& cm, CacheSeqId seq, const std::vector<int32_t>& toks,
                 int64_t hit) {
  for (const auto& o : cm.graph().owners()) {
    const StateSpec& s = o.spec;
    if (!s.fixed() || s.row_bytes == 0 || s.rows_fixed == 0) continue;
    const uint64_t salt = static_cast<uint64_t>(o.id) * 7919u;
    std::vector<float> got(s.row_elems);
    for (int r = 0; r < s.rows_fixed; ++r) {
      cm.read_row(seq, o.id, r, got.data());
      for (int i = 0; i < s.row_elems; ++i) {
        const bool cstate = o.kind == StateKind::kCompressorState ||
                            o.kind == StateKind::kIndexCompressorState;
        const float fresh = o.kind == StateKind::kEngramHistory ? -2.f
                            : (cstate && i >= s.row_elems / 2) ? -INFINITY
                                                               : 0.f;
        ASSERT_EQ(got[i], fresh) << o.label << " row " << r << " elem " << i;
      }
    }
    if (o.kind == StateKind::kWindowKv) {
      for (int64_t p = std::max<int64_t>(0, hit - s.rows_fixed); p < hit; ++p) {
        auto x = fake_row(prefix_hash(toks, p + 1, salt), s.row_elems);
        cm.write_row(seq, o.id, p, x.data());
      }
    } else if (o.kind == StateKind::kCompressorState ||
               o.kind == StateKind::kIndexCompressorState) {
      for (int r = 0; r < s.rows_fixed; ++r) {
        auto x = fake_row(prefix_hash(toks, hit, salt + r), s.row_elems);
        cm.write_row(seq, o.id, r, x.data());
      }
    } else if (o.kind == StateKind::kEngramHistory) {
      std::vector<float> h(s.row_elems);
      for (int i = 0; i < s.row_elems; ++i) {
        const int64_t p = hit - s.row_elems + i;
        h[i] = p < 0 ? -2.f : static_cast<float>(toks[p]);
      }
      cm.write_row(seq, o.id, 0, h.data());
    }
  }
}

// One step for one sequence: plan, commit, fake forward, finish.
SeqStepPlan run_step(CacheManager& cm, CacheSeqId seq, const std::vector<int32_t>& toks,
                     int64_t max_tokens) {
  StepPlan p = cm.plan_step({{seq, max_tokens}});
  EXPECT_EQ(p.outcome, PlanOutcome::kOk) << p.shortfall;
  cm.commit(p);
  const auto& sp = p.seqs[0];
  if (sp.hit_tokens > 0 && cm.boundary_snapshot_bytes() == 0) fake_replay(cm, seq, toks, sp.hit_tokens);
  fake_forward(cm, seq, toks, sp.start_pos, sp.start_pos + sp.num_tokens);
  cm.finish_step(p);
  cm.check_invariants();
  return sp;
}

}  // namespace
}  // namespace strata
