#include "exec/runner_factory.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "exec/deepseek_v41/deepseek_v41_runner.h"
#include "exec/deepseek_v4/deepseek_v4_runner.h"
#include "dist/dcp_comm.h"
#include "dist/expert_comm.h"
#include "dist/pipe_comm.h"
#include "exec/llama/llama_runner.h"
#include "exec/sequence_call_state.h"
#include "model/checkpoint_fingerprint.h"

namespace strata {

StatusOr<std::string> model_architecture(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("{}: cannot open config.json (is --model a model directory?)", path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument("{}: malformed JSON", path);
  if (auto it = j.find("architectures"); it != j.end() && it->is_array() && !it->empty() &&
                                         (*it)[0].is_string())
    return (*it)[0].get<std::string>();
  if (auto it = j.find("model_type"); it != j.end() && it->is_string()) return it->get<std::string>();
  return invalid_argument("{}: neither 'architectures' nor 'model_type' is given", path);
}

StatusOr<std::string> default_model_dir() {
  namespace fs = std::filesystem;
  const fs::path rel = fs::path("models") / "stories260K";
  std::vector<fs::path> tried;
  auto ok = [&](const fs::path& root) {
    std::error_code ec;
    tried.push_back(root / rel);
    return fs::exists(root / rel / "config.json", ec);
  };
  if (const char* env = std::getenv("STRATA_SOURCE_DIR"); env != nullptr && *env != 0) {
    if (ok(env)) return (fs::path(env) / rel).string();
  }
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path dir = exe.parent_path();
    for (int i = 0; i < 6 && !dir.empty(); ++i, dir = dir.parent_path()) {
      if (ok(dir)) return (dir / rel).string();
      if (dir == dir.root_path()) break;
    }
  }
  if (ok(fs::current_path(ec))) return (fs::current_path(ec) / rel).string();
  std::string list;
  for (const auto& t : tried) list += (list.empty() ? "" : ", ") + t.string();
  return not_found("default model not found (tried {}); pass --model DIR", list);
}

Status prepare_runner_tiers(const std::string& dir, RunnerOptions* o) {
  if (!o->tiers.any() || o->unit_store) return ok_status();
  STRATA_ASSIGN_OR_RETURN(o->unit_store, make_unit_store(o->tiers));
  STRATA_ASSIGN_OR_RETURN(o->prefix_salt, checkpoint_fingerprint(dir));
  return ok_status();
}

StatusOr<std::unique_ptr<ModelRunner>> make_model_runner(const std::string& dir,
                                                         const RunnerOptions& given) {
  STRATA_ASSIGN_OR_RETURN(std::string arch, model_architecture(dir));
  RunnerOptions options = given;
  STRATA_RETURN_IF_ERROR(prepare_runner_tiers(dir, &options));
  if (arch == "LlamaForCausalLM" || arch == "llama") {
    if (!options.debug_perturb_restore.empty())
      return invalid_argument("--debug-perturb-restore is built for the DeepSeek V4 / V4.1 runners");
    if (const std::shared_ptr<ExpertComm> ep = process_expert_comm(); ep && ep->size() > 1)
      return failed_precondition("--enable-expert-parallel: {} is a Llama model, it has no "
                                 "routed experts (use --decode-context-parallel-size or "
                                 "--pipeline-parallel-size)", dir);
    STRATA_ASSIGN_OR_RETURN(auto r, LlamaRunner::create(dir, options));
    return std::unique_ptr<ModelRunner>(std::move(r));
  }
  if (arch == "DeepseekV41ForCausalLM" || arch == "deepseek_v41") {
    V41LoadOptions load;
    load.progress = options.progress;
    load.threads = options.threads;
    STRATA_ASSIGN_OR_RETURN(load.engram_placement, parse_engram_placement(options.engram_placement));
    load.engram_cache_bytes = options.engram_cache_bytes;
    V41RunnerCacheOptions cache;
    cache.max_tokens = options.kv_cache_tokens;  // 0 = the runner's default
    cache.unit_store = options.unit_store;
    cache.prefix_cache = options.enable_prefix_caching;
    cache.salt = options.prefix_salt;
    cache.dcp = dcp_shard(process_dcp_comm().get());
    STRATA_ASSIGN_OR_RETURN(cache.restore, parse_v41_prefix_restore(options.prefix_restore));
    if (!options.debug_perturb_restore.empty()) {
      STRATA_ASSIGN_OR_RETURN(StateKind k, parse_state_kind(options.debug_perturb_restore));
      cache.debug_perturb_restore_kind = static_cast<int>(k);
    }
    STRATA_ASSIGN_OR_RETURN(auto r, DeepseekV41Runner::create(dir, load, options.name, cache));
    return std::unique_ptr<ModelRunner>(std::move(r));
  }
  if (arch == "DeepseekV4ForCausalLM" || arch == "deepseek_v4") {
    V41RunnerCacheOptions cache;
    cache.max_tokens = options.kv_cache_tokens;  // 0 = the runner's default
    cache.unit_store = options.unit_store;
    cache.prefix_cache = options.enable_prefix_caching;
    cache.salt = options.prefix_salt;
    cache.dcp = dcp_shard(process_dcp_comm().get());
    STRATA_ASSIGN_OR_RETURN(cache.restore, parse_v41_prefix_restore(options.prefix_restore));
    if (!options.debug_perturb_restore.empty()) {
      STRATA_ASSIGN_OR_RETURN(StateKind k, parse_state_kind(options.debug_perturb_restore));
      cache.debug_perturb_restore_kind = static_cast<int>(k);
    }
    STRATA_ASSIGN_OR_RETURN(auto r,
                            DeepseekV4Runner::create(dir, options.name, options.threads, cache));
    return std::unique_ptr<ModelRunner>(std::move(r));
  }
  return unimplemented("{}: architecture '{}' is not supported", dir, arch);
}

}  // namespace strata
