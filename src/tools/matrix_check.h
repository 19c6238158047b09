// The equality checks of `strata validate matrix` (docs/validation-matrix.md): a fixed set of
// token-id prompts sent to a deployment (greedy, logprobs, the validation mode's state rows),
// and the comparison of two deployments' answers -- token ids, logprobs (chosen and top-5)
// and, where both carry it, the state row by row, naming the state kind that diverges first.
// Also a small Prometheus text parser for the /metrics readings.
// Thread safety: pure functions, except run_prompts (HTTP; spawns threads when concurrent).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace strata::tools {

struct MatrixPrompt {
  std::string name;
  std::vector<int32_t> ids;
};

// Prompts for a model of `vocab` ids and `max_context` positions whose prefix cache hits in
// units of `unit` tokens (0: 16 is used): roots before the prompts that extend them (so a
// prefix cache hits 1-5 units), a prompt shorter than one unit, a 1-token prompt and a long
// one; every prompt leaves room for `max_tokens`. Deterministic in `seed`; ids in [3, vocab).
std::vector<MatrixPrompt> matrix_prompts(int64_t vocab, int64_t max_context, int64_t unit,
                                         int64_t max_tokens, uint64_t seed);

struct PromptOutput {
  std::string name;
  std::vector<int32_t> ids;               // generated token ids
  std::vector<double> logprobs;           // of each generated token
  std::vector<nlohmann::json> top_logprobs;  // per token: {token text: logprob}
  nlohmann::json state;                   // "strata_state" (null when the server sent none)
  int64_t cached_tokens = 0;
  std::string error;                      // transport / HTTP error ("" = ok)
};

// POST /v1/completions per prompt (temperature 0, ignore_eos, logprobs 5, return_token_ids,
// max_tokens), one after another or all at once (`concurrent`), `repeat` times each
// (outputs of repeat r follow those of r-1). An HTTP error is recorded in the output's error.
std::vector<PromptOutput> run_prompts(const std::string& url,
                                      const std::vector<MatrixPrompt>& prompts,
                                      int64_t max_tokens, bool concurrent, int repeat = 1);

// Where two "strata_state" objects first differ. Rows are keyed by (owner, absolute row);
// a row's position is row x positions_per_row (fixed owners: num_tokens, i.e. last). The
// kinds / owners named are those differing at the smallest position.
struct StateDivergence {
  bool compared = false;
  std::string not_compared;  // why (a side sent none, or an export error)
  bool equal = false;
  int64_t position = -1;
  std::vector<std::string> kinds;
  std::vector<std::string> owners;  // at most 8
  int64_t rows_compared = 0;
  nlohmann::json to_json() const;
};
StateDivergence compare_state(const nlohmann::json& below, const nlohmann::json& here);

// Every prompt of `here` against the same prompt of `below` (matched by index; both lists
// come from the same prompt set). Tolerance on logprobs: `tolerance` (absolute).
struct Comparison {
  bool pass = false;
  int64_t prompts = 0;
  bool tokens_equal = true;
  double max_abs_logprob_diff = 0;
  int64_t states_compared = 0;
  std::string failure;        // the first failure, in words ("" when pass)
  std::string failed_prompt;
  StateDivergence state;      // of the first prompt whose state differs (or the last compared)
  nlohmann::json to_json() const;
};
Comparison compare_outputs(const std::vector<PromptOutput>& below,
                           const std::vector<PromptOutput>& here, double tolerance);

// One sample line of a Prometheus text page.
struct MetricSample {
  std::string name;  // without labels
  std::map<std::string, std::string> labels;
  double value = 0;
};
std::vector<MetricSample> parse_metrics(const std::string& text);
// Sum of the samples whose name ends with `suffix` (e.g. ":num_preemptions_total") and whose
// labels include every pair of `where`; 0 when none.
double metric_sum(const std::vector<MetricSample>& m, const std::string& suffix,
                  const std::map<std::string, std::string>& where = {});
// GET URL/metrics parsed; empty on an error.
std::vector<MetricSample> fetch_metrics(const std::string& url);

}  // namespace strata::tools
