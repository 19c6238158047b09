// strata: the command-line entry point. Subcommands register themselves (cmd_*.cc).
#include <cstdio>

#include <CLI/CLI.hpp>

#include "tools/command_registry.h"

int main(int argc, char** argv) {
  CLI::App app{"strata: a serving runtime for DeepSeek-V4.1-class models"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for all subcommands");
  strata::tools::setup_all_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return strata::tools::exit_code();
}
