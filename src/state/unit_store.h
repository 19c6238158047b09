// UnitStore: where prefix-cache units live below the working pool (host DRAM, disk, a pool
// shared between servers). The state module defines the interface and the object format;
// src/tiers implements the tiers (host, disk, Redis) and their chain.
//
// A stored object is one prefix-cache alignment unit, content-addressed by its chain key
// (CacheManager: XXH3 chain over token ids seeded by the model / format / unit / salt root,
// so two models never share a key). Its bytes are produced by encode_unit_object below and
// checked by decode_unit_object on every load; a store never interprets them.
//
// Thread safety: every method of an implementation may be called from any thread (the engine
// thread loads and stores, the HTTP thread reads stats()).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace strata {

// Counters of one tier (all since construction, except bytes / objects: current).
struct TierStats {
  std::string tier;             // "host", "disk", "redis"
  int64_t bytes = 0;            // bytes of objects held now (-1 = unknown, e.g. a shared pool)
  int64_t objects = 0;          // objects held now (-1 = unknown)
  int64_t capacity_bytes = 0;   // byte budget (0 = unbounded / not ours to bound)
  int64_t lookups = 0, hits = 0;
  int64_t stores = 0, store_bytes = 0;
  int64_t loads = 0, load_bytes = 0;
  int64_t evictions = 0;        // objects dropped (or demoted) for the byte budget
  int64_t demotions = 0;        // objects written to the next tier when evicted from this one
  int64_t promotions = 0;       // objects copied up from a lower tier on a hit
  int64_t prefetched = 0;       // of those, copied ahead of their admission (prefetch)
  int64_t rejected = 0;         // objects found corrupt / foreign on load and dropped
  int64_t errors = 0;           // I/O or connection failures (the operation was skipped)
  double load_seconds = 0, store_seconds = 0;  // summed wall time of loads / stores
  // Latency histograms: counts per bucket of kTierLatencyBounds (upper bounds in seconds; one
  // more bucket for +Inf); observe_* also adds to the sums above.
  std::vector<int64_t> load_hist, store_hist;
  void observe_load(double s) { load_seconds += s; add(&load_hist, s); }
  void observe_store(double s) { store_seconds += s; add(&store_hist, s); }
  // One answered load / one store of `n` bytes that took `s` seconds: every counter it moves.
  void count_load(int64_t n, double s) { ++hits; ++loads; load_bytes += n; observe_load(s); }
  void count_store(int64_t n, double s) { ++stores; store_bytes += n; observe_store(s); }

 private:
  static void add(std::vector<int64_t>* h, double s);
};

inline constexpr double kTierLatencyBounds[] = {1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3,
                                                1e-2, 2.5e-2, 5e-2, 0.1,  0.25,   1.0};
inline void TierStats::add(std::vector<int64_t>* h, double s) {
  constexpr size_t n = sizeof(kTierLatencyBounds) / sizeof(kTierLatencyBounds[0]);
  if (h->size() != n + 1) h->assign(n + 1, 0);
  size_t b = 0;
  while (b < n && s > kTierLatencyBounds[b]) ++b;
  ++(*h)[b];
}

class UnitStore {
 public:
  virtual ~UnitStore() = default;
  // Whether an object for `key` is (probably) here: no bytes move (a hint; get may still miss).
  virtual bool contains(uint64_t key) = 0;
  // The object's bytes, or nullopt when absent / unreadable (counted, never an error: a miss
  // makes the caller recompute).
  virtual std::optional<std::vector<uint8_t>> get(uint64_t key) = 0;
  // Stores (or replaces) the object. Errors are counted and swallowed: a failed store only
  // loses a future hit.
  virtual void put(uint64_t key, const std::vector<uint8_t>& bytes) = 0;
  // Drops the object (a corrupt or foreign one found by the caller); counts a rejection.
  virtual void reject(uint64_t key) = 0;
  // Writes what only volatile tiers hold to the persistent ones (shutdown).
  virtual void flush() {}
  // Starts copying these objects into the fastest tier in the background (a request waiting
  // for admission), so the load at admission is a fast one; returns at once. Objects already
  // there, or absent, are skipped. A request cancelled meanwhile leaves only a warmer tier.
  // Default: nothing (a single tier has nowhere faster to put them).
  virtual void prefetch(const std::vector<uint64_t>& keys) { (void)keys; }
  // Tests: returns when every prefetch issued so far is done.
  virtual void wait_prefetch() {}
  // The store-vs-recompute cost model's inputs and decision (docs/tiers.md): seconds to load
  // an object of `bytes` from each tier, measured now by writing, reading and removing a probe
  // object (top tier first; -1 where the probe failed) ...
  virtual std::vector<double> measure_load_seconds(int64_t bytes) {
    (void)bytes;
    return {};
  }
  // ... and which tiers published units are written to (false: recomputing beats loading
  // from that tier, so it is not worth the bytes). Default: every tier.
  virtual void set_admission(const std::vector<bool>& store_per_tier) { (void)store_per_tier; }
  // Removes an object without counting a rejection (probes).
  virtual void remove(uint64_t key) { reject(key); }
  // One entry per tier, top first.
  virtual std::vector<TierStats> stats() const = 0;
};

// ---- The object format ----------------------------------------------------------------------
//
//   header  magic "STRATAU1" | u32 version (1) | u32 flags (bit 0: has snapshot)
//           | u64 identity | u64 key | u64 parent | i64 index | u32 n_tokens | u32 n_sections
//   payload n_tokens x i32 token ids, then n_sections blocks: u64 byte size + bytes
//   trailer u64 XXH3-64 of everything before it
// identity = CacheManager::store_identity(): the hash root (model, unit, formats, salt) plus
// every pool's rows per block and row bytes, so an object of another model, format, unit or
// layout version is refused. Sections: one block per paged owner (owner order), then, with a
// snapshot, one block per ring / fixed owner (owner order). Little-endian host only.
struct UnitObject {
  uint64_t identity = 0;
  uint64_t key = 0, parent = 0;
  int64_t index = 0;
  bool has_snapshot = false;
  std::vector<int32_t> tokens;
  std::vector<std::vector<uint8_t>> sections;
};

std::vector<uint8_t> encode_unit_object(const UnitObject& o);
// DataLoss for a short, truncated, mis-sized or checksum-failing object; FailedPrecondition
// when its identity, key or section sizes differ from what the caller expects
// (expected_sections: byte size of each section without / with the snapshot part).
StatusOr<UnitObject> decode_unit_object(const std::vector<uint8_t>& bytes, uint64_t identity,
                                        uint64_t key, const std::vector<int64_t>& paged_sizes,
                                        const std::vector<int64_t>& snapshot_sizes);

}  // namespace strata
