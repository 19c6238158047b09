// The V4.1 forward on the repacked vector kernels (kernels/block_gemm.h packed FP8/FP4,
// kernels/seq_gemm.h, kernels/fp8_einsum.h; the default) against the scalar reference loops
// (V41LoadOptions::scalar_reference), at 1 and 3 threads: logits of a prompt (prefill and
// chunked prefill) and of teacher-forced decode steps must be bit-identical. The scalar
// loops are the ones validated against DeepSeek's golden logits (tests/v41_golden_test.cc
// runs the golden cases on the default, packed path as well).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "base/check.h"
#include "exec/deepseek_v41/deepseek_v41_model.h"
#include "kernels/cpu_features.h"
#include "deepseek_ab_run.h"
#include "model/v41_random_checkpoint.h"

namespace strata {
namespace {

std::string model_dir() {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  return std::string(e ? e : STRATA_SOURCE_DIR) + "/models/deepseek-v41-tiny";
}

std::unique_ptr<DeepseekV41Model> load(bool scalar, int threads, std::string dir = model_dir(),
                                       int64_t min_parallel_attention_macs = int64_t{1} << 16) {
  V41LoadOptions o;
  o.min_parallel_attention_macs = min_parallel_attention_macs;
  o.state_max_tokens = 256;
  o.scalar_reference = scalar;
  o.threads = threads;
  auto r = DeepseekV41Model::load(dir, o);
  STRATA_CHECK_MSG(r.ok(), "{}", r.status().to_string());
  return std::move(r).value();
}

std::vector<float> run(const DeepseekV41Model& m, int64_t n, int64_t chunk, int steps) {
  return testing_ab::run_prompt_then_decode<V41ForwardOptions>(m, n, chunk, steps, 99u,
                                                   [](V41ForwardOptions& o) { o.decode_step = true; });
}

// fast3p: attention over the pool even for the tiny model's few multiply-adds, so that its
// pooled paths run too (decode: each thread reads the KV rows for its own heads; prefill:
// scores split by rows, heads split over threads).
TEST(V41PackedKernels, BitIdenticalToScalarReference) {
  auto ref = load(true, 1);
  auto fast1 = load(false, 1);
  auto fast3 = load(false, 3);
  auto fast3p = load(false, 3, model_dir(), 0);
  auto fast2p = load(false, 2, model_dir(), 0);
  for (auto [n, chunk] : {std::pair<int64_t, int64_t>{70, 0}, {70, 7}, {5, 0}}) {
    const std::vector<float> want = run(*ref, n, chunk, 4);
    for (const DeepseekV41Model* m : {fast1.get(), fast3.get(), fast3p.get(), fast2p.get()}) {
      const std::vector<float> got = run(*m, n, chunk, 4);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4))
          << "n=" << n << " chunk=" << chunk << " threads=" << (m->pool() ? m->pool()->num_threads() : 1);
    }
  }
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// Another layout and other dims (random weights from `strata bench make-v41`): dim 320 and
// moe_inter 544 are not multiples of 64, so the packed groups are ragged, and the experts'
// SwiGLU + quantization runs in 256-wide pieces with a ragged last one (v41_moe.cc); with
// and without the AVX-512 decode paths.
TEST(V41PackedKernels, RandomCheckpointOtherDimsBitIdentical) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("strata_v41_ab_" + std::to_string(::getpid()))).string();
  V41RandomOptions ro;
  ro.preset = "tiny";
  ro.seed = 5;
  ro.dim = 320;
  ro.layers = 6;
  ro.experts = 6;
  ro.activated = 2;
  ro.moe_inter = 544;
  ro.vocab = 500;
  ASSERT_TRUE(write_v41_random_checkpoint(dir, ro).ok());
  auto ref = load(true, 1, dir);
  auto fast = load(false, 2, dir);
  for (bool e512 : {true, false}) {
    kernels::set_avx512_enabled(e512);
    for (auto [n, chunk] : {std::pair<int64_t, int64_t>{40, 0}, {40, 9}}) {
      const std::vector<float> want = run(*ref, n, chunk, 3);
      const std::vector<float> got = run(*fast, n, chunk, 3);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4))
          << "n=" << n << " chunk=" << chunk << " avx512=" << e512;
    }
  }
  kernels::set_avx512_enabled(true);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata
