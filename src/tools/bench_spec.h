// `strata bench model --speculative-config`: decode speed of one greedy request through the
// engine with and without speculative decoding, in the same run on the same runner, and the
// acceptance the drafts got (issue 28 item 7).
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"
#include "exec/model_runner.h"
#include "sched/spec_decode.h"

namespace strata::tools {

struct SpecBenchResult {
  double plain_tok_s = 0;      // decode tok/s without speculation (median of repeats)
  double spec_tok_s = 0;       // with it
  double mean_acceptance_length = 0;  // 1 + accepted / verify passes (vLLM's definition)
  double draft_acceptance_rate = 0;   // accepted / proposed drafts
  int64_t drafts = 0, draft_tokens = 0, accepted_tokens = 0;
  bool outputs_equal = false;  // the two runs' token ids (greedy) are identical
};

// Runs `prompt` then `decode_tokens` greedy tokens (EOS ignored) `repeats` times each way.
// Errors: the engine's (a request that failed).
StatusOr<SpecBenchResult> bench_speculative(ModelRunner& runner, std::span<const int32_t> prompt,
                                            int64_t decode_tokens, int repeats,
                                            const SpeculativeConfig& config);

}  // namespace strata::tools
