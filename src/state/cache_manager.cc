// CacheManager. See cache_manager.h for the contract.
#include "state/cache_manager.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <queue>
#include <set>

#include <fmt/format.h>
#include <xxhash.h>

#include <spdlog/spdlog.h>

#include "base/check.h"
#include "state/cache_manager_internal.h"

namespace strata {


int default_block_tokens(const StateGraph& g) {
  int64_t l = 1;
  bool any_ring = false;
  for (const auto& o : g.owners()) {
    if (o.spec.grows()) l = std::lcm(l, static_cast<int64_t>(o.spec.ratio));
    any_ring |= o.spec.fixed();
  }
  const int64_t floor_tokens = any_ring ? 64 : 16;
  return static_cast<int>(ceil_div(floor_tokens, l) * l);
}

int64_t replay_window_tokens(const StateGraph& g) {
  int64_t l = 1, w = 0;
  for (const auto& o : g.owners()) {
    if (o.spec.grows()) l = std::lcm(l, static_cast<int64_t>(o.spec.ratio));
    if (o.kind == StateKind::kWindowKv) w = std::max<int64_t>(w, o.spec.rows_fixed);
  }
  return w == 0 ? 0 : ceil_div(w, l) * l;
}

int64_t replay_exact_tokens(const StateGraph& g) {
  int64_t l = 1, w = 0, n = 0;
  for (const auto& o : g.owners()) {
    if (o.spec.grows()) l = std::lcm(l, static_cast<int64_t>(o.spec.ratio));
    if (o.kind == StateKind::kWindowKv && o.stage == Stage::kBackbone) {
      w = std::max<int64_t>(w, o.spec.rows_fixed);
      ++n;
    }
  }
  if (w == 0) return 0;
  return ceil_div(w + (n - 1) * (w - 1), l) * l;
}

RowShard dcp_row_shard(StateKind k, const RowShard& dcp) {
  if (!dcp.sharded()) return {};
  if (k == StateKind::kCompressedKv || k == StateKind::kIndexKeys) return dcp;
  if (k == StateKind::kPlainKv)
    return RowShard{dcp.rank, dcp.size, dcp.interleave * dcp::kPlainKvRecordTokens};
  return {};
}

int dcp_block_tokens(const StateGraph& g, const RowShard& dcp) {
  int64_t l = default_block_tokens(g);
  for (const auto& o : g.owners())
    if (const RowShard sh = dcp_row_shard(o.kind, dcp); sh.sharded() && o.spec.grows())
      l = std::lcm(l, int64_t{o.spec.ratio} * sh.interleave * sh.size);
  return static_cast<int>(l);
}

CacheManager::CacheManager(const StateGraph& graph, CacheOptions opts)
    : graph_(graph), opts_(opts), impl_(std::make_unique<Impl>()) {
  block_tokens_ = opts_.block_tokens > 0 ? opts_.block_tokens : dcp_block_tokens(graph_, opts_.dcp);
  for (int r : graph_.growth_ratios())
    STRATA_CHECK_MSG(block_tokens_ % r == 0, "block_tokens {} is not a multiple of ratio {}",
                     block_tokens_, r);
  Impl& I = *impl_;
  const auto& owners = graph_.owners();
  I.pool_of.assign(owners.size(), -1);
  I.paged.assign(owners.size(), 0);
  I.ringfixed.assign(owners.size(), 0);
  // One pool per (kind, ratio, rows_per_block, row_bytes); owners of a pool share it.
  std::map<std::tuple<int, int, int64_t, int64_t>, int> key_to_pool;
  std::vector<int64_t> owners_in_pool;
  const StageLayers& st = opts_.stage;
  auto on_this_stage = [&](const StateOwnerInfo& o) {
    if (!st.split() || o.layer < 0 || o.layer >= st.backbone_layers) return true;
    if (o.stage != Stage::kBackbone || o.kind == StateKind::kIndexKeys) return true;
    if (o.layer >= st.begin && o.layer < st.end) return true;
    for (int l : o.consumer_layers)
      if (l >= st.begin && l < st.end) return true;
    return false;
  };
  for (const auto& o : owners) {
    const StateSpec& s = o.spec;
    if (s.transient() || s.row_bytes == 0) continue;
    if (s.fixed() && s.rows_fixed == 0) continue;
    if (!on_this_stage(o)) continue;  // another pipeline stage's state
    const int64_t rpb = s.grows() ? block_tokens_ / s.ratio : s.rows_fixed;
    if (const RowShard sh = dcp_row_shard(o.kind, opts_.dcp); sh.sharded())
      STRATA_CHECK_MSG(rpb % (sh.interleave * sh.size) == 0,
                       "block_tokens {}: {} rows per block of {} do not split over {} DCP ranks x "
                       "{} rows per ownership run", block_tokens_, rpb, o.label, sh.size,
                       sh.interleave);
    auto key = std::make_tuple(static_cast<int>(o.kind), s.ratio, rpb, s.row_bytes);
    auto it = key_to_pool.find(key);
    int p;
    if (it == key_to_pool.end()) {
      p = static_cast<int>(I.pool_info.size());
      key_to_pool[key] = p;
      I.pool_info.push_back(PoolInfo{o.kind, s.ratio, rpb, s.row_bytes, 0, 0, {}});
      owners_in_pool.push_back(0);
    } else {
      p = it->second;
    }
    I.pool_of[o.id] = p;
    I.pool_info[p].owners.push_back(o.id);
    ++owners_in_pool[p];
    I.paged[o.id] = s.grows();
    if (s.grows()) I.paged_owners.push_back(o.id);
    I.ringfixed[o.id] = s.fixed();
    I.any_ringfixed |= s.fixed();
  }
  I.snapshots = opts_.boundary_snapshots && I.any_ringfixed;
  for (size_t p = 0; p < I.pool_info.size(); ++p) {
    PoolInfo& pi = I.pool_info[p];
    const bool grows = pi.kind == StateKind::kCompressedKv || pi.kind == StateKind::kIndexKeys ||
                       pi.kind == StateKind::kPlainKv;
    int64_t per_owner = grows ? ceil_div(opts_.max_tokens, block_tokens_) + opts_.max_seqs
                              : opts_.max_seqs + (I.snapshots ? opts_.snapshot_slots : 0);
    pi.num_blocks = per_owner * owners_in_pool[p];
    I.pools.emplace_back(pi.num_blocks, pi.rows_per_block, pi.row_bytes, opts_.allocate_storage,
                         dcp_row_shard(pi.kind, opts_.dcp));
  }
  // Root of the hash chain: model identity, formats, unit, salt.
  std::string id = fmt::format("{}|u{}|salt{}", graph_.model_name(), block_tokens_,
                               opts_.prefix_salt);
  for (const auto& o : owners)
    id += fmt::format("|{}:{}:{}:{}", state_kind_name(o.kind), o.layer,
                      row_format_name(o.spec.format), o.spec.quant_block);
  I.root_key = XXH3_64bits(id.data(), id.size());
  // Store layout: the identity adds every pool's geometry to the root.
  for (const auto& o : owners) {
    const int p = I.pool_of[o.id];
    if (p < 0) continue;
    id += fmt::format("|o{}:p{}:{}x{}", o.id, p, I.pools[p].rows_per_block(),
                      I.pools[p].row_bytes());
    if (const RowShard& sh = I.pools[p].shard(); sh.sharded())  // a rank's rows only
      id += fmt::format(":dcp{}/{}/{}", sh.rank, sh.size, sh.interleave);
    if (I.paged[o.id]) I.paged_sizes.push_back(I.pools[p].block_bytes());
    if (I.ringfixed[o.id]) {
      I.ringfixed_owners.push_back(o.id);
      I.snapshot_sizes.push_back(I.pools[p].block_bytes());
    }
  }
  I.identity = XXH3_64bits(id.data(), id.size());
  I.store = opts_.unit_store;
  opts_.unit_store.reset();  // the Impl holds it
  if (I.store) {
    // A tier whose whole budget is below one unit object stores nothing: say so once.
    int64_t unit = 0;
    for (int64_t b : I.paged_sizes) unit += b;
    if (I.snapshots)
      for (int64_t b : I.snapshot_sizes) unit += b;
    for (const TierStats& t : I.store->stats())
      if (t.capacity_bytes > 0 && t.capacity_bytes < unit)
        spdlog::warn("strata: {} tier: its budget of {} bytes is below one cached unit ({} "
                     "bytes): it will store nothing", t.tier, t.capacity_bytes, unit);
  }
}

CacheManager::~CacheManager() = default;

void CacheManager::perturb_restore(Seq& s, const std::vector<const Entry*>& chain) {
  Impl& I = *impl_;
  if (opts_.dcp.sharded()) return;  // not built under DCP (rows of other ranks)
  const int64_t hit = static_cast<int64_t>(chain.size()) * block_tokens_;
  for (const auto& o : graph_.owners()) {
    if (static_cast<int>(o.kind) != opts_.debug_perturb_restore_kind) continue;
    const int p = I.pool_of[o.id];
    if (p < 0 || !I.pools[p].has_storage()) continue;
    BlockPool& pool = I.pools[p];
    uint8_t* row = nullptr;
    if (I.paged[o.id]) {
      const BlockId b = chain.front()->paged[o.id];
      if (!I.perturbed.insert({p, b}).second) continue;  // a shared block: once
      row = pool.row(b, 0);
    } else {
      const int64_t r =
          o.spec.granularity == Granularity::kRing ? (hit - 1) % pool.rows_per_block() : 0;
      row = pool.row(s.tables[o.id].front(), r);
    }
    row[0] ^= 0x5A;
  }
}

int64_t CacheManager::boundary_snapshot_bytes() const {
  if (!impl_->snapshots) return 0;
  int64_t b = 0;
  for (const auto& o : graph_.owners())
    if (impl_->ringfixed[o.id]) b += o.spec.bytes_per_request();
  return b;
}

// ---------------- sequences ----------------

void CacheManager::add_sequence(CacheSeqId seq, const std::vector<int32_t>& prompt) {
  STRATA_CHECK_MSG(!impl_->seqs.count(seq), "sequence {} already exists", seq);
  Seq s;
  s.tokens = prompt;
  s.tables.resize(graph_.owners().size());
  impl_->seqs.emplace(seq, std::move(s));
}

void CacheManager::append_tokens(CacheSeqId seq, const std::vector<int32_t>& ids) {
  auto it = impl_->seqs.find(seq);
  STRATA_CHECK_MSG(it != impl_->seqs.end(), "unknown sequence {}", seq);
  it->second.tokens.insert(it->second.tokens.end(), ids.begin(), ids.end());
}

bool CacheManager::has_sequence(CacheSeqId seq) const { return impl_->seqs.count(seq) > 0; }

int64_t CacheManager::num_computed(CacheSeqId seq) const { return impl_->seqs.at(seq).computed; }
int64_t CacheManager::num_known(CacheSeqId seq) const {
  return static_cast<int64_t>(impl_->seqs.at(seq).tokens.size());
}

void CacheManager::release(CacheSeqId seq) {
  auto it = impl_->seqs.find(seq);
  STRATA_CHECK_MSG(it != impl_->seqs.end(), "release of unknown sequence {}", seq);
  if (it->second.in_flight) {  // the step still reads/writes: keep everything until it ends
    it->second.pending_release = true;
    return;
  }
  for (size_t o = 0; o < it->second.tables.size(); ++o)
    for (BlockId b : it->second.tables[o]) impl_->pools[impl_->pool_of[o]].unref(b);
  impl_->seqs.erase(it);
  ++impl_->generation;
}

// ---------------- prefix matching ----------------


int64_t CacheManager::cached_prefix_tokens(const std::vector<int32_t>& tokens) const {
  return match_units(tokens, /*load=*/false) * block_tokens_;
}

// ---------------- plan / commit ----------------

StepPlan CacheManager::plan_step(const std::vector<CacheStepItem>& items) const {
  const Impl& I = *impl_;
  StepPlan p;
  p.generation = I.generation;
  p.id = I.next_plan_id++;
  const auto& owners = graph_.owners();
  std::vector<int64_t> need(I.pools.size(), 0);
  std::set<uint64_t> pinned;  // entries a hit in this plan uses
  std::set<CacheSeqId> seen;
  const int64_t u = block_tokens_;
  for (const CacheStepItem& it : items) {
    auto sit = I.seqs.find(it.seq);
    STRATA_CHECK_MSG(sit != I.seqs.end(), "plan_step: unknown sequence {}", it.seq);
    STRATA_CHECK_MSG(seen.insert(it.seq).second, "plan_step: sequence {} twice", it.seq);
    const Seq& s = sit->second;
    STRATA_CHECK_MSG(!s.in_flight && !s.pending_release, "plan_step: sequence {} in flight",
                     it.seq);
    SeqStepPlan sp;
    sp.seq = it.seq;
    const int64_t len = static_cast<int64_t>(s.tokens.size());
    int64_t have_units = 0;  // paged blocks shared from the cache (first step)
    if (!s.started) {
      sp.first_step = true;
      const int64_t best = match_units(s.tokens, /*load=*/true);
      int64_t from_store = 0;  // units of the hit restored from the store: new blocks
      uint64_t key = I.root_key;
      for (int64_t k = 0; k < best; ++k) {
        key = chain_key(key, s.tokens.data() + k * u, u);
        pinned.insert(key);
        from_store += I.entries.count(key) == 0;
      }
      for (OwnerId oid : I.paged_owners) need[I.pool_of[oid]] += from_store;
      sp.hit_tokens = best * u;
      have_units = best;
      sp.start_pos = sp.hit_tokens;
      for (const auto& o : owners)
        if (I.ringfixed[o.id]) {
          ++need[I.pool_of[o.id]];
          if (best > 0 && I.snapshots) ++p.copies;
        }
    } else {
      sp.start_pos = s.computed;
    }
    sp.num_tokens = std::max<int64_t>(0, std::min(it.max_tokens, len - sp.start_pos));
    const int64_t end = sp.start_pos + sp.num_tokens;
    for (OwnerId oid : I.paged_owners) {
      const auto& o = owners[oid];
      const int64_t rpb = I.pools[I.pool_of[o.id]].rows_per_block();
      const int64_t blocks_end = ceil_div(end / o.spec.ratio, rpb);
      const int64_t have = s.started ? static_cast<int64_t>(s.tables[o.id].size()) : have_units;
      need[I.pool_of[o.id]] += std::max<int64_t>(0, blocks_end - have);
    }
    p.seqs.push_back(sp);
  }
  p.new_blocks = need;
  // Evict LRU leaf entries while a pool is short.
  auto short_pool = [&](const std::vector<int64_t>& freed) {
    for (size_t q = 0; q < need.size(); ++q)
      if (need[q] > I.pools[q].num_free() + freed[q]) return static_cast<int>(q);
    return -1;
  };
  std::vector<int64_t> freed(I.pools.size(), 0);
  if (short_pool(freed) >= 0 && !I.entries.empty()) {
    auto by_lru = [](const Entry* a, const Entry* b) { return a->lru < b->lru; };
    auto is_short = [&](int q) { return need[q] > I.pools[q].num_free() + freed[q]; };
    // Phase 1: boundary snapshots (ring/fixed pools) have no dependents: drop LRU ones first,
    // except the snapshot a hit in this plan restores.
    std::vector<const Entry*> snaps;
    for (const auto& [k, e] : I.entries)
      if (!e.snapshot.empty()) snaps.push_back(&e);
    std::sort(snaps.begin(), snaps.end(), by_lru);
    for (const Entry* e : snaps) {
      if (short_pool(freed) < 0) break;
      if (pinned.count(e->key)) continue;
      bool helps = false;
      for (size_t o = 0; o < e->snapshot.size(); ++o)
        helps |= e->snapshot[o] >= 0 && is_short(I.pool_of[o]);
      if (!helps) continue;
      p.drop_snapshots.push_back(e->key);
      for (size_t o = 0; o < e->snapshot.size(); ++o)
        if (e->snapshot[o] >= 0) ++freed[I.pool_of[o]];
    }
  }
  if (short_pool(freed) >= 0 && !I.entries.empty()) {
    std::vector<const Entry*> order;
    order.reserve(I.entries.size());
    for (const auto& [k, e] : I.entries) order.push_back(&e);
    std::sort(order.begin(), order.end(),
              [](const Entry* a, const Entry* b) { return a->lru < b->lru; });
    auto is_short = [&](int q) { return need[q] > I.pools[q].num_free() + freed[q]; };
    // Phase 2: whole leaf entries, LRU first, only if they free a block of a short pool (an
    // entry whose blocks running sequences still hold frees nothing and stays).
    std::unordered_map<uint64_t, int64_t> children;
    for (const Entry* e : order) children[e->key] = e->children;
    // Min-heap of current leaves by LRU; evicting a leaf may turn its parent into a leaf.
    auto later = [](const Entry* x, const Entry* y) { return x->lru > y->lru; };
    std::priority_queue<const Entry*, std::vector<const Entry*>, decltype(later)> leaves(later);
    for (const Entry* e : order)
      if (e->children == 0) leaves.push(e);
    std::set<uint64_t> dropped(p.drop_snapshots.begin(), p.drop_snapshots.end());
    while (short_pool(freed) >= 0 && !leaves.empty()) {
      const Entry* e = leaves.top();
      leaves.pop();
      if (pinned.count(e->key)) continue;
      bool helps = false;
      for (size_t o = 0; o < e->paged.size(); ++o)
        helps |= e->paged[o] >= 0 && I.pools[I.pool_of[o]].refcount(e->paged[o]) == 1 &&
                 is_short(I.pool_of[o]);
      if (!helps) continue;
      p.evict.push_back(e->key);
      for (size_t o = 0; o < e->paged.size(); ++o)
        if (e->paged[o] >= 0 && I.pools[I.pool_of[o]].refcount(e->paged[o]) == 1)
          ++freed[I.pool_of[o]];
      if (!dropped.count(e->key))
        for (size_t o = 0; o < e->snapshot.size(); ++o)
          if (e->snapshot[o] >= 0) ++freed[I.pool_of[o]];
      if (e->index > 0 && --children[e->parent] == 0) leaves.push(&I.entries.at(e->parent));
    }
  }
  const int sp = short_pool(freed);
  if (sp >= 0) {
    p.outcome = PlanOutcome::kOutOfBlocks;
    p.short_pool = sp;
    p.blocks_needed = need[sp];
    p.blocks_available = I.pools[sp].num_free() + freed[sp];
    p.shortfall = fmt::format("pool {} ({} ratio {}): need {} blocks, {} available", sp,
                              state_kind_name(I.pool_info[sp].kind), I.pool_info[sp].ratio,
                              p.blocks_needed, p.blocks_available);
    p.evict.clear();
    p.drop_snapshots.clear();
  }
  return p;
}

int64_t CacheManager::suggest_chunk(CacheSeqId seq, int64_t max_tokens) const {
  const Seq& s = impl_->seqs.at(seq);
  const int64_t len = static_cast<int64_t>(s.tokens.size());
  const int64_t start = s.started ? s.computed : plan_step({{seq, 1}}).seqs[0].start_pos;
  const int64_t n = std::max<int64_t>(0, std::min(max_tokens, len - start));
  const int64_t b = ((len - 1) / block_tokens_) * block_tokens_;
  if (impl_->snapshots) {
    // Every unit boundary up to b ends a step, so each one gets its boundary snapshot and a
    // later prompt sharing any number of whole units hits all of them, whichever request
    // published them (issue 22 item 5).
    const int64_t next = (start / block_tokens_ + 1) * block_tokens_;
    if (next <= b && start + n > next) return next - start;
  }
  if (start < b && start + n > b) return b - start;
  return n;
}

Status CacheManager::truncate(CacheSeqId seq, int64_t new_len) {
  Impl& I = *impl_;
  auto it = I.seqs.find(seq);
  STRATA_CHECK_MSG(it != I.seqs.end(), "truncate of unknown sequence {}", seq);
  Seq& s = it->second;
  STRATA_CHECK_MSG(!s.in_flight, "truncate of sequence {} during a step", seq);
  STRATA_CHECK_MSG(new_len > 0 && new_len <= s.computed, "truncate of sequence {} to {} of {}",
                   seq, new_len, s.computed);
  if (new_len == s.computed) return ok_status();
  if (I.any_ringfixed) {
    if (!s.undo_on || new_len < s.undo_from)
      return Status(StatusCode::kUnimplemented,
                    fmt::format("ring / fixed state of sequence {} cannot be cut back to {}: no "
                                "undo record covers it", seq, new_len));
    for (const Seq::Undo& u : s.undo)
      if (u.start < new_len && u.end > new_len)
        return Status(StatusCode::kUnimplemented,
                      fmt::format("sequence {}: the step [{}, {}) straddles {}", seq, u.start,
                                  u.end, new_len));
  }
  // Copies first (the only step that can fail), then the cuts.
  std::vector<int64_t> copies(I.pools.size(), 0);
  for (OwnerId oid : I.paged_owners) {
    const BlockPool& pool = I.pools[I.pool_of[oid]];
    const int64_t rows = new_len / graph_.owners()[oid].spec.ratio;
    const int64_t keep = ceil_div(rows, pool.rows_per_block());
    if (rows % pool.rows_per_block() != 0 && pool.refcount(s.tables[oid][keep - 1]) > 1)
      ++copies[I.pool_of[oid]];
  }
  for (size_t p = 0; p < copies.size(); ++p)
    if (I.pools[p].num_free() < copies[p])
      return Status(StatusCode::kResourceExhausted,
                    fmt::format("truncate: {} blocks to copy, {} free", copies[p], I.pools[p].num_free()));
  // Ring / fixed rows back as they were after position new_len - 1, newest change first.
  while (!s.undo.empty() && s.undo.back().start >= new_len) {
    const Seq::Undo& u = s.undo.back();
    BlockPool& pool = I.pools[I.pool_of[u.owner]];
    std::memcpy(pool.row(s.tables[u.owner][0], u.row % pool.rows_per_block()), u.bytes.data(),
                u.bytes.size());
    s.undo.pop_back();
  }
  for (OwnerId oid : I.paged_owners) {
    BlockPool& pool = I.pools[I.pool_of[oid]];
    std::vector<BlockId>& table = s.tables[oid];
    const int64_t rows = new_len / graph_.owners()[oid].spec.ratio;
    const int64_t keep = ceil_div(rows, pool.rows_per_block());
    while (static_cast<int64_t>(table.size()) > keep) {
      pool.unref(table.back());
      table.pop_back();
    }
    if (rows % pool.rows_per_block() != 0 && pool.refcount(table.back()) > 1) {
      const BlockId copy = pool.allocate();
      pool.copy_block(copy, table.back());
      pool.unref(table.back());
      table.back() = copy;
    }
  }
  s.tokens.resize(static_cast<size_t>(new_len));
  s.computed = new_len;
  const int64_t u = block_tokens_;
  if (s.published > new_len / u) {
    s.published = new_len / u;
    uint64_t key = I.root_key;
    for (int64_t k = 0; k < s.published; ++k) key = chain_key(key, s.tokens.data() + k * u, u);
    s.last_key = key;
  }
  ++I.generation;
  return ok_status();
}

void CacheManager::commit(const StepPlan& plan) {
  Impl& I = *impl_;
  STRATA_CHECK_MSG(plan.outcome == PlanOutcome::kOk, "commit of a plan that did not fit: {}",
                   plan.shortfall);
  STRATA_CHECK_MSG(plan.generation == I.generation,
                   "commit of a stale plan (generation {} vs {})", plan.generation, I.generation);
  for (uint64_t key : plan.drop_snapshots) {
    Entry& e = I.entries.at(key);
    for (size_t o = 0; o < e.snapshot.size(); ++o)
      if (e.snapshot[o] >= 0) I.pools[I.pool_of[o]].unref(e.snapshot[o]);
    e.snapshot.clear();
  }
  for (uint64_t key : plan.evict) {
    auto it = I.entries.find(key);
    STRATA_CHECK(it != I.entries.end() && it->second.children == 0);
    const Entry& e = it->second;
    for (size_t o = 0; o < e.paged.size(); ++o)
      if (e.paged[o] >= 0) I.pools[I.pool_of[o]].unref(e.paged[o]);
    for (size_t o = 0; o < e.snapshot.size(); ++o)
      if (e.snapshot[o] >= 0) I.pools[I.pool_of[o]].unref(e.snapshot[o]);
    if (e.index > 0) --I.entries.at(e.parent).children;
    I.entries.erase(it);
  }
  const auto& owners = graph_.owners();
  const int64_t u = block_tokens_;
  std::vector<std::pair<uint64_t, CacheSeqId>> snapshot_from_store;  // (entry, hitting seq)
  for (const SeqStepPlan& sp : plan.seqs) {
    Seq& s = I.seqs.at(sp.seq);
    if (sp.first_step) {
      STRATA_CHECK(!s.started);
      // Hit chain.
      std::vector<const Entry*> chain;
      uint64_t key = I.root_key;
      for (int64_t k = 0; k < sp.hit_tokens / u; ++k) {
        key = chain_key(key, s.tokens.data() + k * u, u);
        auto eit = I.entries.find(key);
        Entry& e = eit != I.entries.end() ? eit->second : materialize(key);
        e.lru = ++I.lru_clock;
        chain.push_back(&e);
      }
      for (const auto& o : owners) {
        const int p = I.pool_of[o.id];
        if (p < 0) continue;
        if (I.paged[o.id]) {
          for (const Entry* e : chain) {
            I.pools[p].ref(e->paged[o.id]);
            s.tables[o.id].push_back(e->paged[o.id]);
          }
        } else {
          BlockId b = I.pools[p].allocate();
          s.tables[o.id].push_back(b);
          if (!chain.empty() && I.snapshots) {
            if (!chain.back()->snapshot.empty()) {
              I.pools[p].copy_block(b, chain.back()->snapshot[o.id]);
            } else {  // the unit's snapshot came from the store (plan_step staged it)
              if (snapshot_from_store.empty() || snapshot_from_store.back().second != sp.seq)
                snapshot_from_store.emplace_back(chain.back()->key, sp.seq);
              const UnitObject& obj = I.staged.at(chain.back()->key);
              STRATA_CHECK(obj.has_snapshot);
              const size_t sec = I.paged_owners.size() +
                  (std::find(I.ringfixed_owners.begin(), I.ringfixed_owners.end(), o.id) -
                   I.ringfixed_owners.begin());
              STRATA_CHECK(static_cast<int64_t>(obj.sections.at(sec).size()) ==
                           I.pools[p].block_bytes());
              if (I.pools[p].has_storage())
                std::memcpy(I.pools[p].block_data(b), obj.sections[sec].data(),
                            obj.sections[sec].size());
            }
          } else if (I.pools[p].has_storage()) {
            // Fresh state: zeros; compressor score = -inf; Engram history = -2.
            const StateSpec& spec = o.spec;
            for (int64_t r = 0; r < I.pools[p].rows_per_block(); ++r) {
              uint8_t* row = I.pools[p].row(b, r);
              std::fill(row, row + spec.row_bytes, 0);
              if (o.kind == StateKind::kCompressorState ||
                  o.kind == StateKind::kIndexCompressorState) {
                const float ninf = -std::numeric_limits<float>::infinity();
                const int w = spec.row_elems / 2;
                for (int i = w; i < 2 * w; ++i) std::memcpy(row + 4 * i, &ninf, 4);
              } else if (o.kind == StateKind::kEngramHistory) {
                const int32_t before_start = -2;
                for (int i = 0; i < spec.row_elems; ++i) std::memcpy(row + 4 * i, &before_start, 4);
              }
            }
          }
        }
      }
      if (!chain.empty() && opts_.debug_perturb_restore_kind >= 0) perturb_restore(s, chain);
      s.started = true;
      s.computed = sp.hit_tokens;
      s.published = sp.hit_tokens / u;
      s.last_key = key;
    }
    STRATA_CHECK(s.computed == sp.start_pos);
    s.step_start = sp.start_pos;
    const int64_t end = sp.start_pos + sp.num_tokens;
    for (OwnerId oid : I.paged_owners) {
      const auto& o = owners[oid];
      BlockPool& pool = I.pools[I.pool_of[o.id]];
      const int64_t blocks_end = ceil_div(end / o.spec.ratio, pool.rows_per_block());
      while (static_cast<int64_t>(s.tables[o.id].size()) < blocks_end)
        s.tables[o.id].push_back(pool.allocate());
    }
    s.computed = end;
    s.in_flight = plan.id;
  }
  // A hit whose boundary snapshot came from the store keeps it in the working pool too when
  // every ring / fixed pool has a free block left after this step's allocations (so the next
  // hit on it reads no store); otherwise the next hit loads it again.
  for (const auto& [key, seq] : snapshot_from_store) {
    auto e = I.entries.find(key);
    if (e == I.entries.end() || !e->second.snapshot.empty()) continue;
    std::vector<int64_t> want(I.pools.size(), 0);
    for (OwnerId o : I.ringfixed_owners) ++want[I.pool_of[o]];
    bool room = true;
    for (size_t p = 0; p < want.size(); ++p) room &= I.pools[p].num_free() >= want[p];
    if (!room) continue;
    const Seq& s = I.seqs.at(seq);
    e->second.snapshot.assign(owners.size(), -1);
    for (OwnerId o : I.ringfixed_owners) {
      BlockPool& pool = I.pools[I.pool_of[o]];
      const BlockId b = pool.allocate();
      pool.copy_block(b, s.tables[o][0]);
      e->second.snapshot[o] = b;
    }
  }
  I.staged.clear();
  I.staged_boundaries.clear();
  ++I.generation;
}

void CacheManager::finish_step(const StepPlan& plan) {
  Impl& I = *impl_;
  const auto& owners = graph_.owners();
  const int64_t u = block_tokens_;
  for (const SeqStepPlan& sp : plan.seqs) {
    auto it = I.seqs.find(sp.seq);
    if (it == I.seqs.end()) continue;
    Seq& s = it->second;
    if (s.in_flight != plan.id) continue;
    s.in_flight = 0;
    if (s.pending_release) {
      release(sp.seq);
      continue;
    }
    if (!opts_.prefix_cache) continue;
    const int64_t full = s.computed / u;
    uint64_t key = s.published ? s.last_key : I.root_key;
    int64_t done = s.published;
    std::vector<uint64_t> created;  // entries this step published (written to the store)
    for (int64_t k = s.published; k < full; ++k) {
      const uint64_t parent = key;
      if (k > 0 && !I.entries.count(parent)) break;  // parent evicted meanwhile: stop chain
      key = chain_key(parent, s.tokens.data() + k * u, u);
      done = k + 1;
      auto e = I.entries.find(key);
      if (e != I.entries.end()) {
        e->second.lru = ++I.lru_clock;
        continue;
      }
      Entry ne;
      ne.key = key;
      ne.parent = parent;
      ne.index = k;
      ne.tokens.assign(s.tokens.begin() + k * u, s.tokens.begin() + (k + 1) * u);
      ne.paged.assign(owners.size(), -1);
      for (const auto& o : owners) {
        if (!I.paged[o.id]) continue;
        BlockId b = s.tables[o.id].at(k);
        I.pools[I.pool_of[o.id]].ref(b);
        ne.paged[o.id] = b;
      }
      ne.lru = ++I.lru_clock;
      if (k > 0) ++I.entries.at(parent).children;
      I.entries.emplace(key, std::move(ne));
      created.push_back(key);
    }
    s.published = done;
    s.last_key = key;
    // Boundary snapshot when the step ended exactly on a unit boundary.
    if (I.snapshots && done == full && full > 0 && s.computed == full * u) {
      auto e = I.entries.find(key);
      if (e != I.entries.end() && e->second.snapshot.empty()) {
        bool room = true;
        std::vector<int64_t> want(I.pools.size(), 0);
        for (const auto& o : owners)
          if (I.ringfixed[o.id]) ++want[I.pool_of[o.id]];
        for (size_t p = 0; p < want.size(); ++p) room &= I.pools[p].num_free() >= want[p];
        // No room: the new boundary replaces the least recently used snapshots.
        while (!room) {
          Entry* lru = nullptr;
          for (auto& [k2, e2] : I.entries)
            if (!e2.snapshot.empty() && k2 != key && (!lru || e2.lru < lru->lru)) lru = &e2;
          if (!lru) break;
          for (size_t o = 0; o < lru->snapshot.size(); ++o)
            if (lru->snapshot[o] >= 0) I.pools[I.pool_of[o]].unref(lru->snapshot[o]);
          lru->snapshot.clear();
          room = true;
          for (size_t p = 0; p < want.size(); ++p) room &= I.pools[p].num_free() >= want[p];
        }
        if (room) {
          e->second.snapshot.assign(owners.size(), -1);
          for (const auto& o : owners) {
            if (!I.ringfixed[o.id]) continue;
            BlockPool& pool = I.pools[I.pool_of[o.id]];
            BlockId b = pool.allocate();
            pool.copy_block(b, s.tables[o.id][0]);
            e->second.snapshot[o.id] = b;
          }
          if (I.store && std::find(created.begin(), created.end(), key) == created.end())
            created.push_back(key);  // an existing unit gained its snapshot: store it again
        }
      }
    }
    if (I.store)
      for (uint64_t k : created) store_entry(I.entries.at(k));
  }
  ++I.generation;
}

// ---------------- storage ----------------

namespace {
struct RowLoc {
  BlockPool* pool;
  BlockId block;
  int64_t row;
};
}  // namespace

#define STRATA_ROW_LOC(SEQ, OWNER, ROW, LOC)                                                   \
  const Impl& I_ = *impl_;                                                                     \
  auto sit_ = I_.seqs.find(SEQ);                                                               \
  STRATA_CHECK_MSG(sit_ != I_.seqs.end(), "unknown sequence {}", SEQ);                         \
  STRATA_CHECK_MSG((OWNER) >= 0 && (OWNER) < static_cast<int>(I_.pool_of.size()) &&            \
                       I_.pool_of[OWNER] >= 0,                                                 \
                   "owner {} has no storage", OWNER);                                          \
  const auto& tab_ = sit_->second.tables[OWNER];                                               \
  BlockPool& pool_ = const_cast<BlockPool&>(I_.pools[I_.pool_of[OWNER]]);                     \
  int64_t blk_, r_;                                                                            \
  if (I_.paged[OWNER]) {                                                                       \
    blk_ = (ROW) / pool_.rows_per_block();                                                     \
    r_ = (ROW) % pool_.rows_per_block();                                                       \
  } else {                                                                                     \
    blk_ = 0;                                                                                  \
    r_ = (ROW) % pool_.rows_per_block();                                                       \
  }                                                                                            \
  STRATA_CHECK_MSG((ROW) >= 0 && blk_ < static_cast<int64_t>(tab_.size()),                     \
                   "seq {} owner {}: row {} not allocated", SEQ, OWNER, ROW);                  \
  RowLoc LOC{&pool_, tab_[blk_], r_};

void CacheManager::store_row(CacheSeqId seq, OwnerId owner, int64_t row, const float* x,
                             const uint8_t* bytes) {
  STRATA_ROW_LOC(seq, owner, row, loc);
  STRATA_CHECK_MSG(loc.pool->refcount(loc.block) == 1,
                   "write into shared block (seq {}, {} row {}): shared blocks are immutable",
                   seq, graph_.owner(owner).label, row);
  uint8_t* dst = loc.pool->row(loc.block, loc.row);
  const StateSpec& spec = graph_.owner(owner).spec;
  const size_t n = static_cast<size_t>(spec.row_bytes);
  // While recording, a ring / fixed row's previous bytes are kept unless the write leaves
  // them as they were (compressor tails rewrite every slot per step).
  Seq& s = const_cast<Seq&>(sit_->second);
  const bool record = s.undo_on && !I_.paged[owner];
  if (record)
    s.undo.push_back({owner, row, s.step_start, s.computed, std::vector<uint8_t>(dst, dst + n)});
  if (x != nullptr) {
    encode_state_row(spec, x, dst);
  } else {
    std::memcpy(dst, bytes, n);
  }
  if (record && std::memcmp(dst, s.undo.back().bytes.data(), n) == 0) s.undo.pop_back();
}

void CacheManager::write_row(CacheSeqId seq, OwnerId owner, int64_t row, const float* x) {
  store_row(seq, owner, row, x, nullptr);
}

void CacheManager::write_raw_row(CacheSeqId seq, OwnerId owner, int64_t row,
                                 const uint8_t* bytes) {
  store_row(seq, owner, row, nullptr, bytes);
}

void CacheManager::record_undo(CacheSeqId seq, bool on) {
  auto it = impl_->seqs.find(seq);
  STRATA_CHECK_MSG(it != impl_->seqs.end(), "record_undo of unknown sequence {}", seq);
  Seq& s = it->second;
  STRATA_CHECK_MSG(!s.in_flight, "record_undo of sequence {} during a step", seq);
  s.undo.clear();
  s.undo.shrink_to_fit();
  s.undo_on = on;
  s.undo_from = s.computed;
}

int64_t CacheManager::undo_bytes(CacheSeqId seq) const {
  auto it = impl_->seqs.find(seq);
  if (it == impl_->seqs.end()) return 0;
  int64_t b = 0;
  for (const Seq::Undo& u : it->second.undo) b += static_cast<int64_t>(u.bytes.size());
  return b;
}

void CacheManager::read_row(CacheSeqId seq, OwnerId owner, int64_t row, float* out) const {
  STRATA_ROW_LOC(seq, owner, row, loc);
  decode_state_row(graph_.owner(owner).spec, loc.pool->row(loc.block, loc.row), out);
}

void CacheManager::read_rows(CacheSeqId seq, OwnerId owner, int64_t row0, int64_t n,
                             float* out) const {
  const StateSpec& spec = graph_.owner(owner).spec;
  const uint8_t* rows[64];
  for (int64_t i0 = 0; i0 < n; i0 += 64) {
    const int64_t m = std::min<int64_t>(64, n - i0);
    raw_rows(seq, owner, row0 + i0, m, rows);
    for (int64_t i = 0; i < m; ++i) decode_state_row(spec, rows[i], out + (i0 + i) * spec.row_elems);
  }
}

void CacheManager::raw_rows(CacheSeqId seq, OwnerId owner, int64_t row0, int64_t n,
                            const uint8_t** out) const {
  if (n <= 0) return;
  // One sequence / owner lookup for the run (STRATA_ROW_LOC checks the first row), then the
  // same block-table arithmetic per row, with the table bound checked for each.
  STRATA_ROW_LOC(seq, owner, row0, first);
  (void)first;
  const int64_t rpb = pool_.rows_per_block(), rb = pool_.row_bytes();
  const bool paged = I_.paged[owner];
  for (int64_t i = 0; i < n;) {
    const int64_t row = row0 + i;
    const int64_t blk = paged ? row / rpb : 0;
    STRATA_CHECK_MSG(blk < static_cast<int64_t>(tab_.size()), "seq {} owner {}: row {} not allocated",
                     seq, owner, row);
    // The rest of this block's rows in one run (a ring wraps at the block's end).
    const int64_t r0 = row % rpb, m = std::min(n - i, rpb - r0);
    if (const RowShard& sh = pool_.shard(); sh.sharded()) {  // null: another DCP rank's row
      std::fill(out + i, out + i + m, nullptr);
      uint8_t* const base = pool_.block_data(tab_[blk]);
      dcp::for_owned(r0, r0 + m, sh.interleave, sh.size, sh.rank, [&](int64_t r) {
        out[i + r - r0] = base + dcp::local_index(r, sh.interleave, sh.size) * rb;
      });
    } else {
      const uint8_t* base = pool_.block_data(tab_[blk]);
      for (int64_t j = 0; j < m; ++j) out[i + j] = base + (r0 + j) * rb;
    }
    i += m;
  }
}

const uint8_t* CacheManager::raw_row(CacheSeqId seq, OwnerId owner, int64_t row) const {
  STRATA_ROW_LOC(seq, owner, row, loc);
  return loc.pool->row(loc.block, loc.row);
}

namespace {
OwnerId need_owner(const StateGraph& g, StateKind k, int layer) {
  OwnerId o = g.find_owner(k, layer);
  STRATA_CHECK_MSG(o >= 0, "layer {} owns no {}", layer, state_kind_name(k));
  return o;
}
}  // namespace

void CacheManager::write_window_row(CacheSeqId seq, int layer, int64_t pos, const float* x) {
  write_row(seq, need_owner(graph_, StateKind::kWindowKv, layer), pos, x);
}
void CacheManager::read_window_row(CacheSeqId seq, int layer, int64_t pos, float* out) const {
  read_row(seq, need_owner(graph_, StateKind::kWindowKv, layer), pos, out);
}
void CacheManager::read_window_rows(CacheSeqId seq, int layer, int64_t pos0, int64_t n,
                                    float* out) const {
  read_rows(seq, need_owner(graph_, StateKind::kWindowKv, layer), pos0, n, out);
}
void CacheManager::read_window(CacheSeqId seq, int layer, float* out) const {
  OwnerId o = need_owner(graph_, StateKind::kWindowKv, layer);
  const StateSpec& s = graph_.owner(o).spec;
  for (int slot = 0; slot < s.rows_fixed; ++slot)
    read_row(seq, o, slot, out + static_cast<int64_t>(slot) * s.row_elems);
}
void CacheManager::write_compressed_row(CacheSeqId seq, int owner_layer, int64_t g, const float* x) {
  write_row(seq, need_owner(graph_, StateKind::kCompressedKv, owner_layer), g, x);
}
void CacheManager::read_compressed_rows(CacheSeqId seq, int owner_layer, int64_t g0, int64_t n,
                                        float* out) const {
  read_rows(seq, need_owner(graph_, StateKind::kCompressedKv, owner_layer), g0, n, out);
}
void CacheManager::write_index_key(CacheSeqId seq, int owner_layer, int64_t g, const float* x) {
  write_row(seq, need_owner(graph_, StateKind::kIndexKeys, owner_layer), g, x);
}
void CacheManager::read_index_keys(CacheSeqId seq, int owner_layer, int64_t g0, int64_t n,
                                   float* out) const {
  read_rows(seq, need_owner(graph_, StateKind::kIndexKeys, owner_layer), g0, n, out);
}

void CacheManager::get_compressor_state(CacheSeqId seq, int layer, bool index, float* kv,
                                        float* score) const {
  OwnerId o = need_owner(
      graph_, index ? StateKind::kIndexCompressorState : StateKind::kCompressorState, layer);
  const StateSpec& s = graph_.owner(o).spec;
  const int w = s.row_elems / 2;
  std::vector<float> row(s.row_elems);
  for (int r = 0; r < s.rows_fixed; ++r) {
    read_row(seq, o, r, row.data());
    std::copy(row.begin(), row.begin() + w, kv + static_cast<int64_t>(r) * w);
    std::copy(row.begin() + w, row.end(), score + static_cast<int64_t>(r) * w);
  }
}
void CacheManager::set_compressor_state(CacheSeqId seq, int layer, bool index, const float* kv,
                                        const float* score) {
  OwnerId o = need_owner(
      graph_, index ? StateKind::kIndexCompressorState : StateKind::kCompressorState, layer);
  const StateSpec& s = graph_.owner(o).spec;
  const int w = s.row_elems / 2;
  std::vector<float> row(s.row_elems);
  for (int r = 0; r < s.rows_fixed; ++r) {
    std::copy(kv + static_cast<int64_t>(r) * w, kv + static_cast<int64_t>(r + 1) * w, row.begin());
    std::copy(score + static_cast<int64_t>(r) * w, score + static_cast<int64_t>(r + 1) * w,
              row.begin() + w);
    write_row(seq, o, r, row.data());
  }
}

void CacheManager::get_engram_history(CacheSeqId seq, int32_t* ids) const {
  OwnerId o = need_owner(graph_, StateKind::kEngramHistory, -1);
  const StateSpec& s = graph_.owner(o).spec;
  std::vector<float> row(s.row_elems);
  read_row(seq, o, 0, row.data());
  for (int i = 0; i < s.row_elems; ++i) ids[i] = static_cast<int32_t>(row[i]);
}
void CacheManager::set_engram_history(CacheSeqId seq, const int32_t* ids) {
  OwnerId o = need_owner(graph_, StateKind::kEngramHistory, -1);
  const StateSpec& s = graph_.owner(o).spec;
  std::vector<float> row(s.row_elems);
  for (int i = 0; i < s.row_elems; ++i) row[i] = static_cast<float>(ids[i]);
  write_row(seq, o, 0, row.data());
}

// ---------------- introspection ----------------

std::vector<PoolInfo> CacheManager::pools() const {
  std::vector<PoolInfo> out = impl_->pool_info;
  for (size_t p = 0; p < out.size(); ++p) {
    out[p].num_blocks = impl_->pools[p].num_blocks();
    out[p].num_free = impl_->pools[p].num_free();
    out[p].stored_rows = impl_->pools[p].stored_rows();
  }
  return out;
}

int64_t CacheManager::num_cache_entries() const {
  return static_cast<int64_t>(impl_->entries.size());
}

int64_t CacheManager::total_free_blocks() const {
  int64_t t = 0;
  for (const auto& p : impl_->pools) t += p.num_free();
  return t;
}
int64_t CacheManager::total_blocks() const {
  int64_t t = 0;
  for (const auto& p : impl_->pools) t += p.num_blocks();
  return t;
}

void CacheManager::clear_prefix_cache() {
  Impl& I = *impl_;
  for (auto& [k, e] : I.entries) {
    for (size_t o = 0; o < e.paged.size(); ++o)
      if (e.paged[o] >= 0) I.pools[I.pool_of[o]].unref(e.paged[o]);
    for (size_t o = 0; o < e.snapshot.size(); ++o)
      if (e.snapshot[o] >= 0) I.pools[I.pool_of[o]].unref(e.snapshot[o]);
  }
  I.entries.clear();
  for (auto& [id, s] : I.seqs) {
    s.published = 0;
    s.last_key = 0;
  }
  ++I.generation;
}

void CacheManager::check_invariants() const {
  const Impl& I = *impl_;
  std::vector<std::vector<int32_t>> expect(I.pools.size());
  for (size_t p = 0; p < I.pools.size(); ++p) {
    std::string why;
    STRATA_CHECK_MSG(I.pools[p].check_invariants(&why), "pool {}: {}", p, why);
    expect[p].assign(I.pools[p].num_blocks(), 0);
  }
  const auto& owners = graph_.owners();
  for (const auto& [id, s] : I.seqs) {
    for (const auto& o : owners) {
      const int p = I.pool_of[o.id];
      const auto& tab = s.tables[o.id];
      if (p < 0) {
        STRATA_CHECK(tab.empty());
        continue;
      }
      for (BlockId b : tab) ++expect[p].at(b);
      if (!s.started) {
        STRATA_CHECK(tab.empty());
      } else if (I.paged[o.id]) {
        const int64_t want = ceil_div(s.computed / o.spec.ratio, I.pools[p].rows_per_block());
        STRATA_CHECK_MSG(static_cast<int64_t>(tab.size()) == want,
                         "seq {} {}: {} blocks for {} positions (want {})", id, o.label,
                         tab.size(), s.computed, want);
      } else {
        STRATA_CHECK(tab.size() == 1);
      }
    }
    STRATA_CHECK(s.computed <= static_cast<int64_t>(s.tokens.size()));
    STRATA_CHECK(s.published * block_tokens_ <= s.computed);
  }
  std::unordered_map<uint64_t, int64_t> kids;
  for (const auto& [k, e] : I.entries) {
    STRATA_CHECK(e.key == k);
    for (size_t o = 0; o < e.paged.size(); ++o)
      if (e.paged[o] >= 0) ++expect[I.pool_of[o]].at(e.paged[o]);
    for (size_t o = 0; o < e.snapshot.size(); ++o)
      if (e.snapshot[o] >= 0) ++expect[I.pool_of[o]].at(e.snapshot[o]);
    if (e.index > 0) {
      STRATA_CHECK_MSG(I.entries.count(e.parent), "cache entry {} lost its parent", e.index);
      ++kids[e.parent];
    }
  }
  for (const auto& [k, e] : I.entries)
    STRATA_CHECK_MSG(kids[k] == e.children, "entry children count {} vs {}", e.children, kids[k]);
  for (size_t p = 0; p < I.pools.size(); ++p)
    for (int64_t b = 0; b < I.pools[p].num_blocks(); ++b)
      STRATA_CHECK_MSG(I.pools[p].refcount(static_cast<BlockId>(b)) == expect[p][b],
                       "pool {} block {}: refcount {} but {} users", p, b,
                       I.pools[p].refcount(static_cast<BlockId>(b)), expect[p][b]);
}

}  // namespace strata
