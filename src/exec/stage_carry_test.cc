// Pipeline parallelism in the forwards (issue 25 item 4), in one process: the tiny V4.1 and
// V4 models split over 2-5 stages (dist/fake_pipe_comm.h: one thread per stage, each with its
// own model and sequence) give every logits row, route and draft of one unsplit model, bit
// for bit, in the canonical and the reference call shapes. In the canonical form the prompt
// chunks run as microbatches through the stages (pp_microbatches: 3 per 9-token chunk), the
// one-token steps whole; the reference shape never splits a call. With V4.1's 12 layers the splits
// put KV sources and their consumers on different stages (4 stages: layer 2's rows read by
// layer 3 on the next stage; 5 stages: layer 6's rows read two stages later), so the carried
// persistent rows are exercised. Also: the stage boundary's codec round trip.
#include "exec/stage_carry.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <mutex>
#include <string>
#include <vector>

#include "dist/fake_pipe_comm.h"
#include "exec/deepseek_v4/deepseek_v4_model.h"
#include "exec/deepseek_v41/deepseek_v41_model.h"

namespace strata {
namespace {

std::string model_dir(const char* name) {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  return std::string(e ? e : STRATA_SOURCE_DIR) + "/models/" + name;
}

TEST(StageCarry, EncodeDecodeRoundTrip) {
  StageCarry c;
  c.s0 = 17;
  c.S = 2;
  c.next_layer = 6;
  c.h = {1.5f, -2.0f, 3.25f, 0.0f};
  c.pre = {0.25f, 0.75f};
  c.taps = {9.0f};
  c.tap_slot = 1;
  c.topk.resize(3);
  c.topk[2] = {4, {3, 4}, {{0, 2, 5}, {1, 2, 3, 4}}};
  c.candidates = {{}, {1, 0, 1}};
  c.rows.push_back({6, 1, {8, 9}, {1, 2, 3, 4}});
  c.published_index_owner = 6;
  c.has_routes = true;
  c.routes.moe = {{{1, 2}, {3, 0}}, {}};
  c.routes.index = {{{5}, {}}};
  ByteMsg m;
  c.encode(&m);
  ByteMsg r;
  r.b = m.b;
  const StageCarry d = StageCarry::decode(&r);
  EXPECT_EQ(d.s0, 17);
  EXPECT_EQ(d.S, 2);
  EXPECT_EQ(d.next_layer, 6);
  EXPECT_EQ(d.h, c.h);
  EXPECT_EQ(d.pre, c.pre);
  EXPECT_EQ(d.taps, c.taps);
  EXPECT_EQ(d.tap_slot, 1);
  ASSERT_EQ(d.topk.size(), 3u);
  EXPECT_EQ(d.topk[2].width, 4);
  EXPECT_EQ(d.topk[2].row_width, c.topk[2].row_width);
  EXPECT_EQ(d.topk[2].rows, c.topk[2].rows);
  EXPECT_EQ(d.candidates, c.candidates);
  ASSERT_EQ(d.rows.size(), 1u);
  EXPECT_EQ(d.rows[0].layer, 6);
  EXPECT_EQ(d.rows[0].kind, 1);
  EXPECT_EQ(d.rows[0].records, c.rows[0].records);
  EXPECT_EQ(d.rows[0].values, c.rows[0].values);
  EXPECT_EQ(d.published_index_owner, 6);
  EXPECT_TRUE(d.has_routes);
  EXPECT_EQ(d.routes.moe, c.routes.moe);
  EXPECT_EQ(d.routes.index, c.routes.index);
}

TEST(StageCarry, StageRangesCoverTheLayers) {
  for (int n : {7, 12, 40})
    for (int P = 1; P <= std::min(n, 6); ++P) {
      int at = 0;
      for (int r = 0; r < P; ++r) {
        EXPECT_EQ(pp_layer_begin(r, n, P), at);
        at = pp_layer_begin(r + 1, n, P);
        EXPECT_GT(at, pp_layer_begin(r, n, P)) << "empty stage " << r << " of " << P;
      }
      EXPECT_EQ(at, n);
    }
}

TEST(StageCarry, MicrobatchCounts) {
  EXPECT_EQ(pp_microbatches(1, 2), 1);   // a decode step runs whole
  EXPECT_EQ(pp_microbatches(7, 2), 2);
  EXPECT_EQ(pp_microbatches(9, 2), 3);   // the tests' prompt chunks: 3 microbatches
  EXPECT_EQ(pp_microbatches(512, 2), 4); // 2 per stage
  EXPECT_EQ(pp_microbatches(512, 3), 6);
}

// What one run of a model observes: every call's logits rows and routes, and drafts.
struct Trace {
  std::vector<std::vector<float>> logits;
  std::vector<V41Routes> routes;
  std::vector<std::vector<int32_t>> drafts;
};

// The calls: a 41-token prompt in chunks of 9, then 6 one-token steps (decode_step in the
// reference shape), with a draft after each step where the model has a drafter.
const std::vector<int32_t>& prompt() {
  static const std::vector<int32_t> p = [] {
    std::vector<int32_t> v;
    for (int i = 0; i < 47; ++i) v.push_back((i * 37 + 11) % 509 + 3);
    return v;
  }();
  return p;
}

template <class Model, class Opts, class Draft>
Trace run_calls(const Model& m, CallShape shape, Opts opt, Draft draft) {
  Trace t;
  auto seq = m.new_sequence();
  const std::vector<int32_t>& p = prompt();
  opt.all_logits = true;
  opt.call_shape = shape;
  for (size_t at = 0; at < p.size();) {
    const size_t n = at < 41 ? std::min<size_t>(9, 41 - at) : 1;
    std::vector<float> logits;
    V41Routes routes;
    opt.routes = &routes;
    if constexpr (std::is_same_v<Opts, V41ForwardOptions>) opt.decode_step = at >= 41;
    opt.prompt_len = at < 41 ? 41 : 0;
    const Status st = m.forward(seq.get(), std::span<const int32_t>(p).subspan(at, n), opt, &logits);
    EXPECT_TRUE(st.ok()) << st.to_string();
    if (!st.ok()) return t;
    t.logits.push_back(std::move(logits));
    t.routes.push_back(std::move(routes));
    at += n;
    if (at >= 41) t.drafts.push_back(draft(m, *seq, p[at % p.size()]));
  }
  return t;
}

void expect_same(const Trace& a, const Trace& b, const std::string& what) {
  ASSERT_EQ(a.logits.size(), b.logits.size()) << what;
  for (size_t i = 0; i < a.logits.size(); ++i) {
    ASSERT_EQ(a.logits[i].size(), b.logits[i].size()) << what << " call " << i;
    EXPECT_EQ(0, std::memcmp(a.logits[i].data(), b.logits[i].data(), a.logits[i].size() * 4))
        << what << ": logits of call " << i << " differ";
    EXPECT_EQ(a.routes[i].moe, b.routes[i].moe) << what << " call " << i;
    EXPECT_EQ(a.routes[i].index, b.routes[i].index) << what << " call " << i;
  }
  EXPECT_EQ(a.drafts, b.drafts) << what;
}

// Runs `once(comm)` unsplit and on 2..max_stages stages; every stage's trace equals the
// unsplit one.
template <class Once>
void split_equals_one(int max_stages, Once once, const std::string& what) {
  const Trace one = once(nullptr);
  ASSERT_FALSE(one.logits.empty());
  for (int P = 2; P <= max_stages; ++P) {
    FakePipeGroup g(P);
    std::mutex mu;
    std::vector<Trace> traces(P);
    g.run([&](int stage, std::shared_ptr<PipeComm> comm) {
      Trace t = once(comm);
      std::lock_guard<std::mutex> l(mu);
      traces[stage] = std::move(t);
    });
    for (int r = 0; r < P; ++r)
      expect_same(one, traces[r], what + ", " + std::to_string(P) + " stages, stage " + std::to_string(r));
  }
}

TEST(PipelineForward, V41SplitEqualsOneStage) {
  for (CallShape shape : {CallShape::kCanonical, CallShape::kReference}) {
    split_equals_one(5, [&](std::shared_ptr<PipeComm> comm) {
      V41LoadOptions o;
      o.pipe_comm = comm;
      auto m = DeepseekV41Model::load(model_dir("deepseek-v41-tiny"), o);
      EXPECT_TRUE(m.ok()) << m.status().to_string();
      if (!m.ok()) return Trace{};
      return run_calls(**m, shape, V41ForwardOptions{},
                       [](const DeepseekV41Model& mm, const V41SequenceState& s, int32_t tok) {
                         V41DsparkDraft d;
                         if (!mm.has_dspark()) return std::vector<int32_t>{};
                         EXPECT_TRUE(mm.dspark_draft(s, tok, &d).ok());
                         return d.ids;
                       });
    }, shape == CallShape::kCanonical ? "V4.1 canonical" : "V4.1 reference");
  }
}

TEST(PipelineForward, V4SplitEqualsOneStage) {
  for (CallShape shape : {CallShape::kCanonical, CallShape::kReference}) {
    split_equals_one(3, [&](std::shared_ptr<PipeComm> comm) {
      auto m = DeepseekV4Model::load(model_dir("deepseek-v4flash-tiny"), 0, false, 0, 1, false, comm);
      EXPECT_TRUE(m.ok()) << m.status().to_string();
      if (!m.ok()) return Trace{};
      return run_calls(**m, shape, V4ForwardOptions{},
                       [](const DeepseekV4Model& mm, const V4SequenceState& s, int32_t tok) {
                         std::vector<int32_t> ids;
                         if (mm.has_mtp()) {
                           EXPECT_TRUE(mm.mtp_draft(s, tok, 1, &ids).ok());
                         }
                         return ids;
                       });
    }, shape == CallShape::kCanonical ? "V4 canonical" : "V4 reference");
  }
}

TEST(PipelineForward, MoreStagesThanLayersIsRefused) {
  FakePipeGroup g(13);
  g.run([&](int stage, std::shared_ptr<PipeComm> comm) {
    if (stage != 0) return;
    V41LoadOptions o;
    o.pipe_comm = comm;
    auto m = DeepseekV41Model::load(model_dir("deepseek-v41-tiny"), o);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().to_string().find("exceeds the model's 12 layers"), std::string::npos)
        << m.status().to_string();
  });
}

}  // namespace
}  // namespace strata
