// The records of `strata validate matrix` (schema: docs/validation-matrix.schema.json,
// described in docs/validation-matrix.md): what the run knows about the model, the build and
// the machine (common to every record), one step's run (deployment, checks, load, /metrics
// deltas) and the record built from it.
// Thread safety: run_step blocks (it starts and stops processes); the rest are pure.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "serve/bench_workload.h"
#include "tools/matrix_check.h"
#include "tools/matrix_load.h"
#include "tools/matrix_steps.h"

namespace strata::tools {

// From `strata inspect MODEL --state --json` (run as a child process) and config.json.
struct ModelFacts {
  std::string family;        // "deepseek" or "llama"
  std::string architecture;  // e.g. "DeepSeek V4.1", "Llama"
  bool has_experts = false;
  int64_t vocab_size = 0;
  int64_t max_context = 0;
  int64_t alignment = 0;     // prefix-cache unit in tokens
  nlohmann::json quantization;  // config.json's quantization_config, or "none"
  bool fp4_experts = false;     // routed experts stored as packed FP4 (read off the checkpoint)
  nlohmann::json cache;         // {"block_size_tokens", "compression_ratios", "formats"}
  nlohmann::json parameters;    // inspect's parameter summary (null without weights)
};
StatusOr<ModelFacts> model_facts(const MatrixContext& c);

// checkpoint, strata (version, build), machine, topology placeholders: the fields every
// record shares.
nlohmann::json common_fields(const MatrixContext& c, const ModelFacts& f);

// The load of every step: `trace` (mooncake:FILE / azure:FILE, "" = the repo's Mooncake
// head when found, else random prompts), `n` requests fitted to the model's context.
StatusOr<Workload> matrix_workload(const std::string& trace, const ModelFacts& f, int64_t n);

struct StepRun {
  int step = 0;
  std::string status;  // pass, fail, not_built, not_applicable, unavailable
  std::string reason;  // why not pass ("" when pass)
  Deployment dep;      // configuration only once the step ended (its processes are stopped)
  std::vector<PromptOutput> outputs;
  int compared_to = 0;  // 0 = no lower step (this step is the reference)
  int state_compared_to = 0;  // the step whose state rows were compared
  Comparison cmp;
  std::optional<LoadResult> load;
  nlohmann::json deltas = nlohmann::json::object();  // /metrics deltas over the whole step
  nlohmann::json golden;                              // step 1 with --golden-cases, else null
};

// Runs one step: skip check, deployment, check prompts (compared with `below`, the outputs of
// step `below_step`; 0 = none; state rows with `below_state`, the nearest lower passing step
// that carried them), load, /metrics, stop. `golden_cases`: run `validate golden`.
StepRun run_step(const MatrixContext& c, const StepInfo& info,
                 const std::vector<MatrixPrompt>& prompts, int64_t max_tokens,
                 const Workload& load, const std::vector<PromptOutput>& below, int below_step,
                 const std::vector<PromptOutput>& below_state, int below_state_step,
                 const std::string& golden_cases);

// Fills `rec` (common_fields) with the step's fields.
void fill_record(nlohmann::json* rec, const MatrixContext& c, const ModelFacts& f,
                 const StepInfo& info, const StepRun& run);

// {"schema": "strata.validate_matrix/1", "created", "steps": [records]}
nlohmann::json matrix_document(const std::vector<nlohmann::json>& records);

}  // namespace strata::tools
