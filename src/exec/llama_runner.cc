#include "exec/llama_runner.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/norm.h"
#include "kernels/rope.h"

namespace strata {

StatusOr<std::unique_ptr<LlamaRunner>> LlamaRunner::create(const std::string& dir,
                                                           const RunnerOptions& options) {
  STRATA_ASSIGN_OR_RETURN(auto model, LlamaModel::load(dir, options.progress));
  return std::make_unique<LlamaRunner>(std::move(model), options);
}

namespace {
int64_t kv_tokens(const LlamaModel& m, const RunnerOptions& o) {
  return o.kv_cache_tokens > 0 ? o.kv_cache_tokens : 4 * m.config().max_position_embeddings;
}
}  // namespace

LlamaRunner::LlamaRunner(std::unique_ptr<LlamaModel> model, const RunnerOptions& options)
    : model_(std::move(model)),
      pool_(std::make_unique<ThreadPool>(options.threads)),
      kv_(model_->config().num_hidden_layers, model_->config().kv_dim(),
          model_->config().max_position_embeddings, kv_tokens(*model_, options)) {
  const LlamaConfig& c = model_->config();
  info_.name = options.name.empty()
                   ? std::filesystem::path(model_->dir()).lexically_normal().filename().string()
                   : options.name;
  if (info_.name.empty())
    info_.name = std::filesystem::path(model_->dir()).lexically_normal().parent_path().filename().string();
  info_.architecture = "llama";
  info_.vocab_size = static_cast<int32_t>(c.vocab_size);
  info_.max_context = c.max_position_embeddings;
  info_.bos_id = c.bos_token_id;
  info_.eos_id = c.eos_token_id;
}

Status LlamaRunner::add_sequence(SeqId seq) { return kv_.add(seq); }
void LlamaRunner::release_sequence(SeqId seq) { kv_.release(seq); }
int64_t LlamaRunner::sequence_length(SeqId seq) const { return kv_.length(seq); }
int64_t LlamaRunner::token_capacity_left(SeqId seq) const { return kv_.capacity_left(seq); }
std::vector<CacheUsage> LlamaRunner::cache_usage() const { return {kv_.usage()}; }

int64_t LlamaRunner::decode_bytes_read(int64_t len) const {
  return model_->weight_bytes_per_token() + len * kv_.bytes_per_token();
}

Status LlamaRunner::step(std::span<const StepItem> items, std::vector<float>* logits) {
  const LlamaConfig& c = model_->config();
  // ---- Validate everything before any state changes. ----
  if (items.empty()) return invalid_argument("step: no items");
  std::set<int64_t> seen;
  int64_t M = 0, n_logits = 0;
  for (const StepItem& it : items) {
    if (!kv_.has(it.seq)) return invalid_argument("step: unknown sequence {}", it.seq.value);
    if (!seen.insert(it.seq.value).second)
      return invalid_argument("step: sequence {} appears twice", it.seq.value);
    if (it.tokens.empty()) return invalid_argument("step: sequence {} has no tokens", it.seq.value);
    for (int32_t t : it.tokens)
      if (t < 0 || t >= c.vocab_size)
        return invalid_argument("step: token id {} outside vocabulary [0, {})", t, c.vocab_size);
    M += static_cast<int64_t>(it.tokens.size());
    if (it.want_logits) ++n_logits;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const StepItem& it = items[i];
    Status st = kv_.reserve(it.seq, kv_.length(it.seq) + static_cast<int64_t>(it.tokens.size()));
    if (!st.ok()) {
      for (size_t j = 0; j < i; ++j) kv_.shrink(items[j].seq);
      return st;
    }
  }

  // ---- Row bookkeeping. ----
  const int64_t d = c.hidden_size, hd = c.head_dim, nh = c.num_attention_heads;
  const int64_t nkv = c.num_key_value_heads, qd = c.q_dim(), kvd = c.kv_dim();
  const int64_t ffn = c.intermediate_size, half = hd / 2;
  std::vector<int32_t> row_item(M);
  std::vector<int64_t> row_pos(M);
  {
    int64_t r = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      const int64_t base = kv_.length(items[i].seq);
      for (size_t t = 0; t < items[i].tokens.size(); ++t, ++r) {
        row_item[r] = static_cast<int32_t>(i);
        row_pos[r] = base + static_cast<int64_t>(t);
      }
    }
  }
  auto grow = [](std::vector<float>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  };
  grow(x_, M * d);
  grow(xn_, M * d);
  grow(q_, M * qd);
  grow(k_, M * kvd);
  grow(v_, M * kvd);
  grow(att_, M * qd);
  grow(tmp_, M * d);
  grow(gate_, M * ffn);
  grow(up_, M * ffn);
  grow(rope_cos_, M * half);
  grow(rope_sin_, M * half);

  {
    int64_t r = 0;
    for (const StepItem& it : items)
      for (int32_t t : it.tokens) model_->embedding().row_to_f32(t, x_.data() + (r++) * d);
  }
  for (int64_t r = 0; r < M; ++r)
    kernels::rope_table(row_pos[r], static_cast<int>(hd), c.rope_theta, rope_cos_.data() + r * half,
                        rope_sin_.data() + r * half);
  const auto rope_style =
      c.rope_interleaved ? kernels::RopeStyle::kInterleaved : kernels::RopeStyle::kHalfSplit;
  const float eps = static_cast<float>(c.rms_norm_eps);
  ThreadPool* pool = pool_.get();
  const int64_t group = nh / nkv;
  int64_t max_t = 0;
  for (int64_t r = 0; r < M; ++r) max_t = std::max(max_t, row_pos[r] + 1);

  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LlamaLayerWeights& L = model_->layers()[l];
    kernels::rmsnorm_rows(x_.data(), M, L.attn_norm.data(), d, eps, xn_.data());
    kernels::matmul_multi(xn_.data(), M, {&L.wq, &L.wk, &L.wv}, {q_.data(), k_.data(), v_.data()},
                          pool);
    for (int64_t r = 0; r < M; ++r) {
      const float* cs = rope_cos_.data() + r * half;
      const float* sn = rope_sin_.data() + r * half;
      kernels::rope_apply(q_.data() + r * qd, static_cast<int>(nh), static_cast<int>(hd), cs, sn,
                          rope_style);
      kernels::rope_apply(k_.data() + r * kvd, static_cast<int>(nkv), static_cast<int>(hd), cs, sn,
                          rope_style);
      const SeqId seq = items[row_item[r]].seq;
      std::copy(k_.data() + r * kvd, k_.data() + (r + 1) * kvd, kv_.k_row(seq, l, row_pos[r]));
      std::copy(v_.data() + r * kvd, v_.data() + (r + 1) * kvd, kv_.v_row(seq, l, row_pos[r]));
    }
    std::vector<kernels::KvBlocks> views(items.size());
    for (size_t i = 0; i < items.size(); ++i) views[i] = kv_.view(items[i].seq, l);
    auto attend = [&](int64_t t0, int64_t t1) {
      std::vector<float> scratch(max_t);
      for (int64_t task = t0; task < t1; ++task) {
        const int64_t r = task / nh, h = task % nh;
        kernels::attention_head(q_.data() + r * qd + h * hd, views[row_item[r]],
                                static_cast<int>(h / group), static_cast<int>(hd), row_pos[r] + 1,
                                scratch.data(), att_.data() + r * qd + h * hd);
      }
    };
    if (M * nh * max_t * hd < (int64_t{1} << 18)) {  // small: not worth waking workers
      attend(0, M * nh);
    } else {
      pool->parallel_for(M * nh, attend);
    }
    kernels::matmul(att_.data(), M, L.wo, tmp_.data(), pool);
    for (int64_t i = 0; i < M * d; ++i) x_[i] += tmp_[i];

    kernels::rmsnorm_rows(x_.data(), M, L.ffn_norm.data(), d, eps, xn_.data());
    kernels::matmul_multi(xn_.data(), M, {&L.w_gate, &L.w_up}, {gate_.data(), up_.data()}, pool);
    kernels::swiglu(gate_.data(), up_.data(), M * ffn);
    kernels::matmul(gate_.data(), M, L.w_down, tmp_.data(), pool);
    for (int64_t i = 0; i < M * d; ++i) x_[i] += tmp_[i];
  }

  // ---- Logits for the last token of each item that wants them. ----
  if (logits != nullptr) {
    logits->assign(n_logits * c.vocab_size, 0.0f);
    if (n_logits > 0) {
      int64_t r = 0, j = 0;
      for (const StepItem& it : items) {
        r += static_cast<int64_t>(it.tokens.size());
        if (it.want_logits) {
          kernels::rmsnorm(x_.data() + (r - 1) * d, model_->final_norm().data(), d, eps,
                           xn_.data() + j * d);
          ++j;
        }
      }
      kernels::matmul(xn_.data(), n_logits, model_->lm_head(), logits->data(), pool);
    }
  }
  for (const StepItem& it : items)
    kv_.set_length(it.seq, kv_.length(it.seq) + static_cast<int64_t>(it.tokens.size()));
  return ok_status();
}

}  // namespace strata
