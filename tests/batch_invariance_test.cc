// Batch invariance through the ModelRunner interface, on the real embedded models: a
// sequence's logits in mixed prefill/decode batches of varying composition (other
// sequences prefilling in chunks or decoding next to it, its own prompt chunked
// differently) are bit-identical to its logits when it runs alone.
#include <gtest/gtest.h>

#include <cstring>

#include "exec/runner_factory.h"

namespace strata {
namespace {

std::string model_dir(const std::string& name) {
  const char* src = std::getenv("STRATA_SOURCE_DIR");
  return std::string(src ? src : STRATA_SOURCE_DIR) + "/models/" + name;
}

std::vector<int32_t> tokens(int n, int seed, int32_t vocab) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(3 + (seed * 131 + i * 17) % (vocab - 3));
  return v;
}

int32_t argmax(const float* row, int32_t n) {
  int32_t b = 0;
  for (int32_t i = 1; i < n; ++i) {
    if (row[i] > row[b]) b = i;
  }
  return b;
}

// A's prompt length: its first kPromptLen tokens are the prompt, the rest were generated.
// Every item carries its sequence's prompt length, as the scheduler's do (StepItem::prompt_len).
constexpr int64_t kPromptLen = 20;

// Feeds sequence A (`a_tokens`) in `a_chunks`, each step together with the `others`
// items for that step index; returns A's logits rows at the end of every chunk.
struct Other {
  SeqId seq;
  std::vector<int32_t> toks;
  size_t fed = 0;
  int64_t chunk = 1;
};

std::vector<std::vector<float>> run_a(ModelRunner& r, SeqId a, const std::vector<int32_t>& a_tokens,
                                      const std::vector<int64_t>& a_chunks,
                                      std::vector<Other> others) {
  const int32_t vocab = r.info().vocab_size;
  EXPECT_TRUE(r.add_sequence(a).ok());
  for (auto& o : others) EXPECT_TRUE(r.add_sequence(o.seq).ok());
  std::vector<std::vector<float>> rows;
  size_t pos = 0;
  for (int64_t c : a_chunks) {
    std::vector<StepItem> items;
    // A is placed in the middle of the batch when there are others.
    size_t half = others.size() / 2;
    for (size_t i = 0; i < others.size(); ++i) {
      if (i == half) items.push_back({a, std::span<const int32_t>(a_tokens.data() + pos, c), true, kPromptLen});
      Other& o = others[i];
      if (o.fed < o.toks.size()) {
        const size_t n = std::min<size_t>(o.chunk, o.toks.size() - o.fed);
        items.push_back({o.seq, std::span<const int32_t>(o.toks.data() + o.fed, n), true,
                         static_cast<int64_t>(o.toks.size())});
        o.fed += n;
      }
    }
    if (others.empty() || half >= others.size()) {
      items.push_back({a, std::span<const int32_t>(a_tokens.data() + pos, c), true, kPromptLen});
    }
    std::vector<float> logits;
    Status st = r.step(items, &logits);
    EXPECT_TRUE(st.ok()) << st.to_string();
    if (!st.ok()) return rows;
    size_t row = 0;
    for (const StepItem& it : items) {
      if (it.seq == a) {
        rows.emplace_back(logits.begin() + row * vocab, logits.begin() + (row + 1) * vocab);
      }
      ++row;
    }
    pos += c;
  }
  r.release_sequence(a);
  for (auto& o : others) r.release_sequence(o.seq);
  return rows;
}

// Returns early (skipping) only when the factory has no runner for the architecture.
void check_model(const std::string& name) {
  RunnerOptions ro;
  ro.threads = 2;
  auto runner_or = make_model_runner(model_dir(name), ro);
  if (runner_or.status().code() == StatusCode::kUnimplemented) {
    GTEST_SKIP() << "no runner for this architecture yet: " << runner_or.status().to_string();
  }
  ASSERT_TRUE(runner_or.ok()) << runner_or.status().to_string();
  ModelRunner& r = **runner_or;
  const int32_t vocab = r.info().vocab_size;

  // Solo reference: A's prompt in one step, then greedy decode one token at a time.
  std::vector<int32_t> a = tokens(kPromptLen, 1, vocab);
  std::vector<int64_t> solo_chunks = {kPromptLen};
  {
    ASSERT_TRUE(r.add_sequence(SeqId{100}).ok());
    std::vector<float> logits;
    StepItem item{SeqId{100}, a, true, kPromptLen};
    ASSERT_TRUE(r.step({&item, 1}, &logits).ok());
    for (int k = 0; k < 5; ++k) {
      a.push_back(argmax(logits.data(), vocab));
      StepItem d{SeqId{100}, std::span<const int32_t>(&a.back(), 1), true, kPromptLen};
      ASSERT_TRUE(r.step({&d, 1}, &logits).ok());
      solo_chunks.push_back(1);
    }
    r.release_sequence(SeqId{100});
  }
  auto solo = run_a(r, SeqId{1}, a, solo_chunks, {});
  ASSERT_EQ(solo.size(), 6u);

  // Mixed compositions: A's prompt chunked 7+7+6 (only the last row comparable) and
  // 1-token-at-a-time, next to decoding and prefilling sequences.
  struct Case {
    std::vector<int64_t> chunks;
    std::vector<Other> others;
  };
  std::vector<Case> cases;
  cases.push_back({{7, 7, 6, 1, 1, 1, 1, 1},
                   {{SeqId{2}, tokens(40, 2, vocab), 0, 6}, {SeqId{3}, tokens(9, 3, vocab), 0, 1}}});
  cases.push_back({{20, 1, 1, 1, 1, 1},
                   {{SeqId{4}, tokens(30, 4, vocab), 0, 30}, {SeqId{5}, tokens(12, 5, vocab), 0, 5},
                    {SeqId{6}, tokens(7, 6, vocab), 0, 1}}});
  std::vector<int64_t> ones(25, 1);
  cases.push_back({ones, {{SeqId{7}, tokens(60, 7, vocab), 0, 3}}});
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    auto rows = run_a(r, SeqId{10 + static_cast<int64_t>(ci)}, a, cases[ci].chunks, cases[ci].others);
    ASSERT_EQ(rows.size(), cases[ci].chunks.size());
    // Rows at positions 20..25 are the last 6 rows.
    for (int k = 0; k < 6; ++k) {
      const auto& got = rows[rows.size() - 6 + k];
      ASSERT_EQ(got.size(), solo[k].size());
      EXPECT_EQ(std::memcmp(got.data(), solo[k].data(), got.size() * sizeof(float)), 0)
          << name << " case " << ci << " position " << 20 + k;
    }
  }
  for (const CacheUsage& u : r.cache_usage()) EXPECT_EQ(u.used_bytes, 0) << u.kind;
}

TEST(BatchInvarianceTest, Stories260K) { check_model("stories260K"); }
TEST(BatchInvarianceTest, DeepSeekV41Tiny) { check_model("deepseek-v41-tiny"); }
TEST(BatchInvarianceTest, DeepSeekV4FlashTiny) { check_model("deepseek-v4flash-tiny"); }

}  // namespace
}  // namespace strata
