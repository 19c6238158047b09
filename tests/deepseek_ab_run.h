// Test-only helper of the packed-vs-scalar A/B tests (tests/v41_packed_kernels_test.cc,
// tests/v4_packed_kernels_test.cc): a fixed pseudo-random prompt of `n` ids run in chunks of
// `chunk` (0 = whole), then `steps` one-token steps; every call's last-token logits
// concatenated. `Options` is the model's forward options type; `decode(Options&)` marks a
// one-token step as decode where the model distinguishes it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace strata::testing_ab {

template <class Options, class Model, class Decode>
std::vector<float> run_prompt_then_decode(const Model& m, int64_t n, int64_t chunk, int steps,
                                          uint32_t seed, Decode decode) {
  std::vector<int32_t> ids(n + steps);
  uint32_t x = seed;
  for (auto& t : ids) {
    x = x * 1664525u + 1013904223u;
    t = static_cast<int32_t>(3 + (x >> 8) % std::min<int64_t>(2000, m.config().vocab_size - 4));
  }
  auto seq = m.new_sequence();
  std::vector<float> all, lg;
  for (int64_t s0 = 0; s0 < n;) {
    const int64_t len = chunk > 0 ? std::min(chunk, n - s0) : n;
    Options o;
    o.prompt_len = n;
    EXPECT_TRUE(m.forward(seq.get(), std::span<const int32_t>(ids.data() + s0, len), o, &lg).ok());
    all.insert(all.end(), lg.begin(), lg.end());
    s0 += len;
  }
  for (int i = 0; i < steps; ++i) {
    Options o;
    decode(o);
    EXPECT_TRUE(m.forward(seq.get(), std::span<const int32_t>(ids.data() + n + i, 1), o, &lg).ok());
    all.insert(all.end(), lg.begin(), lg.end());
  }
  return all;
}

}  // namespace strata::testing_ab
