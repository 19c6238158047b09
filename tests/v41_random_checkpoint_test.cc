// `strata bench make-v41` generator (model/v41_random_checkpoint.h):
//   * the tiny preset loads through the normal runner path (every tensor used, none missing),
//     runs prefill + decode with finite, non-degenerate logits;
//   * its layer roles and Engram sizes equal the golden tiny model's config.json (an
//     independent source: that file was written by the reference harness);
//   * value scales: dequantized FP8 / FP4 / BF16 tensors have the recipe's standard deviation;
//   * same seed => identical bytes (also with another thread count); other seed => different;
//   * bad options give InvalidArgument naming the option.
// Optional: STRATA_V41_BENCH_DIR=<dir made by `strata bench make-v41`> also runs a short
// prefill + decode on that model and checks its logits are finite (a manual check of the
// bench preset; skipped when unset).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "exec/deepseek_v41/deepseek_v41_model.h"
#include "exec/runner_factory.h"
#include "model/dtype.h"
#include "model/safetensors.h"
#include "model/v41_random_checkpoint.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::string repo_file(const std::string& rel) {
  const char* e = std::getenv("STRATA_SOURCE_DIR");
  return std::string(e ? e : STRATA_SOURCE_DIR) + "/" + rel;
}

class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    path_ = fs::temp_directory_path() /
            ("strata_v41rand_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

std::string read_file(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

V41RandomOptions tiny(uint64_t seed = 1) {
  V41RandomOptions o;
  o.preset = "tiny";
  o.seed = seed;
  o.threads = 2;
  return o;
}

// Prefill + decode through make_model_runner; returns every step's logits.
std::vector<std::vector<float>> run_model(const std::string& dir, int64_t prompt_len, int decode) {
  RunnerOptions ro;
  ro.threads = 1;
  auto r = make_model_runner(dir, ro);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return {};
  ModelRunner& runner = **r;
  const SeqId seq{1};
  EXPECT_TRUE(runner.add_sequence(seq).ok());
  std::vector<int32_t> prompt(prompt_len);
  for (int64_t i = 0; i < prompt_len; ++i)
    prompt[i] = static_cast<int32_t>(3 + (i * 7919) % (runner.info().vocab_size - 4));
  std::vector<std::vector<float>> out;
  std::vector<float> logits;
  StepItem item{seq, prompt, true};
  Status st = runner.step({&item, 1}, &logits);
  EXPECT_TRUE(st.ok()) << st.to_string();
  out.push_back(logits);
  for (int k = 0; k < decode && st.ok(); ++k) {
    const int32_t next = static_cast<int32_t>(
        std::max_element(logits.begin(), logits.end()) - logits.begin());
    StepItem d{seq, std::span<const int32_t>(&next, 1), true};
    st = runner.step({&d, 1}, &logits);
    EXPECT_TRUE(st.ok()) << st.to_string();
    out.push_back(logits);
  }
  return out;
}

void expect_sane_logits(const std::vector<std::vector<float>>& steps, int64_t vocab) {
  ASSERT_FALSE(steps.empty());
  for (const auto& l : steps) {
    ASSERT_EQ(static_cast<int64_t>(l.size()), vocab);
    double sum = 0, sq = 0, amax = 0;
    for (float v : l) {
      ASSERT_TRUE(std::isfinite(v));
      sum += v;
      sq += static_cast<double>(v) * v;
      amax = std::max(amax, std::fabs(static_cast<double>(v)));
    }
    const double mean = sum / l.size(), sd = std::sqrt(sq / l.size() - mean * mean);
    EXPECT_GT(sd, 0.1) << "logits collapsed";
    EXPECT_LT(amax, 100.0) << "logits blew up";
  }
}

TEST(V41RandomCheckpoint, TinyPresetLoadsAndRuns) {
  TempDir d("run");
  V41RandomSummary s;
  Status st = write_v41_random_checkpoint(d.str(), tiny(), &s);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_GT(s.n_tensors, 900);
  EXPECT_EQ(s.file_bytes, static_cast<int64_t>(fs::file_size(fs::path(d.str()) / "model.safetensors")));

  // Every tensor in the file is one the loader wants.
  V41LoadOptions lo;
  lo.state_max_tokens = 64;
  auto m = DeepseekV41Model::load(d.str(), lo);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ((*m)->weights().num_tensors_ignored(), 0);
  EXPECT_EQ((*m)->weights().num_tensors_used(), s.n_tensors);
  EXPECT_TRUE((*m)->weights().draft_stages().empty());

  expect_sane_logits(run_model(d.str(), 20, 4), 2048);
}

TEST(V41RandomCheckpoint, TinyLayoutMatchesGoldenTinyConfig) {
  TempDir d("layout");
  ASSERT_TRUE(write_v41_random_checkpoint(d.str(), tiny()).ok());
  const auto gen = nlohmann::json::parse(read_file(d.str() + "/config.json"));
  const auto gold = nlohmann::json::parse(read_file(repo_file("models/deepseek-v41-tiny/config.json")));
  EXPECT_EQ(gen["architectures"], gold["architectures"]);
  EXPECT_EQ(gen["quantization_config"], gold["quantization_config"]);
  const auto& g = gen["text_config"];
  const auto& t = gold["text_config"];
  for (const char* k :
       {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim",
        "qk_rope_head_dim", "q_lora_rank", "o_groups", "o_lora_rank", "sliding_window",
        "kv_source_layer_ids", "index_source_layer_ids", "candidate_source_layer_id",
        "candidate_topk_blocks", "candidate_block_size", "index_n_heads", "index_head_dim",
        "index_topk", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
        "scoring_func", "topk_method", "hc_mult", "engram_layer_ids", "engram_num_embeddings",
        "engram_n_heads", "engram_head_dim", "engram_vocab_size",
        "engram_compressed_vocab_size", "rope_scaling"})
    EXPECT_EQ(g[k], t[k]) << k;
  // Backbone ratios equal; the golden file also lists its 3 DSpark stages (omitted here).
  std::vector<int> gr = g["compress_ratios"], tr = t["compress_ratios"];
  tr.resize(12);
  EXPECT_EQ(gr, tr);
  EXPECT_EQ(g["num_nextn_predict_layers"], 0);
}

// Dequantized values per the spec's decode rules (dtype.h), independent of the generator.
double tensor_std(const TensorView& w, const TensorView& scale, int fp4_scale_cols) {
  double sum = 0, sq = 0;
  const int64_t n = w.numel();
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    double v;
    if (w.dtype == DType::kBF16) {
      v = bf16_to_f32(w.u16()[i]);
    } else if (w.dtype == DType::kF8_E4M3) {
      const int64_t in = w.shape[1], r = i / in, c = i % in;
      const int64_t scols = scale.shape[1];
      v = fp8_e4m3_to_f32(w.data[i]) * ue8m0_to_f32(scale.data[(r / 32) * scols + c / 32]);
    } else {  // packed FP4: [out, in/2], scale [out, in/32]
      const int64_t half = w.shape[1], r = i / half, c = i % half;
      const double s = ue8m0_to_f32(scale.data[r * fp4_scale_cols + (2 * c) / 32]);
      const double lo = fp4_e2m1_to_f32(w.data[i] & 0xf) * s;
      const double hi = fp4_e2m1_to_f32(w.data[i] >> 4) * s;
      sum += lo + hi;
      sq += lo * lo + hi * hi;
      count += 2;
      continue;
    }
    sum += v;
    sq += v * v;
    ++count;
  }
  const double mean = sum / count;
  return std::sqrt(sq / count - mean * mean);
}

TEST(V41RandomCheckpoint, ValueScalesFollowTheRecipe) {
  TempDir d("scales");
  ASSERT_TRUE(write_v41_random_checkpoint(d.str(), tiny()).ok());
  auto ck = SafetensorsCheckpoint::open(d.str());
  ASSERT_TRUE(ck.ok());
  auto get = [&](const std::string& n) {
    auto t = (*ck)->get(n);
    EXPECT_TRUE(t.ok()) << n;
    return t.ok() ? *t : TensorView{};
  };
  const double D = 256;
  struct Case {
    const char* name;
    double want;
  } cases[] = {
      {"layers.3.attn.wq_a", 1 / std::sqrt(D)},
      {"layers.3.attn.wo_b", 3 / std::sqrt(256.0)},  // in = o_groups * o_lora = 256
      {"layers.3.ffn.shared_experts.w1", 4 / std::sqrt(D)},
      {"layers.3.ffn.shared_experts.w2", 0.08 / std::sqrt(128.0)},
      {"layers.3.ffn.experts.5.w1", 4 / std::sqrt(D)},
      {"layers.3.ffn.experts.5.w2", 0.08 / std::sqrt(128.0)},
  };
  for (const Case& c : cases) {
    const TensorView w = get(std::string(c.name) + ".weight");
    const TensorView s = get(std::string(c.name) + ".scale");
    const int fp4_cols = w.dtype == DType::kI8 ? static_cast<int>(s.shape[1]) : 0;
    const double sd = tensor_std(w, s, fp4_cols);
    EXPECT_NEAR(sd / c.want, 1.0, 0.12) << c.name << " std " << sd << " want " << c.want;
  }
  EXPECT_NEAR(tensor_std(get("embed.weight"), {}, 0), 1.0, 0.05);
  EXPECT_NEAR(tensor_std(get("head.weight"), {}, 0), 2 / std::sqrt(D), 0.01);
  // Engram table rows dequantize to N(0,1) (per-row-per-32 scales).
  const TensorView et = get("layers.1.engram.embed.weight");
  const TensorView es = get("layers.1.engram.embed.scale");
  double sq = 0;
  for (int64_t i = 0; i < et.numel(); ++i) {
    const double v = fp8_e4m3_to_f32(et.data[i]) * ue8m0_to_f32(es.data[(i / 64) * 2 + (i % 64) / 32]);
    sq += v * v;
  }
  EXPECT_NEAR(std::sqrt(sq / et.numel()), 1.0, 0.1);
}

TEST(V41RandomCheckpoint, SameSeedSameBytesOtherSeedDiffers) {
  TempDir a("a"), b("b"), c("c");
  V41RandomOptions oa = tiny(7), ob = tiny(7), oc = tiny(8);
  ob.threads = 1;  // thread count must not matter
  ASSERT_TRUE(write_v41_random_checkpoint(a.str(), oa).ok());
  ASSERT_TRUE(write_v41_random_checkpoint(b.str(), ob).ok());
  ASSERT_TRUE(write_v41_random_checkpoint(c.str(), oc).ok());
  for (const char* f : {"/config.json", "/tokenizer.json", "/model.safetensors"})
    EXPECT_TRUE(read_file(a.str() + f) == read_file(b.str() + f)) << f;
  EXPECT_EQ(read_file(a.str() + "/config.json"), read_file(c.str() + "/config.json"));
  const std::string ma = read_file(a.str() + "/model.safetensors");
  const std::string mc = read_file(c.str() + "/model.safetensors");
  ASSERT_EQ(ma.size(), mc.size());  // same shapes
  EXPECT_NE(ma, mc);
  // Seeds change the data everywhere, not only in the metadata.
  int64_t diff = 0;
  for (size_t i = ma.size() / 2; i < ma.size(); ++i) diff += ma[i] != mc[i];
  EXPECT_GT(diff, static_cast<int64_t>(ma.size() / 8));
}

TEST(V41RandomCheckpoint, OverridesChangeTheShape) {
  TempDir d("ovr");
  V41RandomOptions o = tiny();
  o.dim = 128;
  o.layers = 6;
  o.experts = 4;
  o.activated = 1;
  o.vocab = 300;
  o.moe_inter = 64;
  ASSERT_TRUE(write_v41_random_checkpoint(d.str(), o).ok());
  auto c = load_deepseek_config(d.str());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->dim, 128);
  EXPECT_EQ(c->n_layers, 6);
  EXPECT_EQ(c->n_routed_experts, 4);
  EXPECT_EQ(c->n_activated_experts, 1);
  EXPECT_EQ(c->vocab_size, 300);
  EXPECT_EQ(c->moe_inter_dim, 64);
  expect_sane_logits(run_model(d.str(), 9, 2), 300);
}

TEST(V41RandomCheckpoint, BadOptionsAreClearErrors) {
  struct Case {
    const char* what;
    V41RandomOptions o;
  };
  std::vector<Case> cases;
  auto add = [&](const char* what, auto edit) {
    V41RandomOptions o = tiny();
    edit(o);
    cases.push_back({what, o});
  };
  add("preset", [](V41RandomOptions& o) { o.preset = "huge"; });
  add("--dim", [](V41RandomOptions& o) { o.dim = 100; });
  add("--dim", [](V41RandomOptions& o) { o.dim = -32; });
  add("--layers", [](V41RandomOptions& o) { o.layers = 3; });
  add("--activated", [](V41RandomOptions& o) { o.experts = 4, o.activated = 5; });
  add("--vocab", [](V41RandomOptions& o) { o.vocab = 10; });
  add("--moe-inter", [](V41RandomOptions& o) { o.moe_inter = 100; });
  add("--max-position", [](V41RandomOptions& o) { o.max_position = 8; });
  add("GB", [](V41RandomOptions& o) { o.preset = "bench", o.experts = 1024; });
  for (const Case& c : cases) {
    TempDir d("bad");
    Status st = write_v41_random_checkpoint(d.str(), c.o);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.what << ": " << st.to_string();
    EXPECT_NE(st.to_string().find(c.what), std::string::npos) << st.to_string();
    EXPECT_FALSE(fs::exists(fs::path(d.str()) / "model.safetensors")) << c.what;
  }
}

TEST(V41RandomCheckpoint, BenchDirFromEnvRuns) {
  const char* dir = std::getenv("STRATA_V41_BENCH_DIR");
  if (!dir) GTEST_SKIP() << "set STRATA_V41_BENCH_DIR to a `strata bench make-v41` output";
  auto c = load_deepseek_config(dir);
  ASSERT_TRUE(c.ok());
  const auto steps = run_model(dir, 8, 2);
  expect_sane_logits(steps, c->vocab_size);
  for (size_t k = 0; k < steps.size(); ++k) {
    double amax = 0, sq = 0;
    for (float v : steps[k]) {
      amax = std::max(amax, std::fabs(static_cast<double>(v)));
      sq += static_cast<double>(v) * v;
    }
    std::printf("step %zu: max |logit| %.3f, rms %.3f\n", k, amax,
                std::sqrt(sq / steps[k].size()));
  }
  // The residual streams stay O(1) through every layer (the final norm would hide growth).
  V41LoadOptions lo;
  lo.state_max_tokens = 64;
  auto m = DeepseekV41Model::load(dir, lo);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto seq = (*m)->new_sequence();
  V41ForwardOptions fo;
  fo.dump = [](const std::string& name, const float* x, const std::vector<int64_t>& shape) {
    if (name.find("block_out") == std::string::npos || name.find("pre_mix") != std::string::npos)
      return;
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    double sq = 0;
    for (int64_t i = 0; i < n; ++i) sq += static_cast<double>(x[i]) * x[i];
    const double rms = std::sqrt(sq / n);
    std::printf("%s rms %.3f\n", name.c_str(), rms);
    EXPECT_TRUE(std::isfinite(rms)) << name;
    EXPECT_LT(rms, 100.0) << name;
    EXPECT_GT(rms, 0.01) << name;
  };
  std::vector<int32_t> prompt = {5, 17, 99, 2, 1234, 77, 8, 300};
  std::vector<float> logits;
  ASSERT_TRUE((*m)->forward(seq.get(), prompt, fo, &logits).ok());
}

}  // namespace
}  // namespace strata
