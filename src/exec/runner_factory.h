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
};

// The architecture string of a model directory ("LlamaForCausalLM", ...).
StatusOr<std::string> model_architecture(const std::string& dir);

// The embedded default model directory (models/stories260K): looked up under
// $STRATA_SOURCE_DIR, then walking up from the executable's directory, then the current
// directory. NotFound listing the places tried.
StatusOr<std::string> default_model_dir();

StatusOr<std::unique_ptr<ModelRunner>> make_model_runner(const std::string& dir,
                                                         const RunnerOptions& options);

}  // namespace strata
