// STRATA_CHECK: broken invariants abort with file:line and a message.
// Use only for programmer errors; expected failures return a Status (status.h).
#pragma once

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#define STRATA_CHECK(cond)                                                          \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      ::fmt::print(stderr, "{}:{}: CHECK failed: {}\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)

#define STRATA_CHECK_MSG(cond, ...)                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      ::fmt::print(stderr, "{}:{}: CHECK failed: {}: {}\n", __FILE__, __LINE__, #cond, \
                   ::fmt::format(__VA_ARGS__));                                     \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)
