// Runs the `strata` binary from CLI tests: $STRATA_BINARY, else <build>/src/tools/strata next
// to the test's <build>/tests/ directory (tests/CMakeLists.txt makes such tests depend on the
// `strata` target).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace strata::tools {

inline std::string strata_binary() {
  if (const char* e = std::getenv("STRATA_BINARY")) return e;
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "strata";
  return (self.parent_path().parent_path() / "src" / "tools" / "strata").string();
}

// Runs the binary with `args`; returns the exit status and stdout.
// Runs `strata args`; stdout goes to *out, stderr is dropped (or appended to *out too when
// with_stderr). Returns the exit status (-1 when it did not exit normally). With
// timeout_s > 0 the command is killed after that many seconds (exit status 137).
// Runs a shell command line; its stdout is appended to *out; the exit status (-1 when it did
// not exit normally).
inline int run_command(const std::string& cmd, std::string* out) {
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return -1;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, f)) > 0) out->append(buf, got);
  const int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

inline int run_strata(const std::string& args, std::string* out, bool with_stderr = false,
                      int timeout_s = 0) {
  const std::string limit = timeout_s > 0 ? "timeout -s KILL " + std::to_string(timeout_s) + " " : "";
  return run_command(
      limit + strata_binary() + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null"), out);
}

}  // namespace strata::tools
