// DeepseekV4Runner: ModelRunner (exec/model_runner.h) over DeepseekV4Model, plus the
// GoldenTarget adapter `strata validate golden` uses (exec/golden_validator.h), and the
// version-dispatching golden factory (V4 config -> V4 target, V4.1 -> V4.1 target).
//
// Each sequence owns one V4SequenceState (window rings, compressed KV and index keys per
// layer, compressor partial states). step() runs every item's tokens as one chunk at the
// sequence's current length; items are independent (batch-invariant), every row in the
// canonical numeric form (exec/call_shape.h), so a position's logits depend on its prefix only.
// Errors: add_sequence on a live id / step on an unknown id -> InvalidArgument; forward errors
// are returned with no state advanced for that item.
// Thread safety: not thread-safe (one engine thread drives a runner).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "exec/deepseek_v4_model.h"
#include "exec/golden_validator.h"
#include "exec/model_runner.h"

namespace strata {

class DeepseekV4Runner : public ModelRunner {
 public:
  // threads: compute threads of the forward (0 = the CPUs this process may use; results do not depend on it).
  static StatusOr<std::unique_ptr<DeepseekV4Runner>> create(const std::string& dir,
                                                            std::string name = "",
                                                            int threads = 0);
  const ModelInfo& info() const override { return info_; }
  Status add_sequence(SeqId seq) override;
  void release_sequence(SeqId seq) override;
  int64_t sequence_length(SeqId seq) const override;
  int64_t token_capacity_left(SeqId seq) const override;
  bool token_capacity_is_shared() const override { return false; }  // per-sequence limit
  Status step(std::span<const StepItem> items, std::vector<float>* logits) override;
  std::vector<CacheUsage> cache_usage() const override;
  const DeepseekV4Model& model() const { return *model_; }

 private:
  DeepseekV4Runner() = default;
  std::unique_ptr<DeepseekV4Model> model_;
  ModelInfo info_;
  std::map<SeqId, std::unique_ptr<V4SequenceState>> seqs_;
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
