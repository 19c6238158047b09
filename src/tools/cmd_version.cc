// `strata version`: prints the version.
#include <fmt/format.h>

#include "tools/command_registry.h"

namespace strata::tools {
namespace {
void setup_version(CLI::App& app) {
  auto* cmd = app.add_subcommand("version", "Print the Strata version");
  cmd->callback([] { fmt::print("strata {}\n", kVersion); });
}
}  // namespace
STRATA_REGISTER_COMMAND("version", setup_version);
}  // namespace strata::tools
