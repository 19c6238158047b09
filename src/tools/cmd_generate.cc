// `strata generate`: generates text from a prompt with a model directory (default: the
// embedded models/stories260K), streaming it to stdout.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>
#include <climits>
#include <vector>

#include <fmt/format.h>

#include "base/thread_pool.h"
#include "exec/generate.h"
#include "exec/runner_factory.h"
#include "model/tokenizer.h"
#include "sched/spec_decode.h"
#include "tools/command_registry.h"
#include "tools/rank_flags.h"
#include "tools/tier_flags.h"

namespace strata::tools {
namespace {

struct GenerateCli {
  std::string model;
  std::string prompt;
  bool have_prompt = false;
  int64_t max_tokens = 256;
  float temperature = 1.0f;
  float top_p = 0.9f;
  int32_t top_k = 0;
  float min_p = 0.0f;
  uint64_t seed = 0;
  int threads = 0;
  bool output_ids = false;
  bool verbose = false;
  std::string speculative_config;  // vLLM's --speculative-config JSON
  std::string prompt_ids;  // --prompt-ids as given
  bool have_prompt_ids = false;  // --prompt-ids was passed (possibly empty: a usage error)
  TierCli tiers;
  RankLayout ranks;  // --enable-expert-parallel, --decode-context-parallel-size (mpirun)
};

// "1,2,3", "1 2 3" or "[1, 2, 3]" -> ids; false on anything else.
bool parse_ids(const std::string& text, std::vector<int32_t>* ids) {
  std::string t = text;
  for (char& ch : t)
    if (ch == ',' || ch == '[' || ch == ']') ch = ' ';
  std::istringstream in(t);
  std::string word;
  while (in >> word) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      return false;
    }
    if (used != word.size() || v < INT32_MIN || v > INT32_MAX) return false;
    ids->push_back(static_cast<int32_t>(v));
  }
  return true;
}

int run_generate(GenerateCli& o) {
  if (o.model.empty()) {
    auto d = default_model_dir();
    if (!d.ok()) {
      fmt::print(stderr, "strata generate: {}\n", d.status().to_string());
      return 1;
    }
    o.model = *d;
  }
  const bool by_ids = o.have_prompt_ids;
  std::vector<int32_t> ids;
  if (by_ids) {
    if (o.have_prompt) {
      fmt::print(stderr, "strata generate: pass either a prompt or --prompt-ids, not both\n");
      return 2;
    }
    if (!parse_ids(o.prompt_ids, &ids) || ids.empty()) {
      fmt::print(stderr,
                 "strata generate: --prompt-ids '{}': expected one or more token ids such as "
                 "1,2,3 or [1, 2, 3]\n",
                 o.prompt_ids);
      return 2;
    }
  }
  SamplingParams sampling;
  sampling.temperature = o.temperature;
  sampling.top_p = o.top_p;
  sampling.top_k = o.top_k;
  sampling.min_p = o.min_p;
  sampling.seed = o.seed;
  if (Status st = validate_sampling_params(sampling); !st.ok()) {
    fmt::print(stderr, "strata generate: {}\n", st.message());
    return 2;
  }
  StatusOr<SpeculativeConfig> spec = parse_speculative_config(o.speculative_config);
  if (!spec.ok()) {
    fmt::print(stderr, "strata generate: {}\n", spec.status().message());
    return 2;
  }
  if (!by_ids && !o.have_prompt && !isatty(0)) {
    o.prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    while (!o.prompt.empty() && (o.prompt.back() == '\n' || o.prompt.back() == '\r'))
      o.prompt.pop_back();
  }
  if (const int rc = setup_ranks("strata generate", o.ranks); rc != 0) return rc;
  RunnerOptions ro;
  ro.threads = o.threads;
  ro.progress = true;
  if (Status st = apply_tier_flags(o.tiers, &ro); !st.ok()) {
    fmt::print(stderr, "strata generate: {}\n", st.message());
    return 2;
  }
  auto runner = make_model_runner(o.model, ro);
  if (!runner.ok()) {
    fmt::print(stderr, "strata generate{}: {}\n", rank_tag(), runner.status().to_string());
    return 1;
  }
  if (Status st = check_speculative_config(*spec, **runner); !st.ok()) {
    fmt::print(stderr, "strata generate: {}\n", st.message());
    return 2;
  }
  auto tok = load_tokenizer_from_dir(o.model);
  // A checkpoint without a tokenizer (e.g. a converted DeepSeek checkpoint): token ids in,
  // token ids out. A tokenizer file that exists but fails to load is still an error.
  const bool no_tokenizer = !tok.ok() && tok.status().code() == StatusCode::kNotFound;
  if (!tok.ok() && !(no_tokenizer && by_ids)) {
    fmt::print(stderr, "strata generate: {}{}\n", tok.status().to_string(),
               no_tokenizer ? " (this model has no tokenizer: pass token ids with --prompt-ids)"
                            : "");
    return 1;
  }
  const Tokenizer* tokenizer = tok.ok() ? tok->get() : nullptr;
  GenerateOptions go;
  go.max_tokens = o.max_tokens;
  go.sampling = sampling;
  go.add_bos = !by_ids;  // --prompt-ids are taken as given, as the server takes id prompts
                         // (a text prompt gets BOS, as generate() gives it)
  std::unique_ptr<DraftProposer> proposer = make_proposer(*spec, runner->get());
  if (proposer) {
    go.num_speculative_tokens = spec->num_speculative_tokens;
    go.propose = [&proposer](SeqId seq, std::span<const int32_t> tokens, int k) {
      return proposer->propose(seq, tokens, k);
    };
  }
  bool ends_with_newline = true;
  go.on_text = [&](const std::string& s) {
    if (s.empty()) return;
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
    ends_with_newline = s.back() == '\n';
  };
  if (!by_ids) {
    ids = tokenizer->encode(o.prompt);
    // A prompt the tokenizer cannot represent (every id is a token whose text does not occur
    // in the prompt, i.e. the unknown token) gives output unrelated to the prompt: say so.
    bool all_unknown = !o.prompt.empty() && !ids.empty();
    for (int32_t id : ids) {
      std::string b = tokenizer->token_bytes(id);
      // SentencePiece-style pieces carry the space the tokenizer puts before a word
      const size_t first = b.find_first_not_of(' ');
      b = first == std::string::npos ? std::string() : b.substr(first);
      if (b.empty() || o.prompt.find(b) != std::string::npos) all_unknown = false;
    }
    if (all_unknown)
      fmt::print(stderr,
                 "strata generate: warning: the prompt encodes to {} token(s) none of which "
                 "appears in it (e.g. id {} '{}'): this model's tokenizer does not cover the "
                 "text\n",
                 ids.size(), ids[0], tokenizer->id_to_token(ids[0]));
  }
  auto res = generate_ids(**runner, tokenizer, ids, go);
  if (!res.ok()) {
    if (!ends_with_newline) std::fputc('\n', stdout);
    std::fflush(stdout);
    fmt::print(stderr, "strata generate: {}\n", res.status().to_string());
    return 1;
  }
  if (!ends_with_newline) std::fputc('\n', stdout);
  // Without a tokenizer the ids are the output.
  if (o.output_ids || tokenizer == nullptr) fmt::print("[{}]\n", fmt::join(res->generated_ids, ","));
  std::fflush(stdout);
  if (o.verbose) {
    const double n = static_cast<double>(res->generated_ids.size());
    fmt::print(stderr,
               "[generate] model {} | prompt {} tokens in {:.3f}s ({:.1f} tok/s) | {} tokens "
               "generated, decode {:.1f} tok/s | threads {}\n",
               o.model, res->prompt_ids.size(), res->prefill_seconds,
               res->prompt_ids.size() / std::max(1e-9, res->prefill_seconds),
               res->generated_ids.size(),
               n > 1 ? (n - 1) / std::max(1e-9, res->decode_seconds) : 0.0,
               o.threads > 0 ? o.threads : ThreadPool(0).num_threads());
    if (res->cached_tokens > 0)
      fmt::print(stderr, "[generate] prefix cache: {} of {} prompt tokens restored\n",
                 res->cached_tokens, res->prompt_ids.size());
    if (proposer)
      fmt::print(stderr, "[generate] speculative {}: {} of {} draft tokens accepted\n",
                 spec->method, res->accepted_tokens, res->draft_tokens);
  }
  return 0;
}

void setup_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "generate",
      "Generate text from a prompt (streams to stdout). Starts from BOS, stops at BOS/EOS or "
      "after --max-tokens tokens");
  auto o = std::make_shared<GenerateCli>();
  cmd->add_option("prompt_arg", o->prompt, "Prompt text (alternatively --prompt or stdin)");
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text (default: read stdin when it is not a "
                                            "terminal, else empty)");
  cmd->add_option("-m,--model", o->model,
                  "Model directory (default: the embedded models/stories260K)");
  // CLI::NonNegativeNumber prints DBL_MAX in its message; a plain range reads better.
  cmd->add_option("-n,--max-tokens", o->max_tokens, "Maximum number of tokens to generate")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 30).description("0 to 2^30"));
  cmd->add_option("-t,--temperature", o->temperature, "Sampling temperature (0: greedy)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0).description("0 to 100"));
  cmd->add_option("--top-p", o->top_p, "Nucleus sampling mass (1: off)")->capture_default_str();
  cmd->add_option("--top-k", o->top_k, "Keep the k most likely tokens (0 or -1: off)")
      ->capture_default_str();
  cmd->add_option("--min-p", o->min_p, "Min-p filter relative to the top token (0: off)")
      ->capture_default_str();
  cmd->add_option("-s,--seed", o->seed, "Random seed of the sampler")->capture_default_str();
  add_tier_options(cmd, &o->tiers);
  add_rank_flags(cmd, &o->ranks);
  cmd->add_option("--threads", o->threads, "Compute threads (0: the CPUs this process may use)")
      ->capture_default_str()
      ->check(threads_range());
  cmd->add_option("--prompt-ids", o->prompt_ids,
                  "Prompt as token ids (1,2,3 or [1, 2, 3]) instead of text, taken as given "
                  "(no BOS added); required for a model without a tokenizer, whose output is "
                  "then the generated ids");
  cmd->add_flag("--output-ids", o->output_ids,
                "After the text, print the generated token ids as one JSON array on the last "
                "line of stdout");
  cmd->add_option("--speculative-config", o->speculative_config,
                  "Speculative decoding as JSON, vLLM's fields: {\"method\": \"ngram\", "
                  "\"dspark\" (V4.1) or \"mtp\" (V4), \"num_speculative_tokens\": K, ...}; the output is the same "
                  "as without it");
  cmd->add_flag("-v,--verbose", o->verbose, "Print timing (and speculative acceptance) to stderr");
  cmd->callback([o, cmd] {
    o->have_prompt = cmd->count("--prompt") > 0 || cmd->count("prompt_arg") > 0;
    o->have_prompt_ids = cmd->count("--prompt-ids") > 0;
    set_exit_code(run_generate(*o));
  });
}
}  // namespace
STRATA_REGISTER_COMMAND("generate", setup_generate);
}  // namespace strata::tools
