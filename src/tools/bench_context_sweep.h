// `strata bench model --context-sweep L1,L2,...`: decode time per token (TPOT) after prompts of
// each length, on one runner in one run, with its ratio to the first length (issue 29 goal 1:
// long-context decode should stay nearly flat).
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "exec/model_runner.h"

namespace strata::tools {

struct ContextSweepRow {
  int64_t context = 0;     // prompt tokens before the decode
  double tpot_ms = 0;      // median over repeats of (decode wall time / decode tokens)
  double prefill_tok_s = 0;  // median prefill speed of that prompt
  int64_t bytes_per_token = 0;  // ModelRunner::decode_bytes_read at the mean decode length
};

// For each length (ascending as given): `repeats` times, a fresh sequence prefills that many
// random ids (seeded; BOS first when the model has one) and decodes `decode_tokens` greedy
// tokens. InvalidArgument when a length + decode_tokens exceeds the context or is < 1;
// the runner's errors otherwise.
StatusOr<std::vector<ContextSweepRow>> bench_context_sweep(ModelRunner& runner,
                                                           const std::vector<int64_t>& lengths,
                                                           int64_t decode_tokens, int repeats);

}  // namespace strata::tools
