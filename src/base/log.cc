// Logging set-up (see log.h).
#include "base/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <mutex>

namespace strata {

void init_logging() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto logger = spdlog::stderr_logger_mt("strata");
    logger->set_pattern("%v");
    logger->flush_on(spdlog::level::trace);  // a line is written when it is logged
    spdlog::set_default_logger(std::move(logger));
  });
}

Status set_log_level(const std::string& name) {
  init_logging();
  spdlog::level::level_enum l;
  if (name == "debug") l = spdlog::level::debug;
  else if (name == "info") l = spdlog::level::info;
  else if (name == "warning" || name == "warn") l = spdlog::level::warn;
  else if (name == "error") l = spdlog::level::err;
  else if (name == "critical") l = spdlog::level::critical;
  else return invalid_argument("log level '{}' is not one of debug, info, warning, error, critical", name);
  spdlog::set_level(l);
  return ok_status();
}

}  // namespace strata
