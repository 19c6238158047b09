// The tier flags shared by `serve`, `generate` and `bench model` (tiers/tiers.h):
//   --host-cache-bytes N   host DRAM tier budget (0: none)
//   --kv-cache-dir DIR     disk tier directory (persists across restarts)
//   --disk-cache-bytes N   disk tier budget (default 16 GiB)
//   --kv-pool URL          shared pool, redis://HOST:PORT
//   --engram-placement ram|mmap|disk, --engram-cache-bytes N   (V4.1 Engram tables)
//   --weight-cache-dir DIR|none   packed-weight cache (model/packed_weight_cache.h; also
//                                 `bench model`)
// Sizes accept 4096, 512MiB, 16GiB, 1e9 (parse_byte_size).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "base/status.h"
#include "exec/runner_factory.h"
#include "model/packed_weight_cache.h"
#include "tiers/tiers.h"

namespace strata::tools {

struct TierCli {
  std::string host_bytes = "0", disk_bytes = "0", disk_dir, pool_url;
  std::string engram_placement = "mmap", engram_cache_bytes;  // "" = 64MiB
  std::string weight_cache_dir;  // "" = the default (packed_weight_cache.h)
};

inline void add_weight_cache_option(CLI::App* cmd, std::string* dir) {
  cmd->add_option("--weight-cache-dir", *dir,
                  "Where the DeepSeek loaders keep the kernels' packed weights once packed, so "
                  "later starts map them instead of repacking (checked, keyed by the strata "
                  "build and the checkpoint files); 'none' = pack every time. Default: "
                  "$STRATA_WEIGHT_CACHE_DIR, else ~/.cache/strata/packed-weights for "
                  "checkpoints of 1 GiB or more");
}
// Sets the process's packed-weight cache from the flag (nothing when it was not given).
inline void apply_weight_cache_flag(const std::string& dir) {
  if (!dir.empty()) set_process_weight_cache_settings(weight_cache_settings_from_flag(dir));
}

inline void add_tier_options(CLI::App* cmd, TierCli* t) {
  cmd->add_option("--host-cache-bytes", t->host_bytes,
                  "Prefix-cache tier in host memory below the working pool, in bytes (512MiB, "
                  "4GiB...; 0: none); evicted units are demoted to --kv-cache-dir")
      ->capture_default_str();
  cmd->add_option("--kv-cache-dir", t->disk_dir,
                  "Prefix-cache tier on disk: one file per cached unit, checked on load; a "
                  "restarted server hits the prefixes stored before");
  cmd->add_option("--disk-cache-bytes", t->disk_bytes,
                  "Byte budget of --kv-cache-dir (0: 16GiB)")
      ->capture_default_str();
  cmd->add_option("--kv-pool", t->pool_url,
                  "Prefix-cache pool shared between servers: redis://HOST:PORT (every published "
                  "unit is written through; servers on the same checkpoint hit each other's)");
  cmd->add_option("--engram-placement", t->engram_placement,
                  "V4.1 Engram tables: mmap (read through the checkpoint's mapping), ram "
                  "(resident copy) or disk (read on demand, hot rows cached, each step's rows "
                  "fetched ahead); identical results")
      ->check(CLI::IsMember({"ram", "mmap", "disk"}))
      ->capture_default_str();
  cmd->add_option("--engram-cache-bytes", t->engram_cache_bytes,
                  "Hot-row cache of --engram-placement disk (default 64MiB)");
  add_weight_cache_option(cmd, &t->weight_cache_dir);
}

inline StatusOr<TierOptions> tier_options(const TierCli& t) {
  TierOptions o;
  auto size = [](const char* flag, const std::string& v) -> StatusOr<int64_t> {
    StatusOr<int64_t> n = parse_byte_size(v);
    if (!n.ok()) return invalid_argument("{}: {}", flag, n.status().message());
    return n;
  };
  STRATA_ASSIGN_OR_RETURN(o.host_bytes, size("--host-cache-bytes", t.host_bytes));
  STRATA_ASSIGN_OR_RETURN(o.disk_bytes, size("--disk-cache-bytes", t.disk_bytes));
  o.disk_dir = t.disk_dir;
  o.pool_url = t.pool_url;
  if (o.disk_bytes > 0 && o.disk_dir.empty())
    return invalid_argument("--disk-cache-bytes needs --kv-cache-dir");
  return o;
}

// Fills the runner options the flags govern (tiers and Engram placement); InvalidArgument
// naming the flag for a bad size.
inline Status apply_tier_flags(const TierCli& t, RunnerOptions* ro) {
  STRATA_ASSIGN_OR_RETURN(ro->tiers, tier_options(t));
  if (!t.engram_cache_bytes.empty() && t.engram_placement != "disk")
    return invalid_argument("--engram-cache-bytes needs --engram-placement disk (the other "
                            "placements keep no row cache)");
  StatusOr<int64_t> n =
      parse_byte_size(t.engram_cache_bytes.empty() ? "64MiB" : t.engram_cache_bytes);
  if (!n.ok()) return invalid_argument("--engram-cache-bytes: {}", n.status().message());
  ro->engram_placement = t.engram_placement;
  ro->engram_cache_bytes = *n;
  apply_weight_cache_flag(t.weight_cache_dir);
  return ok_status();
}

}  // namespace strata::tools
