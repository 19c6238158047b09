// The V4 MTP drafter (issue 28) on the V4-Flash tiny golden checkpoint (mtp.0 included; the
// golden has no MTP outputs, so the checks are between independent code paths and state
// histories):
//   * mtp_draft's logits equal the MTP block run through the general attention / MoE path
//     (DeepseekV4Model::mtp_forward) over the pairs (backbone streams at j, token j+1), for
//     the first draft and a chained second one -- the ring rows each forward writes and the
//     carry reproduce what one whole MTP call computes;
//   * the drafts and their logits do not depend on how the prompt was fed (whole, chunks of
//     1 / 3 / 16 / 37, then decode steps): the MTP rows are a function of the token ids;
//   * a draft changes no state; errors are clear.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "exec/deepseek_v4/deepseek_v4_model.h"
#include "runner_fixtures.h"

namespace strata {
namespace {

std::string model_dir() { return testing::model_dir("deepseek-v4flash-tiny"); }

// A prompt longer than the window (16) and the compression groups, with a repeated span.
std::vector<int32_t> prompt(int n) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(static_cast<int32_t>((i % 23) * 19 % 500 + 5));
  return p;
}

class V4Mtp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = DeepseekV4Model::load(model_dir());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value().release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  // Feeds `ids` in chunks of `chunk` (0 = one call) with the canonical form.
  static std::unique_ptr<V4SequenceState> fed(const std::vector<int32_t>& ids, int64_t chunk) {
    auto s = model_->new_sequence();
    std::vector<float> l;
    const int64_t n = static_cast<int64_t>(ids.size());
    for (int64_t i = 0; i < n;) {
      const int64_t m = chunk <= 0 ? n : std::min(chunk, n - i);
      EXPECT_TRUE(model_->forward(s.get(), std::span<const int32_t>(ids).subspan(i, m), {}, &l).ok());
      i += m;
    }
    return s;
  }
  static DeepseekV4Model* model_;
};
DeepseekV4Model* V4Mtp::model_ = nullptr;

TEST_F(V4Mtp, CheckpointHasTheBlock) {
  EXPECT_TRUE(model_->has_mtp());
  EXPECT_EQ(model_->config().n_draft_layers, 1);
}

TEST_F(V4Mtp, DraftEqualsTheMtpBlockOverTheWholeSequence) {
  const DeepseekConfig& cf = model_->config();
  const int64_t HD = cf.hc_mult * cf.dim, V = cf.vocab_size;
  for (int n : {1, 2, 15, 16, 17, 40}) {
    const std::vector<int32_t> ids = prompt(n);
    const int32_t next = 77;
    // Backbone streams at every position: the last block's output, dumped by a whole forward.
    std::vector<float> streams;
    V4ForwardOptions opt;
    const std::string last = fmt::format("layer{:02d}.block_out", cf.n_layers - 1);
    opt.dump = [&](const std::string& name, const float* data, std::vector<int64_t> shape) {
      if (name == last) streams.assign(data, data + shape[0] * shape[1] * shape[2]);
    };
    auto seq = model_->new_sequence();
    std::vector<float> l;
    ASSERT_TRUE(model_->forward(seq.get(), ids, opt, &l).ok());
    ASSERT_EQ(static_cast<int64_t>(streams.size()), n * HD);
    std::vector<int32_t> draft;
    std::vector<float> dl;
    ASSERT_TRUE(model_->mtp_draft(*seq, next, 2, &draft, &dl).ok());
    ASSERT_EQ(draft.size(), 2u);
    ASSERT_EQ(static_cast<int64_t>(dl.size()), 2 * V);

    // The MTP block over the pairs (streams j, token j+1), j = 0..n-1, token n = next.
    std::vector<int32_t> toks(ids.begin() + 1, ids.end());
    toks.push_back(next);
    auto scratch = model_->new_sequence();
    std::vector<float> ml, ms;
    ASSERT_TRUE(model_->mtp_forward(scratch.get(), toks, streams.data(), &ml, &ms).ok());
    EXPECT_TRUE(std::equal(dl.begin(), dl.begin() + V, ml.end() - V)) << "prompt " << n;
    // Chained: (the block's output streams at n-1, draft 0) at position n.
    const int32_t d0 = draft[0];
    std::vector<float> ml2, ms2;
    ASSERT_TRUE(model_->mtp_forward(scratch.get(), std::span<const int32_t>(&d0, 1),
                                    ms.data() + (n - 1) * HD, &ml2, &ms2).ok());
    EXPECT_TRUE(std::equal(dl.begin() + V, dl.end(), ml2.begin())) << "prompt " << n;
  }
}

TEST_F(V4Mtp, DraftsDoNotDependOnHowThePromptWasFed) {
  const std::vector<int32_t> ids = prompt(60);
  const std::vector<int32_t> more = {11, 250, 37, 99, 3};
  auto drafts = [&](int64_t chunk) {
    auto s = fed(ids, chunk);
    std::vector<std::vector<float>> out;
    std::vector<float> l;
    for (int32_t t : more) {
      std::vector<int32_t> d;
      std::vector<float> dl;
      EXPECT_TRUE(model_->mtp_draft(*s, t, 7, &d, &dl).ok());
      out.push_back(dl);
      EXPECT_TRUE(model_->forward(s.get(), std::span<const int32_t>(&t, 1), {}, &l).ok());
    }
    return out;
  };
  const auto whole = drafts(0);
  ASSERT_EQ(whole.size(), more.size());
  for (int64_t chunk : {1, 3, 16, 37}) EXPECT_EQ(drafts(chunk), whole) << "chunk " << chunk;
}

TEST_F(V4Mtp, DraftChangesNoState) {
  const std::vector<int32_t> ids = prompt(30);
  auto a = fed(ids, 0), b = fed(ids, 0);
  std::vector<float> la, lb;
  for (int32_t t : {8, 9, 10, 11}) {
    std::vector<int32_t> d1, d2;
    ASSERT_TRUE(model_->mtp_draft(*a, t, 5, &d1).ok());
    ASSERT_TRUE(model_->mtp_draft(*a, t, 5, &d2).ok());
    EXPECT_EQ(d1, d2);
    ASSERT_TRUE(model_->forward(a.get(), std::span<const int32_t>(&t, 1), {}, &la).ok());
    ASSERT_TRUE(model_->forward(b.get(), std::span<const int32_t>(&t, 1), {}, &lb).ok());
    EXPECT_EQ(la, lb);
  }
}

TEST_F(V4Mtp, ErrorsAreClear) {
  auto s = model_->new_sequence();
  std::vector<int32_t> d;
  EXPECT_EQ(model_->mtp_draft(*s, 5, 1, &d).code(), StatusCode::kFailedPrecondition);
  s = fed(prompt(4), 0);
  EXPECT_EQ(model_->mtp_draft(*s, -1, 1, &d).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(model_->mtp_draft(*s, 5, 0, &d).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(model_->mtp_draft(*s, 5, DeepseekV4Model::kMtpMaxDrafts + 1, &d).code(),
            StatusCode::kInvalidArgument);
  auto legacy = model_->new_legacy_sequence();
  std::vector<float> l;
  const int32_t t = 7;
  ASSERT_TRUE(model_->forward(legacy.get(), std::span<const int32_t>(&t, 1), {}, &l).ok());
  EXPECT_EQ(model_->mtp_draft(*legacy, 5, 1, &d).code(), StatusCode::kFailedPrecondition);
}

// Through the runner: after a prefix hit (the MTP ring rows and carry restored from the
// boundary snapshot) the drafts and their confidences equal those of a cold runner fed the
// same ids, for prompts around one and two cache units (+-1).
TEST(V4MtpRunner, DraftsAfterAPrefixHitEqualCold) {
  auto warm = testing::fresh_runner("deepseek-v4flash-tiny", 0, 1);
  ASSERT_TRUE(warm);
  const int64_t unit = warm->prefix_alignment();
  ASSERT_GT(unit, 1);
  int64_t seq = 1, hits = 0;
  auto feed = [&](ModelRunner& r, const std::vector<int32_t>& ids, int64_t* hit) {
    const SeqId id{seq++};
    EXPECT_TRUE(r.add_sequence(id).ok());
    *hit = r.attach_cached_prefix(id, ids);
    std::vector<float> logits;
    const std::span<const int32_t> rest(ids.data() + *hit, ids.size() - *hit);
    StepItem item{id, rest, true, static_cast<int64_t>(ids.size())};
    EXPECT_TRUE(r.step(std::span<const StepItem>(&item, 1), &logits).ok());
    return id;
  };
  const std::vector<int32_t> base = prompt(2 * unit + 8);
  int64_t hit = 0;
  // Publish: the whole base once on the warm runner (its units stay cached).
  warm->release_sequence(feed(*warm, base, &hit));
  // Lengths in an order where no sequence follows one of the length it restores to (a freed
  // block reused at once could otherwise hold the very rows a restore must bring back).
  for (int64_t n : {2 * unit + 1, unit - 1, unit + 1, 2 * unit, unit, 2 * unit - 1}) {
    const std::vector<int32_t> ids(base.begin(), base.begin() + n);
    const SeqId a = feed(*warm, ids, &hit);
    hits += hit;
    auto cold = testing::fresh_runner("deepseek-v4flash-tiny", 0, 1);
    ASSERT_TRUE(cold);
    int64_t cold_hit = 0;
    const SeqId b = feed(*cold, ids, &cold_hit);
    EXPECT_EQ(cold_hit, 0);
    std::vector<float> ca, cb;
    auto da = warm->draft_tokens(a, 77, 7, &ca);
    auto db = cold->draft_tokens(b, 77, 7, &cb);
    ASSERT_TRUE(da.ok() && db.ok()) << da.status().to_string() << db.status().to_string();
    EXPECT_EQ(*da, *db) << "n " << n << " hit " << hit;
    EXPECT_EQ(ca, cb) << "n " << n << " hit " << hit;
    warm->release_sequence(a);
  }
  EXPECT_GT(hits, 0) << "no prefix hit was exercised";
}

}  // namespace
}  // namespace strata
