// Speculative decoding (issue 28): the configuration (vLLM's --speculative-config JSON), the
// draft proposer interface and the n-gram (prompt lookup) proposer.
//
// The engine's step (sched/engine.cc) for a decoding request with drafts d_1..d_k:
//   verify   one target pass over [t_last, d_1..d_k] returning k+1 logits rows, each
//            bit-identical to the one-token decode of its position (StepItem::all_logits);
//   accept   y_0 = sample(z_0); while y_i == d_{i+1}: y_{i+1} = sample(z_{i+1}). The
//            request's own sampler (temperature, top-k/p, penalties, seed, grammar) draws
//            every y in order, exactly as non-speculative decoding would: with point-mass
//            drafts (n-gram) "draw y ~ p, accept iff y == d" is the lossless rule of
//            Leviathan et al. / Chen et al., and here it is stronger than lossless -- the
//            output equals the non-speculative output for the same seed, token for token;
//   commit   the emitted tokens y_0..y_a (a accepted drafts plus the target's own next token);
//   rollback the target's state keeps positions up to the last accepted draft
//            (ModelRunner::truncate_sequence, or a recompute from the prefix cache when the
//            runner cannot cut its state back).
// Thread safety: values; proposers are called from the engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "exec/model_runner.h"

namespace strata {

struct SpeculativeConfig {
  std::string method;               // "" = off; "ngram", "dspark", "mtp"
  int num_speculative_tokens = 0;   // K: drafts per step (1..kMaxSpeculativeTokens)
  int prompt_lookup_max = 4;        // ngram: longest suffix n-gram looked up
  int prompt_lookup_min = 2;        // ngram: shortest
  // dspark / mtp: confidence-scheduled width -- verify only the leading drafts whose
  // confidence (ModelRunner::draft_tokens) is >= this; 0 = always K (spec-tiers.md §1.2).
  double confidence_threshold = 0;
  // Test hook: treat draft j (1-based) as rejected even when it matches (0 = off), so every
  // partial-accept count and its rollback can be exercised.
  int force_reject_at = 0;
  bool enabled() const { return !method.empty(); }
};

inline constexpr int kMaxSpeculativeTokens = 16;

// Parses vLLM's --speculative-config JSON ({"method": "ngram", "num_speculative_tokens": K,
// "prompt_lookup_max": N, "prompt_lookup_min": M}; for dspark / mtp also
// "confidence_threshold": a number in [0, 1]). "" or "{}" = off.
// Errors (InvalidArgument, naming the field): not JSON / not an object, unknown field, wrong
// type, K outside [1, 16], lookup bounds outside 1 <= min <= max <= 64, an unknown method.
// "dspark" needs a model with DSpark stages, "mtp" one with an MTP layer:
// check_speculative_config says whether the loaded one fits.
StatusOr<SpeculativeConfig> parse_speculative_config(const std::string& json);

// Whether `config` can run on `runner` (call at startup, before serving): "dspark" / "mtp"
// need that drafter in the model (ModelRunner::drafter_method; FailedPrecondition naming the
// architecture) and K <= its draft_block_size() (InvalidArgument: DSpark proposes one block
// per step, vLLM refuses K > block too; MTP chains its layer up to 16 times).
Status check_speculative_config(const SpeculativeConfig& config, const ModelRunner& runner);

class DraftProposer {
 public:
  virtual ~DraftProposer() = default;
  // Up to max_k draft tokens to follow `tokens` (the request's prompt and generated tokens,
  // last one included; the runner's state for `seq` holds all but the last); may return
  // fewer or none.
  virtual std::vector<int32_t> propose(SeqId seq, std::span<const int32_t> tokens,
                                       int max_k) const = 0;
};

// Prompt lookup: for n from prompt_lookup_max down to prompt_lookup_min, the last n tokens
// are searched for earlier in `tokens` (most recent occurrence first); the tokens that
// followed the first match found are proposed. Cost O(len * n) per call.
class NgramProposer : public DraftProposer {
 public:
  NgramProposer(int min_n, int max_n) : min_n_(min_n), max_n_(max_n) {}
  std::vector<int32_t> propose(SeqId seq, std::span<const int32_t> tokens,
                               int max_k) const override;

 private:
  int min_n_, max_n_;
};

// DSpark (V4.1) / MTP (V4): the model's own drafts (ModelRunner::draft_tokens) from the
// committed state and the target's next token, at most max_k; none when the runner cannot
// draft for the sequence yet (too few positions in state).
// With a confidence threshold, only the leading drafts whose confidence is >= it (possibly
// none: a plain decode step).
class ModelDraftProposer : public DraftProposer {
 public:
  explicit ModelDraftProposer(ModelRunner* runner, double confidence_threshold = 0)
      : runner_(runner), threshold_(confidence_threshold) {}
  std::vector<int32_t> propose(SeqId seq, std::span<const int32_t> tokens,
                               int max_k) const override;

 private:
  ModelRunner* runner_;
  double threshold_;
};

// The proposer of `config` over `runner` (null when speculation is off, or for "dspark" /
// "mtp" on a runner without that drafter -- check_speculative_config refuses that at startup).
std::unique_ptr<DraftProposer> make_proposer(const SpeculativeConfig& config, ModelRunner* runner);

}  // namespace strata
