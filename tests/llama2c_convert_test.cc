// `strata convert --from llama2c` on random GQA / MHA, shared / unshared-classifier llama2.c
// legacy-v0 files: the converted directory, run through LlamaRunner, must match a plain
// double-precision reference forward pass written here directly against the llama2.c file
// layout and run.c's math (interleaved RoPE, no weight permutation).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "exec/llama/llama_runner.h"
#include "model/llama2c_format.h"
#include "model/llama_config.h"

namespace strata {
namespace {
namespace fs = std::filesystem;

// ---- Reference: llama2.c run.c forward in double, straight from the .bin file. ----
struct RefModel {
  int dim, hidden, layers, heads, kv_heads, vocab, seq_len;
  bool shared;
  std::vector<float> w;  // everything after the header
  const float *emb, *rms_att, *wq, *wk, *wv, *wo, *rms_ffn, *w1, *w2, *w3, *rms_final, *wcls;
  std::vector<std::vector<double>> kc, vc;  // [layer][pos*kv_dim]

  explicit RefModel(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    int32_t h[7];
    in.read(reinterpret_cast<char*>(h), 28);
    dim = h[0], hidden = h[1], layers = h[2], heads = h[3], kv_heads = h[4];
    shared = h[5] > 0;
    vocab = std::abs(h[5]);
    seq_len = h[6];
    in.seekg(0, std::ios::end);
    const size_t n = (static_cast<size_t>(in.tellg()) - 28) / 4;
    in.seekg(28);
    w.resize(n);
    in.read(reinterpret_cast<char*>(w.data()), n * 4);
    const int hs = dim / heads, kvd = kv_heads * hs;
    const float* p = w.data();
    auto take = [&p](size_t k) { const float* r = p; p += k; return r; };
    emb = take(size_t(vocab) * dim);
    rms_att = take(size_t(layers) * dim);
    wq = take(size_t(layers) * dim * dim);
    wk = take(size_t(layers) * kvd * dim);
    wv = take(size_t(layers) * kvd * dim);
    wo = take(size_t(layers) * dim * dim);
    rms_ffn = take(size_t(layers) * dim);
    w1 = take(size_t(layers) * hidden * dim);
    w2 = take(size_t(layers) * dim * hidden);
    w3 = take(size_t(layers) * hidden * dim);
    rms_final = take(dim);
    take(size_t(seq_len) * hs);
    wcls = shared ? emb : take(size_t(vocab) * dim);
    kc.assign(layers, {});
    vc.assign(layers, {});
  }

  static std::vector<double> matvec(const float* W, const std::vector<double>& x, int rows) {
    std::vector<double> y(rows, 0.0);
    for (int r = 0; r < rows; ++r)
      for (size_t c = 0; c < x.size(); ++c) y[r] += double(W[size_t(r) * x.size() + c]) * x[c];
    return y;
  }
  static std::vector<double> rmsnorm(const std::vector<double>& x, const float* g) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double r = 1.0 / std::sqrt(ss / x.size() + 1e-5);
    std::vector<double> o(x.size());
    for (size_t i = 0; i < x.size(); ++i) o[i] = g[i] * (x[i] * r);
    return o;
  }

  std::vector<double> forward(int token, int pos) {
    const int hs = dim / heads, kvd = kv_heads * hs;
    std::vector<double> x(emb + size_t(token) * dim, emb + size_t(token + 1) * dim);
    for (int l = 0; l < layers; ++l) {
      auto xb = rmsnorm(x, rms_att + size_t(l) * dim);
      auto q = matvec(wq + size_t(l) * dim * dim, xb, dim);
      auto k = matvec(wk + size_t(l) * kvd * dim, xb, kvd);
      auto v = matvec(wv + size_t(l) * kvd * dim, xb, kvd);
      for (int i = 0; i < dim; i += 2) {  // run.c RoPE: interleaved pairs, freq by i % hs
        const int hd = i % hs;
        const double ang = pos / std::pow(10000.0, double(hd) / hs);
        const double c = std::cos(ang), s = std::sin(ang);
        for (int which = 0; which < (i < kvd ? 2 : 1); ++which) {
          auto& vec = which == 0 ? q : k;
          const double a = vec[i], b = vec[i + 1];
          vec[i] = a * c - b * s;
          vec[i + 1] = a * s + b * c;
        }
      }
      kc[l].insert(kc[l].end(), k.begin(), k.end());
      vc[l].insert(vc[l].end(), v.begin(), v.end());
      std::vector<double> att(dim, 0.0);
      for (int h = 0; h < heads; ++h) {
        const int g = h / (heads / kv_heads);
        std::vector<double> sc(pos + 1);
        double mx = -1e300;
        for (int t = 0; t <= pos; ++t) {
          double d = 0;
          for (int i = 0; i < hs; ++i) d += q[h * hs + i] * kc[l][size_t(t) * kvd + g * hs + i];
          sc[t] = d / std::sqrt(double(hs));
          mx = std::max(mx, sc[t]);
        }
        double sum = 0;
        for (auto& e : sc) sum += (e = std::exp(e - mx));
        for (int t = 0; t <= pos; ++t)
          for (int i = 0; i < hs; ++i)
            att[h * hs + i] += sc[t] / sum * vc[l][size_t(t) * kvd + g * hs + i];
      }
      auto o = matvec(wo + size_t(l) * dim * dim, att, dim);
      for (int i = 0; i < dim; ++i) x[i] += o[i];
      xb = rmsnorm(x, rms_ffn + size_t(l) * dim);
      auto h1 = matvec(w1 + size_t(l) * hidden * dim, xb, hidden);
      auto h3 = matvec(w3 + size_t(l) * hidden * dim, xb, hidden);
      for (int i = 0; i < hidden; ++i) h1[i] = h1[i] / (1.0 + std::exp(-h1[i])) * h3[i];
      auto down = matvec(w2 + size_t(l) * dim * hidden, h1, dim);
      for (int i = 0; i < dim; ++i) x[i] += down[i];
    }
    return matvec(wcls, rmsnorm(x, rms_final), vocab);
  }
};

struct Case {
  const char* name;
  int dim, hidden, layers, heads, kv_heads, vocab, seq_len;
  bool shared, bf16;
};

class Llama2cConvertTest : public ::testing::TestWithParam<Case> {};

TEST_P(Llama2cConvertTest, ConvertedModelMatchesReferenceForward) {
  const Case c = GetParam();
  const fs::path dir = fs::temp_directory_path() / (std::string("strata_l2c_") + c.name);
  fs::create_directories(dir);
  const std::string bin = (dir / "model.bin").string();
  Llama2cRandomOptions ro;
  ro.header = {c.dim, c.hidden, c.layers, c.heads, c.kv_heads, c.vocab, c.seq_len, c.shared};
  ro.seed = 42;
  ro.scale = 0.2f;
  ASSERT_TRUE(write_llama2c_random(bin, ro).ok());
  auto hdr = read_llama2c_header(bin);
  ASSERT_TRUE(hdr.ok()) << hdr.status().to_string();
  EXPECT_EQ(hdr->shared_classifier, c.shared);
  EXPECT_EQ(hdr->vocab_size, c.vocab);

  Llama2cConvertOptions co;
  co.checkpoint = bin;
  co.out_dir = (dir / "hf").string();
  co.bf16 = c.bf16;
  Status st = convert_llama2c(co);
  ASSERT_TRUE(st.ok()) << st.to_string();
  auto cfg = load_llama_config(co.out_dir);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_EQ(cfg->num_key_value_heads, c.kv_heads);
  EXPECT_EQ(cfg->tie_word_embeddings, c.shared);
  EXPECT_EQ(cfg->max_position_embeddings, c.seq_len);

  RunnerOptions opts;
  opts.threads = 2;
  auto runner = LlamaRunner::create(co.out_dir, opts);
  ASSERT_TRUE(runner.ok()) << runner.status().to_string();
  RefModel ref(bin);
  const std::vector<int32_t> toks = {1, 5, c.vocab - 1, 7, 3, 3, 11, 2, 9, 0, 4, 6};
  ASSERT_TRUE((*runner)->add_sequence(SeqId{0}).ok());
  const double tol = c.bf16 ? 0.05 : 2e-4;
  double max_err = 0;
  for (size_t pos = 0; pos < toks.size(); ++pos) {
    std::vector<float> logits;
    StepItem it{SeqId{0}, std::span<const int32_t>(&toks[pos], 1), true};
    ASSERT_TRUE((*runner)->step({&it, 1}, &logits).ok());
    auto want = ref.forward(toks[pos], static_cast<int>(pos));
    ASSERT_EQ(logits.size(), want.size());
    double scale = 0;
    for (double v : want) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < want.size(); ++i)
      max_err = std::max(max_err, std::abs(logits[i] - want[i]) / std::max(1.0, scale));
  }
  std::printf("%s: max relative logit error %.3g\n", c.name, max_err);
  EXPECT_LT(max_err, tol) << c.name;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, Llama2cConvertTest,
    ::testing::Values(Case{"gqa_unshared", 48, 80, 2, 6, 2, 37, 32, false, false},
                      Case{"mha_shared", 32, 64, 2, 4, 4, 29, 16, true, false},
                      Case{"mqa_unshared_odd", 40, 52, 3, 5, 1, 19, 24, false, false},
                      Case{"gqa_unshared_bf16", 48, 80, 2, 6, 2, 37, 32, false, true}),
    [](const auto& info) { return std::string(info.param.name); });

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The embedded model is exactly what `strata convert` makes of the original llama2.c file
// (when the shared original is available next to the repo).
TEST(Llama2cConvertEmbedded, EmbeddedStories260kIsConvertOutput) {
  const char* env = std::getenv("STRATA_SOURCE_DIR");
  const fs::path src = env != nullptr && *env != 0 ? env : STRATA_SOURCE_DIR;
  const fs::path orig = src.parent_path() / "shared/data/tiny_models/stories260K";
  if (!fs::exists(orig / "stories260K.bin")) GTEST_SKIP() << "no " << orig;
  const fs::path out = fs::temp_directory_path() / "strata_l2c_embedded";
  Llama2cConvertOptions co;
  co.checkpoint = (orig / "stories260K.bin").string();
  co.tokenizer = (orig / "tok512.bin").string();
  co.out_dir = out.string();
  ASSERT_TRUE(convert_llama2c(co).ok());
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.bin"})
    EXPECT_TRUE(read_all(out / f) == read_all(src / "models/stories260K" / f)) << f;
  fs::remove_all(out);
}

TEST(Llama2cConvertErrors, TruncatedAndBadHeader) {
  const fs::path dir = fs::temp_directory_path() / "strata_l2c_err";
  fs::create_directories(dir);
  const std::string bin = (dir / "m.bin").string();
  Llama2cRandomOptions ro;
  ro.header = {16, 32, 1, 2, 2, 11, 8, true};
  ASSERT_TRUE(write_llama2c_random(bin, ro).ok());
  fs::resize_file(bin, fs::file_size(bin) - 4);
  auto h = read_llama2c_header(bin);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(h.status().message().find(bin), std::string::npos);
  {
    std::ofstream out(bin, std::ios::binary);
    int32_t bad[7] = {0x616b3432, 1, 0, 0, 0, 0, 0};
    out.write(reinterpret_cast<const char*>(bad), 28);
  }
  EXPECT_EQ(read_llama2c_header(bin).status().code(), StatusCode::kInvalidArgument);
  Llama2cConvertOptions co;
  co.checkpoint = (dir / "missing.bin").string();
  co.out_dir = (dir / "out").string();
  EXPECT_EQ(convert_llama2c(co).code(), StatusCode::kNotFound);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace strata
