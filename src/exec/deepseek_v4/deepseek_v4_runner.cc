// DeepseekV4Runner and DeepseekV4GoldenTarget; see deepseek_v4_runner.h.
#include "exec/deepseek_v4/deepseek_v4_runner.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "exec/deepseek_golden_forward.h"
#include "exec/deepseek_v41/deepseek_v41_runner.h"

namespace strata {

StatusOr<std::unique_ptr<DeepseekV4Runner>> DeepseekV4Runner::create(const std::string& dir,
                                                                     std::string name,
                                                                     int threads,
                                                                     V41RunnerCacheOptions cache) {
  if (cache.restore != V41PrefixRestore::kStoredState)
    return invalid_argument("--prefix-restore {}: DeepSeek-V4 restores prefix hits from stored "
                            "boundary snapshots only (use stored)",
                            v41_prefix_restore_name(cache.restore));
  std::unique_ptr<DeepseekV4Runner> r(new DeepseekV4Runner());
  STRATA_ASSIGN_OR_RETURN(r->model_, DeepseekV4Model::load(dir, 0, false, 0, threads));
  r->init(dir, std::move(name), "deepseek_v4", cache);
  return r;
}

StatusOr<std::vector<int32_t>> DeepseekV4Runner::draft_tokens(SeqId seq, int32_t next,
                                                              int max_k,
                                                              std::vector<float>* confidence) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return invalid_argument("unknown sequence {}", seq.value);
  if (!it->second.state || !it->second.pending.empty())
    return failed_precondition("sequence {} has tokens not yet computed", seq.value);
  std::vector<int32_t> ids;
  std::vector<float> logits;
  STRATA_RETURN_IF_ERROR(model_->mtp_draft(*it->second.state, next,
                                           std::min(max_k, DeepseekV4Model::kMtpMaxDrafts), &ids,
                                           confidence ? &logits : nullptr));
  if (confidence) {  // softmax probability of each drafted (argmax) token
    const int64_t V = model_->config().vocab_size;
    confidence->clear();
    for (size_t i = 0; i < ids.size(); ++i) {
      const float* row = &logits[i * V];
      const float mx = row[ids[i]];
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v] - mx));
      confidence->push_back(static_cast<float>(1.0 / sum));
    }
  }
  return ids;
}

StatusOr<GoldenStepOutput> DeepseekV4GoldenTarget::forward(std::span<const int32_t> tokens,
                                                           int64_t start_pos) {
  V4ForwardOptions opt;
  opt.call_shape = shape_;
  if (shape_ == CallShape::kReference) opt.prompt_len = prompt_len_;
  return deepseek_golden_forward(*model_, *seq_, tokens, start_pos, opt);
}

StatusOr<std::unique_ptr<GoldenTarget>> make_deepseek_v4_golden_target(const std::string& dir,
                                                                       int threads,
                                                                       CallShape shape) {
  STRATA_ASSIGN_OR_RETURN(auto model, DeepseekV4Model::load(dir, 0, false, 0, threads));
  return std::unique_ptr<GoldenTarget>(new DeepseekV4GoldenTarget(std::move(model), shape));
}

bool is_deepseek_v4_dir(const std::string& dir) {
  auto c = load_deepseek_config(dir);
  return c.ok() && !c->is_v41();
}

StatusOr<std::unique_ptr<GoldenTarget>> make_deepseek_golden_target(const std::string& dir,
                                                                    int threads,
                                                                    CallShape shape) {
  if (is_deepseek_v4_dir(dir)) return make_deepseek_v4_golden_target(dir, threads, shape);
  return make_deepseek_v41_golden_target(dir, threads, shape);
}

int64_t DeepseekV4Runner::prefill_flops_per_token() const {
  const DeepseekConfig& c = model().config();
  const DeepseekV4Weights& w = model().weights();
  auto lin = [](const V41Linear& l) { return l.present() ? l.out * l.in : int64_t{0}; };
  auto view = [](const TensorView& t) { return t.data ? t.numel() : int64_t{0}; };
  auto comp = [&](const V4CompressorWeights& cw) {
    return cw.present ? view(cw.wkv) + view(cw.wgate) : int64_t{0};
  };
  auto expert = [&](const V41ExpertWeights& e) { return lin(e.w1) + lin(e.w2) + lin(e.w3); };
  int64_t n = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const V4BlockWeights& b = w.layer(l);
    const V4AttentionWeights& a = b.attn;
    n += view(b.hc_attn.fn) + view(b.hc_ffn.fn);
    n += lin(a.wq_a) + lin(a.wq_b) + lin(a.wkv) + lin(a.wo_a) + lin(a.wo_b) + comp(a.compressor);
    if (a.indexer.present)
      n += lin(a.indexer.wq_b) + lin(a.indexer.weights_proj) + comp(a.indexer.compressor);
    n += view(b.ffn.gate_weight) + expert(b.ffn.shared);
    if (!b.ffn.experts.empty()) {
      int64_t all = 0;
      for (const V41ExpertWeights& e : b.ffn.experts) all += expert(e);
      n += all * c.layers[l].n_activated_experts / static_cast<int64_t>(b.ffn.experts.size());
    }
  }
  return 2 * n;
}

}  // namespace strata
