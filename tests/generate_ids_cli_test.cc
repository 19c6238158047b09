// `strata generate --prompt-ids` (src/tools/cmd_generate.cc, exec/generate.h generate_ids):
// token ids in, token ids out for a checkpoint without a tokenizer (the DeepSeek-V4 tiny
// golden model ships none). The CLI's greedy ids are checked against a greedy loop written
// here directly over ModelRunner::step (BOS + prompt prefilled, then argmax one token at a
// time), and the errors a user can hit are checked for their exit status.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "exec/runner_factory.h"
#include "exec/sampler.h"

namespace strata::tools {
namespace {

std::string src_dir() {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  return e ? e : STRATA_SOURCE_DIR;
}
std::string v4_dir() { return src_dir() + "/models/deepseek-v4flash-tiny"; }

std::vector<int32_t> last_line_ids(const std::string& out) {
  std::string s = out;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  const auto j = nlohmann::json::parse(s.substr(s.rfind('\n') + 1), nullptr, false);
  if (j.is_discarded() || !j.is_array()) return {};
  return j.get<std::vector<int32_t>>();
}

TEST(GenerateIdsCli, NoTokenizerModelGivesGreedyIds) {
  ASSERT_FALSE(std::ifstream(v4_dir() + "/tokenizer.json").good())
      << "the test needs a model without tokenizer";
  std::string out;
  const int rc = run_strata("generate --model " + v4_dir() +
                                " --prompt-ids '[5, 6, 7, 8]' -n 6 -t 0 --threads 2",
                            &out);
  ASSERT_EQ(rc, 0) << out;
  const std::vector<int32_t> got = last_line_ids(out);

  // The same greedy continuation straight through the runner.
  RunnerOptions ro;
  ro.threads = 1;
  auto runner = make_model_runner(v4_dir(), ro);
  ASSERT_TRUE(runner.ok()) << runner.status().to_string();
  ModelRunner& r = **runner;
  // --prompt-ids are taken as given (no BOS), as the server takes an id prompt
  const std::vector<int32_t> prompt = {5, 6, 7, 8};
  const SeqId seq{1};
  ASSERT_TRUE(r.add_sequence(seq).ok());
  std::vector<float> logits;
  StepItem first{seq, prompt, true, static_cast<int64_t>(prompt.size())};
  ASSERT_TRUE(r.step({&first, 1}, &logits).ok());
  std::vector<int32_t> want;
  while (want.size() < 6) {
    const int32_t next = argmax(logits);
    if (next == r.info().bos_id || next == r.info().eos_id) break;
    want.push_back(next);
    StepItem d{seq, std::span<const int32_t>(&want.back(), 1), true,
               static_cast<int64_t>(prompt.size())};
    ASSERT_TRUE(r.step({&d, 1}, &logits).ok());
  }
  r.release_sequence(seq);
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(got, want) << out;
}

TEST(GenerateIdsCli, UserErrors) {
  std::string out;
  // no tokenizer and a text prompt: a clear error (exit 1), nothing generated
  EXPECT_EQ(run_strata("generate --model " + v4_dir() + " -n 2 hello", &out), 1);
  EXPECT_EQ(out, "");
  // malformed ids, or ids and text together: usage errors (exit 2)
  EXPECT_EQ(run_strata("generate --model " + v4_dir() + " --prompt-ids 5,x -n 2", &out), 2);
  EXPECT_EQ(run_strata("generate --model " + v4_dir() + " --prompt-ids 5 -n 2 text", &out), 2);
  // --prompt-ids given but empty (no ids): a usage error, not "pass --prompt-ids"
  EXPECT_EQ(run_strata("generate --model " + v4_dir() + " --prompt-ids '' -n 2", &out, true), 2);
  EXPECT_NE(out.find("one or more token ids"), std::string::npos) << out;
  EXPECT_EQ(run_strata("generate --model " + v4_dir() + " --prompt-ids '[]' -n 2", &out), 2);
  // sampling settings out of range: usage errors, found before the model loads
  EXPECT_EQ(run_strata("generate --model " + v4_dir() + " --prompt-ids 5 --top-k -3", &out), 2);
  EXPECT_EQ(run_strata("generate --model " + v4_dir() + " --prompt-ids 5 --top-p 0", &out), 2);
  EXPECT_EQ(run_strata("generate --model /nonexistent --prompt-ids 5 --min-p 2", &out), 2);
  // an id outside the vocabulary: rejected before any step (exit 1)
  EXPECT_EQ(run_strata("generate --model " + v4_dir() + " --prompt-ids 5,99999999 -n 2", &out), 1);
}

// The "tokenizer does not cover the text" warning: not for a word the tokenizer knows (its
// piece carries a leading space: " Once"), but for text the tiny V4.1 model's stand-in
// WordLevel tokenizer cannot represent.
TEST(GenerateCli, UncoveredPromptWarningOnlyWhenItApplies) {
  std::string out;
  EXPECT_EQ(run_strata("generate --prompt Once -n 2 -t 0", &out, /*with_stderr=*/true), 0);
  EXPECT_EQ(out.find("does not cover"), std::string::npos) << out;
  out.clear();
  const std::string v41 = src_dir() + "/models/deepseek-v41-tiny";
  EXPECT_EQ(run_strata("generate --model " + v41 + " --prompt zebra -n 1 -t 0", &out, true), 0);
  EXPECT_NE(out.find("does not cover"), std::string::npos) << out;
}

}  // namespace
}  // namespace strata::tools

namespace strata::tools {
namespace {

// `generate --speculative-config`: the same output as without it (seeded sampling on
// stories260K, greedy ids on V4.1 with DSpark and V4 with n-gram and MTP); configs the model cannot
// run are usage errors.
TEST(GenerateSpeculativeCli, SameOutputAsWithout) {
  const std::string stories = src_dir() + "/models/stories260K";
  const std::string v41 = src_dir() + "/models/deepseek-v41-tiny";
  const std::string ngram = R"('{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":1}')";
  struct Run {
    std::string args, config;
  };
  for (const Run& r : std::vector<Run>{
           {"generate --model " + stories + " -n 150 -s 11 --output-ids 'Once upon a time'", ngram},
           {"generate --model " + stories + " -n 150 -t 0 --output-ids 'Lily saw a cat'", ngram},
           {"generate --model " + v41 + " -n 24 -t 0 --output-ids --prompt-ids 5,9,11,13,2,17",
            R"('{"method":"dspark","num_speculative_tokens":5}')"},
           {"generate --model " + v41 + " -n 24 -t 0.8 -s 3 --output-ids --prompt-ids 5,9,11,13,2,17",
            R"('{"method":"dspark","num_speculative_tokens":2}')"},
           {"generate --model " + v4_dir() + " -n 24 -t 0 --prompt-ids 7,8,9,7,8,9,7,8", ngram},
           {"generate --model " + v4_dir() + " -n 24 -t 0 --output-ids --prompt-ids 7,8,9,7,8,9,7,8",
            R"('{"method":"mtp","num_speculative_tokens":3}')"},
           {"generate --model " + v4_dir() + " -n 24 -t 0.8 -s 5 --output-ids --prompt-ids 4,90,33",
            R"('{"method":"mtp","num_speculative_tokens":7}')"}}) {
    std::string plain, spec;
    ASSERT_EQ(run_strata(r.args, &plain), 0) << r.args;
    ASSERT_EQ(run_strata(r.args + " --speculative-config " + r.config, &spec), 0) << r.args;
    const std::vector<int32_t> ids = last_line_ids(plain);
    EXPECT_FALSE(ids.empty()) << plain;
    EXPECT_EQ(last_line_ids(spec), ids) << r.args;
    EXPECT_EQ(spec, plain) << r.args;
  }
  std::string out;
  EXPECT_EQ(run_strata("generate --model " + stories +
                           R"( -n 5 --speculative-config '{"method":"dspark","num_speculative_tokens":2}' hi)",
                       &out, /*with_stderr=*/true),
            2);
  EXPECT_NE(out.find("DSpark"), std::string::npos) << out;
  EXPECT_EQ(run_strata("generate --model " + v41 +
                           R"( -n 5 --prompt-ids 1,2 --speculative-config '{"method":"dspark","num_speculative_tokens":6}')",
                       &out, /*with_stderr=*/true),
            2);
  EXPECT_EQ(run_strata("generate --model " + stories + " -n 5 --speculative-config '{' hi", &out), 2);
}

}  // namespace
}  // namespace strata::tools
