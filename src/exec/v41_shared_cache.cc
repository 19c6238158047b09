// V41SharedCache; see v41_shared_cache.h.
#include "exec/v41_shared_cache.h"

#include <algorithm>
#include <map>

#include "base/check.h"
#include "state/cache_manager.h"
#include "state/state_graph.h"

namespace strata {

struct V41SharedCache::Inflight {
  StepPlan plan;
};

V41SharedCache::V41SharedCache(const StateGraph& graph, const V41RunnerCacheOptions& o,
                               int64_t per_seq_max_tokens)
    : o_(o) {
  CacheOptions co;
  co.block_tokens = o.block_tokens;
  co.max_seqs = std::max(1, o.max_seqs);
  co.max_tokens = o.max_tokens > 0 ? o.max_tokens : 16 * std::max<int64_t>(1, per_seq_max_tokens);
  co.snapshot_slots = o.prefix_cache ? std::max(0, o.snapshot_slots) : 0;
  co.prefix_cache = o.prefix_cache;
  co.prefix_salt = o.salt;
  co.boundary_snapshots = o.restore == V41PrefixRestore::kStoredState;
  co.unit_store = o.unit_store;
  co.dcp = o.dcp;
  co.stage = o.stage;
  co.debug_perturb_restore_kind = o.debug_perturb_restore_kind;
  if (!co.boundary_snapshots) co.snapshot_slots = 0;
  o_.max_seqs = co.max_seqs;
  cm_ = std::make_unique<CacheManager>(graph, co);
  if (o_.replay_tokens < 0)
    o_.replay_tokens = o.restore == V41PrefixRestore::kReplayExact ? replay_exact_tokens(graph)
                                                                   : replay_window_tokens(graph);
  for (int r : graph.growth_ratios())
    STRATA_CHECK_MSG(o_.replay_tokens % r == 0, "replay_tokens {} is not a multiple of ratio {}",
                     o_.replay_tokens, r);
}

const char* v41_prefix_restore_name(V41PrefixRestore r) {
  switch (r) {
    case V41PrefixRestore::kReplayWindow: return "replay";
    case V41PrefixRestore::kReplayExact: return "replay-exact";
    default: return "stored";
  }
}

StatusOr<V41PrefixRestore> parse_v41_prefix_restore(const std::string& s) {
  if (s == "stored") return V41PrefixRestore::kStoredState;
  if (s == "replay") return V41PrefixRestore::kReplayWindow;
  if (s == "replay-exact") return V41PrefixRestore::kReplayExact;
  return invalid_argument("prefix restore '{}': expected stored, replay or replay-exact", s);
}

int64_t V41SharedCache::boundary_snapshot_bytes() const { return cm_->boundary_snapshot_bytes(); }

V41SharedCache::~V41SharedCache() {
  if (inflight_) cm_->finish_step(inflight_->plan);
}

int64_t V41SharedCache::unit() const { return cm_->block_tokens(); }

int64_t V41SharedCache::start(int64_t seq, std::span<const int32_t> prompt, bool allow_hit) {
  STRATA_CHECK(!inflight_);
  const std::vector<int32_t> ids(prompt.begin(), prompt.end());
  cm_->add_sequence(seq, ids);
  StepPlan p = cm_->plan_step({{seq, 0}});
  if (p.outcome != PlanOutcome::kOk || (!allow_hit && p.seqs[0].hit_tokens > 0)) {
    // Start without a hit: re-register with no ids (nothing to match), then append them.
    cm_->release(seq);
    cm_->add_sequence(seq, {});
    p = cm_->plan_step({{seq, 0}});
    STRATA_CHECK_MSG(p.outcome == PlanOutcome::kOk && p.seqs[0].hit_tokens == 0,
                     "V41SharedCache: empty start of seq {} does not fit: {}", seq, p.shortfall);
    cm_->commit(p);
    cm_->finish_step(p);
    if (!ids.empty()) cm_->append_tokens(seq, ids);
  } else {
    cm_->commit(p);
    cm_->finish_step(p);
  }
  return cm_->num_computed(seq);
}

void V41SharedCache::append(int64_t seq, std::span<const int32_t> ids) {
  if (!ids.empty()) cm_->append_tokens(seq, std::vector<int32_t>(ids.begin(), ids.end()));
}
int64_t V41SharedCache::num_known(int64_t seq) const { return cm_->num_known(seq); }
int64_t V41SharedCache::num_computed(int64_t seq) const { return cm_->num_computed(seq); }
int64_t V41SharedCache::suggest_chunk(int64_t seq, int64_t n) const {
  return cm_->suggest_chunk(seq, n);
}

Status V41SharedCache::begin(int64_t seq, int64_t n, int64_t* start_pos) {
  STRATA_CHECK(!inflight_);
  StepPlan p = cm_->plan_step({{seq, n}});
  if (p.outcome != PlanOutcome::kOk)
    return Status(StatusCode::kResourceExhausted, "state cache full: " + p.shortfall);
  STRATA_CHECK_MSG(p.seqs.size() == 1 && p.seqs[0].num_tokens == n,
                   "V41SharedCache: plan for seq {} covers {} of {} tokens", seq,
                   p.seqs.empty() ? 0 : p.seqs[0].num_tokens, n);
  *start_pos = p.seqs[0].start_pos;
  cm_->commit(p);
  inflight_ = std::make_unique<Inflight>();
  inflight_->plan = std::move(p);
  return ok_status();
}

Status V41SharedCache::check_fits(const std::vector<std::pair<int64_t, int64_t>>& items) const {
  std::vector<CacheStepItem> plan_items;
  for (const auto& [seq, n] : items) plan_items.push_back({seq, n});
  const StepPlan p = cm_->plan_step(plan_items);
  if (p.outcome != PlanOutcome::kOk)
    return Status(StatusCode::kResourceExhausted, "state cache full: " + p.shortfall);
  return ok_status();
}

void V41SharedCache::finish() {
  STRATA_CHECK(inflight_);
  cm_->finish_step(inflight_->plan);
  inflight_.reset();
}

void V41SharedCache::release(int64_t seq) {
  if (cm_->has_sequence(seq)) cm_->release(seq);
}

std::vector<V41KindUsage> V41SharedCache::usage(const std::vector<int64_t>& lengths) const {
  const StateGraph& g = cm_->graph();
  std::map<int, int64_t> cap;  // kind -> pool bytes
  int64_t pool_used = 0;
  for (const PoolInfo& p : cm_->pools()) {
    const int64_t block_bytes = p.block_bytes();
    cap[static_cast<int>(p.kind)] += p.num_blocks * block_bytes;
    pool_used += (p.num_blocks - p.num_free) * block_bytes;
  }
  std::vector<V41KindUsage> out;
  int64_t held = 0;
  for (const auto& [k, c] : cap) {
    const StateKind kind = static_cast<StateKind>(k);
    const int64_t fixed = g.bytes_per_request_fixed(kind);
    const double per_tok = g.bytes_per_token(kind);
    int64_t used = 0;
    for (int64_t len : lengths) used += fixed + static_cast<int64_t>(per_tok * static_cast<double>(len));
    held += used;
    out.push_back({state_kind_name(kind), used, c});
  }
  int64_t total = 0;
  for (const auto& [k, c] : cap) total += c;
  // Blocks allocated beyond what running sequences need: prefix-cache entries and snapshots
  // (plus block-rounding slack of running sequences).
  out.push_back({"v41_prefix_cache", std::max<int64_t>(0, pool_used - held), total});
  return out;
}

void V41SharedCache::check_invariants() const { cm_->check_invariants(); }
void V41SharedCache::clear_prefix_cache() { cm_->clear_prefix_cache(); }
int64_t V41SharedCache::num_cache_entries() const { return cm_->num_cache_entries(); }
int64_t V41SharedCache::total_free_blocks() const { return cm_->total_free_blocks(); }
int64_t V41SharedCache::total_blocks() const { return cm_->total_blocks(); }

}  // namespace strata
