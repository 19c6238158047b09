// The tier flags shared by `serve`, `generate` and `bench model` (tiers/tiers.h):
//   --host-cache-bytes N   host DRAM tier budget (0: none)
//   --kv-cache-dir DIR     disk tier directory (persists across restarts)
//   --disk-cache-bytes N   disk tier budget (default 16 GiB)
//   --kv-pool URL          shared pool, redis://HOST:PORT
// Sizes accept 4096, 512MiB, 16GiB, 1e9 (parse_byte_size).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "base/status.h"
#include "tiers/tiers.h"

namespace strata::tools {

struct TierCli {
  std::string host_bytes = "0", disk_bytes = "0", disk_dir, pool_url;
};

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

}  // namespace strata::tools
