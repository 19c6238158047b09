// DeepseekV41Model: load, top-level forward, Engram. Attention lives in v41_attention.cc,
// MoE in v41_moe.cc, mHC in v41_mhc.cc. Reference: model.py Transformer / Block / Engram;
// spec §2.0, §2.7–§2.9.
#include "exec/deepseek_v41/deepseek_v41_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "base/check.h"
#include "base/phase_profile.h"
#include "base/scratch.h"
#include "base/thread_pool.h"
#include "exec/deepseek_v41/v41_forward_ctx.h"
#include "exec/deepseek_v41/v41_mhc.h"
#include "exec/ep_moe.h"
#include "exec/stage_carry.h"
#include "kernels/block_gemm.h"
#include "model/dtype.h"
#include "model/packed_weight_cache.h"
#include "model/tokenizer.h"

namespace strata {

namespace {

float bf16v(const TensorView& t, int64_t i) { return bf16_to_f32(t.u16()[i]); }

}  // namespace

// A stage boundary (exec/stage_carry.h) from / into a forward's context.
StageCarry DeepseekV41Model::make_carry(const Ctx& c, int next_layer,
                                        const std::vector<float>& pre,
                                        const std::vector<float>& taps, int tap_slot) const {
  StageCarry k;
  k.s0 = c.s0;
  k.S = c.S;
  k.next_layer = next_layer;
  k.h = c.h;
  k.pre = pre;
  k.taps = taps;
  k.tap_slot = tap_slot;
  for (const Ctx::TopK& t : c.topk) k.topk.push_back({t.width, t.row_width, t.rows});
  k.candidates = c.candidates;
  // Persistent rows an earlier layer owns and a layer at or past next_layer reads (V4.1-Flash:
  // layer 20's compressed KV and index keys are read up to layer 39). In the reference call
  // shape every index key goes to every stage, the last stage's result included: the
  // reference's decode quirk (V41ForwardOptions::decode_step) lets an index source read the
  // keys of whichever owner published last, in a later layer of the previous call too.
  const DeepseekConfig& cf = config_;
  for (int O = 0; O < next_layer; ++O) {
    const LayerSchedule& os = cf.layers[O];
    if (!os.has_compressor || c.emitted[O].empty()) continue;
    bool kv_read = false, keys_read = false;
    for (int L = next_layer; L < cf.n_layers; ++L) {
      kv_read |= cf.layers[L].kv_owner == O;
      keys_read |= cf.layers[L].index_key_owner == O;
    }
    const std::vector<int64_t>& g = c.emitted[O];
    for (int kind = 0; kind < 2; ++kind) {
      if (!(kind == 0 ? kv_read : (keys_read || !c.canonical) && os.owns_index_keys)) continue;
      const int64_t width = kind == 0 ? cf.head_dim : cf.index_head_dim;
      StageCarry::Rows r;
      r.layer = O;
      r.kind = kind;
      r.records = g;
      r.values.resize(g.size() * width);
      for (size_t i = 0; i < g.size(); ++i) {
        if (kind == 0) {
          c.seq->read_compressed_rows(O, g[i], 1, &r.values[i * width]);
        } else {
          c.seq->read_index_keys(O, g[i], 1, &r.values[i * width]);
        }
      }
      k.rows.push_back(std::move(r));
    }
  }
  k.published_index_owner = c.seq->published_index_owner();
  if (c.routes) {
    k.has_routes = true;
    k.routes = *c.routes;
  }
  return k;
}

void DeepseekV41Model::take_carry(StageCarry k, int next_layer, Ctx& c, std::vector<float>* pre,
                                  std::vector<float>* taps, int* tap_slot) const {
  const int64_t hc = config_.hc_mult, D = config_.dim;
  STRATA_CHECK_MSG(k.s0 == c.s0 && k.S == c.S && k.next_layer == next_layer &&
                       static_cast<int64_t>(k.h.size()) == c.S * hc * D &&
                       k.pre.size() == pre->size() && k.taps.size() == taps->size() &&
                       k.topk.size() == c.topk.size() && k.candidates.size() == c.candidates.size() &&
                       k.has_routes == (c.routes != nullptr),
                   "pipeline stage boundary does not match this call (positions {}+{} vs {}+{}, "
                   "layer {} vs {}): the stages diverged", k.s0, k.S, c.s0, c.S, k.next_layer,
                   next_layer);
  c.h = std::move(k.h);
  *pre = std::move(k.pre);
  *taps = std::move(k.taps);
  *tap_slot = k.tap_slot;
  for (size_t l = 0; l < k.topk.size(); ++l) {
    c.topk[l].width = k.topk[l].width;
    c.topk[l].row_width = std::move(k.topk[l].row_width);
    c.topk[l].rows = std::move(k.topk[l].rows);
  }
  c.candidates = std::move(k.candidates);
  for (const StageCarry::Rows& r : k.rows) {
    const int64_t width = r.kind == 0 ? config_.head_dim : config_.index_head_dim;
    STRATA_CHECK(r.values.size() == r.records.size() * width);
    c.emitted[r.layer] = r.records;  // a later boundary passes them on
    for (size_t i = 0; i < r.records.size(); ++i) {
      if (r.kind == 0) {
        c.seq->write_compressed_row(r.layer, r.records[i], &r.values[i * width]);
      } else {
        c.seq->write_index_key(r.layer, r.records[i], &r.values[i * width]);
      }
    }
  }
  c.seq->set_published_index_owner(k.published_index_owner);
  if (c.routes) *c.routes = std::move(k.routes);
}

StatusOr<std::unique_ptr<DeepseekV41Model>> DeepseekV41Model::load(const std::string& dir,
                                                                   const V41LoadOptions& options) {
  std::unique_ptr<DeepseekV41Model> m(new DeepseekV41Model());
  STRATA_ASSIGN_OR_RETURN(m->config_, load_deepseek_config(dir));
  const DeepseekConfig& c = m->config_;
  if (!c.is_v41()) return failed_precondition("{}: not a DeepSeek-V4.1 config", dir);
  if (c.hc_mult < 1 || c.hc_mult > 16) return failed_precondition("hc_mult {} unsupported", c.hc_mult);
  if (c.head_dim % 32 != 0 || c.index_head_dim % 32 != 0 || c.dim % 32 != 0)
    return failed_precondition("dims must be multiples of 32 (head_dim {}, index_head_dim {}, dim {})",
                               c.head_dim, c.index_head_dim, c.dim);
  for (const LayerSchedule& ls : c.layers)
    if (ls.ratio > 16) return failed_precondition("layer {}: ratio {} unsupported", ls.layer_id, ls.ratio);
  // A pipeline stage checks and packs (and so keeps resident) only its own layers.
  const PipeStage own = pipe_stage(options.pipe_comm ? options.pipe_comm.get()
                                                     : process_pipe_comm().get(), c.n_layers);
  if (options.threads != 1) m->pool_ = std::make_unique<ThreadPool>(options.threads);
  // Expert parallelism: this rank packs (and computes) only its share of the routed experts.
  m->expert_comm_ = options.expert_comm ? options.expert_comm : process_expert_comm();
  if (m->expert_comm_ && m->expert_comm_->size() <= 1) m->expert_comm_.reset();
  const ExpertShare share = m->expert_comm_
                                ? ExpertShare{m->expert_comm_->rank(), m->expert_comm_->size()}
                                : ExpertShare{};
  std::unique_ptr<PackedWeightCache> cache;
  if (!options.scalar_reference)
    cache = PackedWeightCache::open(dir, pack_layout("v4.1", own.begin, own.end, share),
                                    process_weight_cache_settings(), m->pool_.get());
  const bool hit = cache && cache->hit();
  STRATA_ASSIGN_OR_RETURN(m->checkpoint_,
                          SafetensorsCheckpoint::open(dir, options.progress && !hit));
  if (hit) m->checkpoint_->mark_scanned(cache->scanned_tensors());
  m->checkpoint_->skip_scans_outside_layers(own.begin, own.end);
  STRATA_ASSIGN_OR_RETURN(m->weights_, DeepseekV41Weights::load(*m->checkpoint_, c));
  if (!options.scalar_reference) {
    m->weights_->pack_for_kernels(m->pool_.get(), own.begin, own.end, share, cache.get());
    // The packed copies are what the kernels read: the file's pages (faulted in by the
    // checks and the packing) need not stay resident too (issue 29 goal 4).
    m->checkpoint_->release_resident_pages();
  }

  if (!c.engram_layer_ids.empty()) {
    std::vector<int64_t> map = options.engram_token_map;
    if (map.empty() && !options.engram_token_map_path.empty()) {
      STRATA_ASSIGN_OR_RETURN(map, load_token_map(options.engram_token_map_path));
    }
    if (map.empty()) {
      auto tok = load_tokenizer_from_dir(dir);
      if (!tok.ok())
        return tok.status().with_context(
            "Engram needs the compressed-token map: no tokenizer in the model directory and none "
            "injected");
      int64_t n = 0;
      STRATA_ASSIGN_OR_RETURN(map, build_compressed_token_map(**tok, &n));
      if (n != c.engram_compressed_vocab_size)
        return failed_precondition("Engram token map has {} compressed ids, config says {}", n,
                                   c.engram_compressed_vocab_size);
    }
    if (static_cast<int64_t>(map.size()) < c.vocab_size)
      return failed_precondition("Engram token map covers {} ids < vocab {}", map.size(), c.vocab_size);
    EngramHashConfig ec;
    ec.layer_ids = c.engram_layer_ids;
    ec.max_ngram_size = c.engram_max_ngram_size;
    ec.n_heads = c.engram_n_heads;
    ec.engram_vocab_size = c.engram_vocab_size;
    ec.compressed_vocab_size = c.engram_compressed_vocab_size;
    ec.pad_id = c.engram_pad_id;
    ec.num_embeddings = c.engram_num_embeddings;
    STRATA_ASSIGN_OR_RETURN(EngramHasher hasher, EngramHasher::create(ec, std::move(map)));
    m->engram_hasher_.emplace(std::move(hasher));
    m->engram_tables_ = std::make_unique<EngramTableStore>(options.engram_placement,
                                                           options.engram_cache_bytes);
    for (int layer : c.engram_layer_ids) {
      if (layer < own.begin || layer >= own.end) continue;  // another pipeline stage's layer
      const V41EngramWeights& ew = m->weights_->layer(layer).engram;
      STRATA_RETURN_IF_ERROR(m->engram_tables_->add_layer(layer, ew.table, ew.table_scale));
    }
  }

  for (int l = 0; l < c.total_layers(); ++l) {
    const LayerSchedule& ls = c.layers[l];
    m->rope_.emplace_back(c.rope_head_dim, ls.rope_theta, ls.yarn ? c.original_seq_len : 0,
                          c.rope_factor, c.beta_fast, c.beta_slow);
  }
  m->max_context_ = options.max_context > 0 ? options.max_context : c.max_position_embeddings;
  if (m->max_context_ <= 0) m->max_context_ = 1 << 20;
  m->min_parallel_attention_macs_ = options.min_parallel_attention_macs;
  STRATA_ASSIGN_OR_RETURN(StateGraph g, StateGraph::from_deepseek(c));
  m->state_graph_.emplace(std::move(g));
  m->state_max_tokens_ = options.state_max_tokens > 0 ? options.state_max_tokens
                                                      : std::min<int64_t>(m->max_context_, 32768);
  m->state_max_tokens_ = std::min(m->state_max_tokens_, m->max_context_);
  m->legacy_state_ = options.legacy_state;
  if (m->expert_comm_)  // the dispatch sends what the packed expert GEMM consumes
    for (int L = 0; L < c.n_layers; ++L) {
      const std::vector<V41ExpertWeights>& ex = m->weights_->layer(L).ffn.experts;
      STRATA_RETURN_IF_ERROR(check_expert_parallel_layer(L, static_cast<int64_t>(ex.size()),
                                                         share.size));
      for (size_t e = 0; e < ex.size(); ++e)
        if (share.owns(static_cast<int64_t>(e), static_cast<int64_t>(ex.size())) &&
            ex[e].w1.present() && expert_act_block(ex[e]) == 0)
          return failed_precondition("--enable-expert-parallel: layer {}'s routed experts are "
                                     "not FP8 with 32-wide blocks or FP4", L);
    }
  m->dcp_comm_ = options.dcp_comm ? options.dcp_comm : process_dcp_comm();
  if (m->dcp_comm_ && m->dcp_comm_->size() <= 1) m->dcp_comm_.reset();
  m->pipe_comm_ = options.pipe_comm ? options.pipe_comm : process_pipe_comm();
  if (m->pipe_comm_ && m->pipe_comm_->size() <= 1) m->pipe_comm_.reset();
  if (m->pipe_comm_ && m->pipe_comm_->size() > c.n_layers)
    return failed_precondition("--pipeline-parallel-size {} exceeds the model's {} layers",
                               m->pipe_comm_->size(), c.n_layers);
  // The load succeeded: persist what was packed (with the tensors found finite).
  if (cache) cache->finish(m->checkpoint_->scanned_tensors());
  return m;
}

std::unique_ptr<V41SequenceState> DeepseekV41Model::new_sequence() const {
  if (legacy_state_) return new_legacy_sequence();
  auto s = V41SequenceState::create(config_, *state_graph_, state_max_tokens_, dcp_shard(dcp_comm_.get()),
                                      stage_layers());
  STRATA_CHECK_MSG(s.ok(), "V4.1 sequence state: {}", s.status().to_string());
  return std::move(s).value();
}

void DeepseekV41Model::engram(int L, Ctx& c) const {
  const LayerSchedule& ls = config_.layers[L];
  const V41EngramWeights& ew = weights_->layer(L).engram;
  const int64_t S = c.S, D = config_.dim, hc = config_.hc_mult, ed = config_.engram_head_dim;
  const int ncols = engram_hasher_->n_cols();
  const int nl = engram_hasher_->n_layers();
  const int64_t K = ncols * ed;
  const int64_t nsc = (ed + 31) / 32;
  std::vector<float> e(S * K);
  // The step's table rows, from wherever the placement keeps them (fetched ahead for disk).
  std::vector<int64_t> rows(S * ncols);
  for (int64_t i = 0; i < S; ++i)
    for (int col = 0; col < ncols; ++col)
      rows[i * ncols + col] = c.hashes[(i * nl + ls.engram_slot) * ncols + col];
  std::vector<uint8_t> trows(S * ncols * ed), srows(S * ncols * nsc);
  engram_tables_->gather(L, rows.data(), S * ncols, trows.data(), srows.data());
  // Tokens are independent rows here and in the gate below: split over the pool.
  parallel_rows(pool_.get(), S, 8, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      for (int col = 0; col < ncols; ++col) {
        const uint8_t* tr = &trows[(i * ncols + col) * ed];
        const uint8_t* sr = &srows[(i * ncols + col) * nsc];
        for (int64_t k = 0; k < ed; ++k)
          e[i * K + col * ed + k] =
              round_to_bf16(v41::e4m3_decode(tr[k]) * ue8m0_to_f32(sr[k / 32]));
      }
  });
  const int64_t N = D * (hc + 1);
  std::vector<float> kv(S * N);
  v41::linear(e.data(), S, ew.wkv, kv.data(), pool_.get());
  std::vector<float> wgt(hc * D);
  for (int64_t i = 0; i < hc * D; ++i) wgt[i] = bf16v(ew.q_weight, i) * bf16v(ew.k_weight, i);
  const float eps = static_cast<float>(config_.norm_eps);
  const float dscale = static_cast<float>(std::pow(static_cast<double>(D), -0.5));
  parallel_rows(pool_.get(), S, 8, [&](int64_t i0, int64_t i1) {
    std::vector<float> tx(D), tk(D), td(D);  // written whole per (token, channel)
    for (int64_t i = i0; i < i1; ++i) {
      const float* value = &kv[i * N + hc * D];
      for (int64_t ch = 0; ch < hc; ++ch) {
        float* x = &c.h[(i * hc + ch) * D];
        const float* key = &kv[i * N + ch * D];
        const float* wg = &wgt[ch * D];
        for (int64_t d = 0; d < D; ++d) {
          tx[d] = x[d] * x[d];
          tk[d] = key[d] * key[d];
          td[d] = (x[d] * wg[d]) * key[d];
        }
        const float mx = v41::torch_sum(tx.data(), D) / static_cast<float>(D);
        const float mk = v41::torch_sum(tk.data(), D) / static_cast<float>(D);
        const float rstd = (1.0f / std::sqrt(mx + eps)) * (1.0f / std::sqrt(mk + eps));
        float dot = v41::torch_sum(td.data(), D) * rstd;
        dot = dot * dscale;
        const float mag = std::sqrt(std::max(std::fabs(dot), 1e-6f));
        const float sg = std::copysign(mag, dot);
        const float gate = 1.0f / (1.0f + v41::torch_exp_at(0.0f - sg, c.vrows.tok(i) * hc + ch,
                                                            c.vrows.n * hc));
        for (int64_t d = 0; d < D; ++d) x[d] = round_to_bf16(x[d] + gate * value[d]);
      }
    }
  });
}

void DeepseekV41Model::pipeline_microbatches(Ctx& c, const PipeStage& st, int64_t M,
                                             std::vector<float>* pre_prev,
                                             std::vector<float>* main_hidden, int* tap_slot,
                                             const V41ForwardOptions& opt) const {
  const DeepseekConfig& cf = config_;
  const int64_t S = c.S, hc = cf.hc_mult, D = cf.dim;
  const int64_t row_h = hc * D, row_pre = hc;
  const int64_t row_taps = S > 0 ? static_cast<int64_t>(main_hidden->size()) / S : 0;
  const int64_t row_hash = S > 0 ? static_cast<int64_t>(c.hashes.size()) / S : 0;
  auto slice = [](const std::vector<float>& v, int64_t a, int64_t b, int64_t w) {
    return std::vector<float>(v.begin() + a * w, v.begin() + b * w);
  };
  struct Micro {
    Ctx c;
    V41Routes routes;
    std::vector<float> pre, taps;
    int tap_slot = 0;
    int64_t a = 0;
  };
  std::vector<Micro> mb(static_cast<size_t>(M));
  for (int64_t k = 0; k < M; ++k) {
    Micro& u = mb[k];
    const int64_t a = k * S / M, b = (k + 1) * S / M;
    u.a = a;
    Ctx& x = u.c;
    x.microbatch_of(c, a, b, &u.routes, cf.n_layers, cf.index_source_layers.size());
    x.width_end = x.s0 + x.S;
    x.hashes.assign(c.hashes.begin() + a * row_hash, c.hashes.begin() + b * row_hash);
    x.h = slice(c.h, a, b, row_h);
    x.topk.resize(cf.n_layers);
    x.candidates.resize(cf.n_layers);
    x.emitted.resize(cf.n_layers);
    u.pre = slice(*pre_prev, a, b, row_pre);
    u.taps = slice(*main_hidden, a, b, row_taps);
    // Through this stage's layers, one microbatch after the other; each goes on to the next
    // stage as soon as it is done.
    if (!st.first) take_carry(pipe_receive(*pipe_comm_), st.begin, x, &u.pre, &u.taps, &u.tap_slot);
    run_layers(x, st.begin, st.end, &u.pre, &u.taps, &u.tap_slot, opt);
    if (!st.last) {
      ByteMsg m;
      make_carry(x, st.end, u.pre, u.taps, u.tap_slot).encode(&m);
      pipe_comm_->send_next(m.b);
    }
  }
  // The last stage's results, in microbatch order, to every rank; then the call's rows.
  for (Micro& u : mb) {
    ByteMsg m;
    if (st.last) make_carry(u.c, cf.n_layers, u.pre, u.taps, u.tap_slot).encode(&m);
    pipe_comm_->bcast_from_last(&m.b);
    if (!st.last) take_carry(StageCarry::decode(&m), cf.n_layers, u.c, &u.pre, &u.taps, &u.tap_slot);
    std::copy(u.c.h.begin(), u.c.h.end(), c.h.begin() + u.a * row_h);
    std::copy(u.pre.begin(), u.pre.end(), pre_prev->begin() + u.a * row_pre);
    std::copy(u.taps.begin(), u.taps.end(), main_hidden->begin() + u.a * row_taps);
    *tap_slot = u.tap_slot;
    if (c.routes) merge_routes(u.routes, u.a, c.routes);
  }
}

// The body of forward's layer loop: layers [L0, L1) over the call's rows (c.h, the lagged pre
// mix, DSpark's taps).
void DeepseekV41Model::run_layers(Ctx& c, int L0, int L1, std::vector<float>* pre_prev_io,
                                  std::vector<float>* main_hidden_io, int* tap_slot_io,
                                  const V41ForwardOptions& opt) const {
  const DeepseekConfig& cf = config_;
  const int64_t S = c.S, D = cf.dim;
  const int hc = cf.hc_mult;
  auto dump = [&](const std::string& name, const float* data, std::vector<int64_t> shape) {
    if (opt.dump) opt.dump(name, data, shape);
  };
  std::vector<float>& pre_prev = *pre_prev_io;
  std::vector<float>& main_hidden = *main_hidden_io;
  int& tap_slot = *tap_slot_io;
  const int64_t n_taps = has_dspark() ? static_cast<int64_t>(cf.dspark_target_layer_ids.size()) : 0;
  std::vector<float> preA(S * hc), postA(S * hc), combA(S * hc * hc);
  std::vector<float> preF(S * hc), postF(S * hc), combF(S * hc * hc);
  std::vector<float> x(S * D), xn(S * D), f(S * D);
  // mHC mixes on the pool's worker while the sublayer runs (see `mixes` below): for decode
  // steps (in a prefill the sublayer's own dispatches keep every thread busy).
  const bool async_mixes = pool_ && pool_->num_threads() > 1 && S == 1;
  // Should anything leave this scope early (an exception), the worker's mixes task must end
  // before the buffers it reads and writes go away.
  struct WaitAsyncOnExit {
    ThreadPool* pool;
    ~WaitAsyncOnExit() {
      if (pool != nullptr) pool->wait_async();
    }
  } wait_on_exit{async_mixes ? pool_.get() : nullptr};
  for (int L = L0; L < L1; ++L) {
    const LayerSchedule& ls = cf.layers[L];
    const V41BlockWeights& bw = weights_->layer(L);
    const std::string ln = fmt::format("layer{:02d}.", L);
    if (ls.engram_before) {
      profile::PhaseScope phase("engram (table rows, projections)");
      engram(L, c);
      dump(ln + "engram_out", c.h.data(), {S, hc, D});
    }
    if (n_taps > 0 && ls.dspark_tap) {
      // h.mean(dim=2) of the bf16 streams: fp32 sum over the streams in order, / hc, bf16.
      // Only the rows that stay in a ring (the call's last W) are used.
      for (int64_t i = std::max<int64_t>(0, S - cf.window_size); i < S; ++i)
        for (int64_t d = 0; d < D; ++d) {
          float acc = 0.0f;
          for (int ch = 0; ch < hc; ++ch) acc += c.h[(i * hc + ch) * D + d];
          main_hidden[(i * n_taps + tap_slot) * D + d] = round_to_bf16(acc / static_cast<float>(hc));
        }
      ++tap_slot;
    }
    // One sublayer's mHC steps (each a --breakdown phase): its mixes (pre/post/comb), and
    // the input collapsed with `pre` then normalized into xn.
    //
    // The sublayer's own mixes are first needed by its post (V4.1's lagged pre: its input is
    // collapsed with the previous sublayer's pre), so with a worker thread they run there
    // while the caller goes on into the sublayer (ThreadPool::run_async), and mixes_done()
    // waits for them before the post. Same arithmetic either way. Only c.h is shared, and
    // nothing writes it before the post.
    auto mixes = [&](const V41MhcWeights& w, float* pre, float* post, float* comb) {
      auto run = [&c, &w, &cf, S, hc, D, pre, post, comb](ThreadPool* pool) {
        v41::hc_mixes(c.h.data(), S, hc * D, w, hc, cf.hc_sinkhorn_iters, cf.norm_eps, cf.hc_eps,
                 pre, post, comb, c.vrows, pool);
      };
      if (async_mixes) {
        pool_->run_async([run] {  // on the worker: its dispatches run inline
          profile::Untimed untimed;  // beside the caller's phases, not one of them
          run(nullptr);
        });
        return;
      }
      profile::PhaseScope phase("mhc: mixes, sinkhorn", static_cast<double>(w.fn.num_bytes));
      run(pool_.get());
    };
    auto mixes_done = [&] {
      if (!async_mixes) return;
      profile::PhaseScope phase("mhc: wait for mixes (worker)");
      pool_->wait_async();
    };
    auto collapse = [&](const float* pre, const TensorView& norm) {
      profile::PhaseScope phase("mhc: pre + rms norm");
      v41::hc_pre(c.h.data(), pre, S, hc, D, x.data(), pool_.get());
      v41::rms_norm(x.data(), S, D, &norm, cf.norm_eps, xn.data());
    };
    auto post = [&](const float* post_mix, const float* comb) {
      profile::PhaseScope phase("mhc: post");
      v41::hc_post(f.data(), post_mix, comb, S, hc, D, c.h.data(), pool_.get());
    };
    // Attention sublayer: its own mixes for post/comb; input collapsed with the previous
    // FFN's pre (lagged mHC).
    mixes(bw.hc_attn, preA.data(), postA.data(), combA.data());
    collapse(pre_prev.data(), bw.attn_norm);
    attention(L, xn.data(), c, f.data());
    dump(ln + "attn_out", f.data(), {S, D});
    mixes_done();
    post(postA.data(), combA.data());
    // FFN sublayer: collapsed with the attention's pre.
    mixes(bw.hc_ffn, preF.data(), postF.data(), combF.data());
    collapse(preA.data(), bw.ffn_norm);
    moe(L, xn.data(), c, f.data());
    dump(ln + "ffn_out", f.data(), {S, D});
    mixes_done();
    post(postF.data(), combF.data());
    dump(ln + "block_out", c.h.data(), {S, hc, D});
    dump(ln + "block_out.pre_mix", preF.data(), {S, hc});
    pre_prev = preF;
  }
}

Status DeepseekV41Model::forward(V41SequenceState* seq, std::span<const int32_t> tokens,
                                 const V41ForwardOptions& opt, std::vector<float>* logits) const {
  const DeepseekConfig& cf = config_;
  Ctx c;
  STRATA_RETURN_IF_ERROR(c.begin(seq, tokens, cf.vocab_size, max_context_, opt.call_shape,
                                 opt.routes, cf.n_layers, cf.index_source_layers.size()));
  const int64_t S = c.S;
  c.width_end = c.s0 + S;
  if (!c.canonical) {
    c.decode_step = opt.decode_step && S == 1;
    if (!c.decode_step && opt.prompt_len >= c.s0 + S) c.width_end = opt.prompt_len;
    c.vrows = c.decode_step ? v41::CallRows::reference(0, 1)
                            : v41::CallRows::reference(c.s0, c.width_end);
  }
  c.topk.resize(cf.n_layers);
  c.candidates.resize(cf.n_layers);
  if (pipe_comm_) c.emitted.resize(cf.n_layers);
  const int64_t D = cf.dim;
  const int hc = cf.hc_mult;
  auto dump = [&](const std::string& name, const float* data, std::vector<int64_t> shape) {
    if (opt.dump) opt.dump(name, data, shape);
  };

  // Pipeline parallelism: this rank runs layers [stage.begin, stage.end) (all without it).
  const PipeStage stage = pipe_stage(pipe_comm_.get(), cf.n_layers);
  std::vector<int64_t> raw(tokens.begin(), tokens.end());
  if (engram_hasher_) {
    c.hashes.resize(S * engram_hasher_->n_layers() * engram_hasher_->n_cols());
    engram_hasher_->hash(seq->engram_history(), raw, c.s0, c.hashes.data());
    if (engram_tables_->placement() == EngramPlacement::kDisk) {
      // Rows of every Engram layer are known now: read them ahead while layers run.
      const int nl = engram_hasher_->n_layers(), ncols = engram_hasher_->n_cols();
      std::vector<std::pair<int, std::vector<int64_t>>> ahead;
      for (int j = 0; j < nl; ++j) {
        if (cf.engram_layer_ids[j] < stage.begin || cf.engram_layer_ids[j] >= stage.end) continue;
        std::vector<int64_t> rows;
        for (int64_t i = 0; i < S; ++i)
          for (int col = 0; col < ncols; ++col) rows.push_back(c.hashes[(i * nl + j) * ncols + col]);
        ahead.emplace_back(cf.engram_layer_ids[j], std::move(rows));
      }
      engram_tables_->prefetch(std::move(ahead));
    }
  }

  // Embedding, replicated to hc streams; layer 0's pre is one-hot on stream 0.
  c.h.resize(S * hc * D);
  if (stage.first) {  // later stages receive the streams
    const uint16_t* emb = weights_->embed().u16();
    for (int64_t i = 0; i < S; ++i)
      for (int ch = 0; ch < hc; ++ch)
        for (int64_t d = 0; d < D; ++d) c.h[(i * hc + ch) * D + d] = bf16_to_f32(emb[tokens[i] * D + d]);
    if (opt.dump) {
      std::vector<float> e0(S * D);
      for (int64_t i = 0; i < S; ++i) std::copy_n(&c.h[i * hc * D], D, &e0[i * D]);
      dump("embed", e0.data(), {S, D});
    }
  }
  std::vector<float> pre_prev(S * hc, 0.0f);
  for (int64_t i = 0; i < S; ++i) pre_prev[i * hc] = 1.0f;

  // DSpark main_hidden rows [S, n_targets * D] (the tapped block inputs), when drafting.
  const int64_t n_taps = has_dspark() ? static_cast<int64_t>(cf.dspark_target_layer_ids.size()) : 0;
  std::vector<float> main_hidden(S * n_taps * D);
  int tap_slot = 0;
  const int64_t microbatches = stage.split() && c.canonical ? pp_microbatches(S, pipe_comm_->size()) : 1;
  if (!stage.split()) {
    run_layers(c, 0, cf.n_layers, &pre_prev, &main_hidden, &tap_slot, opt);
  } else if (microbatches > 1) {
    profile::PhaseScope phase("pipeline: microbatches through the stages");
    pipeline_microbatches(c, stage, microbatches, &pre_prev, &main_hidden, &tap_slot, opt);
  } else {
    if (!stage.first) {
      profile::PhaseScope phase("pipeline: receive the stage boundary");
      take_carry(pipe_receive(*pipe_comm_), stage.begin, c, &pre_prev, &main_hidden, &tap_slot);
    }
    run_layers(c, stage.begin, stage.end, &pre_prev, &main_hidden, &tap_slot, opt);
    // The last stage's boundary reaches every rank, which runs the epilogue on it.
    profile::PhaseScope phase("pipeline: pass the stage boundary");
    StageCarry out = make_carry(c, stage.end, pre_prev, main_hidden, tap_slot);
    take_carry(pipe_pass(*pipe_comm_, stage, out), cf.n_layers, c, &pre_prev, &main_hidden,
               &tap_slot);
  }
  std::vector<float> x(S * D), xn(S * D);
  if (n_taps > 0) {
    STRATA_CHECK(tap_slot == n_taps);
    profile::PhaseScope phase("dspark: stage rings");
    write_dspark_rings(c, main_hidden.data());
  }
  v41::hc_pre(c.h.data(), pre_prev.data(), S, hc, D, x.data(), pool_.get());
  v41::rms_norm(x.data(), S, D, &weights_->norm(), cf.norm_eps, xn.data());
  dump("final_norm_out", xn.data(), {S, D});
  const int64_t V = cf.vocab_size;
  if (opt.all_logits) {
    logits->resize(S * V);
    v41::linear_f32(xn.data(), S, weights_->head(), V, D, logits->data(), weights_->head_packed(), pool_.get());
  } else {
    logits->resize(V);
    v41::linear_f32(&xn[(S - 1) * D], 1, weights_->head(), V, D, logits->data(), weights_->head_packed(), pool_.get());
  }

  if (engram_hasher_) {
    std::vector<int64_t> hist = seq->engram_history();
    engram_hasher_->advance_history(&hist, raw);
    seq->set_engram_history(hist);
  }
  seq->end_call(S);
  return ok_status();
}

}  // namespace strata
