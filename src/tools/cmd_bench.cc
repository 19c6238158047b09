// `strata bench`: parent of the benchmark subcommands (`bench model`, `bench make-llama2c`,
// `bench serve`, ...). Children register in cmd_bench_<name>.cc and attach to this one.
#include "tools/command_registry.h"

namespace strata::tools {
namespace {
void setup_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Benchmarks");
  cmd->require_subcommand(1);
}
}  // namespace
STRATA_REGISTER_COMMAND("bench", setup_bench);
}  // namespace strata::tools
