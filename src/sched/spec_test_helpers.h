// Test helpers (header-only) shared by the speculative-decoding tests of the sched module and
// tests/spec_decode_e2e_test.cc.
#pragma once

#include "sched/request.h"
#include "sched/spec_decode.h"

namespace strata::testing {

// Greedy, EOS ignored, `n` tokens.
inline GenerationParams greedy_params(int n) {
  GenerationParams g;
  g.temperature = 0;
  g.max_tokens = n;
  g.ignore_eos = true;
  return g;
}

// n-gram drafting with K = k, lookups of 1..4 tokens, rejection forced at draft `reject_at`.
inline SpeculativeConfig ngram_config(int k, int reject_at = 0) {
  SpeculativeConfig c;
  c.method = "ngram";
  c.num_speculative_tokens = k;
  c.prompt_lookup_min = 1;
  c.force_reject_at = reject_at;
  return c;
}

}  // namespace strata::testing
