// CacheManager's private state, shared by its translation units (cache_manager.cc: plan /
// commit / storage; cache_manager_tiers.cc: the unit store below the working pool). Not a
// public header: include only from src/state/cache_manager*.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <unordered_map>
#include <vector>

#include <xxhash.h>

#include "state/cache_manager.h"
#include "state/unit_store.h"

namespace strata {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Prefix-cache chain key of the unit `ids[0, n)` under `parent`.
inline uint64_t chain_key(uint64_t parent, const int32_t* ids, int64_t n) {
  return XXH3_64bits_withSeed(ids, static_cast<size_t>(n) * sizeof(int32_t), parent);
}

struct CacheManager::Seq {
  std::vector<int32_t> tokens;
  int64_t computed = 0;
  bool started = false;
  std::vector<std::vector<BlockId>> tables;  // per owner
  uint64_t in_flight = 0;                    // plan id, 0 = none
  bool pending_release = false;
  int64_t published = 0;                     // full units published to the prefix cache
  uint64_t last_key = 0;                     // chain key of unit `published - 1`
  int64_t step_start = 0;                    // first position of the step in flight / last
  // Undo record of ring / fixed rows (record_undo): the bytes a step [start, end) replaced.
  struct Undo {
    OwnerId owner = -1;
    int64_t row = 0, start = 0, end = 0;
    std::vector<uint8_t> bytes;
  };
  bool undo_on = false;
  int64_t undo_from = 0;
  std::vector<Undo> undo;
};

struct CacheManager::Entry {
  uint64_t key = 0, parent = 0;
  int64_t index = 0;                         // unit index k (tokens [k*u, (k+1)*u))
  std::vector<int32_t> tokens;               // the unit's ids (collision check)
  std::vector<BlockId> paged;                // per owner (-1 = not paged)
  std::vector<BlockId> snapshot;             // per owner (-1 = none); empty = no snapshot
  int64_t children = 0;
  uint64_t lru = 0;
};

struct CacheManager::Impl {
  std::vector<BlockPool> pools;
  std::vector<PoolInfo> pool_info;
  std::vector<int> pool_of;        // per owner, -1 = no storage
  std::vector<char> paged;         // per owner
  std::vector<char> ringfixed;     // per owner (with storage)
  std::vector<OwnerId> paged_owners;  // owners with paged (growing) storage
  std::unordered_map<CacheSeqId, Seq> seqs;
  std::unordered_map<uint64_t, Entry> entries;
  uint64_t root_key = 0;
  uint64_t generation = 1;
  mutable uint64_t next_plan_id = 1;
  uint64_t lru_clock = 0;
  bool any_ringfixed = false;
  std::set<std::pair<int, BlockId>> perturbed;  // debug_perturb_restore_kind: paged blocks done
  bool snapshots = true;  // CacheOptions::boundary_snapshots (and some ring/fixed owner)
  // Unit store below the working pool (CacheOptions::unit_store; null = none).
  std::shared_ptr<UnitStore> store;
  uint64_t identity = 0;                 // store_identity()
  std::vector<OwnerId> ringfixed_owners; // owners whose blocks a snapshot holds (owner order)
  std::vector<int64_t> paged_sizes, snapshot_sizes;  // section bytes (unit_store.h)
  // Objects fetched and verified by plan_step (load mode) for the next commit; cleared by
  // commit. Logically a cache of the store, so a const plan may fill it.
  mutable std::unordered_map<uint64_t, UnitObject> staged;
  mutable std::set<uint64_t> staged_boundaries;  // staged units a planned hit ends on
  int64_t units_loaded = 0, units_stored = 0;
};

}  // namespace strata
