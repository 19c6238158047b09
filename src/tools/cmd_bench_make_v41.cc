// `strata bench make-v41`: writes a random-weight model with DeepSeek-V4.1-Flash's file
// format and layer roles, scaled down (model/v41_random_checkpoint.h), for
// `strata bench model --model DIR`.
#include <chrono>

#include <fmt/format.h>

#include "model/v41_random_checkpoint.h"
#include "tools/command_registry.h"

namespace strata::tools {
namespace {

void setup_bench_make_v41(CLI::App& app) {
  CLI::App* bench = app.get_subcommand("bench");
  auto* cmd = bench->add_subcommand(
      "make-v41",
      "Write a random-weight DeepSeek-V4.1-shaped model directory (config.json, "
      "model.safetensors in the released FP8/FP4 format, tokenizer.json)");
  auto o = std::make_shared<V41RandomOptions>();
  auto out = std::make_shared<std::string>();
  cmd->add_option("--out", *out, "Output directory (created; existing files replaced)")
      ->required();
  cmd->add_option("--preset", o->preset,
                  "tiny: the golden tiny model's dims (17 MB); bench: ~0.9 GB read per decode "
                  "token, ~2 GB file")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Random seed (same seed and options = same bytes)")
      ->capture_default_str();
  cmd->add_option("--dim", o->dim, "Hidden size override (multiple of 32)");
  cmd->add_option("--layers", o->layers, "Backbone layers override (>= 4)");
  cmd->add_option("--experts", o->experts, "Routed experts per layer override");
  cmd->add_option("--activated", o->activated, "Routed experts per token override");
  cmd->add_option("--vocab", o->vocab, "Vocabulary size override (>= 64)");
  cmd->add_option("--moe-inter", o->moe_inter, "Expert hidden size override (multiple of 32)");
  cmd->add_option("--max-position", o->max_position, "max_position_embeddings override");
  cmd->add_option("--threads", o->threads, "Generation threads (0: the CPUs this process may use; bytes unchanged)")
      ->capture_default_str()
      ->check(threads_range());
  cmd->callback([o, out] {
    const auto t0 = std::chrono::steady_clock::now();
    V41RandomSummary s;
    Status st = write_v41_random_checkpoint(*out, *o, &s);
    if (!st.ok()) {
      // Option errors already start with "make-v41: "; I/O errors name the file.
      const std::string& m = st.message();
      fmt::print(stderr, "strata bench {}{}\n", m.rfind("make-v41: ", 0) == 0 ? "" : "make-v41: ",
                 m);
      set_exit_code(1);
      return;
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("wrote {} in {:.1f} s: {} tensors, model.safetensors {:.3f} GB (routed experts "
               "{:.3f} GB, Engram tables {:.3f} GB)\n{}\n",
               *out, secs, s.n_tensors, s.file_bytes / 1e9, s.expert_bytes / 1e9,
               s.engram_table_bytes / 1e9, s.layout);
  });
}

}  // namespace
STRATA_REGISTER_COMMAND("bench_make_v41", setup_bench_make_v41);
}  // namespace strata::tools
