// `strata inspect MODEL_DIR_OR_CONFIG [--state] [--dot] [--json] [--block-tokens N]`:
// architecture, parameter counts by dtype (when a checkpoint is present), the per-layer
// schedule (role, ratio, window, owners) and, with --state, the state graph (owners ->
// consumers, bytes per token / per request per kind, backbone vs draft stages, prefix-cache
// alignment unit). --dot prints Graphviz DOT of the state graph; --json prints the state
// report as JSON (per-kind entries, "totals": {bytes_per_token, bytes_per_request_fixed}) plus
// "architecture" and "layers". Accepts DeepSeek V4 / V4.1 configs (any format, see
// model/deepseek_config.h) and Llama configs.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/checkpoint_summary.h"
#include "model/deepseek_config.h"
#include "model/llama_config.h"
#include "model/safetensors.h"
#include "state/handoff.h"
#include "state/state_graph.h"
#include "state/state_report.h"
#include "tools/command_registry.h"

namespace strata::tools {
namespace {

namespace fs = std::filesystem;

struct InspectArgs {
  std::string path;
  bool state = false;
  bool dot = false;
  bool json = false;
  int block_tokens = 0;
  int64_t handoff = -1;  // --handoff N: prompt tokens
  int dcp = 1;           // --dcp D: per-rank bytes under decode context parallelism
  int64_t dcp_interleave = 1;
};

// The prefill -> decode handoff of a prompt of n tokens (state/handoff.h): positions
// [0, n-1) cross, the decode side computes position n-1.
nlohmann::json handoff_json(const StateGraph& g, int64_t n) {
  const int64_t pos = std::max<int64_t>(0, n - 1);
  const HandoffBytes hb = handoff_bytes(g, pos);
  nlohmann::json kinds = nlohmann::json::object();
  for (const auto& [k, b] : hb.per_kind) kinds[k] = b;
  nlohmann::json owners = nlohmann::json::array();
  for (const HandoffRowRange& r : handoff_rows(g, pos)) {
    const StateOwnerInfo& o = g.owner(r.owner);
    owners.push_back({{"owner", o.label}, {"policy", handoff_policy_name(o.spec.handoff)},
                      {"row0", r.row0}, {"rows", r.n_rows}, {"row_bytes", o.spec.row_bytes},
                      {"bytes", r.n_rows * o.spec.row_bytes}});
  }
  nlohmann::json rebuilt = nlohmann::json::array();
  for (const StateOwnerInfo& o : g.owners())
    if (o.spec.handoff == HandoffPolicy::kRebuild && !o.spec.transient() && o.spec.row_bytes > 0)
      rebuilt.push_back(o.label);
  return {{"prompt_tokens", n}, {"positions", pos}, {"bytes_per_kind", kinds},
          {"state_bytes", hb.total}, {"token_id_bytes", hb.token_id_bytes},
          {"frames", owners.size()}, {"runs", owners}, {"rebuilt_on_decode", rebuilt}};
}

std::string handoff_text(const StateGraph& g, int64_t n) {
  const nlohmann::json j = handoff_json(g, n);
  std::string s = fmt::format(
      "handoff of a {}-token prompt (prefill computes positions [0, {}), decode computes "
      "position {}):\n",
      n, j["positions"].get<int64_t>(), j["positions"].get<int64_t>());
  for (const auto& [k, b] : j["bytes_per_kind"].items())
    s += fmt::format("  {:<24} {:>14} B\n", k, b.get<int64_t>());
  s += fmt::format("  {:<24} {:>14} B  ({} frames, one per owner run)\n", "state total",
                   j["state_bytes"].get<int64_t>(), j["frames"].get<size_t>());
  s += fmt::format("  {:<24} {:>14} B\n", "token ids", j["token_id_bytes"].get<int64_t>());
  std::string rb;
  for (const auto& x : j["rebuilt_on_decode"]) rb += (rb.empty() ? "" : ", ") + x.get<std::string>();
  s += fmt::format("  rebuilt on decode from the ids: {}\n", rb.empty() ? "nothing" : rb);
  return s;
}

std::string ids(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += fmt::format("{}{}", s.empty() ? "" : ",", x);
  return "[" + s + "]";
}

std::string owner_str(int id) { return id < 0 ? "-" : fmt::format("L{}", id); }

std::string deepseek_arch_text(const DeepseekConfig& c) {
  std::string s;
  s += fmt::format("model: DeepSeek-{} ({} config{})\n", deepseek_version_name(c.version),
                   c.source_format, c.model_type.empty() ? "" : ", model_type " + c.model_type);
  s += fmt::format("  dim {}  layers {} + {} draft stage(s)  heads {} (kv {})  head_dim {} "
                   "(rope {})  vocab {}\n",
                   c.dim, c.n_layers, c.n_draft_layers, c.n_heads, c.n_kv_heads, c.head_dim,
                   c.rope_head_dim, c.vocab_size);
  s += fmt::format("  q_lora {}  o_groups {}  o_lora {}  window {}  norm_eps {:g}\n",
                   c.q_lora_rank, c.o_groups, c.o_lora_rank, c.window_size, c.norm_eps);
  s += fmt::format("  rope theta {:g} / compressed {:g}, scaling {} factor {:g} orig {} "
                   "beta {:g}/{:g}\n",
                   c.rope_theta, c.compress_rope_theta,
                   c.rope_scaling_type.empty() ? "none" : c.rope_scaling_type, c.rope_factor,
                   c.original_seq_len, c.beta_fast, c.beta_slow);
  s += fmt::format("  indexer heads {} dim {} topk {}", c.index_n_heads, c.index_head_dim,
                   c.index_topk);
  if (c.is_v41())
    s += fmt::format("  kv sources {} index sources {} candidate source {} ({} blocks of {})",
                     ids(c.kv_source_layers), ids(c.index_source_layers),
                     c.candidate_source_layer, c.candidate_topk_blocks, c.candidate_block_size);
  s += "\n";
  s += fmt::format("  MoE {} routed top-{} + {} shared, inter {}, {} bias-routed, route_scale "
                   "{:g}, swiglu_limit {:g} (shared expert {}clamped){}\n",
                   c.n_routed_experts, c.n_activated_experts, c.n_shared_experts,
                   c.moe_inter_dim, c.score_func, c.route_scale, c.swiglu_limit,
                   c.shared_expert_clamped ? "" : "not ",
                   c.n_hash_layers ? fmt::format(", hash-routed layers 0..{}", c.n_hash_layers - 1)
                                   : "");
  s += fmt::format("  mHC {} streams, {} Sinkhorn iters, eps {:g}\n", c.hc_mult,
                   c.hc_sinkhorn_iters, c.hc_eps);
  if (!c.engram_layer_ids.empty())
    s += fmt::format("  Engram before layers {}: max n-gram {}, {} heads x {}, compressed vocab "
                     "{}\n",
                     ids(c.engram_layer_ids), c.engram_max_ngram_size, c.engram_n_heads,
                     c.engram_head_dim, c.engram_compressed_vocab_size);
  if (!c.engram_layer_ids.empty()) {
    // Table rows: FP8 E4M3 [rows, head_dim] + UE8M0 scales [rows, head_dim / 32] per layer.
    int64_t rows = 0;
    for (int64_t r : c.engram_num_embeddings) rows += r;
    const int64_t row_bytes = c.engram_head_dim + (c.engram_head_dim + 31) / 32;
    s += fmt::format("  Engram tables: {} rows in {} layers, {} B per row ({} FP8 + {} scale), "
                     "{:.2f} GB in all (--engram-placement ram|mmap|disk)\n",
                     rows, c.engram_layer_ids.size(), row_bytes, c.engram_head_dim,
                     row_bytes - c.engram_head_dim, rows * row_bytes / 1e9);
  }
  if (c.n_draft_layers > 0) {
    if (c.is_v41() || !c.dspark_target_layer_ids.empty())
      s += fmt::format("  DSpark: {} stages (layer ids {}..{}), block {}, taps {}, markov rank {}"
                       " (served with --speculative-config '{{\"method\":\"dspark\"}}')\n",
                       c.n_draft_layers, c.n_layers, c.total_layers() - 1, c.dspark_block_size,
                       ids(c.dspark_target_layer_ids), c.dspark_markov_rank);
    else
      s += fmt::format("  MTP: {} layer(s) (layer id {}); mtp.0 drafts, chained up to 16 tokens "
                       "(served with --speculative-config '{{\"method\":\"mtp\","
                       "\"num_speculative_tokens\":K}}')\n",
                       c.n_draft_layers, c.n_layers);
  }
  s += fmt::format("  quantization: weights {} (block {}x{}), experts {}, scales {}\n",
                   c.weight_dtype, c.weight_block_size, c.weight_block_size, c.expert_dtype,
                   c.scale_fmt);
  for (const auto& n : c.notes) s += "  note: " + n + "\n";
  return s;
}

std::string deepseek_schedule_text(const DeepseekConfig& c) {
  std::string s = "layer schedule:\n";
  s += "  layer stage    role     ratio window kv_owner idx_keys topk  cand  extras\n";
  for (const auto& L : c.layers) {
    std::string extras;
    if (L.engram_before) extras += " engram";
    if (L.dspark_tap) extras += " dspark-tap";
    if (L.hash_routed) extras += " hash-moe";
    if (L.is_candidate_source) extras += " cand-source";
    if (L.overlap_compressor) extras += " overlap";
    extras += fmt::format(" rope {:g}{}", L.rope_theta, L.yarn ? "+yarn" : "");
    if (L.is_draft) extras += fmt::format(" experts {}/{}", L.n_routed_experts, L.n_activated_experts);
    s += fmt::format("  {:>5} {:<8} {:<8} {:>5} {:>6} {:>8} {:>8} {:>5} {:>5} {}\n", L.layer_id,
                     L.is_draft ? "draft" : "backbone", attn_role_name(L.role), L.ratio,
                     c.window_size, owner_str(L.kv_owner), owner_str(L.index_key_owner),
                     owner_str(L.topk_owner), owner_str(L.candidate_owner), extras);
  }
  return s;
}

nlohmann::json deepseek_json(const DeepseekConfig& c) {
  nlohmann::json a;
  a["family"] = "deepseek";
  a["version"] = deepseek_version_name(c.version);
  a["source_format"] = c.source_format;
  a["dim"] = c.dim;
  a["n_layers"] = c.n_layers;
  a["n_draft_layers"] = c.n_draft_layers;
  a["n_heads"] = c.n_heads;
  a["head_dim"] = c.head_dim;
  a["window_size"] = c.window_size;
  a["compress_ratios"] = c.compress_ratios;
  a["notes"] = c.notes;
  return a;
}

nlohmann::json deepseek_layers_json(const DeepseekConfig& c) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& L : c.layers)
    arr.push_back({{"layer", L.layer_id}, {"stage", L.is_draft ? "draft" : "backbone"},
                   {"role", attn_role_name(L.role)}, {"ratio", L.ratio},
                   {"kv_owner", L.kv_owner}, {"index_key_owner", L.index_key_owner},
                   {"topk_owner", L.topk_owner}, {"candidate_owner", L.candidate_owner}});
  return arr;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int run_inspect(const InspectArgs& a) {
  std::error_code ec;
  fs::path p(a.path);
  fs::path cfg_path = p, dir;
  if (fs::is_directory(p, ec)) {
    dir = p;
    cfg_path = fs::exists(p / "config.json", ec) ? p / "config.json" : p / "inference-config.json";
  } else {
    dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();  // checkpoint next to it
  }
  if (!fs::exists(cfg_path, ec)) {
    fmt::print(stderr, "inspect: no config at {}\n", cfg_path.string());
    return 1;  // a model that does not load, as `generate --model` (usage errors exit 2)
  }
  const std::string text = read_file(cfg_path);
  std::optional<DeepseekConfig> ds;
  std::optional<StateGraph> graph;
  std::string arch, schedule;
  nlohmann::json arch_json, layers_json = nlohmann::json::array();
  if (looks_like_deepseek_config(text)) {
    auto c = parse_deepseek_config_json(text);
    if (!c.ok()) {
      fmt::print(stderr, "inspect: {}: {}\n", cfg_path.string(), c.status().to_string());
      return 1;
    }
    ds = std::move(c).value();
    arch = deepseek_arch_text(*ds);
    schedule = deepseek_schedule_text(*ds);
    arch_json = deepseek_json(*ds);
    layers_json = deepseek_layers_json(*ds);
    auto g = StateGraph::from_deepseek(*ds);
    if (!g.ok()) {
      fmt::print(stderr, "inspect: state graph: {}\n", g.status().to_string());
      return 1;
    }
    graph = std::move(g).value();
  } else {
    auto c = parse_llama_config_json(text);
    if (!c.ok()) {
      fmt::print(stderr, "inspect: {}: not a DeepSeek or Llama config: {}\n", cfg_path.string(),
                 c.status().to_string());
      return 1;
    }
    arch = fmt::format("model: Llama (dim {}, layers {}, heads {} / kv {}, head_dim {}, inter {}, "
                       "vocab {}), {} parameters by config\n",
                       c->hidden_size, c->num_hidden_layers, c->num_attention_heads,
                       c->num_key_value_heads, c->head_dim, c->intermediate_size, c->vocab_size,
                       c->num_parameters());
    arch_json = {{"family", "llama"}, {"dim", c->hidden_size}, {"n_layers", c->num_hidden_layers}};
    for (int64_t l = 0; l < c->num_hidden_layers; ++l)
      schedule += fmt::format("{}  {:>5} plain-kv owner L{}\n", l == 0 ? "layer schedule:\n" : "",
                              l, l);
    LlamaStateDesc d{.n_layers = static_cast<int>(c->num_hidden_layers),
                     .n_kv_heads = static_cast<int>(c->num_key_value_heads),
                     .head_dim = static_cast<int>(c->head_dim),
                     .kv_format = RowFormat::kF32,
                     .name = "llama"};
    auto g = StateGraph::from_llama(d);
    if (!g.ok()) {
      fmt::print(stderr, "inspect: state graph: {}\n", g.status().to_string());
      return 1;
    }
    graph = std::move(g).value();
  }
  StateReportOptions ro{.block_tokens = a.block_tokens, .dcp = a.dcp,
                        .dcp_interleave = a.dcp_interleave};
  if (a.dot) {
    fmt::print("{}", format_state_dot(*graph));
    return 0;
  }
  // Parameter counts (only when a checkpoint is present next to the config).
  // A checkpoint that is present but unreadable is an error (exit 1) after the config report.
  std::optional<CheckpointSummary> summary;
  std::string checkpoint_error;
  if (!dir.empty() && (fs::exists(dir / "model.safetensors", ec) ||
                       fs::exists(dir / "model.safetensors.index.json", ec))) {
    auto ck = SafetensorsCheckpoint::open(dir.string());
    if (ck.ok()) summary = summarize_checkpoint(**ck);
    else checkpoint_error = ck.status().to_string();
  }
  if (summary && !summary->nonfinite.empty())
    checkpoint_error = fmt::format("{} tensor(s) hold NaN/Inf values (e.g. '{}'): the checkpoint "
                                   "is corrupt and will not load", summary->nonfinite.size(),
                                   summary->nonfinite.begin()->first);
  if (!checkpoint_error.empty()) fmt::print(stderr, "inspect: checkpoint: {}\n", checkpoint_error);
  const int status = checkpoint_error.empty() ? 0 : 1;
  if (a.json) {
    auto j = nlohmann::json::parse(format_state_json(*graph, ro));
    j["architecture"] = arch_json;
    j["layers"] = layers_json;
    if (summary) {
      nlohmann::json by;
      for (const auto& [cat, n] : summary->by_category)
        by[cat] = {{"tensors", n.tensors}, {"params", n.params}, {"bytes", n.bytes}};
      j["parameters"] = {{"total_params", summary->total_params},
                         {"total_bytes", summary->total_bytes}, {"by_dtype", by},
                         {"nonfinite_tensors", summary->nonfinite}};
    }
    if (!checkpoint_error.empty()) j["checkpoint_error"] = checkpoint_error;
    if (a.handoff >= 0) j["handoff"] = handoff_json(*graph, a.handoff);
    fmt::print("{}\n", j.dump(2));
    return status;
  }
  fmt::print("{}", arch);
  if (summary) fmt::print("parameters by dtype:\n{}", format_checkpoint_summary(*summary));
  else if (!checkpoint_error.empty()) fmt::print("parameters: checkpoint unreadable (see stderr)\n");
  else fmt::print("parameters: (config only; no checkpoint to count)\n");
  fmt::print("{}", schedule);
  if (a.state) fmt::print("{}", format_state_text(*graph, ro));
  if (a.handoff >= 0) fmt::print("{}", handoff_text(*graph, a.handoff));
  return status;
}

void setup_inspect(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  auto* cmd = app.add_subcommand("inspect", "Show a model's architecture, layer schedule and state graph");
  cmd->add_option("model", args->path, "Model directory or config.json")->required();
  cmd->add_flag("--state", args->state, "Print the state graph and state bytes per kind");
  cmd->add_flag("--dot", args->dot, "Print the state graph as Graphviz DOT");
  cmd->add_flag("--json", args->json, "Print the state report (and architecture) as JSON");
  cmd->add_option("--block-tokens", args->block_tokens,
                  "Prefix-cache alignment unit in tokens (default: per model)");
  cmd->add_option("--handoff", args->handoff,
                  "Print the prefill->decode handoff bytes per kind for a prompt of N tokens")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--dcp,--decode-context-parallel-size", args->dcp,
                  "With --state: each rank's bytes per kind under decode context parallelism "
                  "over D ranks (one request at 128K and 1M tokens)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--dcp-kv-cache-interleave-size", args->dcp_interleave,
                  "With --dcp: consecutive records each rank owns in turn (default 1)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->callback([args] { set_exit_code(run_inspect(*args)); });
}

}  // namespace
STRATA_REGISTER_COMMAND("inspect", setup_inspect);
}  // namespace strata::tools
