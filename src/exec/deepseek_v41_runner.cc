// DeepseekV41Runner and DeepseekV41GoldenTarget; see deepseek_v41_runner.h.
#include "exec/deepseek_v41_runner.h"

#include <filesystem>

namespace strata {

StatusOr<std::unique_ptr<DeepseekV41Runner>> DeepseekV41Runner::create(
    const std::string& dir, const V41LoadOptions& options, std::string name) {
  std::unique_ptr<DeepseekV41Runner> r(new DeepseekV41Runner());
  STRATA_ASSIGN_OR_RETURN(r->model_, DeepseekV41Model::load(dir, options));
  const DeepseekConfig& c = r->model_->config();
  if (name.empty()) name = std::filesystem::path(dir).filename().string();
  if (name.empty()) name = std::filesystem::path(dir).parent_path().filename().string();
  r->info_.name = name;
  r->info_.architecture = "deepseek_v41";
  r->info_.vocab_size = static_cast<int32_t>(c.vocab_size);
  r->info_.max_context = r->model_->max_context();
  r->info_.bos_id = static_cast<int32_t>(c.bos_token_id);
  r->info_.eos_id = static_cast<int32_t>(c.eos_token_id);
  return r;
}

Status DeepseekV41Runner::add_sequence(SeqId seq) {
  if (seqs_.count(seq)) return invalid_argument("sequence {} already exists", seq.value);
  seqs_[seq] = model_->new_sequence();
  return ok_status();
}

void DeepseekV41Runner::release_sequence(SeqId seq) { seqs_.erase(seq); }

int64_t DeepseekV41Runner::sequence_length(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second->length();
}

int64_t DeepseekV41Runner::token_capacity_left(SeqId seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return model_->state_max_tokens();
  return (it->second->uses_state_graph() ? model_->state_max_tokens() : model_->max_context()) -
         it->second->length();
}

Status DeepseekV41Runner::step(std::span<const StepItem> items, std::vector<float>* logits) {
  for (const StepItem& it : items)
    if (!seqs_.count(it.seq)) return invalid_argument("unknown sequence {}", it.seq.value);
  logits->clear();
  std::vector<float> row;
  for (const StepItem& it : items) {
    V41ForwardOptions opt;
    const int64_t pos = seqs_[it.seq]->length();
    if (it.prompt_len > 0) {
      // Known prompt length (the scheduler passes it): positions past the prompt are
      // generation steps (reference decode semantics); prompt chunks are computed as rows
      // of one whole-prompt call, so chunked prefill is bit-identical to unchunked.
      opt.decode_step = pos >= it.prompt_len;
      if (!opt.decode_step) opt.prompt_len = it.prompt_len;
    } else {
      // Unknown: a one-token step after the first token is taken as a generation step.
      opt.decode_step = it.tokens.size() == 1 && pos > 0;
    }
    STRATA_RETURN_IF_ERROR(model_->forward(seqs_[it.seq].get(), it.tokens, opt, &row));
    if (it.want_logits) logits->insert(logits->end(), row.begin(), row.end());
  }
  return ok_status();
}

std::vector<CacheUsage> DeepseekV41Runner::cache_usage() const {
  int64_t used = 0;
  for (const auto& [id, s] : seqs_) used += s->bytes();
  return {CacheUsage{"v41_state", "host", used, 0}};
}

StatusOr<GoldenStepOutput> DeepseekV41GoldenTarget::forward(std::span<const int32_t> tokens,
                                                            int64_t start_pos) {
  if (start_pos != seq_->length())
    return invalid_argument("golden forward at {} but the sequence holds {} tokens", start_pos,
                            seq_->length());
  GoldenStepOutput out;
  V41Routes routes;
  V41ForwardOptions opt;
  opt.routes = &routes;
  opt.decode_step = prompt_len_ >= 0 ? start_pos >= prompt_len_
                                     : (tokens.size() == 1 && start_pos > 0);
  if (!opt.decode_step && prompt_len_ >= 0) opt.prompt_len = prompt_len_;
  STRATA_RETURN_IF_ERROR(model_->forward(seq_.get(), tokens, opt, &out.logits));
  out.moe = std::move(routes.moe);
  out.index = std::move(routes.index);
  return out;
}

StatusOr<std::unique_ptr<GoldenTarget>> make_deepseek_v41_golden_target(const std::string& dir,
                                                                        int threads) {
  (void)threads;
  STRATA_ASSIGN_OR_RETURN(auto model, DeepseekV41Model::load(dir, V41LoadOptions{}));
  return std::unique_ptr<GoldenTarget>(new DeepseekV41GoldenTarget(std::move(model)));
}

}  // namespace strata
