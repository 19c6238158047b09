#include "tools/command_registry.h"

#include <cstdio>
#include <map>
#include <new>

namespace strata::tools {
namespace {
std::map<std::string, CommandSetup>& registry() {
  static std::map<std::string, CommandSetup> r;
  return r;
}
int g_exit_code = 0;
}  // namespace

bool register_command(const std::string& name, CommandSetup setup) {
  registry()[name] = std::move(setup);
  return true;
}

void setup_all_commands(CLI::App& app) {
  for (auto& [name, setup] : registry()) setup(app);
}

void set_exit_code(int code) { g_exit_code = code; }
int exit_code() { return g_exit_code; }

void set_exit_code_of(const char* what, const std::function<int()>& run) {
  try {
    set_exit_code(run());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "strata %s: out of memory for the requested sizes\n", what);
    set_exit_code(1);
  }
}

}  // namespace strata::tools
