// Shared helpers of the cross-module runner tests: the embedded model directories, a fresh
// runner for one of them, and greedy argmax over a logits row.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "exec/runner_factory.h"

namespace strata::testing {

// $STRATA_SOURCE_DIR/models/<name> (the source tree's embedded models).
inline std::string model_dir(const std::string& name) {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  return std::string(e ? e : STRATA_SOURCE_DIR) + "/models/" + name;
}

// `n` ids uniform in [3, vocab - 8), a fixed function of (n, seed, vocab).
inline std::vector<int32_t> random_prompt(int64_t n, uint32_t seed, int32_t vocab) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(3, vocab - 8);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& t : v) t = tok(rng);
  return v;
}

// A runner on models/<name> with `threads` compute threads and a KV capacity of `kv_tokens`
// (0: the runner's default); null (and a test failure) if it does not load.
inline std::unique_ptr<ModelRunner> fresh_runner(const std::string& name, int64_t kv_tokens = 0,
                                                 int threads = 2) {
  RunnerOptions ro;
  ro.threads = threads;
  ro.kv_cache_tokens = kv_tokens;
  auto r = make_model_runner(model_dir(name), ro);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : nullptr;
}

// Index of the largest logit (the lowest on ties).
inline int32_t argmax(const std::vector<float>& v) {
  size_t b = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[b]) b = i;
  return static_cast<int32_t>(b);
}

}  // namespace strata::testing
