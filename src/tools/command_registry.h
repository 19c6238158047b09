// Subcommand registry for the `strata` CLI.
//
// Each cmd_<name>.cc defines a setup function that adds a CLI11 subcommand to the app and
// registers it with STRATA_REGISTER_COMMAND at static-initialization time. main() builds
// the app from all registered commands in name order.
//
// A subcommand callback returns its process exit status through `set_exit_code`.
#pragma once

#include <exception>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

namespace strata::tools {

// The version `strata version` and `strata --version` print.
inline constexpr const char* kVersion = "0.1.0";

using CommandSetup = std::function<void(CLI::App& app)>;

// Registers `setup` under `name`; returns true (for static initialization).
bool register_command(const std::string& name, CommandSetup setup);

// Adds every registered subcommand to `app`.
void setup_all_commands(CLI::App& app);

// The accepted range of every --threads option: 0 (the CPUs this process may use) to 1024. (An unbounded count
// made thread creation fail with an uncaught std::system_error.)
inline CLI::Range threads_range() { return CLI::Range(0, 1024, "0 to 1024"); }

// Counts, lengths and scales that must be > 0. (CLI::PositiveNumber's message for 0 read
// "Value 0 not in range 0.000000 to 1.79769e+308".)
inline CLI::Validator positive() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        try {
          size_t used = 0;
          const double d = std::stod(v, &used);
          if (used == v.size() && d > 0) return {};
        } catch (const std::exception&) {
        }
        return "must be greater than 0 (got " + v + ")";
      },
      "POSITIVE");
}

// The exit status main() returns after the subcommand callback ran (default 0).
void set_exit_code(int code);
int exit_code();

// set_exit_code(run()), except that a std::bad_alloc (sizes the machine cannot hold) prints
// "strata <what>: out of memory for the requested sizes" and sets 1 instead of aborting.
void set_exit_code_of(const char* what, const std::function<int()>& run);

}  // namespace strata::tools

#define STRATA_REGISTER_COMMAND(name, fn) \
  static const bool STRATA_CMD_REG_##fn = ::strata::tools::register_command(name, fn)
