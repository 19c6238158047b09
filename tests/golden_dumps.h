// Shared by the DeepSeek golden tests: the per-layer activations of one forward in the
// reference's call shape (the whole prompt as one call, bit for bit with DeepSeek's
// inference/model.py), as the golden dumps name them ("embed", "layerKK.attn_out", ...).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "exec/call_shape.h"

namespace strata::testing {

struct ReferenceRun {
  std::map<std::string, std::vector<float>> dumps;  // name -> activation, row-major
  std::vector<float> logits;                         // the last token's
};

// Model: DeepseekV41Model or DeepseekV4Model; Options: its forward options. The forward runs
// on a fresh sequence; a failed forward is a test failure (and an empty result).
template <class Options, class Model>
ReferenceRun reference_layer_dumps(const Model& model, const std::vector<int32_t>& prompt) {
  ReferenceRun run;
  auto& got = run.dumps;
  Options opt;
  opt.call_shape = CallShape::kReference;
  opt.dump = [&](const std::string& n, const float* d, const std::vector<int64_t>& shape) {
    int64_t k = 1;
    for (auto s : shape) k *= s;
    got[n].assign(d, d + k);
  };
  auto seq = model.new_sequence();
  const Status st = model.forward(seq.get(), prompt, opt, &run.logits);
  EXPECT_TRUE(st.ok()) << st.to_string();
  if (!st.ok()) run = {};
  return run;
}

}  // namespace strata::testing
