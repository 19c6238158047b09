// DeepseekV4Runner: ModelRunner (exec/model_runner.h) over DeepseekV4Model, plus the
// GoldenTarget adapter `strata validate golden` uses (exec/golden_validator.h), and the
// version-dispatching golden factory (V4 config -> V4 target, V4.1 -> V4.1 target).
//
// All sequences share one CacheManager with the prefix cache, exactly as V4.1
// (DeepseekCacheRunner, exec/deepseek_cache_runner.h): window rings, compressed KV, index keys
// and the compressor partial states (the CSA overlapping compressor's previous-group rows,
// the HCA buffered rows) are V4SequenceStates on the external-manager backend; a prefix hit
// shares the paged blocks and copies the boundary snapshot of the ring/fixed owners.
// --kv-cache-tokens sizes the paged pools (preemption under pressure), cache_usage() reports
// per kind. Only the exact stored-snapshot restore exists for V4 (a replay policy is refused
// at create()).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "exec/deepseek_cache_runner.h"
#include "exec/deepseek_v4/deepseek_v4_model.h"
#include "exec/golden_validator.h"
#include "exec/model_runner.h"

namespace strata {

class DeepseekV4Runner
    : public DeepseekCacheRunner<DeepseekV4Model, V4SequenceState, V4ForwardOptions> {
 public:
  // threads: compute threads of the forward (0 = the CPUs this process may use; results do
  // not depend on it). InvalidArgument for a replay restore policy.
  static StatusOr<std::unique_ptr<DeepseekV4Runner>> create(const std::string& dir,
                                                            std::string name = "",
                                                            int threads = 0,
                                                            V41RunnerCacheOptions cache = {});

  // MTP (DeepseekV4Model::mtp_draft) when the checkpoint has an MTP block.
  std::string drafter_method() const override { return model_->has_mtp() ? "mtp" : ""; }
  int draft_block_size() const override {
    return model_->has_mtp() ? DeepseekV4Model::kMtpMaxDrafts : 0;
  }
  StatusOr<std::vector<int32_t>> draft_tokens(SeqId seq, int32_t next, int max_k,
                                              std::vector<float>* confidence) override;
  // ModelRunner::prefill_flops_per_token: the backbone's mHC mixes, attention projections,
  // compressors (kv and indexer), indexer wq_b / weights_proj, MoE gate, shared expert and the
  // routed experts at top-k / n.
  int64_t prefill_flops_per_token() const override;

 private:
  DeepseekV4Runner() = default;
};

// GoldenTarget over one V4 sequence: reset() starts a fresh sequence; forward() returns the
// call's last logits and routes (MoE ids per layer per token; indexer selections per CSA
// layer per token).
class DeepseekV4GoldenTarget : public GoldenTarget {
 public:
  explicit DeepseekV4GoldenTarget(std::unique_ptr<DeepseekV4Model> model,
                                  CallShape shape = CallShape::kCanonical)
      : model_(std::move(model)), seq_(model_->new_sequence()), shape_(shape) {}
  int32_t vocab_size() const override { return static_cast<int32_t>(model_->config().vocab_size); }
  Status reset() override {
    seq_ = model_->new_sequence();
    prompt_len_ = 0;
    return ok_status();
  }
  // kReference: prompt chunks are then computed as rows of one whole-prompt call (bit-exact
  // chunking). Ignored by the canonical form.
  void set_prompt_length(int64_t prompt_len) override { prompt_len_ = prompt_len; }
  StatusOr<GoldenStepOutput> forward(std::span<const int32_t> tokens, int64_t start_pos) override;
  std::vector<int> index_layer_ids() const override { return model_->index_layers(); }
  const DeepseekV4Model& model() const { return *model_; }

 private:
  std::unique_ptr<DeepseekV4Model> model_;
  std::unique_ptr<V4SequenceState> seq_;
  CallShape shape_;
  int64_t prompt_len_ = 0;
};

// Loads the V4 model in `dir`.
StatusOr<std::unique_ptr<GoldenTarget>> make_deepseek_v4_golden_target(
    const std::string& dir, int threads, CallShape shape = CallShape::kCanonical);
// Dispatches on the config version: V4 -> make_deepseek_v4_golden_target, otherwise the V4.1
// factory (make_deepseek_v41_golden_target).
StatusOr<std::unique_ptr<GoldenTarget>> make_deepseek_golden_target(
    const std::string& dir, int threads, CallShape shape = CallShape::kCanonical);
// True when `dir`'s config parses as a DeepSeek-V4 (not V4.1) config.
bool is_deepseek_v4_dir(const std::string& dir);

}  // namespace strata
