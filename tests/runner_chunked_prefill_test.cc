// Chunked prefill through the ModelRunner contract (exec/model_runner.h) is bit-identical to
// an unchunked prefill, and so are the decode steps that follow, for every embedded model
// family: the scheduler passes StepItem::prompt_len so prompt chunks are computed as rows of
// one whole-prompt call. Prompt lengths straddle the tiny models' window (16), compression
// ratios (1, 2, 4) and the V4 HCA ratio (16).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "exec/model_runner.h"
#include "exec/runner_factory.h"

namespace strata {
namespace {

std::string model_dir(const std::string& name) {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  return std::string(e ? e : STRATA_SOURCE_DIR) + "/models/" + name;
}

// Pseudo-random prompt ids in [3, vocab), deterministic in (len, salt).
std::vector<int32_t> make_prompt(int64_t len, int32_t vocab, uint32_t salt) {
  std::vector<int32_t> ids;
  uint32_t x = 2463534242u ^ salt;
  for (int64_t i = 0; i < len; ++i) {
    x ^= x << 13; x ^= x >> 17; x ^= x << 5;
    ids.push_back(3 + static_cast<int32_t>(x % static_cast<uint32_t>(vocab - 3)));
  }
  return ids;
}

// Prefill `prompt` in chunks of `chunk` (0 = whole), then decode `decode_steps` greedy
// tokens; returns every logits row produced after the prompt (prefill + decode).
std::vector<std::vector<float>> run(ModelRunner& runner, const std::vector<int32_t>& prompt,
                                    int64_t chunk, int decode_steps) {
  SeqId seq{7};
  EXPECT_TRUE(runner.add_sequence(seq).ok());
  const int64_t L = static_cast<int64_t>(prompt.size());
  if (chunk <= 0) chunk = L;
  std::vector<std::vector<float>> rows;
  std::vector<float> logits;
  for (int64_t b = 0; b < L; b += chunk) {
    const int64_t n = std::min(chunk, L - b);
    StepItem item{seq, std::span<const int32_t>(prompt.data() + b, n), b + n == L, L};
    Status st = runner.step({&item, 1}, &logits);
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  rows.push_back(logits);
  for (int s = 0; s < decode_steps; ++s) {
    int32_t next = 0;
    for (size_t v = 1; v < logits.size(); ++v)
      if (logits[v] > logits[next]) next = static_cast<int32_t>(v);
    StepItem item{seq, std::span<const int32_t>(&next, 1), true, L};
    Status st = runner.step({&item, 1}, &logits);
    EXPECT_TRUE(st.ok()) << st.to_string();
    rows.push_back(logits);
  }
  runner.release_sequence(seq);
  return rows;
}

void check_model(const std::string& name, const std::vector<int64_t>& lengths) {
  RunnerOptions opt;
  opt.threads = 1;
  auto runner = make_model_runner(model_dir(name), opt);
  ASSERT_TRUE(runner.ok()) << runner.status().to_string();
  const int32_t vocab = (*runner)->info().vocab_size;
  for (int64_t len : lengths) {
    auto prompt = make_prompt(len, vocab, static_cast<uint32_t>(len));
    auto whole = run(**runner, prompt, 0, 3);
    ASSERT_EQ(whole.front().size(), static_cast<size_t>(vocab));
    for (int64_t chunk : {1, 2, 3, 4, 5, 16}) {
      if (chunk >= len) continue;
      auto chunked = run(**runner, prompt, chunk, 3);
      ASSERT_EQ(chunked.size(), whole.size());
      for (size_t r = 0; r < whole.size(); ++r)
        EXPECT_EQ(chunked[r], whole[r]) << name << " len=" << len << " chunk=" << chunk
                                        << " row=" << r << " (0 = prefill, then decode steps)";
    }
  }
}

TEST(RunnerChunkedPrefill, Stories260kBitIdentical) {
  check_model("stories260K", {1, 2, 5, 17, 40});
}

TEST(RunnerChunkedPrefill, DeepseekV4FlashTinyBitIdentical) {
  check_model("deepseek-v4flash-tiny", {3, 4, 5, 15, 16, 17, 33});
}

TEST(RunnerChunkedPrefill, DeepseekV41TinyBitIdentical) {
  check_model("deepseek-v41-tiny", {2, 3, 15, 16, 17, 33});
}

}  // namespace
}  // namespace strata
