// Issue 23, the handoff at the ModelRunner boundary (state/handoff.h), for Llama
// (stories260K), DeepSeek-V4.1 tiny and V4 tiny: a "prefill" runner computes positions
// [0, T-1) of a prompt of T tokens and exports them; a "decode" runner with another pool size
// (and, for some cases, its own prefix cache already holding part of the prompt) imports the
// state, computes position T-1 and decodes greedily. Its logits are compared with == against a
// colocated cold run of the same ids on a third runner, at T around every boundary of the
// tiny models (1, 2, 3, ratios +-1, window 16 +-1, the unit +-1, 2 units + 1). The bytes
// exported equal handoff_bytes() (the analytic formula) and a corrupted, truncated or
// misplaced run fails verify_handoff with DataLoss.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "exec/runner_factory.h"
#include "runner_fixtures.h"
#include "state/handoff.h"

namespace strata {
namespace {

using testing::argmax;

std::unique_ptr<ModelRunner> fresh(const std::string& model, int64_t kv_tokens = 0) {
  return testing::fresh_runner(model, kv_tokens);
}

Status feed(ModelRunner& r, SeqId id, std::span<const int32_t> toks, std::vector<float>* logits) {
  StepItem item{id, toks, true, -1};
  return r.step(std::span<const StepItem>(&item, 1), logits);
}

// Feeds ids[held, end) then `decode` greedy steps; returns the logits rows.
std::vector<std::vector<float>> finish(ModelRunner& r, SeqId id, std::vector<int32_t> ids,
                                       int64_t held, int decode) {
  std::vector<std::vector<float>> rows;
  std::vector<float> logits;
  EXPECT_TRUE(feed(r, id, std::span<const int32_t>(ids).subspan(static_cast<size_t>(held)),
                   &logits)
                  .ok());
  rows.push_back(logits);
  for (int k = 0; k < decode; ++k) {
    ids.push_back(argmax(rows.back()));
    EXPECT_TRUE(feed(r, id, std::span<const int32_t>(&ids.back(), 1), &logits).ok());
    rows.push_back(logits);
  }
  return rows;
}

// Prefill side: positions [0, T-1) of `ids` computed (in chunks of `chunk`) and exported.
HandoffState prefill_export(ModelRunner& p, int64_t seq, const std::vector<int32_t>& ids,
                            int64_t chunk) {
  const SeqId id{seq};
  EXPECT_TRUE(p.add_sequence(id).ok());
  const int64_t n = static_cast<int64_t>(ids.size()) - 1;
  const std::span<const int32_t> head(ids.data(), static_cast<size_t>(n));
  int64_t done = n > 0 ? p.attach_cached_prefix(id, head) : 0;
  std::vector<float> logits;
  while (done < n) {
    const int64_t c = std::min(chunk, n - done);
    EXPECT_TRUE(feed(p, id, head.subspan(static_cast<size_t>(done), static_cast<size_t>(c)),
                     &logits)
                    .ok());
    done += c;
  }
  HandoffState st;
  EXPECT_TRUE(p.export_handoff(id, 0, head, &st).ok());
  p.release_sequence(id);
  return st;
}

void check(const std::string& model) {
  auto cold = fresh(model);
  auto pre = fresh(model);
  auto dec = fresh(model, /*kv_tokens=*/0);
  ASSERT_TRUE(cold && pre && dec);
  ASSERT_NE(pre->state_graph(), nullptr);
  const StateGraph& g = *pre->state_graph();
  const int64_t unit = pre->prefix_alignment();
  const int64_t ctx = pre->info().max_context;
  std::set<int64_t> lens = {1, 2, 3, 15, 16, 17, unit - 1, unit, unit + 1, 2 * unit + 1};
  for (int r : g.growth_ratios())
    for (int64_t d : {-1, 0, 1}) lens.insert(r + d);
  std::mt19937 rng(2323);
  std::uniform_int_distribution<int32_t> tok(3, pre->info().vocab_size - 8);
  std::vector<int32_t> base(static_cast<size_t>(ctx));
  for (auto& t : base) t = tok(rng);
  int64_t seq = 1;
  int checked = 0;
  for (int64_t T : lens) {
    if (T < 1 || T + 8 >= ctx) continue;
    SCOPED_TRACE(model + " T=" + std::to_string(T));
    const std::vector<int32_t> ids(base.begin(), base.begin() + T);
    // Colocated reference.
    const SeqId c{seq++};
    ASSERT_TRUE(cold->add_sequence(c).ok());
    const auto want = finish(*cold, c, ids, 0, 4);
    cold->release_sequence(c);
    // Handoff, prefill in chunks of 7 (any chunking gives the same state).
    const HandoffState st = prefill_export(*pre, seq++, ids, 7);
    EXPECT_EQ(st.num_tokens, T - 1);
    ASSERT_TRUE(verify_handoff(g, st).ok()) << verify_handoff(g, st).to_string();
    EXPECT_EQ(st.payload_bytes(), handoff_bytes(g, T - 1).total);
    const SeqId d{seq++};
    ASSERT_TRUE(dec->add_sequence(d).ok());
    int64_t held = dec->attach_cached_prefix(d, ids);
    ASSERT_TRUE(dec->import_handoff(d, ids, st, &held).ok());
    EXPECT_EQ(held, T - 1);
    EXPECT_EQ(dec->sequence_length(d), T - 1);
    const auto got = finish(*dec, d, ids, held, 4);
    dec->release_sequence(d);
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) EXPECT_TRUE(got[k] == want[k]) << "row " << k;
    ++checked;
  }
  EXPECT_GE(checked, 6);

  // The decode side already holds 2 units of the prompt in its own prefix cache (it served a
  // request sharing them): the handoff from 2 units on carries fewer bytes, and the result is
  // still the colocated one.
  const int64_t T = 3 * unit + 5;
  if (T + 8 < ctx) {
    const std::vector<int32_t> ids(base.begin(), base.begin() + T);
    std::vector<int32_t> other(base.begin(), base.begin() + 2 * unit + 3);
    const SeqId w{seq++};
    ASSERT_TRUE(dec->add_sequence(w).ok());
    finish(*dec, w, other, dec->attach_cached_prefix(w, other), 0);
    dec->release_sequence(w);
    const SeqId c{seq++};
    ASSERT_TRUE(cold->add_sequence(c).ok());
    const auto want = finish(*cold, c, ids, 0, 4);
    cold->release_sequence(c);
    const SeqId d{seq++};
    ASSERT_TRUE(dec->add_sequence(d).ok());
    int64_t held = dec->attach_cached_prefix(d, ids);
    EXPECT_EQ(held, 2 * unit);
    const SeqId ps{seq++};
    ASSERT_TRUE(pre->add_sequence(ps).ok());
    std::vector<float> logits;
    const std::span<const int32_t> head(ids.data(), ids.size() - 1);
    ASSERT_TRUE(feed(*pre, ps, head, &logits).ok());
    HandoffState st;
    ASSERT_TRUE(pre->export_handoff(ps, held, head, &st).ok());
    pre->release_sequence(ps);
    EXPECT_TRUE(verify_handoff(g, st).ok());
    EXPECT_EQ(st.payload_bytes(), handoff_bytes(g, T - 1, held).total);
    EXPECT_LT(st.payload_bytes(), handoff_bytes(g, T - 1).total);
    ASSERT_TRUE(dec->import_handoff(d, ids, st, &held).ok());
    const auto got = finish(*dec, d, ids, held, 4);
    dec->release_sequence(d);
    for (size_t k = 0; k < want.size(); ++k) EXPECT_TRUE(got[k] == want[k]) << "row " << k;
  }

  // Damaged states are refused by verify_handoff (DataLoss) or by the import's id check.
  const std::vector<int32_t> ids(base.begin(), base.begin() + unit + 3);
  const HandoffState good = prefill_export(*pre, seq++, ids, 64);
  ASSERT_FALSE(good.runs.empty());
  {
    HandoffState bad = good;
    bad.runs.back().bytes[bad.runs.back().bytes.size() / 2] ^= 0x10;
    EXPECT_EQ(verify_handoff(g, bad).code(), StatusCode::kDataLoss);
  }
  {
    HandoffState bad = good;
    bad.runs.back().bytes.pop_back();
    EXPECT_EQ(verify_handoff(g, bad).code(), StatusCode::kDataLoss);
  }
  {
    HandoffState bad = good;
    bad.runs.pop_back();
    EXPECT_EQ(verify_handoff(g, bad).code(), StatusCode::kDataLoss);
  }
  {
    HandoffState bad = good;
    bad.runs.front().row0 += 1;
    EXPECT_EQ(verify_handoff(g, bad).code(), StatusCode::kDataLoss);
  }
  {
    HandoffState bad = good;
    bad.runs.push_back(good.runs.front());
    EXPECT_EQ(verify_handoff(g, bad).code(), StatusCode::kDataLoss);
  }
  {
    std::vector<int32_t> other = ids;
    other[1] ^= 1;
    const SeqId d{seq++};
    ASSERT_TRUE(dec->add_sequence(d).ok());
    int64_t held = dec->attach_cached_prefix(d, other);
    EXPECT_EQ(dec->import_handoff(d, other, good, &held).code(), StatusCode::kInvalidArgument);
    dec->release_sequence(d);
  }
}

TEST(HandoffRunner, Llama) { check("stories260K"); }
TEST(HandoffRunner, DeepseekV41Tiny) { check("deepseek-v41-tiny"); }
TEST(HandoffRunner, DeepseekV4Tiny) { check("deepseek-v4flash-tiny"); }

}  // namespace
}  // namespace strata
