// Issue 22, at the ModelRunner boundary with full logits compared with ==: for Llama
// (stories260K), DeepSeek-V4.1 tiny and V4 tiny, a prompt B sharing s tokens with a prompt A
// the runner served before (prefix hit + the rest of B, then 2 greedy decode steps), and
// then B + its answer re-admitted after release (a recompute after preemption, hitting its
// own cached units), give logits bit-identical to a cold single-sequence run of the same
// ids on a fresh runner. Lengths straddle every boundary of the tiny models: window 16, ratio
// 2 / 4 / 128 (odd / even positions), the alignment unit (16, 64 or 128) and each +-1.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "exec/runner_factory.h"
#include "runner_fixtures.h"

namespace strata {
namespace {

using testing::argmax;

std::unique_ptr<ModelRunner> fresh(const std::string& model) { return testing::fresh_runner(model); }

// Admits `prompt` as `seq` (prefix hit allowed), feeds the rest in one step, then `decode`
// greedy steps. Returns the logits rows (prompt's last, then one per decode step) and
// appends the generated ids to *ids. *hit: the cached tokens.
std::vector<std::vector<float>> serve(ModelRunner& r, int64_t seq, std::vector<int32_t>* ids,
                                      int decode, int64_t* hit) {
  const SeqId id{seq};
  EXPECT_TRUE(r.add_sequence(id).ok());
  *hit = r.attach_cached_prefix(id, *ids);
  std::vector<std::vector<float>> rows;
  std::vector<float> logits;
  const std::span<const int32_t> rest(ids->data() + *hit, ids->size() - *hit);
  StepItem item{id, rest, true, static_cast<int64_t>(ids->size())};
  EXPECT_TRUE(r.step(std::span<const StepItem>(&item, 1), &logits).ok());
  rows.push_back(logits);
  for (int k = 0; k < decode; ++k) {
    ids->push_back(argmax(rows.back()));
    StepItem d{id, std::span<const int32_t>(&ids->back(), 1), true, -1};
    EXPECT_TRUE(r.step(std::span<const StepItem>(&d, 1), &logits).ok());
    rows.push_back(logits);
  }
  return rows;
}

void check(const std::string& model) {
  auto warm = fresh(model);
  ASSERT_TRUE(warm);
  const int64_t unit = warm->prefix_alignment();
  ASSERT_GT(unit, 0) << model << " has no prefix cache";
  const int64_t ctx = warm->info().max_context;
  const int32_t vocab = warm->info().vocab_size;
  std::mt19937 rng(4242);
  std::uniform_int_distribution<int32_t> tok(3, vocab - 8);
  std::vector<int32_t> base(static_cast<size_t>(ctx));
  for (auto& t : base) t = tok(rng);
  // (shared length s, B's length L): around the window (16), the unit and twice the unit.
  std::vector<std::pair<int64_t, int64_t>> cases;
  for (int64_t s : {int64_t{15}, int64_t{16}, int64_t{17}, unit - 1, unit, unit + 1, 2 * unit - 1,
                    2 * unit, 2 * unit + 1})
    for (int64_t extra : {1, 2, 15, 16, 17})
      if (s + extra + 8 < ctx && s + 20 < ctx) cases.push_back({s, s + extra});
  int64_t seq = 1, hits = 0;
  for (auto [s, L] : cases) {
    // A shares s ids with B and then differs (A is longer than s so its units up to s publish).
    std::vector<int32_t> a(base.begin(), base.begin() + s);
    for (int i = 0; i < 19; ++i) a.push_back(static_cast<int32_t>(3 + (i * 37 + s) % (vocab - 11)));
    std::vector<int32_t> b(base.begin(), base.begin() + L);
    int64_t hit = 0;
    std::vector<int32_t> ida = a;
    serve(*warm, seq, &ida, 0, &hit);
    warm->release_sequence(SeqId{seq++});
    std::vector<int32_t> idb = b;
    const auto got = serve(*warm, seq, &idb, 2, &hit);
    warm->release_sequence(SeqId{seq++});
    hits += hit > 0;
    EXPECT_EQ(hit % unit, 0);
    // Earlier cases' B prompts (prefixes of `base`) may have cached more than s ids of B.
    EXPECT_LE(hit, L - 1);
    auto cold_r = fresh(model);
    std::vector<int32_t> idc = b;
    int64_t cold_hit = 0;
    const auto want = serve(*cold_r, 1, &idc, 2, &cold_hit);
    EXPECT_EQ(cold_hit, 0);
    ASSERT_EQ(idb, idc) << model << " s=" << s << " L=" << L;
    for (size_t k = 0; k < want.size(); ++k)
      EXPECT_TRUE(got[k] == want[k]) << model << " s=" << s << " L=" << L << " (hit " << hit
                                     << "): logits row " << k << " differ from the cold run";
    // Recompute after preemption: B + its answer again, hitting its own cached units.
    std::vector<int32_t> idr(idb.begin(), idb.end() - 1);  // the last id was never fed
    const int64_t n = static_cast<int64_t>(idr.size());
    int64_t rhit = 0;
    const auto again = serve(*warm, seq, &idr, 0, &rhit);
    warm->release_sequence(SeqId{seq++});
    EXPECT_EQ(rhit, (n - 1) / unit * unit) << model << " s=" << s << " L=" << L;
    EXPECT_TRUE(again[0] == want[1]) << model << " s=" << s << " L=" << L
                                     << ": recomputed logits differ from the cold run";
  }
  EXPECT_GT(hits, 0) << model;
}

TEST(RestoreLogits, Llama) { check("stories260K"); }
TEST(RestoreLogits, DeepseekV41Tiny) { check("deepseek-v41-tiny"); }
TEST(RestoreLogits, DeepseekV4Tiny) { check("deepseek-v4flash-tiny"); }

}  // namespace
}  // namespace strata
