#include "exec/llama/llama_runner.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "base/byte_msg.h"
#include "exec/llama/llama_dcp_attention.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/norm.h"
#include "kernels/rope.h"

namespace strata {

StatusOr<std::unique_ptr<LlamaRunner>> LlamaRunner::create(const std::string& dir,
                                                           const RunnerOptions& options) {
  STRATA_ASSIGN_OR_RETURN(const LlamaConfig config, load_llama_config(dir));
  const int layers = static_cast<int>(config.num_hidden_layers);
  const std::shared_ptr<PipeComm> p = process_pipe_comm();
  if (p && p->size() > layers)
    return invalid_argument("{}: --pipeline-parallel-size {} exceeds the model's {} layers", dir,
                            p->size(), layers);
  // A pipeline stage checks only its own layers' tensors.
  const PipeStage st = pipe_stage(p.get(), layers);
  STRATA_ASSIGN_OR_RETURN(auto model, LlamaModel::load(dir, options.progress, st.begin, st.end));
  return std::make_unique<LlamaRunner>(std::move(model), options);
}

namespace {
// The process's pipeline communicator when it splits this model (null: one stage).
std::shared_ptr<PipeComm> pipe_of(const LlamaModel& m) {
  std::shared_ptr<PipeComm> p = process_pipe_comm();
  return p && p->size() > 1 && p->size() <= m.config().num_hidden_layers ? p : nullptr;
}

int64_t kv_tokens(const LlamaModel& m, const RunnerOptions& o) {
  return o.kv_cache_tokens > 0 ? o.kv_cache_tokens : 4 * m.config().max_position_embeddings;
}
LlamaKvState::Options kv_options(const LlamaModel& m, const RunnerOptions& o) {
  const LlamaConfig& c = m.config();
  LlamaKvState::Options k;
  k.n_layers = static_cast<int>(c.num_hidden_layers);
  k.n_kv_heads = static_cast<int>(c.num_key_value_heads);
  k.head_dim = static_cast<int>(c.head_dim);
  k.max_context = c.max_position_embeddings;
  k.capacity_tokens = kv_tokens(m, o);
  // Prefix-cache blocks on top of the running capacity: as many again (the state pools are
  // allocated up front, so this doubles the KV memory; cached blocks are evicted LRU only
  // when a step would run short).
  k.cache_tokens = k.capacity_tokens;
  k.unit_store = o.unit_store;
  k.salt = o.prefix_salt;
  k.prefix_cache = o.enable_prefix_caching;
  if (const std::shared_ptr<DcpComm> d = process_dcp_comm(); d && d->size() > 1)
    k.dcp = RowShard{d->rank(), d->size(), d->interleave()};
  if (const std::shared_ptr<PipeComm> p = pipe_of(m)) {
    const PipeStage st = pipe_stage(p.get(), static_cast<int>(c.num_hidden_layers));
    k.stage = StageLayers{st.begin, st.end, static_cast<int>(c.num_hidden_layers)};
  }
  // With a checkpoint fingerprint (tiers) the files are the identity, not their path, so
  // servers on copies of the checkpoint share units.
  k.identity = fmt::format("llama|{}|L{}|d{}|kv{}x{}|V{}",
                           o.prefix_salt ? std::string("fp") : m.dir(), c.num_hidden_layers,
                           c.hidden_size, c.num_key_value_heads, c.head_dim, c.vocab_size);
  return k;
}
}  // namespace

LlamaRunner::LlamaRunner(std::unique_ptr<LlamaModel> model, const RunnerOptions& options)
    : model_(std::move(model)),
      pool_(std::make_unique<ThreadPool>(options.threads)),
      kv_(kv_options(*model_, options)),
      dcp_(kv_.dcp().sharded() ? process_dcp_comm() : nullptr),
      pipe_(pipe_of(*model_)) {
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

Status LlamaRunner::add_sequence(SeqId seq) { return kv_.add(seq.value); }
void LlamaRunner::release_sequence(SeqId seq) { kv_.release(seq.value); }
int64_t LlamaRunner::sequence_length(SeqId seq) const { return kv_.length(seq.value); }
int64_t LlamaRunner::token_capacity_left(SeqId seq) const { return kv_.capacity_left(seq.value); }
std::vector<CacheUsage> LlamaRunner::cache_usage() const {
  // Only what requests hold ("kv"); blocks kept just by the prefix cache are reclaimable and
  // reported by kv_state().usage() ("kv_prefix_cache").
  const LlamaKvUsage u = kv_.usage().at(0);
  return {CacheUsage{u.kind, "host", u.used_bytes, u.capacity_bytes}};
}
Status LlamaRunner::truncate_sequence(SeqId seq, int64_t new_len) {
  return kv_.truncate(seq.value, new_len);
}
int64_t LlamaRunner::attach_cached_prefix(SeqId seq, std::span<const int32_t> tokens) {
  return kv_.attach_prefix(seq.value, tokens);
}
int64_t LlamaRunner::prefix_alignment() const { return kv_.unit(); }

int64_t LlamaRunner::decode_bytes_read(int64_t len) const {
  return model_->weight_bytes_per_token() + len * kv_.bytes_per_token();
}

int64_t LlamaRunner::prefill_flops_per_token() const {
  int64_t n = 0;
  for (const auto& L : model_->layers())
    for (const kernels::WeightMatrix* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down})
      n += w->rows * w->cols;
  return 2 * n;
}

std::vector<uint8_t> LlamaRunner::put_rows(int64_t r0, int64_t r1, int next_layer) const {
  const int64_t d = model_->config().hidden_size;
  ByteMsg m;
  m.put<int64_t>(r0);
  m.put<int64_t>(r1);
  m.put<int32_t>(next_layer);
  m.put_span<float>(std::span<const float>(x_.data() + r0 * d, static_cast<size_t>((r1 - r0) * d)));
  return std::move(m.b);
}

void LlamaRunner::take_rows(std::vector<uint8_t> bytes, int64_t r0, int64_t r1, int next_layer) {
  const int64_t d = model_->config().hidden_size;
  ByteMsg m;
  m.b = std::move(bytes);
  const int64_t a = m.get<int64_t>(), b = m.get<int64_t>();
  const int32_t layer = m.get<int32_t>();
  STRATA_CHECK_MSG(a == r0 && b == r1 && layer == next_layer,
                   "pipeline: received rows [{}, {}) before layer {}, expected [{}, {}) before "
                   "layer {} (the stages ran different calls)", a, b, layer, r0, r1, next_layer);
  const std::vector<float> v = m.get_vec<float>();
  STRATA_CHECK(static_cast<int64_t>(v.size()) == (r1 - r0) * d);
  std::copy(v.begin(), v.end(), x_.begin() + r0 * d);
}

Status LlamaRunner::step(std::span<const StepItem> items, std::vector<float>* logits) {
  const LlamaConfig& c = model_->config();
  // ---- Validate everything before any state changes. ----
  if (items.empty()) return invalid_argument("step: no items");
  std::set<int64_t> seen;
  int64_t M = 0, n_logits = 0;
  for (const StepItem& it : items) {
    if (!kv_.has(it.seq.value)) return invalid_argument("step: unknown sequence {}", it.seq.value);
    if (!seen.insert(it.seq.value).second)
      return invalid_argument("step: sequence {} appears twice", it.seq.value);
    if (it.tokens.empty()) return invalid_argument("step: sequence {} has no tokens", it.seq.value);
    for (int32_t t : it.tokens)
      if (t < 0 || t >= c.vocab_size)
        return invalid_argument("step: token id {} outside vocabulary [0, {})", t, c.vocab_size);
    M += static_cast<int64_t>(it.tokens.size());
    if (it.want_logits) n_logits += it.all_logits ? static_cast<int64_t>(it.tokens.size()) : 1;
  }
  {
    std::vector<int64_t> ids;
    std::vector<std::span<const int32_t>> toks;
    for (const StepItem& it : items) {
      ids.push_back(it.seq.value);
      toks.push_back(it.tokens);
    }
    STRATA_RETURN_IF_ERROR(kv_.begin_step(ids, toks));
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
      const int64_t base = kv_.length(items[i].seq.value);
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

  const PipeStage st = pipe_stage(pipe_.get(), static_cast<int>(c.num_hidden_layers));
  if (st.first) {
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

  // Layer l over rows [r0, r1) of the step (a row's result does not depend on which rows share
  // the call: every kernel is batch-invariant, so pipeline microbatches keep the bits).
  auto layer_rows = [&](int64_t l, int64_t r0, int64_t r1) {
    const LlamaLayerWeights& L = model_->layers()[l];
    const int64_t n = r1 - r0;
    float* x = x_.data() + r0 * d;
    float* xn = xn_.data() + r0 * d;
    float* q = q_.data() + r0 * qd;
    float* k = k_.data() + r0 * kvd;
    float* v = v_.data() + r0 * kvd;
    float* att = att_.data() + r0 * qd;
    float* tmp = tmp_.data() + r0 * d;
    kernels::rmsnorm_rows(x, n, L.attn_norm.data(), d, eps, xn);
    kernels::matmul_multi(xn, n, {&L.wq, &L.wk, &L.wv}, {q, k, v}, pool);
    int64_t max_t = 0;
    for (int64_t r = r0; r < r1; ++r) {
      const float* cs = rope_cos_.data() + r * half;
      const float* sn = rope_sin_.data() + r * half;
      kernels::rope_apply(q_.data() + r * qd, static_cast<int>(nh), static_cast<int>(hd), cs, sn,
                          rope_style);
      kernels::rope_apply(k_.data() + r * kvd, static_cast<int>(nkv), static_cast<int>(hd), cs, sn,
                          rope_style);
      kv_.write_kv(items[row_item[r]].seq.value, static_cast<int>(l), row_pos[r],
                   k_.data() + r * kvd, v_.data() + r * kvd);
      max_t = std::max(max_t, row_pos[r] + 1);
    }
    std::vector<kernels::KvBlocks> views(items.size());
    for (size_t i = 0; i < items.size(); ++i) views[i] = kv_.view(items[i].seq.value, static_cast<int>(l));
    auto attend = [&](int64_t t0, int64_t t1) {
      std::vector<float> scratch(kernels::attention_scratch_floats(max_t, static_cast<int>(hd)));
      for (int64_t task = t0; task < t1; ++task) {
        const int64_t r = r0 + task / nh, h = task % nh;
        kernels::attention_head(q_.data() + r * qd + h * hd, views[row_item[r]],
                                static_cast<int>(h / group), static_cast<int>(hd), row_pos[r] + 1,
                                scratch.data(), att_.data() + r * qd + h * hd);
      }
    };
    if (dcp_) {
      dcp_attention(*dcp_, DcpAttentionShape{n, static_cast<int>(nh), static_cast<int>(group),
                                             static_cast<int>(hd)},
                    views, row_item.data() + r0, row_pos.data() + r0, q, pool, &dcp_buf_, att);
    } else if (n * nh * max_t * hd < (int64_t{1} << 18)) {  // small: not worth waking workers
      attend(0, n * nh);
    } else {
      pool->parallel_for(n * nh, attend);
    }
    kernels::matmul(att, n, L.wo, tmp, pool);
    for (int64_t i = 0; i < n * d; ++i) x[i] += tmp[i];

    kernels::rmsnorm_rows(x, n, L.ffn_norm.data(), d, eps, xn);
    float* gate = gate_.data() + r0 * ffn;
    float* up = up_.data() + r0 * ffn;
    kernels::matmul_multi(xn, n, {&L.w_gate, &L.w_up}, {gate, up}, pool);
    kernels::swiglu(gate, up, n * ffn);
    kernels::matmul(gate, n, L.w_down, tmp, pool);
    for (int64_t i = 0; i < n * d; ++i) x[i] += tmp[i];
  };

  // Pipeline parallelism: this rank's layers, microbatch by microbatch, the residual rows
  // received from the stage before and sent to the one after (the next microbatch's work
  // overlaps the transfer); the last stage's rows then reach every rank for the head.
  const int64_t nmb = st.split() ? pp_microbatches(M, pipe_->size()) : 1;
  for (int64_t mb = 0; mb < nmb; ++mb) {
    const int64_t r0 = M * mb / nmb, r1 = M * (mb + 1) / nmb;
    if (!st.first) take_rows(pipe_->recv_prev(), r0, r1, st.begin);
    for (int64_t l = st.begin; l < st.end; ++l) layer_rows(l, r0, r1);
    if (!st.last) pipe_->send_next(put_rows(r0, r1, st.end));
  }
  if (st.split()) {
    std::vector<uint8_t> all = st.last ? put_rows(0, M, st.end) : std::vector<uint8_t>{};
    pipe_->bcast_from_last(&all);
    if (!st.last) take_rows(std::move(all), 0, M, static_cast<int>(c.num_hidden_layers));
  }

  // ---- Logits for the last token of each item that wants them. ----
  if (logits != nullptr) {
    logits->assign(n_logits * c.vocab_size, 0.0f);
    if (n_logits > 0) {
      int64_t r = 0, j = 0;
      for (const StepItem& it : items) {
        const int64_t n = static_cast<int64_t>(it.tokens.size());
        r += n;
        if (!it.want_logits) continue;
        for (int64_t t = it.all_logits ? r - n : r - 1; t < r; ++t, ++j)
          kernels::rmsnorm(x_.data() + t * d, model_->final_norm().data(), d, eps,
                           xn_.data() + j * d);
      }
      kernels::matmul(xn_.data(), n_logits, model_->lm_head(), logits->data(), pool);
    }
  }
  kv_.end_step();
  return ok_status();
}

}  // namespace strata
