#include "model/llama2c_format.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "model/dtype.h"
#include "model/llama_config.h"
#include "model/safetensors.h"

namespace strata {
namespace fs = std::filesystem;

int64_t Llama2cHeader::num_floats() const {
  const int64_t d = dim, h = hidden_dim, L = n_layers, hs = head_size(), kvd = kv_dim();
  const int64_t qd = int64_t{n_heads} * hs;
  int64_t n = int64_t{vocab_size} * d;   // embedding
  n += L * d;                            // rms_att
  n += L * qd * d + 2 * L * kvd * d;     // wq wk wv
  n += L * d * qd;                       // wo
  n += L * d;                            // rms_ffn
  n += 3 * L * h * d;                    // w1 w2 w3
  n += d;                                // rms_final
  n += int64_t{seq_len} * hs;            // freq_cis_real + imag (hs/2 each)
  if (!shared_classifier) n += int64_t{vocab_size} * d;
  return n;
}

StatusOr<Llama2cHeader> read_llama2c_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("{}: cannot open llama2.c checkpoint", path);
  int32_t h[7];
  if (!in.read(reinterpret_cast<char*>(h), sizeof(h)))
    return data_loss("{}: file shorter than the 28-byte llama2.c header", path);
  Llama2cHeader H;
  H.dim = h[0];
  H.hidden_dim = h[1];
  H.n_layers = h[2];
  H.n_heads = h[3];
  H.n_kv_heads = h[4];
  H.shared_classifier = h[5] > 0;
  H.vocab_size = h[5] < 0 ? -h[5] : h[5];
  H.seq_len = h[6];
  if (H.dim <= 0 || H.hidden_dim <= 0 || H.n_layers <= 0 || H.n_heads <= 0 || H.n_kv_heads <= 0 ||
      H.vocab_size <= 0 || H.seq_len <= 0)
    return invalid_argument(
        "{}: not a llama2.c legacy v0 checkpoint (header dim={} hidden={} layers={} heads={} "
        "kv_heads={} vocab={} seq_len={}; version-1+ exports start with magic 0x616b3432)",
        path, h[0], h[1], h[2], h[3], h[4], h[5], h[6]);
  if (H.dim % H.n_heads != 0 || H.n_heads % H.n_kv_heads != 0 || H.head_size() % 2 != 0)
    return invalid_argument("{}: inconsistent header: dim {} heads {} kv_heads {}", path, H.dim,
                            H.n_heads, H.n_kv_heads);
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  const uint64_t want = 28 + static_cast<uint64_t>(H.num_floats()) * 4;
  if (ec || size != want)
    return data_loss("{}: file is {} bytes but its header (dim={} hidden={} layers={} heads={} "
                     "kv_heads={} vocab={}{} seq_len={}) implies {} bytes",
                     path, ec ? 0 : size, H.dim, H.hidden_dim, H.n_layers, H.n_heads, H.n_kv_heads,
                     H.vocab_size, H.shared_classifier ? "" : " (unshared)", H.seq_len, want);
  return H;
}

namespace {

// Rows of a [n_heads*hs, cols] matrix, permuted per head from interleaved to half-split.
std::vector<float> permute_rope_rows(const float* w, int64_t n_heads, int64_t hs, int64_t cols) {
  std::vector<float> out(n_heads * hs * cols);
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t i = 0; i < hs / 2; ++i) {
      std::memcpy(&out[(h * hs + i) * cols], w + (h * hs + 2 * i) * cols, cols * 4);
      std::memcpy(&out[(h * hs + hs / 2 + i) * cols], w + (h * hs + 2 * i + 1) * cols, cols * 4);
    }
  return out;
}

}  // namespace

Status convert_llama2c(const Llama2cConvertOptions& o) {
  STRATA_ASSIGN_OR_RETURN(Llama2cHeader H, read_llama2c_header(o.checkpoint));
  std::vector<float> data(H.num_floats());
  {
    std::ifstream in(o.checkpoint, std::ios::binary);
    in.seekg(28);
    if (!in.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(data.size() * 4)))
      return data_loss("{}: read failed", o.checkpoint);
  }
  const int64_t d = H.dim, hid = H.hidden_dim, L = H.n_layers, hs = H.head_size();
  const int64_t qd = int64_t{H.n_heads} * hs, kvd = H.kv_dim(), V = H.vocab_size;
  const float* p = data.data();
  auto take = [&p](int64_t n) {
    const float* r = p;
    p += n;
    return r;
  };
  const float* emb = take(V * d);
  const float* rms_att = take(L * d);
  const float* wq = take(L * qd * d);
  const float* wk = take(L * kvd * d);
  const float* wv = take(L * kvd * d);
  const float* wo = take(L * d * qd);
  const float* rms_ffn = take(L * d);
  const float* w1 = take(L * hid * d);
  const float* w2 = take(L * d * hid);
  const float* w3 = take(L * hid * d);
  const float* rms_final = take(d);
  take(int64_t{H.seq_len} * hs);  // freq_cis_real + imag
  const float* wcls = H.shared_classifier ? nullptr : take(V * d);

  // Owned buffers for permuted / converted tensors (stable addresses: list of vectors).
  std::vector<std::vector<float>> owned_f32;
  std::vector<std::vector<uint16_t>> owned_bf16;
  owned_f32.reserve(2 * L);
  owned_bf16.reserve(16 * L + 4);
  std::vector<TensorToWrite> tensors;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, const float* src,
                 bool matrix) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    if (o.bf16 && matrix) {
      std::vector<uint16_t> b(n);
      for (int64_t i = 0; i < n; ++i) b[i] = f32_to_bf16(src[i]);
      owned_bf16.push_back(std::move(b));
      const auto& v = owned_bf16.back();
      tensors.push_back({name, DType::kBF16, std::move(shape),
                         {reinterpret_cast<const uint8_t*>(v.data()), v.size() * 2}});
    } else {
      tensors.push_back({name, DType::kF32, std::move(shape),
                         {reinterpret_cast<const uint8_t*>(src), static_cast<size_t>(n) * 4}});
    }
  };
  add("model.embed_tokens.weight", {V, d}, emb, true);
  for (int64_t l = 0; l < L; ++l) {
    const std::string pre = fmt::format("model.layers.{}.", l);
    add(pre + "input_layernorm.weight", {d}, rms_att + l * d, false);
    add(pre + "post_attention_layernorm.weight", {d}, rms_ffn + l * d, false);
    owned_f32.push_back(permute_rope_rows(wq + l * qd * d, H.n_heads, hs, d));
    add(pre + "self_attn.q_proj.weight", {qd, d}, owned_f32.back().data(), true);
    owned_f32.push_back(permute_rope_rows(wk + l * kvd * d, H.n_kv_heads, hs, d));
    add(pre + "self_attn.k_proj.weight", {kvd, d}, owned_f32.back().data(), true);
    add(pre + "self_attn.v_proj.weight", {kvd, d}, wv + l * kvd * d, true);
    add(pre + "self_attn.o_proj.weight", {d, qd}, wo + l * d * qd, true);
    add(pre + "mlp.gate_proj.weight", {hid, d}, w1 + l * hid * d, true);
    add(pre + "mlp.down_proj.weight", {d, hid}, w2 + l * d * hid, true);
    add(pre + "mlp.up_proj.weight", {hid, d}, w3 + l * hid * d, true);
  }
  add("model.norm.weight", {d}, rms_final, false);
  if (wcls != nullptr) add("lm_head.weight", {V, d}, wcls, true);

  LlamaConfig c;
  c.hidden_size = d;
  c.intermediate_size = hid;
  c.num_hidden_layers = L;
  c.num_attention_heads = H.n_heads;
  c.num_key_value_heads = H.n_kv_heads;
  c.head_dim = hs;
  c.vocab_size = V;
  c.max_position_embeddings = H.seq_len;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = H.shared_classifier;
  c.rope_interleaved = false;
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  c.torch_dtype = o.bf16 ? "bfloat16" : "float32";

  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) return invalid_argument("{}: cannot create output directory: {}", o.out_dir, ec.message());
  {
    const std::string cfg = (fs::path(o.out_dir) / "config.json").string();
    std::ofstream out(cfg, std::ios::binary);
    out << c.to_json();
    if (!out) return internal_error("{}: write failed", cfg);
  }
  STRATA_RETURN_IF_ERROR(write_safetensors((fs::path(o.out_dir) / "model.safetensors").string(),
                                           tensors,
                                           {{"format", "pt"},
                                            {"converted_from", "llama2.c legacy v0"}}));
  if (!o.tokenizer.empty()) {
    if (!fs::exists(o.tokenizer)) return not_found("{}: tokenizer file not found", o.tokenizer);
    fs::copy_file(o.tokenizer, fs::path(o.out_dir) / "tokenizer.bin",
                  fs::copy_options::overwrite_existing, ec);
    if (ec) return internal_error("copying {}: {}", o.tokenizer, ec.message());
    fs::permissions(fs::path(o.out_dir) / "tokenizer.bin",
                    fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                        fs::perms::others_read,
                    ec);
  }
  return ok_status();
}

Status write_llama2c_random(const std::string& path, const Llama2cRandomOptions& o) {
  Llama2cHeader H = o.header;
  if (H.dim <= 0 || H.n_heads <= 0 || H.dim % H.n_heads != 0 || H.n_kv_heads <= 0 ||
      H.n_heads % H.n_kv_heads != 0 || H.head_size() % 2 != 0 || H.hidden_dim <= 0 ||
      H.n_layers <= 0 || H.vocab_size <= 0 || H.seq_len <= 0)
    return invalid_argument("make-llama2c: inconsistent dimensions");
  std::ofstream out(path, std::ios::binary);
  if (!out) return invalid_argument("{}: cannot open for writing", path);
  int32_t hdr[7] = {H.dim,        H.hidden_dim, H.n_layers, H.n_heads, H.n_kv_heads,
                    H.shared_classifier ? H.vocab_size : -H.vocab_size, H.seq_len};
  out.write(reinterpret_cast<const char*>(hdr), sizeof(hdr));
  std::mt19937_64 rng(o.seed);
  std::vector<float> buf;
  auto emit_uniform = [&](int64_t n, float center, float scale) {
    buf.resize(n);
    const double inv = 1.0 / 18446744073709551616.0;  // 2^-64
    for (int64_t i = 0; i < n; ++i)
      buf[i] = center + scale * static_cast<float>(2.0 * (rng() * inv) - 1.0);
    out.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(n * 4));
  };
  const int64_t d = H.dim, hid = H.hidden_dim, L = H.n_layers, hs = H.head_size();
  const int64_t qd = int64_t{H.n_heads} * hs, kvd = H.kv_dim(), V = H.vocab_size;
  emit_uniform(V * d, 0.0f, o.scale);
  emit_uniform(L * d, 1.0f, 0.1f);
  emit_uniform(L * qd * d, 0.0f, o.scale);
  emit_uniform(L * kvd * d, 0.0f, o.scale);
  emit_uniform(L * kvd * d, 0.0f, o.scale);
  emit_uniform(L * d * qd, 0.0f, o.scale);
  emit_uniform(L * d, 1.0f, 0.1f);
  emit_uniform(L * hid * d, 0.0f, o.scale);
  emit_uniform(L * d * hid, 0.0f, o.scale);
  emit_uniform(L * hid * d, 0.0f, o.scale);
  emit_uniform(d, 1.0f, 0.1f);
  // freq_cis_real / imag as llama2.c's precompute_freqs_cis writes them (unused by readers).
  std::vector<float> re(int64_t{H.seq_len} * hs / 2), im(re.size());
  for (int64_t t = 0; t < H.seq_len; ++t)
    for (int64_t i = 0; i < hs / 2; ++i) {
      const double f = 1.0 / std::pow(10000.0, (2.0 * i) / hs);
      re[t * hs / 2 + i] = static_cast<float>(std::cos(t * f));
      im[t * hs / 2 + i] = static_cast<float>(std::sin(t * f));
    }
  out.write(reinterpret_cast<const char*>(re.data()), static_cast<std::streamsize>(re.size() * 4));
  out.write(reinterpret_cast<const char*>(im.data()), static_cast<std::streamsize>(im.size() * 4));
  if (!H.shared_classifier) emit_uniform(V * d, 0.0f, o.scale);
  if (!out) return internal_error("{}: write failed", path);
  return ok_status();
}

}  // namespace strata
