// Tiers of prefix-cache units below the working pool (state/unit_store.h), and their chain.
//
//   host   objects in this process's memory, LRU within --host-cache-bytes; an object it
//          evicts is demoted to the disk tier (if any and not there yet).
//   disk   one file per object, <dir>/<key as 16 hex digits>.unit, written to a temporary
//          name and renamed (a crash never leaves a half object under a key), LRU within
//          --disk-cache-bytes; a restarted server finds the objects of the same directory.
//   redis  a pool shared between servers: key "strata:unit:<16 hex digits>", SET / GET /
//          EXISTS / DEL over one hiredis connection (reconnects after a failure; the pool's
//          memory limit is the Redis server's maxmemory setting).
// Movement (make_unit_store's chain): a unit the working pool publishes goes to the top tier
// (host, else disk) and, write-through, to the shared pool, so other servers hit it at once;
// a hit on a lower tier is promoted (copied) into the tiers above it; flush() (and the
// chain's destructor) demotes what only the host tier holds to disk, so a restart keeps it.
// Errors: I/O or connection failures are counted (TierStats::errors) and make the operation a
// miss; the constructor errors of make_unit_store are Status (bad URL, directory not
// creatable, Redis unreachable at start).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "state/unit_store.h"

namespace strata {

struct TierOptions {
  int64_t host_bytes = 0;   // host tier budget (--host-cache-bytes); 0 = no host tier
  std::string disk_dir;     // disk tier directory (--kv-cache-dir); empty = no disk tier
  int64_t disk_bytes = 0;   // disk tier budget (--disk-cache-bytes); 0 = 16 GiB
  std::string pool_url;     // shared pool (--kv-pool), "redis://HOST:PORT"; empty = none
  bool any() const { return host_bytes > 0 || !disk_dir.empty() || !pool_url.empty(); }
};

// The chain of the configured tiers (null when none is configured).
StatusOr<std::shared_ptr<UnitStore>> make_unit_store(const TierOptions& o);

// Single tiers (tests, tools). Each is a complete UnitStore with one stats() entry.
// `spill` (not owned, may be null) receives the objects the host tier evicts and does not
// find there already, and everything it holds on flush().
std::unique_ptr<UnitStore> make_host_tier(int64_t budget_bytes, UnitStore* spill = nullptr);
StatusOr<std::unique_ptr<UnitStore>> make_disk_tier(const std::string& dir, int64_t budget_bytes);
StatusOr<std::unique_ptr<UnitStore>> make_redis_tier(const std::string& url);

// "16GiB", "512MiB", "1e9", "4096" -> bytes; InvalidArgument otherwise.
StatusOr<int64_t> parse_byte_size(const std::string& s);

}  // namespace strata
