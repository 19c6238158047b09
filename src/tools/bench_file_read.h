// The peer of `strata bench model`'s load time (issue 29 goal 4): reading the checkpoint's
// files once from the page cache, measured in the same run.
#pragma once

#include <string>

#include "base/status.h"

namespace strata {

// Seconds to read every .safetensors file of `dir` (or `dir` itself when it is a file) once
// through read(2) into a 4 MiB buffer: the files are read twice and the second pass is
// timed, so it is a page-cache read when they fit in memory. NotFound when there is no such
// file; DataLoss when a read fails. Thread safety: a pure function of the files.
StatusOr<double> page_cache_read_seconds(const std::string& dir);

}  // namespace strata
