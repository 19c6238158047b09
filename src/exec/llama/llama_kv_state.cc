#include "exec/llama/llama_kv_state.h"

#include <algorithm>

#include "base/check.h"
#include "dist/dcp.h"
#include "state/cache_manager.h"
#include "state/handoff.h"
#include "state/state_graph.h"

namespace strata {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

struct LlamaKvState::Inflight {
  StepPlan plan;
};

LlamaKvState::LlamaKvState(const Options& o) : o_(o) {
  STRATA_CHECK(o.n_layers > 0 && o.n_kv_heads > 0 && o.head_dim > 0 && o.capacity_tokens > 0);
  kv_dim_ = int64_t{o.n_kv_heads} * o.head_dim;
  LlamaStateDesc d;
  d.n_layers = o.n_layers;
  d.n_kv_heads = o.n_kv_heads;
  d.head_dim = o.head_dim;
  d.kv_format = RowFormat::kF32;
  d.name = o.identity.empty() ? std::string("llama") : o.identity;
  auto g = StateGraph::from_llama(d);
  STRATA_CHECK_MSG(g.ok(), "llama state graph: {}", g.status().to_string());
  graph_ = std::make_unique<StateGraph>(std::move(*g));
  CacheOptions co;
  co.max_tokens = o.capacity_tokens + std::max<int64_t>(0, o.cache_tokens);
  co.max_seqs = 8;
  co.snapshot_slots = 0;
  co.prefix_cache = o.prefix_cache;
  co.prefix_salt = o.salt;
  co.unit_store = o.unit_store;
  co.dcp = o.dcp;
  co.stage = o.stage;
  cm_ = std::make_unique<CacheManager>(*graph_, co);
  owner_of_layer_.resize(o.n_layers);
  for (int l = 0; l < o.n_layers; ++l) {
    owner_of_layer_[l] = graph_->find_owner(StateKind::kPlainKv, l);
    STRATA_CHECK(owner_of_layer_[l] >= 0);
  }
  row_.resize(2 * kv_dim_);
}

LlamaKvState::~LlamaKvState() = default;

int64_t LlamaKvState::unit() const { return cm_->block_tokens(); }

Status LlamaKvState::add(int64_t seq) {
  if (has(seq)) return invalid_argument("sequence {} already exists", seq);
  Seq s;
  s.k_ptrs.resize(o_.n_layers);
  s.v_ptrs.resize(o_.n_layers);
  seqs_.emplace(seq, std::move(s));
  return ok_status();
}

void LlamaKvState::release(int64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  if (it->second.started) cm_->release(seq);
  seqs_.erase(it);
}

int64_t LlamaKvState::length(int64_t seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.length;
}

int64_t LlamaKvState::running_blocks() const {
  int64_t n = 0;
  for (const auto& [id, s] : seqs_) n += ceil_div(s.length, unit());
  return n;  // token blocks (one block per layer each)
}

int64_t LlamaKvState::capacity_left(int64_t seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return 0;
  const Seq& s = it->second;
  const int64_t u = unit(), L = layers_here();
  const int64_t slack = ceil_div(s.length, u) * u - s.length;
  const int64_t running = running_blocks();
  // Blocks the pool can still give: free ones plus cache-only ones (evictable). Blocks shared
  // by several sequences are counted once per holder, so this errs on the safe side.
  const int64_t used_layer_blocks = cm_->total_blocks() - cm_->total_free_blocks();
  const int64_t evictable = std::max<int64_t>(0, used_layer_blocks - running * L);
  const int64_t pool_tb = (cm_->total_free_blocks() + evictable) / L;
  const int64_t budget_tb = std::max<int64_t>(0, ceil_div(o_.capacity_tokens, u) - running);
  const int64_t by_pool = slack + std::min(pool_tb, budget_tb) * u;
  return std::max<int64_t>(0, std::min(o_.max_context - s.length, by_pool));
}

void LlamaKvState::start(int64_t seq, Seq& s, std::span<const int32_t> prompt, bool allow_hit) {
  STRATA_CHECK(!s.started);
  cm_->add_sequence(seq, std::vector<int32_t>(prompt.begin(), prompt.end()));
  StepPlan p = cm_->plan_step({{seq, 0}});
  if (p.outcome != PlanOutcome::kOk || (!allow_hit && p.seqs[0].hit_tokens > 0)) {
    // Start without a hit: re-register with no known ids (nothing to match), then append.
    cm_->release(seq);
    cm_->add_sequence(seq, {});
    p = cm_->plan_step({{seq, 0}});
    STRATA_CHECK(p.outcome == PlanOutcome::kOk && p.seqs[0].hit_tokens == 0);
    cm_->commit(p);
    cm_->finish_step(p);
    cm_->append_tokens(seq, std::vector<int32_t>(prompt.begin(), prompt.end()));
  } else {
    cm_->commit(p);
    cm_->finish_step(p);
  }
  s.started = true;
  s.length = cm_->num_computed(seq);
  s.pending.assign(prompt.begin() + s.length, prompt.end());
  refresh_ptrs(seq, s);
}

void LlamaKvState::refresh_ptrs(int64_t seq, Seq& s) {
  const int64_t nb = ceil_div(cm_->num_computed(seq), unit());
  for (int l = 0; l < o_.n_layers; ++l) {
    if (!on_stage(l)) continue;  // another pipeline stage's layer: no storage here
    while (static_cast<int64_t>(s.k_ptrs[l].size()) < nb) {
      const int64_t b = static_cast<int64_t>(s.k_ptrs[l].size());
      // Plain-KV f32 rows are the kernels' floats; a block's rows are contiguous.
      // Under DCP the block's first stored row is this rank's first run (every block starts
      // an ownership period).
      const int64_t first = b * unit() + int64_t{o_.dcp.rank} * o_.dcp.interleave *
                                             (o_.dcp.sharded() ? dcp::kPlainKvRecordTokens : 0);
      const float* base =
          reinterpret_cast<const float*>(cm_->raw_row(seq, owner_of_layer_[l], first));
      s.k_ptrs[l].push_back(base);
      s.v_ptrs[l].push_back(base + kv_dim_);
    }
  }
}

int64_t LlamaKvState::attach_prefix(int64_t seq, std::span<const int32_t> tokens) {
  auto it = seqs_.find(seq);
  STRATA_CHECK_MSG(it != seqs_.end(), "attach_prefix: unknown sequence {}", seq);
  Seq& s = it->second;
  if (s.started || tokens.empty()) return s.length;
  start(seq, s, tokens, /*allow_hit=*/true);
  return s.length;
}

Status LlamaKvState::begin_step(const std::vector<int64_t>& seqs,
                                const std::vector<std::span<const int32_t>>& tokens) {
  STRATA_CHECK(!inflight_);
  STRATA_CHECK(seqs.size() == tokens.size());
  // ---- Checks that change nothing. ----
  int64_t added_tb = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    auto it = seqs_.find(seqs[i]);
    STRATA_CHECK_MSG(it != seqs_.end(), "begin_step: unknown sequence {}", seqs[i]);
    const Seq& s = it->second;
    const int64_t n = static_cast<int64_t>(tokens[i].size());
    const int64_t new_len = s.length + n;
    if (new_len > o_.max_context)
      return out_of_range("sequence {} would reach {} positions; the model's context is {}",
                          seqs[i], new_len, o_.max_context);
    // Ids already known to the cache manager (from attach_prefix, or a step that failed)
    // must agree with what is fed now.
    const size_t m = std::min(s.pending.size(), tokens[i].size());
    if (!std::equal(s.pending.begin(), s.pending.begin() + m, tokens[i].begin()))
      return invalid_argument("sequence {}: tokens differ from the ones given at admission",
                              seqs[i]);
    added_tb += ceil_div(new_len, unit()) - ceil_div(s.length, unit());
  }
  if (running_blocks() + added_tb > ceil_div(o_.capacity_tokens, unit()))
    return Status(StatusCode::kResourceExhausted,
                  fmt::format("KV cache full: the step needs {} more blocks of {} tokens, {} of "
                              "{} in use",
                              added_tb, unit(), running_blocks(),
                              ceil_div(o_.capacity_tokens, unit())));
  // ---- Register ids, plan, commit. ----
  std::vector<CacheStepItem> items;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Seq& s = seqs_.at(seqs[i]);
    if (!s.started) start(seqs[i], s, {}, /*allow_hit=*/false);
    const int64_t known = cm_->num_known(seqs[i]);
    const int64_t n = static_cast<int64_t>(tokens[i].size());
    const int64_t have = known - s.length;  // already-known ids at [length, known)
    STRATA_CHECK(have == static_cast<int64_t>(s.pending.size()));
    if (have < n) {
      std::vector<int32_t> extra(tokens[i].begin() + have, tokens[i].end());
      cm_->append_tokens(seqs[i], extra);
      s.pending.insert(s.pending.end(), extra.begin(), extra.end());
    }
    items.push_back({seqs[i], n});
  }
  StepPlan p = cm_->plan_step(items);
  if (p.outcome != PlanOutcome::kOk)
    return Status(StatusCode::kResourceExhausted, "KV cache full: " + p.shortfall);
  for (size_t i = 0; i < seqs.size(); ++i) {
    STRATA_CHECK(p.seqs[i].start_pos == seqs_.at(seqs[i]).length);
    STRATA_CHECK(p.seqs[i].num_tokens == static_cast<int64_t>(tokens[i].size()));
  }
  cm_->commit(p);
  for (int64_t id : seqs) refresh_ptrs(id, seqs_.at(id));
  inflight_ = std::make_unique<Inflight>();
  inflight_->plan = std::move(p);
  return ok_status();
}

bool LlamaKvState::owns(int64_t pos) const {
  return !o_.dcp.sharded() ||
         dcp::owner(pos / dcp::kPlainKvRecordTokens, o_.dcp.interleave, o_.dcp.size) == o_.dcp.rank;
}

void LlamaKvState::write_kv(int64_t seq, int layer, int64_t pos, const float* k, const float* v) {
  if (!owns(pos)) return;
  std::copy(k, k + kv_dim_, row_.data());
  std::copy(v, v + kv_dim_, row_.data() + kv_dim_);
  cm_->write_row(seq, owner_of_layer_[layer], pos, row_.data());
}

kernels::KvBlocks LlamaKvState::view(int64_t seq, int layer) const {
  const Seq& s = seqs_.at(seq);
  return kernels::KvBlocks{s.k_ptrs[layer].data(), s.v_ptrs[layer].data(),
                           unit() / o_.dcp.size, 2 * kv_dim_};
}

void LlamaKvState::end_step() {
  STRATA_CHECK(inflight_);
  cm_->finish_step(inflight_->plan);
  for (const SeqStepPlan& sp : inflight_->plan.seqs) {
    auto it = seqs_.find(sp.seq);
    if (it == seqs_.end()) continue;
    Seq& s = it->second;
    const int64_t done = cm_->num_computed(sp.seq) - s.length;
    s.pending.erase(s.pending.begin(), s.pending.begin() + done);
    s.length += done;
  }
  inflight_.reset();
}

Status LlamaKvState::truncate(int64_t seq, int64_t new_len) {
  STRATA_CHECK(!inflight_);
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return invalid_argument("truncate: unknown sequence {}", seq);
  Seq& s = it->second;
  if (new_len <= 0 || new_len > s.length)
    return invalid_argument("truncate: {} positions of {}", new_len, s.length);
  if (new_len == s.length) return ok_status();
  STRATA_RETURN_IF_ERROR(cm_->truncate(seq, new_len));
  s.length = new_len;
  s.pending.clear();
  for (int l = 0; l < o_.n_layers; ++l) {  // the last block may have been copied
    s.k_ptrs[l].clear();
    s.v_ptrs[l].clear();
  }
  refresh_ptrs(seq, s);
  return ok_status();
}

int64_t LlamaKvState::peek_prefix(std::span<const int32_t> tokens) const {
  return cm_->cached_prefix_tokens(std::vector<int32_t>(tokens.begin(), tokens.end()));
}

Status LlamaKvState::export_state(int64_t seq, int64_t from_pos, std::span<const int32_t> ids,
                                  HandoffState* out) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return invalid_argument("export: unknown sequence {}", seq);
  if (static_cast<int64_t>(ids.size()) != it->second.length)
    return invalid_argument("export: {} ids for {} positions", ids.size(), it->second.length);
  if (o_.dcp.sharded())
    return unimplemented("export: a handed-off state from a decode-context-parallel rank (it "
                         "holds 1/{} of the KV) is not supported", o_.dcp.size);
  if (!it->second.started) {
    *out = HandoffState{};
    return ok_status();
  }
  *out = export_handoff_rows(*cm_, seq, from_pos, std::vector<int32_t>(ids.begin(), ids.end()));
  return ok_status();
}

Status LlamaKvState::import_state(int64_t seq, std::span<const int32_t> tokens,
                                  const HandoffState& st, int64_t* held) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return invalid_argument("import: unknown sequence {}", seq);
  STRATA_RETURN_IF_ERROR(check_handoff_ids(tokens, st));
  Seq& s = it->second;
  if (!s.started) start(seq, s, tokens, /*allow_hit=*/false);
  const int64_t h = s.length;
  if (st.from_pos > h)
    return failed_precondition("import: the state starts at position {} but only {} are held",
                               st.from_pos, h);
  if (st.num_tokens <= h) {
    *held = h;
    return ok_status();
  }
  STRATA_RETURN_IF_ERROR(begin_step({seq}, {tokens.subspan(static_cast<size_t>(h),
                                                           static_cast<size_t>(st.num_tokens - h))}));
  write_handoff_rows(*cm_, seq, st, h);
  end_step();
  *held = s.length;
  return ok_status();
}

std::vector<LlamaKvUsage> LlamaKvState::usage() const {
  const int64_t tb_bytes = int64_t{layers_here()} * unit() * 2 * kv_dim_ * 4 / o_.dcp.size;
  std::vector<LlamaKvUsage> u;
  u.push_back({"kv", running_blocks() * tb_bytes, ceil_div(o_.capacity_tokens, unit()) * tb_bytes});
  if (o_.prefix_cache)
    // Cached blocks may occupy any block of the shared pool not held by a running request.
    u.push_back({"kv_prefix_cache", cm_->num_cache_entries() * tb_bytes,
                 cm_->total_blocks() / layers_here() * tb_bytes});
  return u;
}

void LlamaKvState::check_invariants() const { cm_->check_invariants(); }
int64_t LlamaKvState::num_cache_entries() const { return cm_->num_cache_entries(); }

}  // namespace strata

namespace strata {
void LlamaKvState::prefetch_prefix(std::span<const int32_t> tokens) const {
  if (o_.prefix_cache) cm_->prefetch(std::vector<int32_t>(tokens.begin(), tokens.end()));
}
}  // namespace strata
