// DeepseekV41Runner: ModelRunner (exec/model_runner.h) over DeepseekV41Model, plus the
// GoldenTarget adapter `strata validate golden` uses (exec/golden_validator.h).
//
// The shared cache, step(), prefix hits, usage and errors are DeepseekCacheRunner's
// (exec/deepseek_cache_runner.h; state: V41SequenceState on the external-manager backend).
// Prefix cache: attach_cached_prefix(seq, tokens) restores the longest cached prefix (whole
// units of prefix_alignment() tokens, < tokens.size()) by sharing compressed-KV / index-key
// blocks and copying the boundary snapshot (rings, compressor tails, Engram history); a hit
// then the rest of the prompt is bit-identical to a cold prefill (tests/v41_runner_prefix_test).
// With V41RunnerCacheOptions::restore = kReplayWindow / kReplayExact (`--prefix-restore
// replay` / `replay-exact`) no boundary snapshot is stored: a hit of H tokens shares the compressed-KV / index-key blocks, sets the
// Engram history from the ids, and rebuilds the window rings and compressor tails by running
// the last R = replay_tokens() tokens [H-R, H) (all of them when H <= R) through the normal
// forward from a fresh ring and fresh compressors (kv 0, score -inf; exact at H-R, a group
// boundary), as one prompt chunk whose rewrites of shared rows are skipped
// (V41SequenceState::set_shared_prefix_end). Approximate: the replayed window rows miss the
// positions before H-R (drift measured in tests/v41_prefix_replay_test.cc, docs/state.md §5);
// exact when H <= R or R >= replay_exact_tokens() (kReplayExact's default). If the replay
// forward fails the sequence restarts cold (no hit).
// Thread safety: not thread-safe (one engine thread drives a runner).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "exec/deepseek_cache_runner.h"
#include "exec/deepseek_v41/deepseek_v41_model.h"
#include "exec/golden_validator.h"
#include "exec/model_runner.h"
#include "exec/v41_shared_cache.h"

namespace strata {


class DeepseekV41Runner
    : public DeepseekCacheRunner<DeepseekV41Model, V41SequenceState, V41ForwardOptions> {
 public:
  static StatusOr<std::unique_ptr<DeepseekV41Runner>> create(const std::string& dir,
                                                             const V41LoadOptions& options,
                                                             std::string name = "",
                                                             V41RunnerCacheOptions cache = {});
  // Weights touched by one decode token (dense + n_activated routed experts per layer +
  // embedding row + LM head) plus state read at length `len` (deepseek_v41_decode_bytes.cc).
  int64_t decode_bytes_read(int64_t len) const override;
  int64_t prefill_flops_per_token() const override;
  // DSpark (DeepseekV41Model::dspark_draft) when the checkpoint has the stages.
  int draft_block_size() const override { return model_->dspark_block_size(); }
  const EngramTableStore* engram_tables() const override { return model_->engram_tables(); }
  std::string drafter_method() const override { return model_->has_dspark() ? "dspark" : ""; }
  StatusOr<std::vector<int32_t>> draft_tokens(SeqId seq, int32_t next, int max_k,
                                              std::vector<float>* confidence) override;

 private:
  DeepseekV41Runner() = default;
  // Replay policies: rebuilds ring / fixed state after a hit of `hit` tokens of `prompt`.
  Status replay(SeqId seq, Seq& s, std::span<const int32_t> prompt, int64_t hit) override;
  // Engram history as of position n: the mapped ids of positions [n - (max_ngram-1), n).
  Status rebuild_from_ids(V41SequenceState& st, std::span<const int32_t> ids,
                          int64_t n) override;
  // Replay restores and handoff imports with Engram: raw token id -> compressed id (the model's Engram token map,
  // loaded the same way; the model does not expose its hasher).
  std::vector<int64_t> engram_map_;
};

// GoldenTarget over one V4.1 sequence: reset() starts a fresh sequence; forward() returns the
// call's last logits and the routes (MoE ids per layer per token; indexer selections per
// index-source layer per token).
class DeepseekV41GoldenTarget : public GoldenTarget {
 public:
  explicit DeepseekV41GoldenTarget(std::unique_ptr<DeepseekV41Model> model,
                                   CallShape shape = CallShape::kCanonical)
      : model_(std::move(model)), seq_(model_->new_sequence()), shape_(shape) {}
  int32_t vocab_size() const override { return static_cast<int32_t>(model_->config().vocab_size); }
  Status reset() override {
    seq_ = model_->new_sequence();
    prompt_len_ = -1;
    if (!prompt_lengths_.empty()) {
      prompt_len_ = prompt_lengths_.front();
      prompt_lengths_.erase(prompt_lengths_.begin());
    }
    return ok_status();
  }
  // kReference only (the canonical form needs neither hint).
  // Which calls are generation steps (V41ForwardOptions::decode_step): calls at positions >=
  // the case's prompt length. The validator does not say, so callers that know the cases'
  // prompt lengths queue them here in case order (one per reset()); without a hint, a
  // one-token call at position > 0 is taken as a decode step (right except for a final
  // one-token prompt chunk).
  void queue_prompt_lengths(std::vector<int64_t> lengths) { prompt_lengths_ = std::move(lengths); }
  // The current case's prompt length (call after reset(); overrides the queue). Intended
  // for a GoldenTarget hook the validator would call per case.
  void set_prompt_length(int64_t n) override { prompt_len_ = n; }
  StatusOr<GoldenStepOutput> forward(std::span<const int32_t> tokens, int64_t start_pos) override;
  // The DSpark draft (DeepseekV41Model::dspark_draft) when the checkpoint has the stages.
  bool has_draft() const override { return model_->has_dspark(); }
  StatusOr<GoldenDraft> draft(int32_t token) override;
  const DeepseekV41Model& model() const { return *model_; }

 private:
  std::unique_ptr<DeepseekV41Model> model_;
  std::unique_ptr<V41SequenceState> seq_;
  CallShape shape_;
  std::vector<int64_t> prompt_lengths_;
  int64_t prompt_len_ = -1;
};

// Factory for `strata validate golden` (register with register_golden_target_factory from
// the composition root): loads the V4.1 model in `dir`.
StatusOr<std::unique_ptr<GoldenTarget>> make_deepseek_v41_golden_target(
    const std::string& dir, int threads, CallShape shape = CallShape::kCanonical);

}  // namespace strata
