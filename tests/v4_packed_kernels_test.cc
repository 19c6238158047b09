// The DeepSeek-V4 forward on the repacked multi-threaded kernels (DeepseekV4Weights::
// pack_for_kernels; the default) against the scalar loops on the checkpoint layout
// (DeepseekV4Model::load(..., scalar_reference = true)), at 1 and 3 threads: the logits of a
// prompt (whole and chunked) and of decode steps must be bit-identical. The scalar loops are
// the ones validated against DeepSeek's golden logits (tests/v4_golden_test.cc runs the
// golden cases on the default, packed path).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/thread_pool.h"
#include "exec/deepseek_v4/deepseek_v4_model.h"
#include "kernels/cpu_features.h"
#include "deepseek_ab_run.h"

namespace strata {
namespace {

std::string model_dir() {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  const std::string src = e ? e : STRATA_SOURCE_DIR;
  const std::string m = src + "/models/deepseek-v4flash-tiny";
  return std::ifstream(m + "/model.safetensors").good() ? m : src + "/testdata/golden/v4flash-tiny";
}

std::unique_ptr<DeepseekV4Model> load(bool scalar, int threads) {
  auto r = DeepseekV4Model::load(model_dir(), 0, false, 256, threads, scalar);
  STRATA_CHECK_MSG(r.ok(), "{}", r.status().to_string());
  return std::move(r).value();
}

std::vector<float> run(const DeepseekV4Model& m, int64_t n, int64_t chunk, int steps) {
  return testing_ab::run_prompt_then_decode<V4ForwardOptions>(m, n, chunk, steps, 7u,
                                                   [](V4ForwardOptions&) {});
}

TEST(V4PackedKernels, BitIdenticalToScalarReference) {
  auto ref = load(true, 1);
  auto fast1 = load(false, 1);
  auto fast3 = load(false, 3);
  EXPECT_EQ(ref->weights().packed_bytes(), 0);
  EXPECT_GT(fast1->weights().packed_bytes(), 0);
  for (bool e512 : {true, false}) {
    kernels::set_avx512_enabled(e512);
    for (auto [n, chunk] : {std::pair<int64_t, int64_t>{70, 0}, {70, 9}, {5, 0}}) {
      const std::vector<float> want = run(*ref, n, chunk, 4);
      for (const DeepseekV4Model* m : {fast1.get(), fast3.get()}) {
        const std::vector<float> got = run(*m, n, chunk, 4);
        ASSERT_EQ(got.size(), want.size());
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4))
            << "n=" << n << " chunk=" << chunk << " avx512=" << e512
            << " packed " << (m == fast1.get() ? "1 thread" : "3 threads");
      }
    }
  }
  kernels::set_avx512_enabled(true);
}

}  // namespace
}  // namespace strata
