// The DeepSeek-V4 forward through the state module (V4SequenceState over SequenceCache /
// CacheManager, serving-format rows) against the pre-port f32 mirror (legacy backend):
//   * golden prompts (v4flash-tiny cases): prefill (all logits) + greedy decode through the
//     state path are bit-identical to the legacy path -- i.e. the state module's decode of
//     window KV (FP8 E4M3 + UE8M0/64 + BF16 RoPE tail), compressed KV, index keys (FP4 +
//     UE8M0/32) and compressor partial states returns exactly the values the forward QDQ'd;
//   * owners: exactly one owner per (layer, kind), consumed only by that layer, with the
//     row formats / sizes derived by hand from the config (583 B window rows for d=512);
//     the sequence's bytes equal that hand-derived per-token / per-request sum;
//   * chunked prefill == whole prefill (then decode) through the state path for lengths
//     3,4,5,15,16,17,33 at chunks 1,2,3,4,5,16.
// Expected values: the legacy path (independent storage: plain f32 copies) and formulas
// from the config; never the state path's own output.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "base/check.h"
#include "exec/deepseek_v4/deepseek_v4_model.h"
#include "model/safetensors.h"
#include "state/cache_manager.h"
#include "state/state_graph.h"

namespace strata {
namespace {

std::string src_dir() {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  return e ? e : STRATA_SOURCE_DIR;
}
std::string golden_dir() { return src_dir() + "/testdata/golden/v4flash-tiny"; }
std::string model_dir() {
  const std::string m = src_dir() + "/models/deepseek-v4flash-tiny";
  return std::ifstream(m + "/model.safetensors").good() ? m : golden_dir();
}

const DeepseekV4Model& model() {
  static std::unique_ptr<DeepseekV4Model> m = [] {
    auto r = DeepseekV4Model::load(model_dir());
    STRATA_CHECK_MSG(r.ok(), "{}", r.status().to_string());
    return std::move(r).value();
  }();
  return *m;
}

int32_t argmax(const std::vector<float>& v, size_t off, size_t n) {
  size_t b = 0;
  for (size_t i = 1; i < n; ++i)
    if (v[off + i] > v[off + b]) b = i;
  return static_cast<int32_t>(b);
}

std::vector<int32_t> make_prompt(int64_t len, int32_t vocab, uint32_t salt) {
  std::vector<int32_t> ids;
  uint32_t x = 2463534242u ^ salt;
  for (int64_t i = 0; i < len; ++i) {
    x ^= x << 13; x ^= x >> 17; x ^= x << 5;
    ids.push_back(3 + static_cast<int32_t>(x % static_cast<uint32_t>(vocab - 3)));
  }
  return ids;
}

// Prefill (all logits) + `steps` greedy decode steps; returns every logits vector.
std::vector<std::vector<float>> prefill_decode(V4SequenceState* seq,
                                               const std::vector<int32_t>& prompt, int steps) {
  const DeepseekV4Model& m = model();
  const size_t V = static_cast<size_t>(m.config().vocab_size);
  std::vector<std::vector<float>> out;
  std::vector<float> logits;
  V4ForwardOptions opt;
  opt.all_logits = true;
  Status st = m.forward(seq, prompt, opt, &logits);
  EXPECT_TRUE(st.ok()) << st.to_string();
  out.push_back(logits);
  int32_t next = argmax(logits, logits.size() - V, V);
  for (int s = 0; s < steps; ++s) {
    st = m.forward(seq, std::span<const int32_t>(&next, 1), V4ForwardOptions{}, &logits);
    EXPECT_TRUE(st.ok()) << st.to_string();
    out.push_back(logits);
    next = argmax(logits, 0, V);
  }
  return out;
}

TEST(V4State, GoldenPromptsStateEqualsLegacy) {
  auto f = SafetensorsFile::open(golden_dir() + "/cases.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  int done = 0;
  for (const char* name : {"case05", "case08", "case10"}) {
    auto it = (*f)->tensors().find(std::string(name) + ".prompt");
    if (it == (*f)->tensors().end()) continue;
    const TensorView& pt = it->second;
    std::vector<int32_t> prompt(pt.numel());
    for (int64_t i = 0; i < pt.numel(); ++i) {
      int64_t v;
      std::memcpy(&v, pt.data + 8 * i, 8);
      prompt[i] = static_cast<int32_t>(v);
    }
    auto now = model().new_sequence();
    auto old = model().new_legacy_sequence();
    ASSERT_TRUE(now->uses_state_graph());
    ASSERT_FALSE(old->uses_state_graph());
    auto a = prefill_decode(now.get(), prompt, 6);
    auto b = prefill_decode(old.get(), prompt, 6);
    ASSERT_EQ(a.size(), b.size());
    for (size_t r = 0; r < a.size(); ++r)
      EXPECT_EQ(a[r], b[r]) << name << " row " << r << " (0 = prefill, then decode)";
    EXPECT_EQ(now->cache_manager()->num_computed(now->cache_seq()), now->length());
    ++done;
  }
  EXPECT_GE(done, 1);
}

TEST(V4State, OneOwnerPerLayerAndBytes) {
  const DeepseekConfig& c = model().config();
  const StateGraph& g = model().state_graph();
  const int64_t hd = c.head_dim, rd = c.rope_head_dim, ihd = c.index_head_dim;
  // V4 window / compressed row: (d-rope) E4M3 codes, one UE8M0 per 64, rope dims as BF16.
  const int64_t kv_row = (hd - rd) + (hd - rd) / 64 + 2 * rd;
  if (hd == 512 && rd == 64) {
    EXPECT_EQ(kv_row, 583);
  }
  const int64_t key_row = ihd / 2 + ihd / 32;  // FP4 pairs + UE8M0 per 32
  int64_t fixed = 0;
  double per_token = 0;
  for (int L = 0; L < c.n_layers; ++L) {
    const LayerSchedule& ls = c.layers[L];
    std::map<StateKind, int> count;
    for (const StateOwnerInfo& o : g.owners()) {
      if (o.layer != L) continue;
      ++count[o.kind];
      if (o.kind != StateKind::kTopk) {
        EXPECT_EQ(o.consumer_layers.size() <= 1, true) << o.label;
        for (int cl : o.consumer_layers) EXPECT_EQ(cl, L) << o.label;
      }
      switch (o.kind) {
        case StateKind::kWindowKv:
          EXPECT_EQ(o.spec.format, RowFormat::kFp8Ue8m0RopeBf16);
          EXPECT_EQ(o.spec.rows_fixed, c.window_size);
          EXPECT_EQ(o.spec.row_bytes, kv_row);
          break;
        case StateKind::kCompressedKv:
          EXPECT_EQ(o.spec.ratio, ls.ratio);
          EXPECT_EQ(o.spec.row_bytes, kv_row);
          break;
        case StateKind::kIndexKeys:
          EXPECT_EQ(o.spec.row_bytes, key_row);
          break;
        case StateKind::kCompressorState: {
          const int coff = ls.overlap_compressor ? 2 : 1;
          EXPECT_EQ(o.spec.rows_fixed, coff * ls.ratio);
          EXPECT_EQ(o.spec.row_bytes, 2 * coff * hd * 4);
          break;
        }
        case StateKind::kIndexCompressorState:
          EXPECT_EQ(o.spec.rows_fixed, 2 * ls.ratio);
          EXPECT_EQ(o.spec.row_bytes, 2 * 2 * ihd * 4);
          break;
        default:
          break;
      }
    }
    EXPECT_EQ(count[StateKind::kWindowKv], 1) << "layer " << L;
    EXPECT_EQ(count[StateKind::kCompressedKv], ls.ratio > 0 ? 1 : 0) << "layer " << L;
    EXPECT_EQ(count[StateKind::kCompressorState], ls.ratio > 1 ? 1 : 0) << "layer " << L;
    EXPECT_EQ(count[StateKind::kIndexKeys], ls.has_indexer ? 1 : 0) << "layer " << L;
    EXPECT_EQ(count[StateKind::kIndexCompressorState], ls.has_indexer ? 1 : 0) << "layer " << L;
    fixed += c.window_size * kv_row;
    if (ls.ratio > 0) {
      const int coff = ls.overlap_compressor ? 2 : 1;
      fixed += int64_t{coff} * ls.ratio * 2 * coff * hd * 4;
      per_token += static_cast<double>(kv_row) / ls.ratio;
    }
    if (ls.has_indexer) {
      fixed += int64_t{2} * ls.ratio * 2 * 2 * ihd * 4;
      per_token += static_cast<double>(key_row) / ls.ratio;
    }
  }
  EXPECT_EQ(g.bytes_per_request_fixed(Stage::kBackbone), fixed);
  EXPECT_DOUBLE_EQ(g.bytes_per_token(Stage::kBackbone), per_token);

  // A sequence allocates its owners once: the manager's pools hold ring/fixed blocks for
  // the sequence, and after 33 tokens its rows are all computed.
  auto seq = model().new_sequence();
  auto prompt = make_prompt(33, c.vocab_size, 5);
  std::vector<float> logits;
  ASSERT_TRUE(model().forward(seq.get(), prompt, V4ForwardOptions{}, &logits).ok());
  EXPECT_EQ(seq->cache_manager()->num_computed(seq->cache_seq()), 33);
  for (const PoolInfo& p : seq->cache_manager()->pools())
    for (OwnerId o : p.owners) EXPECT_EQ(g.owner(o).kind, p.kind);
  seq->cache_manager()->check_invariants();
}

TEST(V4State, ChunkedEqualsWholeThroughState) {
  const DeepseekV4Model& m = model();
  const size_t V = static_cast<size_t>(m.config().vocab_size);
  auto run = [&](const std::vector<int32_t>& prompt, int64_t chunk) {
    auto seq = m.new_sequence();
    EXPECT_TRUE(seq->uses_state_graph());
    const int64_t L = static_cast<int64_t>(prompt.size());
    std::vector<std::vector<float>> rows;
    std::vector<float> logits;
    V4ForwardOptions opt;
    opt.prompt_len = L;
    for (int64_t b = 0; b < L; b += chunk) {
      const int64_t n = std::min(chunk, L - b);
      Status st = m.forward(seq.get(), std::span<const int32_t>(prompt.data() + b, n), opt, &logits);
      EXPECT_TRUE(st.ok()) << st.to_string();
    }
    rows.push_back(logits);
    for (int s = 0; s < 2; ++s) {
      int32_t next = argmax(logits, 0, V);
      Status st = m.forward(seq.get(), std::span<const int32_t>(&next, 1), V4ForwardOptions{}, &logits);
      EXPECT_TRUE(st.ok()) << st.to_string();
      rows.push_back(logits);
    }
    return rows;
  };
  for (int64_t len : {3, 4, 5, 15, 16, 17, 33}) {
    auto prompt = make_prompt(len, m.config().vocab_size, static_cast<uint32_t>(len));
    auto whole = run(prompt, len);
    for (int64_t chunk : {1, 2, 3, 4, 5, 16}) {
      if (chunk >= len) continue;
      auto chunked = run(prompt, chunk);
      ASSERT_EQ(chunked.size(), whole.size());
      for (size_t r = 0; r < whole.size(); ++r)
        EXPECT_EQ(chunked[r], whole[r]) << "len=" << len << " chunk=" << chunk << " row=" << r;
    }
  }
}

}  // namespace
}  // namespace strata
