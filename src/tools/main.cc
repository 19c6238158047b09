// strata: the command-line entry point. Subcommands register themselves (cmd_*.cc).
#include <malloc.h>

#include <cstdio>
#include <new>

#include <CLI/CLI.hpp>

#include "base/huge_pages.h"
#include "base/log.h"
#include "mpi/mpi_world.h"
#include "tools/command_registry.h"

int main(int argc, char** argv) {
  // Heap in transparent huge pages (base/huge_pages.h): may re-execute this binary once.
  strata::reexec_with_malloc_huge_pages(argv);
  // Under mpirun: MPI up, stdout only on rank 0 (mpi/mpi_world.h). Nothing otherwise.
  strata::mpi_init_if_launched(&argc, &argv);
  // Warnings of any command (e.g. a rejected prefix-cache unit in `generate`) go to stderr,
  // never into a command's output on stdout (base/log.h).
  strata::init_logging();
  // A decode step allocates and frees scratch of 100 KB .. a few MB per layer (rows read
  // from the state, attention lists). glibc would serve those with mmap/munmap and zero
  // fresh pages every step (and, with worker threads, shoot down TLBs); keep them in the
  // heap instead. Measured: several % of a V4.1 decode step (docs/PERFORMANCE.md).
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  CLI::App app{"strata: a serving runtime for DeepSeek-V4.1-class models"};
  // At most one subcommand; none is a usage error reported below (so an unknown word is
  // named as such by CLI11 instead of "A subcommand is required").
  app.require_subcommand(0, 1);
  app.set_help_all_flag("--help-all", "Show help for all subcommands");
  app.set_version_flag("--version", std::string("strata ") + strata::tools::kVersion);
  strata::tools::setup_all_commands(app);
  // Exit status of every command: 0 success, 1 a failure (a model that does not load, a
  // failed validation, a server error), 2 a usage error (bad or missing arguments).
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints the help or the error
    return rc == 0 ? 0 : 2;      // CLI11's own codes (105, 106, ...) are all usage errors
  } catch (const std::bad_alloc&) {
    // A model, pool size or config whose memory this machine does not have: a clear failure,
    // not an abort.
    std::fputs("strata: out of memory (the model, --kv-cache-tokens or a config value asks "
               "for more memory than this machine has)\n", stderr);
    return 1;
  }
  if (app.get_subcommands().empty()) {
    std::fputs(app.help().c_str(), stderr);
    std::fputs("strata: a subcommand is required\n", stderr);
    return 2;
  }
  return strata::tools::exit_code();
}
