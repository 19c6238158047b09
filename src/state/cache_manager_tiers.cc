// CacheManager: the unit store below the working pool (CacheOptions::unit_store). See
// cache_manager.h; the object format is unit_store.h's.
#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>

#include "base/check.h"
#include "state/cache_manager.h"
#include "state/cache_manager_internal.h"

namespace strata {

uint64_t CacheManager::store_identity() const { return impl_->identity; }
int64_t CacheManager::units_loaded() const { return impl_->units_loaded; }
int64_t CacheManager::units_stored() const { return impl_->units_stored; }

void CacheManager::prefetch(const std::vector<int32_t>& tokens) const {
  const Impl& I = *impl_;
  if (!I.store || !opts_.prefix_cache) return;
  const int64_t u = block_tokens_, len = static_cast<int64_t>(tokens.size());
  std::vector<uint64_t> keys;
  uint64_t key = I.root_key;
  for (int64_t k = 0; (k + 1) * u <= len - 1; ++k) {
    key = chain_key(key, tokens.data() + k * u, u);
    auto e = I.entries.find(key);
    if (e == I.entries.end() || (I.snapshots && e->second.snapshot.empty())) keys.push_back(key);
  }
  I.store->prefetch(keys);
}

int64_t CacheManager::match_units(const std::vector<int32_t>& tokens, bool load) const {
  const Impl& I = *impl_;
  if (!opts_.prefix_cache) return 0;
  const int64_t u = block_tokens_, len = static_cast<int64_t>(tokens.size());
  // The chain: units found in the working pool, then (when it runs out) in the store, whose
  // objects are fetched (load) because their paged rows are needed whatever the boundary.
  struct Unit {
    uint64_t key, parent;
    bool in_pool, snapshot;
  };
  std::vector<Unit> chain;
  uint64_t key = I.root_key;
  for (int64_t k = 0; (k + 1) * u <= len - 1; ++k) {
    const uint64_t parent = key;
    const int32_t* ids = tokens.data() + k * u;
    key = chain_key(parent, ids, u);
    auto e = I.entries.find(key);
    bool snapshot = false;
    if (e != I.entries.end()) {
      if (!std::equal(e->second.tokens.begin(), e->second.tokens.end(), ids)) break;
      chain.push_back({key, parent, true, !e->second.snapshot.empty()});
    } else if (I.store && probe_store(key, parent, k, ids, load, &snapshot)) {
      chain.push_back({key, parent, false, snapshot});
    } else {
      break;
    }
  }
  if (!I.snapshots) return static_cast<int64_t>(chain.size());
  // The boundary: the deepest unit whose ring / fixed snapshot is in the pool or the store
  // (a pool unit without one asks the store, deepest first, only until one is found).
  int64_t best = 0;
  for (int64_t k = static_cast<int64_t>(chain.size()) - 1; k >= 0 && best == 0; --k) {
    const Unit& c = chain[k];
    bool snapshot = c.snapshot;
    if (!snapshot && I.store)
      probe_store(c.key, c.parent, k, tokens.data() + k * u, load, &snapshot,
                  /*want_snapshot=*/true);
    if (snapshot) best = k + 1;
  }
  if (load) {
    // Only the boundary's snapshot is copied: drop the snapshot bytes of the other staged units
    // of this chain (a long hit must not hold one snapshot per unit), except where another
    // sequence of the plan being built uses that unit as its boundary. Staged objects are
    // never dropped here (another sequence of the same plan may restore them); commit clears.
    if (best > 0) I.staged_boundaries.insert(chain[best - 1].key);
    for (int64_t k = 0; k < static_cast<int64_t>(chain.size()); ++k) {
      auto st = I.staged.find(chain[k].key);
      if (st == I.staged.end() || !st->second.has_snapshot) continue;
      if (I.staged_boundaries.count(chain[k].key)) continue;
      st->second.sections.resize(I.paged_sizes.size());
      st->second.has_snapshot = false;
    }
  }
  return best;
}

bool CacheManager::probe_store(uint64_t key, uint64_t parent, int64_t k, const int32_t* ids,
                               bool load, bool* snapshot, bool want_snapshot) const {
  const Impl& I = *impl_;
  const int64_t u = block_tokens_;
  auto st = I.staged.find(key);
  if (st != I.staged.end()) {
    // Staged without its snapshot bytes (dropped for another hit's sake): fetch it again
    // when this hit wants to end there.
    if (!st->second.has_snapshot && want_snapshot && load) {
      std::optional<std::vector<uint8_t>> bytes = I.store->get(key);
      StatusOr<UnitObject> obj =
          bytes ? decode_unit_object(*bytes, I.identity, key, I.paged_sizes, I.snapshot_sizes)
                : StatusOr<UnitObject>(not_found("unit object {:016x} is gone", key));
      // The staged paged rows stay whatever happens (another hit may restore them).
      if (obj.ok() && obj->has_snapshot && obj->tokens == st->second.tokens)
        st->second = std::move(*obj);
    }
    *snapshot = st->second.has_snapshot;
    return true;
  }
  if (!load) {
    // Peek: a unit the store holds is assumed to carry its snapshot (every step that
    // publishes a unit ends on its boundary unless the step ran past it).
    *snapshot = true;
    return I.store->contains(key);
  }
  std::optional<std::vector<uint8_t>> bytes = I.store->get(key);
  if (!bytes) return false;
  StatusOr<UnitObject> obj =
      decode_unit_object(*bytes, I.identity, key, I.paged_sizes, I.snapshot_sizes);
  Status why = obj.ok() ? ok_status() : obj.status();
  if (obj.ok() && (obj->parent != (k == 0 ? I.root_key : parent) || obj->index != k ||
                   static_cast<int64_t>(obj->tokens.size()) != u ||
                   !std::equal(obj->tokens.begin(), obj->tokens.end(), ids)))
    why = failed_precondition("unit object {:016x}: chain position or token ids differ", key);
  if (!why.ok()) {
    spdlog::warn("strata: unit store: dropping unit {} ({}); its positions are recomputed", k,
                    why.to_string());
    I.store->reject(key);
    return false;
  }
  *snapshot = obj->has_snapshot;
  I.staged.emplace(key, std::move(*obj));
  return true;
}

CacheManager::Entry& CacheManager::materialize(uint64_t key) {
  Impl& I = *impl_;
  const UnitObject& obj = I.staged.at(key);
  Entry ne;
  ne.key = key;
  ne.parent = obj.parent;
  ne.index = obj.index;
  ne.tokens = obj.tokens;
  ne.paged.assign(graph_.owners().size(), -1);
  for (size_t i = 0; i < I.paged_owners.size(); ++i) {
    const OwnerId o = I.paged_owners[i];
    BlockPool& pool = I.pools[I.pool_of[o]];
    const BlockId b = pool.allocate();
    if (pool.has_storage()) std::memcpy(pool.block_data(b), obj.sections[i].data(), obj.sections[i].size());
    ne.paged[o] = b;
  }
  if (ne.index > 0) ++I.entries.at(ne.parent).children;
  ++I.units_loaded;
  return I.entries.emplace(key, std::move(ne)).first->second;
}

void CacheManager::store_entry(const Entry& e) {
  Impl& I = *impl_;
  if (!I.pools.empty() && !I.pools[0].has_storage()) return;  // metadata-only manager
  const bool snap = !e.snapshot.empty();
  if (!snap && I.store->contains(e.key)) return;  // never replace an object by a poorer one
  UnitObject o;
  o.identity = I.identity;
  o.key = e.key;
  o.parent = e.index == 0 ? I.root_key : e.parent;
  o.index = e.index;
  o.has_snapshot = snap;
  o.tokens = e.tokens;
  auto block = [&](OwnerId owner, BlockId b) {
    const BlockPool& pool = I.pools[I.pool_of[owner]];
    const uint8_t* p = pool.block_data(b);
    o.sections.emplace_back(p, p + pool.block_bytes());
  };
  for (OwnerId owner : I.paged_owners) block(owner, e.paged[owner]);
  if (snap)
    for (OwnerId owner : I.ringfixed_owners) block(owner, e.snapshot[owner]);
  I.store->put(e.key, encode_unit_object(o));
  ++I.units_stored;
}

}  // namespace strata
