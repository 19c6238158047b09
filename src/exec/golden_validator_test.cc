// Tests for exec/golden_validator with synthetic golden cases and a fake target that
// replays the golden data with controlled perturbations (noise, flipped routes, NaNs).
#include "exec/golden_validator.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <unistd.h>

#include <gtest/gtest.h>

#include "model/safetensors.h"

namespace strata {
namespace {

constexpr int kV = 16, kLayers = 2, kIdx = 1, kTopk = 3, kAct = 2, kSteps = 2;

struct Synth {
  std::map<std::string, GoldenCase> cases;
  std::string path, stats;
};

// Builds case00 (L=3, stable) and case01 (L=5, fragile), writes them in the golden schema.
Synth make_synth(const std::string& dir) {
  Synth s;
  std::mt19937 g(7);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<TensorToWrite> tw;
  auto add = [&](const std::string& name, DType dt, std::vector<int64_t> shape, const void* p,
                 size_t bytes) {
    bufs.emplace_back(static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + bytes);
    tw.push_back({name, dt, std::move(shape), std::span<const uint8_t>(bufs.back())});
  };
  bufs.reserve(64);
  for (int ci = 0; ci < 2; ++ci) {
    GoldenCase c;
    c.name = ci == 0 ? "case00" : "case01";
    const int L = ci == 0 ? 3 : 5;
    for (int t = 0; t < L; ++t) c.prompt.push_back(3 + t * 2 + ci);
    auto row = [&] {
      std::vector<float> r(kV);
      for (auto& x : r) x = nd(g);
      r[5] = 20.0f;  // clear argmax (gap > 0.25)
      return r;
    };
    c.prefill_logits = row();
    for (int i = 0; i < kSteps; ++i) {
      c.decode_tokens.push_back(5);
      c.decode_logits.push_back(row());
    }
    c.prefill_moe.assign(kLayers, std::vector<std::vector<int32_t>>(L));
    c.prefill_index.assign(kIdx, std::vector<std::vector<int32_t>>(L));
    for (int l = 0; l < kLayers; ++l)
      for (int t = 0; t < L; ++t) c.prefill_moe[l][t] = {(l + t) % 4, 4 + (l * t) % 3};
    for (int t = 0; t < L; ++t) c.prefill_index[0][t] = {t >= 2 ? 0 : -2, t >= 4 ? 1 : -2, -1};
    c.decode_moe.assign(kSteps, std::vector<std::vector<int32_t>>(kLayers));
    c.decode_index.assign(kSteps, std::vector<std::vector<int32_t>>(kIdx));
    for (int i = 0; i < kSteps; ++i) {
      for (int l = 0; l < kLayers; ++l) c.decode_moe[i][l] = {i, 7 - l};
      c.decode_index[i][0] = {0, 1, -2};
    }
    c.fragile = ci == 1;
    // serialize
    std::vector<int64_t> p64(c.prompt.begin(), c.prompt.end());
    add(c.name + ".prompt", DType::kI64, {L}, p64.data(), p64.size() * 8);
    add(c.name + ".prefill_logits", DType::kF32, {kV}, c.prefill_logits.data(), kV * 4);
    std::vector<int64_t> d64(c.decode_tokens.begin(), c.decode_tokens.end());
    add(c.name + ".decode_tokens", DType::kI64, {kSteps}, d64.data(), d64.size() * 8);
    std::vector<float> dl;
    for (const auto& r : c.decode_logits) dl.insert(dl.end(), r.begin(), r.end());
    add(c.name + ".decode_logits", DType::kF32, {kSteps, kV}, dl.data(), dl.size() * 4);
    auto flat16 = [](const std::vector<std::vector<std::vector<int32_t>>>& v) {
      std::vector<int16_t> f;
      for (const auto& a : v)
        for (const auto& b : a)
          for (int32_t x : b) f.push_back(static_cast<int16_t>(x));
      return f;
    };
    auto pm = flat16(c.prefill_moe);
    add(c.name + ".route_prefill_moe", DType::kI16, {kLayers, L, kAct}, pm.data(), pm.size() * 2);
    auto pi = flat16(c.prefill_index);
    add(c.name + ".route_prefill_index", DType::kI16, {kIdx, L, kTopk}, pi.data(), pi.size() * 2);
    auto dm = flat16(c.decode_moe);
    add(c.name + ".route_decode_moe", DType::kI16, {kSteps, kLayers, kAct}, dm.data(), dm.size() * 2);
    auto di = flat16(c.decode_index);
    add(c.name + ".route_decode_index", DType::kI16, {kSteps, kIdx, kTopk}, di.data(), di.size() * 2);
    s.cases[c.name] = c;
  }
  s.path = dir + "/cases.safetensors";
  Status st = write_safetensors(s.path, tw);
  EXPECT_TRUE(st.ok()) << st.to_string();
  s.stats = dir + "/stats.json";
  std::ofstream(s.stats) << R"([{"case":"case00","fragile":false},{"case":"case01","fragile":true}])";
  return s;
}

// Replays golden data; perturbations are keyed by (row, ...) where row 0 = prefill.
class FakeTarget : public GoldenTarget {
 public:
  explicit FakeTarget(const Synth& s) : s_(s) {}
  int32_t vocab_size() const override { return kV + vocab_offset; }
  Status reset() override {
    fed_.clear();
    ++resets_;
    return ok_status();
  }
  StatusOr<GoldenStepOutput> forward(std::span<const int32_t> tokens, int64_t start_pos) override {
    EXPECT_EQ(start_pos, static_cast<int64_t>(fed_.size()));
    ++forwards;
    fed_.insert(fed_.end(), tokens.begin(), tokens.end());
    calls_.push_back(static_cast<int64_t>(tokens.size()));
    // identify the case by its prompt prefix
    const GoldenCase* c = nullptr;
    for (const auto& [n, gc] : s_.cases)
      if (std::equal(gc.prompt.begin(), gc.prompt.begin() + std::min(gc.prompt.size(), fed_.size()),
                     fed_.begin()))
        c = &gc;
    if (!c) return invalid_argument("unknown prompt");
    const int64_t L = static_cast<int64_t>(c->prompt.size());
    GoldenStepOutput out;
    int row;
    if (start_pos < L) {
      row = 0;
      out.logits = c->prefill_logits;
      out.moe.assign(kLayers, {});
      out.index.assign(kIdx, {});
      for (size_t t = 0; t < tokens.size(); ++t) {
        for (int l = 0; l < kLayers; ++l) {
          auto r = c->prefill_moe[l][start_pos + t];
          std::reverse(r.begin(), r.end());  // order must not matter
          out.moe[l].push_back(r);
        }
        auto ix = c->prefill_index[0][start_pos + t];
        std::vector<int32_t> keep;
        for (int32_t x : ix)
          if (x >= 0) keep.push_back(x);  // negatives may be omitted
        out.index[0].push_back(keep);
      }
    } else {
      const int step = static_cast<int>(start_pos - L);
      row = step + 1;
      out.logits = c->decode_logits[step];
      for (int l = 0; l < kLayers; ++l) out.moe.push_back({c->decode_moe[step][l]});
      out.index.push_back({c->decode_index[step][0]});
    }
    if (flip_case == c->name && flip_row == row) {
      auto& v = flip_index ? out.index[0][flip_token] : out.moe[flip_layer][flip_token];
      v = {13};
    }
    for (auto& x : out.logits) x += noise;
    if (bump_case == c->name && bump_row == row) out.logits[3] += bump;
    if (nan_case == c->name && nan_row == row) out.logits[0] = NAN;
    if (truncate_logits) out.logits.pop_back();
    return out;
  }
  std::vector<int> index_layer_ids() const override { return index_ids; }

  float noise = 0.0f;
  std::string flip_case;
  int flip_row = -1, flip_layer = 0, flip_token = 0;
  bool flip_index = false;
  std::string bump_case;
  int bump_row = -1;
  float bump = 0.0f;
  bool truncate_logits = false;
  int32_t vocab_offset = 0;  // a model whose reported vocabulary differs from the cases'
  int forwards = 0;
  std::string nan_case;
  int nan_row = -1;
  std::vector<int> index_ids;
  std::vector<int64_t> calls_;
  int resets_ = 0;

 private:
  const Synth& s_;
  std::vector<int32_t> fed_;
};

class GoldenValidatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("strata_golden_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    synth_ = make_synth(dir_.string());
    auto c = load_golden_cases(synth_.path, synth_.stats);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    cases_ = std::move(*c);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
  Synth synth_;
  std::vector<GoldenCase> cases_;
};

// A target with a drafter that replays a case's draft tensors with perturbations.
class FakeDraftTarget : public FakeTarget {
 public:
  FakeDraftTarget(const Synth& s, const GoldenCase& c) : FakeTarget(s), c_(c) {}
  bool has_draft() const override { return true; }
  StatusOr<GoldenDraft> draft(int32_t token) override {
    const size_t i = static_cast<size_t>(drafts_++);
    EXPECT_EQ(token, c_.dspark_ids[i][0]);
    GoldenDraft d{c_.dspark_ids[i], c_.dspark_logits[i], c_.dspark_confidence[i]};
    if (static_cast<int>(i) == bad_step) {
      d.logits[bad_row * kV + 3] += logit_bump;
      if (swap_id) d.ids[bad_row + 1] = (d.ids[bad_row + 1] + 1) % kV;
    }
    return d;
  }
  int bad_step = -1, bad_row = 0;
  float logit_bump = 0.0f;
  bool swap_id = false;
  int drafts_ = 0;

 private:
  const GoldenCase& c_;
};

// Draft blocks (dspark_* tensors): compared after each decode step from the golden entry-0
// token; strict rows until the first differing draft id, which is allowed only where the
// golden gap is <= gap_tol; the report counts differing ids.
TEST_F(GoldenValidatorTest, DraftBlocksAreChecked) {
  GoldenCase c = cases_[0];  // stable, 2 decode steps
  const int blk = 3;
  std::mt19937 g(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int i = 0; i < kSteps; ++i) {
    std::vector<float> lg(blk * kV);
    for (auto& x : lg) x = nd(g);
    std::vector<int32_t> ids = {5};
    for (int r = 0; r < blk; ++r) {
      lg[r * kV + 7 + r] = 10.0f;  // a clear argmax (gap > 0.25)
      ids.push_back(7 + r);
    }
    if (i == 1) {  // step 1 row 1: a near tie (gap 0.1) between ids 8 and 9
      lg[1 * kV + 9] = 9.9f;
    }
    c.dspark_ids.push_back(ids);
    c.dspark_logits.push_back(lg);
    c.dspark_confidence.push_back(std::vector<float>(blk, 0.5f));
  }
  const std::vector<GoldenCase> one = {c};
  {
    FakeDraftTarget t(synth_, c);
    GoldenReport r = run_golden(t, one, GoldenOptions{});
    EXPECT_EQ(r.passed, 1) << r.cases[0].summary();
    EXPECT_EQ(r.dspark_line(), "dspark: 1 cases, 2 steps, 0 draft ids differ");
    EXPECT_EQ(t.drafts_, 2);
  }
  {  // a logit off by more than logit_tol fails
    FakeDraftTarget t(synth_, c);
    t.bad_step = 0;
    t.bad_row = 2;
    t.logit_bump = 0.5f;
    GoldenReport r = run_golden(t, one, GoldenOptions{});
    EXPECT_EQ(r.failed, 1);
    EXPECT_NE(r.cases[0].error.find("dspark0 row 2: max|dlogit|"), std::string::npos) << r.cases[0].error;
  }
  {  // a draft id that differs where the golden gap is large fails
    FakeDraftTarget t(synth_, c);
    t.bad_step = 0;
    t.bad_row = 0;
    t.swap_id = true;
    GoldenReport r = run_golden(t, one, GoldenOptions{});
    EXPECT_EQ(r.failed, 1);
    EXPECT_NE(r.cases[0].error.find("dspark0 row 0: draft id"), std::string::npos) << r.cases[0].error;
    EXPECT_EQ(r.dspark_ids_differ, 1);
  }
  {  // ...and passes at a near tie (the rows after it are a sampling cascade)
    FakeDraftTarget t(synth_, c);
    t.bad_step = 1;
    t.bad_row = 1;
    t.swap_id = true;
    GoldenReport r = run_golden(t, one, GoldenOptions{});
    EXPECT_EQ(r.passed, 1) << r.cases[0].summary();
    EXPECT_EQ(r.dspark_line(), "dspark: 1 cases, 2 steps, 1 draft ids differ");
  }
  {  // a target without a drafter: the tensors are skipped, no line
    FakeTarget t(synth_);
    GoldenReport r = run_golden(t, one, GoldenOptions{});
    EXPECT_EQ(r.passed, 1);
    EXPECT_EQ(r.dspark_line(), "");
  }
}

TEST_F(GoldenValidatorTest, LoadsCasesAndFragileFlags) {
  ASSERT_EQ(cases_.size(), 2u);
  EXPECT_EQ(cases_[0].name, "case00");
  EXPECT_FALSE(cases_[0].fragile);
  EXPECT_TRUE(cases_[1].fragile);
  EXPECT_EQ(cases_[1].prompt.size(), 5u);
  EXPECT_EQ(cases_[1].prefill_index[0][4], (std::vector<int32_t>{0, 1, -1}));
  EXPECT_EQ(cases_[0].decode_logits.size(), 2u);
  EXPECT_EQ(cases_[0].decode_moe[1][1], (std::vector<int32_t>{1, 6}));
  EXPECT_FALSE(load_golden_cases(dir_.string() + "/nope.safetensors", "").ok());
}

TEST_F(GoldenValidatorTest, ExactTargetPasses) {
  FakeTarget t(synth_);
  GoldenOptions opt;
  GoldenReport r = run_golden(t, cases_, opt);
  EXPECT_EQ(r.passed, 2);
  EXPECT_EQ(r.failed, 0);
  EXPECT_EQ(r.route_divergent, 0);
  EXPECT_EQ(r.max_abs_diff, 0.0);
  EXPECT_EQ(r.cases[0].rows_strict, 3);
  EXPECT_EQ(r.cases[0].rows_exact, 3);
  EXPECT_EQ(r.last_line(), "golden: 2 passed, 0 failed, max_abs_diff=0, route_divergent=0");
  EXPECT_EQ(t.resets_, 2);
}

TEST_F(GoldenValidatorTest, SmallNoisePassesLargeNoiseFails) {
  FakeTarget t(synth_);
  t.noise = 0.125f;
  GoldenReport r = run_golden(t, cases_, GoldenOptions{});
  EXPECT_EQ(r.failed, 0);
  EXPECT_NEAR(r.max_abs_diff, 0.125, 1e-5);
  EXPECT_EQ(r.cases[0].rows_exact, 0);
  t.noise = 0.3f;
  r = run_golden(t, cases_, GoldenOptions{});
  EXPECT_EQ(r.passed, 0);
  EXPECT_EQ(r.failed, 2);
  EXPECT_NE(r.cases[0].error.find("max|dlogit|"), std::string::npos);
}

TEST_F(GoldenValidatorTest, ArgmaxMustAgreeWhereGapIsLarge) {
  FakeTarget t(synth_);
  t.bump_case = "case00";
  t.bump_row = 1;
  t.bump = 0.2f;  // within tolerance: passes unless it flips the argmax
  EXPECT_EQ(run_golden(t, cases_, GoldenOptions{}).failed, 0);
  // make entry 3 the argmax of decode row 0 by a bump bigger than the gap: fails on both
  // counts; with a loose tolerance only the argmax check remains
  t.bump = 30.0f;
  GoldenOptions loose;
  loose.logit_tol = 100.0;
  GoldenReport r = run_golden(t, cases_, loose);
  EXPECT_EQ(r.failed, 1);
  EXPECT_NE(r.cases[0].error.find("argmax"), std::string::npos);
}

TEST_F(GoldenValidatorTest, RouteFlipFailsStableCaseAndStopsStrictComparison) {
  FakeTarget t(synth_);
  t.flip_case = "case00";
  t.flip_row = 1;  // decode step 0
  t.flip_layer = 1;
  // after the divergence, rows are not compared (the noise bump below is ignored)
  t.bump_case = "case00";
  t.bump_row = 2;
  t.bump = 5.0f;
  GoldenReport r = run_golden(t, cases_, GoldenOptions{});
  const auto& c0 = r.cases[0];
  EXPECT_FALSE(c0.passed);
  ASSERT_TRUE(c0.divergence.has_value());
  EXPECT_EQ(c0.divergence->step, 0);
  EXPECT_EQ(c0.divergence->which, "moe");
  EXPECT_EQ(c0.divergence->layer, 1);
  EXPECT_EQ(c0.divergence->got, (std::vector<int32_t>{13}));
  EXPECT_EQ(c0.rows_strict, 1);  // only the prefill row
  EXPECT_NE(c0.error.find("stable"), std::string::npos);
  EXPECT_EQ(r.route_divergent, 1);
  EXPECT_TRUE(r.cases[1].passed);
}

TEST_F(GoldenValidatorTest, FragileCaseMayDivergeButLaterRowsMustBeFinite) {
  FakeTarget t(synth_);
  t.flip_case = "case01";
  t.flip_row = 0;  // prefill, index route of token 4
  t.flip_index = true;
  t.flip_token = 4;
  t.bump_case = "case01";
  t.bump_row = 0;
  t.bump = 9.0f;  // prefill row is after the divergence: not compared
  GoldenReport r = run_golden(t, cases_, GoldenOptions{});
  EXPECT_EQ(r.failed, 0);
  EXPECT_EQ(r.route_divergent, 1);
  ASSERT_TRUE(r.cases[1].divergence.has_value());
  EXPECT_EQ(r.cases[1].divergence->step, -1);
  EXPECT_EQ(r.cases[1].divergence->which, "index");
  EXPECT_EQ(r.cases[1].divergence->token, 4);
  EXPECT_EQ(r.cases[1].rows_strict, 0);
  t.nan_case = "case01";
  t.nan_row = 2;
  r = run_golden(t, cases_, GoldenOptions{});
  EXPECT_EQ(r.failed, 1);
  EXPECT_NE(r.cases[1].error.find("finite"), std::string::npos);
}

// A target of another model (wrong vocabulary): every case fails at its first row with a
// message naming the size mismatch, and the summary does not report max_abs_diff=0 as if
// rows had matched.
TEST_F(GoldenValidatorTest, WrongVocabularyFailsEveryCaseWithNoDiff) {
  FakeTarget t(synth_);
  t.truncate_logits = true;
  GoldenReport r = run_golden(t, cases_, GoldenOptions{});
  EXPECT_EQ(r.failed, 2);
  EXPECT_NE(r.cases[0].error.find("logits, the golden row has"), std::string::npos)
      << r.cases[0].error;
  EXPECT_EQ(r.last_line(), "golden: 0 passed, 2 failed, max_abs_diff=n/a, route_divergent=0");
  EXPECT_NE(r.cases[0].summary().find("rows 0/3 strict (0 bit-exact), max_abs_diff=n/a"),
            std::string::npos)
      << r.cases[0].summary();
}

// Cases of another vocabulary size fail up front with that reason: no forward runs, no
// route divergence is counted.
TEST_F(GoldenValidatorTest, CasesOfAnotherVocabularyFailBeforeAnyForward) {
  FakeTarget t(synth_);
  t.vocab_offset = 7;
  GoldenReport r = run_golden(t, cases_, GoldenOptions{});
  EXPECT_EQ(r.failed, 2);
  EXPECT_EQ(t.forwards, 0);
  EXPECT_NE(r.cases[0].error.find("made for another model"), std::string::npos) << r.cases[0].error;
  EXPECT_EQ(r.last_line(), "golden: 0 passed, 2 failed, max_abs_diff=n/a, route_divergent=0");
}

TEST_F(GoldenValidatorTest, ChunkedPrefillMergesRoutes) {
  FakeTarget t(synth_);
  GoldenOptions opt;
  opt.chunk_size = 2;
  GoldenReport r = run_golden(t, cases_, opt);
  EXPECT_EQ(r.failed, 0) << r.cases[0].error << r.cases[1].error;
  // case00: 2+1 prefill then 2 decode calls; case01: 2+2+1 then 2
  EXPECT_EQ(t.calls_, (std::vector<int64_t>{2, 1, 1, 1, 2, 2, 1, 1, 1}));
}

TEST(GoldenCompare, RoutesComparedAsSetsInExecutionOrder) {
  // golden: 3 layers x 1 token; index slots for layers {0, 2}
  std::vector<std::vector<std::vector<int32_t>>> gm = {{{1, 2}}, {{3, 4}}, {{5, 6}}};
  std::vector<std::vector<std::vector<int32_t>>> gi = {{{0, -1, -2}}, {{2, 1}}};
  GoldenStepOutput got;
  got.moe = {{{2, 1}}, {{4, 3}}, {{6, 5}}};
  got.index = {{{0}}, {{1, 2, -2}}};
  EXPECT_FALSE(compare_routes(gm, gi, got, 0, {0, 2}).has_value());
  // layer 1's MoE and layer 2's index both differ: MoE of layer 1 runs first
  got.moe[1][0] = {4, 0};
  got.index[1][0] = {1};
  auto d = compare_routes(gm, gi, got, 0, {0, 2});
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->which, "moe");
  EXPECT_EQ(d->layer, 1);
  // layer 2: its indexer runs before its MoE
  got.moe[1][0] = {3, 4};
  got.moe[2][0] = {0, 0};
  d = compare_routes(gm, gi, got, 0, {0, 2});
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->which, "index");
  EXPECT_EQ(d->layer, 1);  // slot 1 (layer 2)
  EXPECT_EQ(d->golden, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(d->describe(), "decode0 index#1 token 0: golden {1,2} got {1}");
  // an unreported route counts as the empty set: fine where the golden has only markers
  got.moe[2][0] = {5, 6};
  got.index[1][0] = {1, 2};
  std::vector<std::vector<std::vector<int32_t>>> gi3 = {{{0}}, {{2, 1}}, {{-2, -2, -2}}};
  EXPECT_FALSE(compare_routes(gm, gi3, got, 0, {0, 2, 4}).has_value());
  got.moe.pop_back();  // layer 2 MoE missing: diverges
  d = compare_routes(gm, gi3, got, -1, {0, 2, 4});
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->describe(), "prefill moe L2 token 0: golden {5,6} got {}");
}

TEST(GoldenCompare, LogitsRow) {
  std::vector<float> g = {0.0f, 1.0f, 0.9f, -1.0f};
  std::vector<float> o = {0.1f, 1.0f, 0.9f, -1.2f};
  bool checked = true, ok = false;
  EXPECT_NEAR(compare_logits_row(g, o, 0.25, &checked, &ok), 0.2, 1e-6);
  EXPECT_FALSE(checked);  // gap 0.1 <= 0.25
  EXPECT_TRUE(ok);
  g[1] = 2.0f;
  compare_logits_row(g, o, 0.25, &checked, &ok);
  EXPECT_TRUE(checked);
  std::vector<float> nan = {NAN, 1.0f, 0.9f, -1.0f};
  EXPECT_TRUE(std::isnan(compare_logits_row(g, nan, 0.25, &checked, &ok)));
}

}  // namespace
}  // namespace strata
