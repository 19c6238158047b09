// StateSpec helpers and row codecs. See state_spec.h.
#include "state/state_spec.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "base/check.h"
#include "kernels/quant_formats.h"

namespace strata {

const char* state_kind_name(StateKind k) {
  switch (k) {
    case StateKind::kWindowKv: return "window_kv";
    case StateKind::kCompressedKv: return "compressed_kv";
    case StateKind::kIndexKeys: return "index_keys";
    case StateKind::kCompressorState: return "compressor_state";
    case StateKind::kIndexCompressorState: return "index_compressor_state";
    case StateKind::kEngramHistory: return "engram_history";
    case StateKind::kPlainKv: return "plain_kv";
    case StateKind::kTopk: return "topk";
    case StateKind::kCandidates: return "candidates";
    case StateKind::kDraftState: return "draft_state";
  }
  return "?";
}

StatusOr<StateKind> parse_state_kind(std::string_view name) {
  std::string names;
  for (int k = 0; k < kNumStateKinds; ++k) {
    const char* n = state_kind_name(static_cast<StateKind>(k));
    if (name == n) return static_cast<StateKind>(k);
    names += names.empty() ? n : fmt::format(", {}", n);
  }
  return invalid_argument("unknown state kind '{}' (one of: {})", name, names);
}

const char* granularity_name(Granularity g) {
  switch (g) {
    case Granularity::kPerToken: return "per_token";
    case Granularity::kPerCompressedRow: return "per_compressed_row";
    case Granularity::kRing: return "ring";
    case Granularity::kFixed: return "fixed";
    case Granularity::kPerStep: return "per_step";
  }
  return "?";
}

const char* row_format_name(RowFormat f) {
  switch (f) {
    case RowFormat::kFp8Ue8m0: return "fp8_e4m3+ue8m0";
    case RowFormat::kFp8Ue8m0RopeBf16: return "fp8_e4m3+ue8m0+bf16_rope";
    case RowFormat::kFp4E4m3: return "fp4_e2m1+e4m3";
    case RowFormat::kFp4Ue8m0: return "fp4_e2m1+ue8m0";
    case RowFormat::kF32: return "f32";
    case RowFormat::kBf16: return "bf16";
    case RowFormat::kI32: return "i32";
  }
  return "?";
}

const char* handoff_policy_name(HandoffPolicy h) {
  switch (h) {
    case HandoffPolicy::kTransfer: return "transfer";
    case HandoffPolicy::kRebuild: return "rebuild";
    case HandoffPolicy::kReplay: return "replay";
    case HandoffPolicy::kNone: return "none";
  }
  return "?";
}

StateSpec make_state_spec(StateSpec s) {
  const int n = s.row_elems;
  STRATA_CHECK(n >= 0);
  switch (s.format) {
    case RowFormat::kFp8Ue8m0:
      STRATA_CHECK(s.quant_block > 0 && n % s.quant_block == 0);
      s.row_bytes = n + n / s.quant_block;
      s.layout = fmt::format("[{} x e4m3 code][{} x ue8m0 scale, 1 per {}]", n, n / s.quant_block,
                             s.quant_block);
      break;
    case RowFormat::kFp8Ue8m0RopeBf16: {
      const int nope = n - s.rope_elems;
      STRATA_CHECK(s.quant_block > 0 && nope > 0 && nope % s.quant_block == 0);
      s.row_bytes = nope + nope / s.quant_block + 2 * s.rope_elems;
      s.layout = fmt::format("[{} x e4m3 code][{} x ue8m0 scale, 1 per {}][{} x bf16 rope, LE]",
                             nope, nope / s.quant_block, s.quant_block, s.rope_elems);
      break;
    }
    case RowFormat::kFp4E4m3:
    case RowFormat::kFp4Ue8m0:
      STRATA_CHECK(s.quant_block > 0 && s.quant_block % 2 == 0 && n % s.quant_block == 0);
      s.row_bytes = n / 2 + n / s.quant_block;
      s.layout = fmt::format("[{} B packed e2m1, even elem low nibble][{} x {} scale, 1 per {}]",
                             n / 2, n / s.quant_block,
                             s.format == RowFormat::kFp4E4m3 ? "e4m3" : "ue8m0", s.quant_block);
      break;
    case RowFormat::kF32:
      s.row_bytes = 4LL * n;
      s.layout = fmt::format("[{} x f32 LE]", n);
      break;
    case RowFormat::kBf16:
      s.row_bytes = 2LL * n;
      s.layout = fmt::format("[{} x bf16 LE]", n);
      break;
    case RowFormat::kI32:
      s.row_bytes = 4LL * n;
      s.layout = fmt::format("[{} x i32 LE]", n);
      break;
  }
  if (s.transient()) s.layout = fmt::format("{} per query token: {} B", s.layout,
                                            s.transient_bytes_per_query);
  return s;
}

void encode_state_row(const StateSpec& s, const float* in, uint8_t* out) {
  const int n = s.row_elems;
  switch (s.format) {
    case RowFormat::kFp8Ue8m0:
      quant::fp8_ue8m0_quantize(in, n, s.quant_block, out, out + n);
      return;
    case RowFormat::kFp8Ue8m0RopeBf16: {
      const int nope = n - s.rope_elems;
      quant::fp8_ue8m0_quantize(in, nope, s.quant_block, out, out + nope);
      uint8_t* rope = out + nope + nope / s.quant_block;
      for (int i = 0; i < s.rope_elems; ++i) {
        uint16_t b = quant::bf16_encode(in[nope + i]);
        rope[2 * i] = static_cast<uint8_t>(b & 0xff);
        rope[2 * i + 1] = static_cast<uint8_t>(b >> 8);
      }
      return;
    }
    case RowFormat::kFp4E4m3:
      quant::fp4_e4m3_quantize(in, n, s.quant_block, out, out + n / 2);
      return;
    case RowFormat::kFp4Ue8m0:
      quant::fp4_ue8m0_quantize(in, n, s.quant_block, out, out + n / 2);
      return;
    case RowFormat::kF32:
      std::memcpy(out, in, 4LL * n);  // little-endian host
      return;
    case RowFormat::kBf16:
      for (int i = 0; i < n; ++i) {
        uint16_t b = quant::bf16_encode(in[i]);
        out[2 * i] = static_cast<uint8_t>(b & 0xff);
        out[2 * i + 1] = static_cast<uint8_t>(b >> 8);
      }
      return;
    case RowFormat::kI32:
      for (int i = 0; i < n; ++i) {
        int32_t v = static_cast<int32_t>(in[i]);
        std::memcpy(out + 4 * i, &v, 4);
      }
      return;
  }
}

void decode_state_row(const StateSpec& s, const uint8_t* in, float* out) {
  const int n = s.row_elems;
  switch (s.format) {
    case RowFormat::kFp8Ue8m0:
      quant::fp8_ue8m0_dequantize(in, in + n, n, s.quant_block, out);
      return;
    case RowFormat::kFp8Ue8m0RopeBf16: {
      const int nope = n - s.rope_elems;
      quant::fp8_ue8m0_dequantize(in, in + nope, nope, s.quant_block, out);
      const uint8_t* rope = in + nope + nope / s.quant_block;
      for (int i = 0; i < s.rope_elems; ++i)
        out[nope + i] = quant::bf16_decode(static_cast<uint16_t>(rope[2 * i] | (rope[2 * i + 1] << 8)));
      return;
    }
    case RowFormat::kFp4E4m3:
      quant::fp4_e4m3_dequantize(in, in + n / 2, n, s.quant_block, out);
      return;
    case RowFormat::kFp4Ue8m0:
      quant::fp4_ue8m0_dequantize(in, in + n / 2, n, s.quant_block, out);
      return;
    case RowFormat::kF32:
      std::memcpy(out, in, 4LL * n);
      return;
    case RowFormat::kBf16:
      for (int i = 0; i < n; ++i)
        out[i] = quant::bf16_decode(static_cast<uint16_t>(in[2 * i] | (in[2 * i + 1] << 8)));
      return;
    case RowFormat::kI32:
      for (int i = 0; i < n; ++i) {
        int32_t v;
        std::memcpy(&v, in + 4 * i, 4);
        out[i] = static_cast<float>(v);
      }
      return;
  }
}

void qdq_state_row(const StateSpec& s, float* x) {
  const int n = s.row_elems;
  switch (s.format) {
    case RowFormat::kFp8Ue8m0: quant::fp8_ue8m0_qdq(x, n, s.quant_block); return;
    case RowFormat::kFp8Ue8m0RopeBf16:
      quant::fp8_ue8m0_qdq(x, n - s.rope_elems, s.quant_block);
      for (int i = n - s.rope_elems; i < n; ++i) x[i] = quant::bf16_decode(quant::bf16_encode(x[i]));
      return;
    case RowFormat::kFp4E4m3: quant::fp4_e4m3_qdq(x, n, s.quant_block); return;
    case RowFormat::kFp4Ue8m0: quant::fp4_ue8m0_qdq(x, n, s.quant_block); return;
    case RowFormat::kF32: return;
    case RowFormat::kBf16:
      for (int i = 0; i < n; ++i) x[i] = quant::bf16_decode(quant::bf16_encode(x[i]));
      return;
    case RowFormat::kI32:
      for (int i = 0; i < n; ++i) x[i] = static_cast<float>(static_cast<int32_t>(x[i]));
      return;
  }
}

}  // namespace strata
