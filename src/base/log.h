// Server logging: spdlog's default logger, writing lines to stderr as given (pattern "%v":
// the callers' messages carry their own "strata: " prefix, as before spdlog), filtered by
// level (--log-level, vLLM's / uvicorn's names: debug, info, warning, error, critical).
// Request lines and throughput lines are info; ignored fields, unknown prompt tokens and
// contract notes are warnings. Thread safety: spdlog's logger is thread-safe; set_log_level
// and init_logging are meant for start-up.
#pragma once

#include <string>

#include "base/status.h"

namespace strata {

// Installs the stderr logger as spdlog's default (idempotent).
void init_logging();
// Sets the level by name; InvalidArgument naming the accepted names otherwise.
Status set_log_level(const std::string& name);

}  // namespace strata
