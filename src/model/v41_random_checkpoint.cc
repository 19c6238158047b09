// V4.1-shaped random checkpoint generator. See v41_random_checkpoint.h.
#include "model/v41_random_checkpoint.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/thread_pool.h"
#include "kernels/quant_formats.h"
#include "model/deepseek_config.h"
#include "model/dtype.h"
#include "model/engram_hash.h"
#include "model/safetensors.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

// ---------------------------------------------------------------------------------------
// Shapes.

struct Shape {
  int64_t vocab = 0, dim = 0;
  int layers = 0, heads = 0, head_dim = 0, rope_head_dim = 0, q_lora = 0, o_groups = 0,
      o_lora = 0, window = 0;
  int index_heads = 0, index_head_dim = 0, index_topk = 0, cand_blocks = 0, cand_block_size = 0;
  int experts = 0, activated = 0;
  int64_t moe_inter = 0;
  int engram_heads = 0, engram_head_dim = 0, engram_max_ngram = 0;
  int64_t engram_vocab = 0, max_position = 0;
};

Shape tiny_shape() {  // models/deepseek-v41-tiny's dims
  Shape s;
  s.vocab = 2048, s.dim = 256, s.layers = 12, s.heads = 8, s.head_dim = 64, s.rope_head_dim = 16;
  s.q_lora = 128, s.o_groups = 4, s.o_lora = 64, s.window = 16;
  s.index_heads = 4, s.index_head_dim = 64, s.index_topk = 8, s.cand_blocks = 6,
  s.cand_block_size = 4;
  s.experts = 8, s.activated = 2, s.moe_inter = 128;
  s.engram_heads = 2, s.engram_head_dim = 64, s.engram_max_ngram = 4, s.engram_vocab = 200;
  s.max_position = 512;
  return s;
}

// Flash scaled down: real head_dim / rope dims / window / hc, about 0.4x width, half depth,
// 16 experts (4 active): ~0.9 GB read per decode token, ~2 GB file.
Shape bench_shape() {
  Shape s;
  s.vocab = 32768, s.dim = 2048, s.layers = 20, s.heads = 16, s.head_dim = 512,
  s.rope_head_dim = 64;
  s.q_lora = 512, s.o_groups = 4, s.o_lora = 512, s.window = 128;
  s.index_heads = 16, s.index_head_dim = 128, s.index_topk = 256, s.cand_blocks = 128,
  s.cand_block_size = 8;
  s.experts = 16, s.activated = 4, s.moe_inter = 1024;
  s.engram_heads = 4, s.engram_head_dim = 128, s.engram_max_ngram = 4, s.engram_vocab = 50000;
  s.max_position = 4096;
  return s;
}

StatusOr<Shape> resolve_shape(const V41RandomOptions& o) {
  Shape s;
  if (o.preset == "tiny") s = tiny_shape();
  else if (o.preset == "bench") s = bench_shape();
  else return invalid_argument("make-v41: unknown preset '{}' (expected tiny or bench)", o.preset);
  auto neg = [](const char* name, int64_t v) -> Status {
    if (v < 0) return invalid_argument("make-v41: --{} must be >= 0 (0 = preset), got {}", name, v);
    return ok_status();
  };
  STRATA_RETURN_IF_ERROR(neg("dim", o.dim));
  STRATA_RETURN_IF_ERROR(neg("layers", o.layers));
  STRATA_RETURN_IF_ERROR(neg("experts", o.experts));
  STRATA_RETURN_IF_ERROR(neg("activated", o.activated));
  STRATA_RETURN_IF_ERROR(neg("vocab", o.vocab));
  STRATA_RETURN_IF_ERROR(neg("moe-inter", o.moe_inter));
  STRATA_RETURN_IF_ERROR(neg("max-position", o.max_position));
  if (o.dim) s.dim = o.dim;
  if (o.layers) s.layers = o.layers;
  if (o.experts) s.experts = o.experts;
  if (o.activated) s.activated = o.activated;
  else s.activated = std::min(s.activated, s.experts);
  if (o.vocab) s.vocab = o.vocab;
  if (o.moe_inter) s.moe_inter = o.moe_inter;
  if (o.max_position) s.max_position = o.max_position;

  if (s.dim < 64 || s.dim > 16384 || s.dim % 32)
    return invalid_argument("make-v41: --dim {} must be a multiple of 32 in [64, 16384]", s.dim);
  if (s.layers < 4 || s.layers > 128)
    return invalid_argument(
        "make-v41: --layers {} must be in [4, 128] (2 SWA layers, at least one ratio-2 and "
        "one ratio-1 layer)",
        s.layers);
  if (s.experts < 1 || s.experts > 1024)
    return invalid_argument("make-v41: --experts {} must be in [1, 1024]", s.experts);
  if (s.activated < 1 || s.activated > s.experts)
    return invalid_argument("make-v41: --activated {} must be in [1, experts = {}]", s.activated,
                            s.experts);
  if (s.vocab < 64 || s.vocab > (int64_t{1} << 24))
    return invalid_argument("make-v41: --vocab {} must be in [64, 16777216]", s.vocab);
  if (s.moe_inter < 32 || s.moe_inter > 65536 || s.moe_inter % 32)
    return invalid_argument("make-v41: --moe-inter {} must be a multiple of 32 in [32, 65536]",
                            s.moe_inter);
  if (s.max_position < 2 * s.window || s.max_position > (int64_t{1} << 20))
    return invalid_argument("make-v41: --max-position {} must be in [{}, 1048576]",
                            s.max_position, 2 * s.window);
  return s;
}

// Layer roles scaled from V4.1-Flash (see the header).
struct Roles {
  std::vector<int> ratios, kv_sources, index_sources, engram_layers;
  int candidate = -1;
};

Roles make_roles(int n) {
  Roles r;
  const int n2 = std::clamp((n - 2) * 9 / 19, 1, n - 3);
  const int f = 2 + n2, n1 = n - f;
  r.ratios.assign(n, 1);
  r.ratios[0] = r.ratios[1] = 0;
  for (int i = 2; i < f; ++i) r.ratios[i] = 2;
  const int step2 = (n2 + 2) / 3;
  for (int k = 0; k < 3 && 2 + k * step2 < f; ++k) r.kv_sources.push_back(2 + k * step2);
  r.index_sources = r.kv_sources;
  r.kv_sources.push_back(f);
  r.index_sources.push_back(f);
  const int step1 = std::max(2, static_cast<int>(std::lround(n1 / 5.0)));
  for (int l = f + step1; l < n; l += step1) r.index_sources.push_back(l);
  r.candidate = f;
  r.engram_layers = {1, r.kv_sources[r.kv_sources.size() - 2]};  // last ratio-2 kv source
  return r;
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

// Tokenizer: specials, then triples normalizing alike. Returns the number of compressed ids.
int64_t compressed_vocab(int64_t vocab) { return 3 + (vocab - 3 + 2) / 3; }

std::string tokenizer_json(int64_t vocab) {
  ojson v = ojson::object();
  v["<bos>"] = 0;
  v["<eos>"] = 1;
  v["<pad>"] = 2;
  for (int64_t id = 3; id < vocab; ++id) {
    const int64_t g = (id - 3) / 3;
    const int64_t k = (id - 3) % 3;
    std::string s = k == 0 ? fmt::format("tok{}", g) : k == 1 ? fmt::format("Tok{}", g)
                                                              : fmt::format(" TOK{}", g);
    v[s] = id;
  }
  ojson t = {{"version", "1.0"},       {"truncation", nullptr},   {"padding", nullptr},
             {"added_tokens", ojson::array()}, {"normalizer", nullptr}, {"pre_tokenizer", nullptr},
             {"post_processor", nullptr}, {"decoder", nullptr}};
  t["model"] = {{"type", "WordLevel"}, {"vocab", v}, {"unk_token", "<pad>"}};
  return t.dump(2) + "\n";
}

ojson config_json(const Shape& s, const Roles& r, const std::vector<int64_t>& engram_rows) {
  ojson c;
  c["architectures"] = {"DeepseekV41ForCausalLM"};
  c["model_type"] = "deepseek_v41";
  c["dtype"] = "bfloat16";
  c["bos_token_id"] = 0;
  c["eos_token_id"] = 1;
  c["pad_token_id"] = 2;
  c["image_token_id"] = s.vocab - 1;
  c["quantization_config"] = {{"quant_method", "fp8"},
                              {"activation_scheme", "dynamic"},
                              {"weight_block_size", {32, 32}},
                              {"scale_fmt", "ue8m0"},
                              {"expert_dtype", "fp4"}};
  ojson t;
  t["model_type"] = "deepseek_v41_text";
  t["vocab_size"] = s.vocab;
  t["hidden_size"] = s.dim;
  t["num_hidden_layers"] = s.layers;
  t["num_nextn_predict_layers"] = 0;
  t["num_attention_heads"] = s.heads;
  t["num_key_value_heads"] = 1;
  t["head_dim"] = s.head_dim;
  t["qk_rope_head_dim"] = s.rope_head_dim;
  t["q_lora_rank"] = s.q_lora;
  t["o_groups"] = s.o_groups;
  t["o_lora_rank"] = s.o_lora;
  t["rms_norm_eps"] = 1e-20;
  t["sliding_window"] = s.window;
  t["compress_ratios"] = r.ratios;
  t["compress_rope_theta"] = 160000;
  t["rope_theta"] = 10000;
  t["rope_scaling"] = {{"type", "yarn"},
                       {"factor", 16},
                       {"original_max_position_embeddings", 65536},
                       {"beta_fast", 32},
                       {"beta_slow", 1}};
  t["max_position_embeddings"] = s.max_position;
  t["kv_source_layer_ids"] = r.kv_sources;
  t["index_source_layer_ids"] = r.index_sources;
  t["candidate_source_layer_id"] = r.candidate;
  t["candidate_topk_blocks"] = s.cand_blocks;
  t["candidate_block_size"] = s.cand_block_size;
  t["index_n_heads"] = s.index_heads;
  t["index_head_dim"] = s.index_head_dim;
  t["index_topk"] = s.index_topk;
  t["n_routed_experts"] = s.experts;
  t["num_experts_per_tok"] = s.activated;
  t["n_shared_experts"] = 1;
  t["moe_intermediate_size"] = s.moe_inter;
  t["scoring_func"] = "sqrtsoftplus";
  t["topk_method"] = "noaux_tc";
  t["norm_topk_prob"] = true;
  t["routed_scaling_factor"] = 1.5;
  t["swiglu_limit"] = 10.0;
  t["hc_mult"] = 4;
  t["hc_sinkhorn_iters"] = 20;
  t["hc_eps"] = 1e-6;
  t["engram_layer_ids"] = r.engram_layers;
  t["engram_num_embeddings"] = engram_rows;
  t["engram_max_ngram_size"] = s.engram_max_ngram;
  t["engram_n_heads"] = s.engram_heads;
  t["engram_head_dim"] = s.engram_head_dim;
  t["engram_vocab_size"] = s.engram_vocab;
  t["engram_compressed_vocab_size"] = compressed_vocab(s.vocab);
  t["engram_pad_token_id"] = 2;
  t["hidden_act"] = "silu";
  t["attention_bias"] = false;
  t["tie_word_embeddings"] = false;
  t["torch_dtype"] = "bfloat16";
  c["text_config"] = std::move(t);
  return c;
}

// ---------------------------------------------------------------------------------------
// Random values.

uint64_t mix64(uint64_t z) {  // splitmix64 finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
struct Rng {
  uint64_t s;
  uint64_t next() { return mix64(s += 0x9e3779b97f4a7c15ULL); }
};
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ULL;
  return h;
}

// Quantiles of N(0,1) at (u + 0.5) / 2^bits, by bisection on the CDF.
std::vector<float> make_quantiles(int bits) {
  const int64_t n = int64_t{1} << bits;
  std::vector<float> z(n);
  for (int64_t u = 0; u < n / 2; ++u) {
    const double p = (static_cast<double>(u) + 0.5) / static_cast<double>(n);
    double lo = -40, hi = 0;
    for (int it = 0; it < 80; ++it) {
      const double mid = 0.5 * (lo + hi);
      if (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p) lo = mid;
      else hi = mid;
    }
    z[u] = static_cast<float>(0.5 * (lo + hi));
    z[n - 1 - u] = -z[u];  // symmetric
  }
  return z;
}
const std::vector<float>& quantiles8() {
  static const std::vector<float> z = make_quantiles(8);
  return z;
}
const std::vector<float>& quantiles16() {
  static const std::vector<float> z = make_quantiles(16);
  return z;
}

enum class Fill : uint8_t { kGauss, kUniform, kFp8, kFp4, kConst };
enum Group : uint8_t { kDense, kExpert, kEngramTable };

struct GenTensor {
  std::string name;
  DType dtype = DType::kBF16;
  std::vector<int64_t> shape;
  Fill fill = Fill::kGauss;
  float a = 0, b = 0;   // kGauss: mean, std; kUniform: [a, b); kFp8 / kFp4: std b
  uint8_t byte = 0;     // kConst
  int64_t nbytes = 0, offset = 0;
  Group group = kDense;
};

// Power-of-two scale exponent k and code spread s0 with s0 * 2^k = std, s0 in (top/2, top].
std::pair<int, double> split_scale(double std_dev, double top) {
  const int k = static_cast<int>(std::ceil(std::log2(std_dev / top)));
  return {k, std_dev / std::ldexp(1.0, k)};
}

constexpr int64_t kChunk = int64_t{1} << 20;  // elements (FP4: packed bytes) per RNG stream

int64_t chunk_units(const GenTensor& t) {  // what a chunk counts
  switch (t.fill) {
    case Fill::kGauss:
    case Fill::kUniform: return t.nbytes / static_cast<int64_t>(dtype_size(t.dtype));
    default: return t.nbytes;
  }
}

void fill_chunk(const GenTensor& t, int64_t chunk, uint64_t seed, uint8_t* base) {
  const int64_t units = chunk_units(t);
  const int64_t b = chunk * kChunk, e = std::min(units, b + kChunk);
  Rng rng{mix64(seed ^ mix64(fnv1a(t.name) + static_cast<uint64_t>(chunk)))};
  uint8_t* out = base + t.offset;
  switch (t.fill) {
    case Fill::kConst:
      std::memset(out + b, t.byte, static_cast<size_t>(e - b));
      return;
    case Fill::kGauss:
    case Fill::kUniform: {
      const std::vector<float>& z = quantiles16();
      for (int64_t i = b; i < e;) {
        uint64_t r = rng.next();
        const int take = t.fill == Fill::kGauss ? 4 : 1;
        for (int j = 0; j < take && i < e; ++j, ++i) {
          float v;
          if (t.fill == Fill::kGauss) {
            v = t.a + t.b * z[(r >> (16 * j)) & 0xffff];
          } else {
            v = t.a + (t.b - t.a) * static_cast<float>(static_cast<double>(r >> 11) * 0x1.0p-53);
          }
          if (t.dtype == DType::kBF16) {
            const uint16_t h = f32_to_bf16(v);
            std::memcpy(out + 2 * i, &h, 2);
          } else {
            std::memcpy(out + 4 * i, &v, 4);
          }
        }
      }
      return;
    }
    case Fill::kFp8: {
      const auto [k, s0] = split_scale(t.b, 128.0);
      (void)k;
      // 2^16 quantiles: the smallest ones encode to E4M3 subnormals at ~1.2e-4 of the codes,
      // as a real block-quantized tensor (the golden tiny checkpoint: 1.1e-4).
      static thread_local std::vector<uint8_t> code;
      static thread_local double code_s0 = -1;
      if (code_s0 != s0) {
        const std::vector<float>& z = quantiles16();
        code.resize(z.size());
        for (size_t u = 0; u < z.size(); ++u)
          code[u] = quant::e4m3_encode(static_cast<float>(z[u] * s0));
        code_s0 = s0;
      }
      for (int64_t i = b; i < e;) {
        uint64_t r = rng.next();
        for (int j = 0; j < 4 && i < e; ++j, ++i) out[i] = code[(r >> (16 * j)) & 0xffff];
      }
      return;
    }
    case Fill::kFp4: {
      const auto [k, s0] = split_scale(t.b, 2.25);
      (void)k;
      uint8_t nib[256];
      const std::vector<float>& z = quantiles8();
      for (int u = 0; u < 256; ++u)
        nib[u] = quant::e2m1_encode(std::clamp(static_cast<float>(z[u] * s0), -6.0f, 6.0f)) & 0xf;
      for (int64_t i = b; i < e;) {
        uint64_t r = rng.next();
        for (int j = 0; j < 4 && i < e; ++j, ++i)
          out[i] = static_cast<uint8_t>(nib[(r >> (16 * j)) & 0xff] |
                                        (nib[(r >> (16 * j + 8)) & 0xff] << 4));
      }
      return;
    }
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

class Plan {
 public:
  Status status;
  std::vector<GenTensor> tensors;
  Group group = kDense;

  void add(std::string name, DType dt, std::vector<int64_t> shape, Fill fill, float a, float b,
           uint8_t byte = 0) {
    GenTensor t;
    t.name = std::move(name);
    t.dtype = dt;
    t.shape = std::move(shape);
    t.fill = fill;
    t.a = a;
    t.b = b;
    t.byte = byte;
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    t.nbytes = n * static_cast<int64_t>(dtype_size(dt));
    t.group = group;
    tensors.push_back(std::move(t));
  }
  void gauss(const std::string& name, DType dt, std::vector<int64_t> shape, float mean, float sd) {
    add(name, dt, std::move(shape), Fill::kGauss, mean, sd);
  }
  void norm(const std::string& name, int64_t n) { gauss(name, DType::kBF16, {n}, 1.0f, 0.1f); }
  uint8_t scale_byte(double sd, double top, const std::string& name) {
    const int k = split_scale(sd, top).first;
    if (k < -126 || k > 127) {
      if (status.ok()) status = invalid_argument("make-v41: {}: scale 2^{} out of range", name, k);
      return 127;
    }
    return static_cast<uint8_t>(127 + k);
  }
  void fp8(const std::string& base, int64_t out, int64_t in, double sd) {
    add(base + ".weight", DType::kF8_E4M3, {out, in}, Fill::kFp8, 0, static_cast<float>(sd));
    add(base + ".scale", DType::kF8_E8M0, {ceil_div(out, 32), ceil_div(in, 32)}, Fill::kConst, 0,
        0, scale_byte(sd, 128.0, base));
  }
  void fp4(const std::string& base, int64_t out, int64_t in, double sd) {
    add(base + ".weight", DType::kI8, {out, in / 2}, Fill::kFp4, 0, static_cast<float>(sd));
    add(base + ".scale", DType::kF8_E8M0, {out, in / 32}, Fill::kConst, 0, 0,
        scale_byte(sd, 2.25, base));
  }
};

Plan make_plan(const DeepseekConfig& c) {
  Plan p;
  const int64_t D = c.dim, V = c.vocab_size, hc = c.hc_mult, mix = (2 + hc) * hc;
  const int64_t H = c.n_heads, hd = c.head_dim, ql = c.q_lora_rank, I = c.moe_inter_dim;
  const int64_t G = c.o_groups, R = c.o_lora_rank;
  auto inv = [](int64_t fan_in) { return 1.0 / std::sqrt(static_cast<double>(fan_in)); };
  p.gauss("embed.weight", DType::kBF16, {V, D}, 0.0f, 1.0f);
  p.gauss("head.weight", DType::kBF16, {V, D}, 0.0f, static_cast<float>(2 * inv(D)));
  p.norm("norm.weight", D);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerSchedule& ls = c.layers[l];
    const std::string pre = fmt::format("layers.{}.", l);
    p.group = kDense;
    p.norm(pre + "attn_norm.weight", D);
    p.norm(pre + "ffn_norm.weight", D);
    for (const char* h : {"hc_attn", "hc_ffn"}) {
      p.gauss(pre + h + "_fn", DType::kF32, {mix, hc * D}, 0.0f, static_cast<float>(inv(hc * D)));
      p.gauss(pre + h + "_base", DType::kF32, {mix}, 0.0f, 0.5f);
      p.add(pre + h + "_scale", DType::kF32, {3}, Fill::kUniform, 0.5f, 0.75f);
    }
    const std::string a = pre + "attn.";
    p.gauss(a + "attn_sink", DType::kF32, {H}, 0.0f, 1.0f);
    p.fp8(a + "wq_a", ql, D, inv(D));
    p.norm(a + "q_norm.weight", ql);
    p.fp8(a + "wq_b", H * hd, ql, inv(ql));
    p.fp8(a + "wkv", hd, D, inv(D));
    p.norm(a + "kv_norm.weight", hd);
    p.fp8(a + "wo_a", G * R, H * hd / G, inv(H * hd / G));
    p.fp8(a + "wo_b", D, G * R, 3 * inv(G * R));
    if (ls.has_compressor) {
      p.gauss(a + "compressor.wkv.weight", DType::kBF16, {hd, D}, 0.0f, static_cast<float>(inv(D)));
      if (ls.ratio > 1)
        p.gauss(a + "compressor.wgate.weight", DType::kBF16, {hd, D}, 0.0f,
                static_cast<float>(inv(D)));
      p.norm(a + "compressor.norm.weight", hd);
    }
    if (ls.has_indexer) {
      const int64_t ih = c.index_n_heads, id = c.index_head_dim;
      p.fp8(a + "indexer.wq_b", ih * id, ql, inv(ql));
      p.gauss(a + "indexer.weights_proj.weight", DType::kBF16, {ih, D}, 0.0f,
              static_cast<float>(inv(D)));
      if (ls.owns_index_keys) {
        p.gauss(a + "indexer.wk.weight", DType::kBF16, {id, hd}, 0.0f, static_cast<float>(inv(hd)));
        p.norm(a + "indexer.k_norm.weight", id);
      }
    }
    const std::string f = pre + "ffn.";
    const int64_t E = ls.n_routed_experts;
    p.gauss(f + "gate.weight", DType::kBF16, {E, D}, 0.0f, static_cast<float>(inv(D)));
    p.gauss(f + "gate.bias", DType::kF32, {E}, 0.0f, 0.1f);
    p.group = kExpert;
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = fmt::format("{}experts.{}.", f, e);
      p.fp4(x + "w1", I, D, 4 * inv(D));
      p.fp4(x + "w2", D, I, 0.08 * inv(I));
      p.fp4(x + "w3", I, D, 4 * inv(D));
    }
    p.group = kDense;
    p.fp8(f + "shared_experts.w1", I, D, 4 * inv(D));
    p.fp8(f + "shared_experts.w2", D, I, 0.08 * inv(I));
    p.fp8(f + "shared_experts.w3", I, D, 4 * inv(D));
    if (ls.engram_before) {
      const int64_t rows = c.engram_num_embeddings[ls.engram_slot], ed = c.engram_head_dim;
      const int64_t cols = int64_t{c.engram_max_ngram_size - 1} * c.engram_n_heads * ed;
      p.group = kEngramTable;
      p.add(pre + "engram.embed.weight", DType::kF8_E4M3, {rows, ed}, Fill::kFp8, 0, 1.0f);
      p.add(pre + "engram.embed.scale", DType::kF8_E8M0, {rows, ceil_div(ed, 32)}, Fill::kConst,
            0, 0, p.scale_byte(1.0, 128.0, pre + "engram.embed"));
      p.group = kDense;
      p.fp8(pre + "engram.wkv", D * (hc + 1), cols, inv(cols));
      p.gauss(pre + "engram.q_weight", DType::kBF16, {hc, D}, 1.0f, 0.1f);
      p.gauss(pre + "engram.k_weight", DType::kBF16, {hc, D}, 1.0f, 0.1f);
    }
  }
  return p;
}

Status write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return internal_error("{}: cannot create file", path.string());
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.flush();
  if (!out) return internal_error("{}: write failed", path.string());
  return ok_status();
}

}  // namespace

Status write_v41_random_checkpoint(const std::string& dir, const V41RandomOptions& options,
                                   V41RandomSummary* summary) {
  STRATA_ASSIGN_OR_RETURN(Shape s, resolve_shape(options));
  if (options.threads < 0)
    return invalid_argument("make-v41: --threads {} must be >= 0", options.threads);
  const Roles roles = make_roles(s.layers);

  // Engram rows per layer = the sum of that layer's hash primes (the loader checks this).
  EngramHashConfig ec;
  ec.layer_ids = roles.engram_layers;
  ec.max_ngram_size = s.engram_max_ngram;
  ec.n_heads = s.engram_heads;
  ec.engram_vocab_size = s.engram_vocab;
  ec.compressed_vocab_size = compressed_vocab(s.vocab);
  ec.pad_id = 2;
  STRATA_ASSIGN_OR_RETURN(EngramHashConstants consts, compute_engram_constants(ec));
  std::vector<int64_t> engram_rows;
  for (const auto& primes : consts.primes) {
    int64_t sum = 0;
    for (int64_t p : primes) sum += p;
    engram_rows.push_back(sum);
  }

  const ojson cfg_json = config_json(s, roles, engram_rows);
  const std::string cfg_text = cfg_json.dump(2) + "\n";
  auto cfg_or = parse_deepseek_config_json(cfg_text);
  if (!cfg_or.ok())
    return invalid_argument("make-v41: these options give an invalid V4.1 config: {}",
                            cfg_or.status().to_string());
  const DeepseekConfig& cfg = *cfg_or;

  Plan plan = make_plan(cfg);
  STRATA_RETURN_IF_ERROR(plan.status);
  int64_t total = 0, expert_bytes = 0, table_bytes = 0;
  for (GenTensor& t : plan.tensors) {
    t.offset = total;
    total += t.nbytes;
    if (t.group == kExpert) expert_bytes += t.nbytes;
    if (t.group == kEngramTable) table_bytes += t.nbytes;
  }
  constexpr int64_t kMaxBytes = int64_t{32} << 30;
  if (total > kMaxBytes)
    return invalid_argument(
        "make-v41: these dimensions need {:.1f} GB of weights (limit 32 GiB); lower --dim, "
        "--layers, --experts or --vocab",
        static_cast<double>(total) / 1e9);

  std::error_code ec_fs;
  fs::create_directories(dir, ec_fs);
  if (ec_fs) return internal_error("make-v41: cannot create {}: {}", dir, ec_fs.message());

  // Generate: work items are (tensor, chunk), taken dynamically by every thread.
  std::unique_ptr<uint8_t[]> buf(new uint8_t[std::max<int64_t>(total, 1)]);
  std::vector<std::pair<int, int64_t>> items;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const int64_t n = ceil_div(chunk_units(plan.tensors[i]), kChunk);
    for (int64_t c = 0; c < n; ++c) items.emplace_back(static_cast<int>(i), c);
  }
  // Large tensors first, so the dynamic schedule ends with small items.
  std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
    return plan.tensors[x.first].nbytes > plan.tensors[y.first].nbytes;
  });
  (void)quantiles8();
  (void)quantiles16();
  ThreadPool pool(options.threads);
  std::atomic<size_t> next{0};
  pool.parallel_for(pool.num_threads(), [&](int64_t, int64_t) {
    for (size_t k; (k = next.fetch_add(1)) < items.size();)
      fill_chunk(plan.tensors[items[k].first], items[k].second, options.seed, buf.get());
  });

  std::vector<TensorToWrite> tw;
  tw.reserve(plan.tensors.size());
  for (const GenTensor& t : plan.tensors)
    tw.push_back({t.name, t.dtype, t.shape,
                  std::span<const uint8_t>(buf.get() + t.offset, static_cast<size_t>(t.nbytes))});
  const fs::path out(dir);
  STRATA_RETURN_IF_ERROR(write_text(out / "config.json", cfg_text));
  STRATA_RETURN_IF_ERROR(write_text(out / "tokenizer.json", tokenizer_json(s.vocab)));
  STRATA_RETURN_IF_ERROR(write_safetensors(
      (out / "model.safetensors").string(), tw,
      {{"format", "pt"},
       {"generator", fmt::format("strata bench make-v41 --preset {} --seed {}", options.preset,
                                 options.seed)}}));

  if (summary) {
    summary->n_tensors = static_cast<int64_t>(plan.tensors.size());
    std::error_code e2;
    summary->file_bytes = static_cast<int64_t>(fs::file_size(out / "model.safetensors", e2));
    summary->expert_bytes = expert_bytes;
    summary->engram_table_bytes = table_bytes;
    std::vector<int> r2, r1, reindex;
    for (int l = 0; l < cfg.n_layers; ++l) {
      if (cfg.layers[l].ratio == 2) r2.push_back(l);
      if (cfg.layers[l].ratio == 1) r1.push_back(l);
      if (cfg.layers[l].role == AttnRole::kReindex) reindex.push_back(l);
    }
    summary->layout = fmt::format(
        "{} layers (dim {}, {} heads x {}, {} experts, {} active, moe_inter {}, vocab {}): "
        "SWA 0-1; ratio 2: {}-{}; ratio 1: {}-{}; kv sources [{}]; index sources [{}] "
        "(reindex [{}]); candidate source {}; Engram before [{}]; window {}, index_topk {}",
        cfg.n_layers, cfg.dim, cfg.n_heads, cfg.head_dim, cfg.n_routed_experts,
        cfg.n_activated_experts, cfg.moe_inter_dim, cfg.vocab_size, r2.front(), r2.back(),
        r1.front(), r1.back(), join(cfg.kv_source_layers), join(cfg.index_source_layers),
        join(reindex), cfg.candidate_source_layer, join(cfg.engram_layer_ids), cfg.window_size,
        cfg.index_topk);
  }
  return ok_status();
}

}  // namespace strata
