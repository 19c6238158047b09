// `strata convert`: converts a llama2.c checkpoint into a Hugging Face-style Llama directory
// (config.json + model.safetensors + tokenizer). See model/llama2c_format.h and
// docs/models.md for the layout and the RoPE permutation.
#include <fmt/format.h>

#include "model/llama2c_format.h"
#include "tools/command_registry.h"

namespace strata::tools {
namespace {
void setup_convert(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "convert", "Convert a llama2.c checkpoint into a Hugging Face-style Llama directory");
  struct Opts {
    std::string from = "llama2c";
    Llama2cConvertOptions c;
    std::string dtype = "f32";
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--from", o->from, "Source format (llama2c)")
      ->check(CLI::IsMember({"llama2c"}))
      ->capture_default_str();
  cmd->add_option("--checkpoint", o->c.checkpoint, "llama2.c checkpoint (.bin, legacy v0)")
      ->required();
  cmd->add_option("--tokenizer", o->c.tokenizer,
                  "Tokenizer file copied into the output (llama2.c tokenizer.bin)");
  cmd->add_option("--out", o->c.out_dir, "Output directory")->required();
  cmd->add_option("--dtype", o->dtype, "Weight dtype of matrices: f32 or bf16")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  cmd->callback([o] {
    o->c.bf16 = o->dtype == "bf16";
    Status st = convert_llama2c(o->c);
    if (!st.ok()) {
      fmt::print(stderr, "strata convert: {}\n", st.to_string());
      set_exit_code(1);
      return;
    }
    fmt::print("wrote {}/config.json, model.safetensors{}\n", o->c.out_dir,
               o->c.tokenizer.empty() ? "" : ", tokenizer.bin");
  });
}
}  // namespace
STRATA_REGISTER_COMMAND("convert", setup_convert);
}  // namespace strata::tools
