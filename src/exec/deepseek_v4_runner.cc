// DeepseekV4Runner and DeepseekV4GoldenTarget; see deepseek_v4_runner.h.
#include "exec/deepseek_v4_runner.h"

#include <filesystem>

#include "exec/deepseek_v41_runner.h"

namespace strata {

StatusOr<std::unique_ptr<DeepseekV4Runner>> DeepseekV4Runner::create(const std::string& dir,
                                                                     std::string name,
                                                                     int threads) {
  std::unique_ptr<DeepseekV4Runner> r(new DeepseekV4Runner());
  STRATA_ASSIGN_OR_RETURN(r->model_, DeepseekV4Model::load(dir, 0, false, 0, threads));
  const DeepseekConfig& c = r->model_->config();
  if (name.empty()) name = std::filesystem::path(dir).filename().string();
  if (name.empty()) name = std::filesystem::path(dir).parent_path().filename().string();
  r->info_.name = name;
  r->info_.architecture = "deepseek_v4";
  r->info_.vocab_size = static_cast<int32_t>(c.vocab_size);
  r->info_.max_context = r->model_->max_context();
  r->info_.bos_id = static_cast<int32_t>(c.bos_token_id);
  r->info_.eos_id = static_cast<int32_t>(c.eos_token_id);
  return r;
}

Status DeepseekV4Runner::add_sequence(SeqId seq) {
  if (seqs_.count(seq)) return invalid_argument("sequence {} already exists", seq.value);
  seqs_[seq] = model_->new_sequence();
  return ok_status();
}

void DeepseekV4Runner::release_sequence(SeqId seq) { seqs_.erase(seq); }

int64_t DeepseekV4Runner::sequence_length(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second->length();
}

int64_t DeepseekV4Runner::token_capacity_left(SeqId seq) const {
  return model_->max_context() - sequence_length(seq);
}

Status DeepseekV4Runner::step(std::span<const StepItem> items, std::vector<float>* logits) {
  for (const StepItem& it : items)
    if (!seqs_.count(it.seq)) return invalid_argument("unknown sequence {}", it.seq.value);
  logits->clear();
  std::vector<float> row;
  for (const StepItem& it : items) {
    V4ForwardOptions opt;  // canonical form: prompt and generated rows alike
    STRATA_RETURN_IF_ERROR(model_->forward(seqs_[it.seq].get(), it.tokens, opt, &row));
    if (it.want_logits) logits->insert(logits->end(), row.begin(), row.end());
  }
  return ok_status();
}

std::vector<CacheUsage> DeepseekV4Runner::cache_usage() const {
  int64_t used = 0;
  for (const auto& [id, s] : seqs_) used += s->bytes();
  return {CacheUsage{"v4_state", "host", used, 0}};
}

StatusOr<GoldenStepOutput> DeepseekV4GoldenTarget::forward(std::span<const int32_t> tokens,
                                                           int64_t start_pos) {
  if (start_pos != seq_->length())
    return invalid_argument("golden forward at {} but the sequence holds {} tokens", start_pos,
                            seq_->length());
  GoldenStepOutput out;
  V41Routes routes;
  V4ForwardOptions opt;
  opt.routes = &routes;
  opt.call_shape = shape_;
  if (shape_ == CallShape::kReference) opt.prompt_len = prompt_len_;
  STRATA_RETURN_IF_ERROR(model_->forward(seq_.get(), tokens, opt, &out.logits));
  out.moe = std::move(routes.moe);
  out.index = std::move(routes.index);
  return out;
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

}  // namespace strata
