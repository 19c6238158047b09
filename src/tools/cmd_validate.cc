// `strata validate`: parent of the validation subcommands (`validate golden`, ...). The
// children register themselves in cmd_validate_<name>.cc and attach to this subcommand.
#include "tools/command_registry.h"

namespace strata::tools {
namespace {
void setup_validate(CLI::App& app) {
  auto* cmd = app.add_subcommand("validate", "Validate a model against reference outputs");
  cmd->require_subcommand(1);
}
}  // namespace
STRATA_REGISTER_COMMAND("validate", setup_validate);
}  // namespace strata::tools
