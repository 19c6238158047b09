// THE acceptance test of the Llama path: greedy generation from BOS with the embedded,
// converted stories260K model reproduces the token ids and text of greedy_golden.json (an
// independent fp64 re-implementation of llama2.c run.c; the text equals Karpathy's
// documented sample). Also checks the runner's batch / chunking / thread invariance on the
// real model bit-exactly.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "exec/generate.h"
#include "exec/llama/llama_runner.h"
#include "exec/runner_factory.h"
#include "kernels/cpu_features.h"
#include "model/tokenizer.h"

namespace strata {
namespace {

std::string source_dir() {
  const char* env = std::getenv("STRATA_SOURCE_DIR");
  return env != nullptr && *env != 0 ? env : STRATA_SOURCE_DIR;
}
std::string model_dir() { return source_dir() + "/models/stories260K"; }

nlohmann::json golden() {
  std::ifstream in(source_dir() + "/testdata/stories260K/greedy_golden.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

TEST(Stories260kGolden, GreedyIdsAndTextMatch) {
  const auto g = golden();
  ASSERT_EQ(g["steps"].get<int>(), 256);
  for (int threads : {1, 2}) {
    RunnerOptions ro;
    ro.threads = threads;
    auto runner = make_model_runner(model_dir(), ro);
    ASSERT_TRUE(runner.ok()) << runner.status().to_string();
    auto tok = load_tokenizer_from_dir(model_dir());
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    GenerateOptions go;
    go.max_tokens = 256;
    go.sampling.temperature = 0.0f;
    std::string streamed;
    go.on_text = [&](const std::string& s) { streamed += s; };
    auto res = generate(**runner, **tok, "", go);
    ASSERT_TRUE(res.ok()) << res.status().to_string();
    EXPECT_EQ(res->prompt_ids, std::vector<int32_t>{1});
    EXPECT_EQ(res->generated_ids, g["generated_ids"].get<std::vector<int32_t>>())
        << "threads=" << threads;
    EXPECT_EQ(res->text, g["generated_text"].get<std::string>());
    EXPECT_EQ(streamed, res->text);
  }
}

std::vector<float> logits_of(ModelRunner& r, SeqId s, const std::vector<int32_t>& toks) {
  std::vector<float> out;
  StepItem it{s, toks, true};
  Status st = r.step({&it, 1}, &out);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

TEST(Stories260kGolden, BatchChunkAndThreadInvariant) {
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298};
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2}) {
    RunnerOptions ro;
    ro.threads = threads;
    auto rr = LlamaRunner::create(model_dir(), ro);
    ASSERT_TRUE(rr.ok()) << rr.status().to_string();
    LlamaRunner& r = **rr;
    // (a) whole prompt in one step.
    ASSERT_TRUE(r.add_sequence(SeqId{1}).ok());
    results.push_back(logits_of(r, SeqId{1}, prompt));
    // (b) token by token (decode path).
    ASSERT_TRUE(r.add_sequence(SeqId{2}).ok());
    std::vector<float> last;
    for (int32_t t : prompt) last = logits_of(r, SeqId{2}, {t});
    results.push_back(last);
    // (c) chunks of 4/7 inside a batch with two other sequences.
    ASSERT_TRUE(r.add_sequence(SeqId{3}).ok());
    ASSERT_TRUE(r.add_sequence(SeqId{4}).ok());
    ASSERT_TRUE(r.add_sequence(SeqId{5}).ok());
    std::vector<int32_t> a(prompt.begin(), prompt.begin() + 4), b(prompt.begin() + 4, prompt.end());
    std::vector<int32_t> other1 = {1, 300, 301, 302, 303, 304}, other2 = {1, 7};
    std::vector<float> out;
    {
      StepItem items[] = {{SeqId{4}, other1, true}, {SeqId{3}, a, false}, {SeqId{5}, other2, true}};
      ASSERT_TRUE(r.step(items, &out).ok());
      EXPECT_EQ(out.size(), 2u * 512u);
    }
    {
      std::vector<int32_t> o1 = {5}, o2 = {9, 10, 11};
      StepItem items[] = {{SeqId{4}, o1, true}, {SeqId{5}, o2, true}, {SeqId{3}, b, true}};
      ASSERT_TRUE(r.step(items, &out).ok());
      ASSERT_EQ(out.size(), 3u * 512u);
      results.emplace_back(out.begin() + 2 * 512, out.end());
    }
    EXPECT_EQ(r.sequence_length(SeqId{3}), static_cast<int64_t>(prompt.size()));
  }
  for (size_t i = 1; i < results.size(); ++i) {
    ASSERT_EQ(results[i].size(), results[0].size());
    EXPECT_EQ(0, std::memcmp(results[i].data(), results[0].data(), results[0].size() * 4))
        << "variant " << i << " differs";
  }
}

TEST(Stories260kGolden, ScalarAndAvx2KernelsGiveIdenticalLogits) {
  if (!kernels::cpu_has_avx2_fma()) GTEST_SKIP() << "no AVX2";
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298};
  std::vector<std::vector<float>> out;
  for (auto isa : {kernels::Isa::kScalar, kernels::Isa::kAvx2}) {
    kernels::force_isa(isa);
    RunnerOptions ro;
    ro.threads = 2;
    auto rr = LlamaRunner::create(model_dir(), ro);
    ASSERT_TRUE(rr.ok());
    ASSERT_TRUE((*rr)->add_sequence(SeqId{1}).ok());
    auto a = logits_of(**rr, SeqId{1}, prompt);
    auto b = logits_of(**rr, SeqId{1}, {432});
    a.insert(a.end(), b.begin(), b.end());
    out.push_back(a);
  }
  kernels::force_isa(kernels::Isa::kAvx2);
  ASSERT_EQ(out[0].size(), out[1].size());
  EXPECT_EQ(0, std::memcmp(out[0].data(), out[1].data(), out[0].size() * 4));
}

TEST(Stories260kGolden, StepErrorsLeaveStateUntouched) {
  RunnerOptions ro;
  ro.threads = 1;
  ro.kv_cache_tokens = 32;  // two blocks of 16
  auto rr = LlamaRunner::create(model_dir(), ro);
  ASSERT_TRUE(rr.ok());
  LlamaRunner& r = **rr;
  ASSERT_TRUE(r.add_sequence(SeqId{1}).ok());
  ASSERT_TRUE(r.add_sequence(SeqId{2}).ok());
  std::vector<float> out;
  std::vector<int32_t> t20(20, 5), bad = {1, 512}, t1 = {1};
  {
    StepItem items[] = {{SeqId{1}, t20, true}, {SeqId{2}, t20, true}};  // needs 4 blocks
    Status st = r.step(items, &out);
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  }
  {
    StepItem items[] = {{SeqId{1}, t1, true}, {SeqId{2}, bad, true}};
    EXPECT_EQ(r.step(items, &out).code(), StatusCode::kInvalidArgument);
  }
  {
    StepItem items[] = {{SeqId{1}, t1, true}, {SeqId{1}, t1, true}};
    EXPECT_EQ(r.step(items, &out).code(), StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(r.sequence_length(SeqId{1}), 0);
  EXPECT_EQ(r.sequence_length(SeqId{2}), 0);
  EXPECT_EQ(r.cache_usage()[0].used_bytes, 0);
  EXPECT_EQ(r.token_capacity_left(SeqId{1}), 32);
  StepItem ok_item{SeqId{1}, t20, true};
  ASSERT_TRUE(r.step({&ok_item, 1}, &out).ok());
  EXPECT_EQ(r.token_capacity_left(SeqId{1}), 12);
  r.release_sequence(SeqId{1});
  EXPECT_EQ(r.cache_usage()[0].used_bytes, 0);
}

}  // namespace
}  // namespace strata
