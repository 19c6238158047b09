// make_model_runner: builds the ModelRunner for a model directory, dispatching on
// config.json's "architectures" (or "model_type").
//
// Known: LlamaForCausalLM -> LlamaRunner, DeepseekV41ForCausalLM -> DeepseekV41Runner,
// DeepseekV4ForCausalLM -> DeepseekV4Runner. Errors: NotFound (no config.json), InvalidArgument (bad
// JSON), Unimplemented (unknown architecture), or the runner's own load errors.
// Thread safety: free function; the runner it returns is single-threaded (model_runner.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "exec/model_runner.h"
#include "tiers/tiers.h"

namespace strata {

class ThreadPool;

struct RunnerOptions {
  int threads = 0;             // compute threads (0: the CPUs this process may use)
  int64_t kv_cache_tokens = 0; // KV capacity in tokens over all sequences (0: 4 × context)
  bool progress = false;       // print loading progress for large files
  std::string name;            // served model name (default: directory basename)
  // DeepSeek V4.1 prefix-cache hits: "stored" restores the stored boundary snapshot of window
  // rings / compressor tails (exact), "replay" stores none and rebuilds them by bounded replay
  // of the last window of tokens (approximate; docs/state.md §5), "replay-exact" replays the
  // layers' whole window dependency cone instead (bit-identical). Other runners ignore it.
  std::string prefix_restore = "stored";
  // Tiers below the working pool (host, disk, shared Redis pool; tiers/tiers.h). When any is
  // set, make_model_runner builds the chain and stamps the prefix-cache root with the
  // checkpoint fingerprint (model/checkpoint_fingerprint.h), so units written by another
  // checkpoint are never found.
  TierOptions tiers;
  // V4.1 Engram tables: "mmap" (read through the checkpoint mapping), "ram" (resident copy)
  // or "disk" (pread on demand through a hot-row cache of engram_cache_bytes, 0 = 64 MiB,
  // fetched ahead per step); bit-identical results (exec/deepseek_v41/v41_engram_table.h).
  std::string engram_placement = "mmap";
  int64_t engram_cache_bytes = 0;
  // Filled by make_model_runner from `tiers` (runners read them; callers leave them unset).
  std::shared_ptr<UnitStore> unit_store;
  uint64_t prefix_salt = 0;
  // Test hook (`serve --debug-perturb-restore KIND`, DeepSeek runners): a state kind whose
  // rows a prefix-hit restore perturbs (CacheOptions::debug_perturb_restore_kind); "" = off.
  std::string debug_perturb_restore;
  // vLLM's --enable-prefix-caching (default) / --no-enable-prefix-caching: false = every
  // prompt is computed from position 0 (nothing published, nothing hit).
  bool enable_prefix_caching = true;
};

// The architecture string of a model directory ("LlamaForCausalLM", ...).
StatusOr<std::string> model_architecture(const std::string& dir);

// The embedded default model directory (models/stories260K): looked up under
// $STRATA_SOURCE_DIR, then walking up from the executable's directory, then the current
// directory. NotFound listing the places tried.
StatusOr<std::string> default_model_dir();

// Builds the tier chain of o->tiers into o->unit_store and stamps o->prefix_salt with the
// model directory's checkpoint fingerprint; nothing when no tier is set or unit_store is
// already set. Errors: the tier chain's (bad URL / size / directory, pool unreachable) and the
// fingerprint's. make_model_runner calls it; callers that want the store's stats (the server's
// /metrics) call it first and keep o->unit_store.
Status prepare_runner_tiers(const std::string& dir, RunnerOptions* o);

StatusOr<std::unique_ptr<ModelRunner>> make_model_runner(const std::string& dir,
                                                         const RunnerOptions& options);

}  // namespace strata
