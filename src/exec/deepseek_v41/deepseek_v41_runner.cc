// DeepseekV41Runner and DeepseekV41GoldenTarget; see deepseek_v41_runner.h.
#include "exec/deepseek_v41/deepseek_v41_runner.h"

#include "base/check.h"
#include "exec/deepseek_golden_forward.h"
#include "exec/deepseek_v41/v41_sequence_state.h"
#include "model/engram_hash.h"
#include "model/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

namespace strata {

StatusOr<std::unique_ptr<DeepseekV41Runner>> DeepseekV41Runner::create(
    const std::string& dir, const V41LoadOptions& options, std::string name,
    V41RunnerCacheOptions cache) {
  if (options.legacy_state)
    return invalid_argument("DeepseekV41Runner keeps state in the state module (no legacy_state)");
  std::unique_ptr<DeepseekV41Runner> r(new DeepseekV41Runner());
  STRATA_ASSIGN_OR_RETURN(r->model_, DeepseekV41Model::load(dir, options));
  const DeepseekConfig& c = r->model_->config();
  r->init(dir, std::move(name), "deepseek_v41", cache);
  if (!c.engram_layer_ids.empty() && c.engram_max_ngram_size > 1) {
    // The Engram history at a replay start or after a handoff import is rebuilt from ids:
    // the same compressed-token map DeepseekV41Model::load built (or was given).
    const std::vector<int64_t>* map = r->model_->engram_token_map();
    STRATA_CHECK(map != nullptr);
    r->engram_map_ = *map;
  }
  return r;
}

Status DeepseekV41Runner::rebuild_from_ids(V41SequenceState& st, std::span<const int32_t> ids,
                                           int64_t n) {
  if (engram_map_.empty()) return ok_status();
  // Mapped ids of the positions [n - h, n), oldest first (fewer near the start).
  const int64_t h = model_->config().engram_max_ngram_size - 1;
  std::vector<int64_t> hist;
  for (int64_t p = std::max<int64_t>(0, n - h); p < n; ++p) {
    const int64_t t = ids[static_cast<size_t>(p)];
    if (t < 0 || t >= static_cast<int64_t>(engram_map_.size()))
      return invalid_argument("token {} at {} outside the Engram map", t, p);
    hist.push_back(engram_map_[static_cast<size_t>(t)]);
  }
  st.set_engram_history(hist);
  return ok_status();
}

Status DeepseekV41Runner::replay(SeqId seq, Seq& s, std::span<const int32_t> prompt,
                                 int64_t hit) {
  const DeepseekConfig& c = model_->config();
  const int64_t r0 = std::max<int64_t>(0, hit - cm_->replay_tokens());
  // The manager holds [0, hit); the replay runs [r0, hit) on a state that starts at r0.
  s.state = std::make_unique<V41SequenceState>(c, cm_->manager(), seq.value, r0);
  V41SequenceState& st = *s.state;
  st.set_shared_prefix_end(hit);  // compressed rows / index keys of [0, hit) are the cache's
  st.set_window_floor(r0);        // fresh ring before r0
  STRATA_RETURN_IF_ERROR(rebuild_from_ids(st, prompt, r0));
  if (r0 == hit) {  // replay_tokens 0: measurement baseline, rings left empty
    st.set_shared_prefix_end(0);
    return ok_status();
  }
  // Canonical form, as step() computes every row: a replay from 0 (hit <= replay_tokens) is
  // exact.
  V41ForwardOptions opt;
  std::vector<float> row;
  STRATA_RETURN_IF_ERROR(model_->forward(&st, prompt.subspan(static_cast<size_t>(r0),
                                                            static_cast<size_t>(hit - r0)),
                                         opt, &row));
  STRATA_CHECK(st.length() == hit);
  st.set_shared_prefix_end(0);
  st.set_window_floor(0);
  return ok_status();
}

StatusOr<GoldenStepOutput> DeepseekV41GoldenTarget::forward(std::span<const int32_t> tokens,
                                                            int64_t start_pos) {
  V41ForwardOptions opt;
  opt.call_shape = shape_;
  opt.decode_step = prompt_len_ >= 0 ? start_pos >= prompt_len_
                                     : (tokens.size() == 1 && start_pos > 0);
  if (!opt.decode_step && prompt_len_ >= 0) opt.prompt_len = prompt_len_;
  return deepseek_golden_forward(*model_, *seq_, tokens, start_pos, opt);
}

StatusOr<std::vector<int32_t>> DeepseekV41Runner::draft_tokens(SeqId seq, int32_t next, int max_k,
                                                               std::vector<float>* confidence) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return invalid_argument("unknown sequence {}", seq.value);
  if (!it->second.state || !it->second.pending.empty())
    return failed_precondition("sequence {} has tokens not yet computed", seq.value);
  V41DsparkDraft d;
  STRATA_RETURN_IF_ERROR(model_->dspark_draft(*it->second.state, next, &d));
  std::vector<int32_t> out(d.ids.begin() + 1, d.ids.end());
  if (max_k >= 0 && static_cast<int64_t>(out.size()) > max_k) out.resize(static_cast<size_t>(max_k));
  if (confidence) {  // draft i+1 comes from row i, as its confidence (a raw logit)
    confidence->clear();
    for (size_t i = 0; i < out.size(); ++i)
      confidence->push_back(1.0f / (1.0f + std::exp(-d.confidence[i])));
  }
  return out;
}

StatusOr<GoldenDraft> DeepseekV41GoldenTarget::draft(int32_t token) {
  V41DsparkDraft d;
  STRATA_RETURN_IF_ERROR(model_->dspark_draft(*seq_, token, &d));
  return GoldenDraft{std::move(d.ids), std::move(d.logits), std::move(d.confidence)};
}

StatusOr<std::unique_ptr<GoldenTarget>> make_deepseek_v41_golden_target(const std::string& dir,
                                                                        int threads,
                                                                        CallShape shape) {
  V41LoadOptions load;
  load.threads = threads;
  STRATA_ASSIGN_OR_RETURN(auto model, DeepseekV41Model::load(dir, load));
  return std::unique_ptr<GoldenTarget>(new DeepseekV41GoldenTarget(std::move(model), shape));
}

}  // namespace strata
