// StateSpec: WHAT one kind of per-request inference state is -- granularity, serving-format
// bytes per unit and their byte layout, handoff and rollback policy -- plus the row codec that
// stores a float row in that format and reads it back. Knows nothing about layers or pools.
//
// Kinds and serving formats (spec docs v41-architecture.md §3.1 / §3.2, MISSION.md table):
//   kWindowKv        ring of W rows per owning layer. V4.1: 512 x FP8 E4M3 codes, then
//                    512/32 UE8M0 scales = 528 B/row. V4: (d-64) FP8 codes, (d-64)/64 UE8M0
//                    scales, then 64 BF16 RoPE dims (little-endian) = 448+7+128 = 583 B/row.
//   kCompressedKv    one row per `ratio` tokens. V4.1: d/2 packed FP4 E2M1 bytes (even element
//                    in the low nibble), then d/16 E4M3 scales = 256+32 = 288 B/row. V4: as the
//                    V4 window row (583 B).
//   kIndexKeys       one row per `ratio` tokens: index_head_dim/2 packed FP4 bytes, then
//                    index_head_dim/32 UE8M0 scales = 64+4 = 68 B/row for dim 128.
//   kCompressorState / kIndexCompressorState   resumable partial group, fixed per request:
//                    `rows` slots of [kv(width) f32 | score(width) f32]. Fresh: kv = 0,
//                    score = -inf. V4.1 m=2: 2 x (512+512) x 4 B = 8 KB. V4 CSA: 8 slots of
//                    width 1024 (main) / 256 (indexer); V4 HCA: 128 slots of width 512.
//   kEngramHistory   last (max_ngram-1) mapped token ids as int32 (-1 DEAD, -2 before start).
//   kPlainKv         Llama/GQA: one row per token, [K | V] each n_kv_heads*head_dim, f32 or
//                    bf16 (little-endian).
//   kTopk / kCandidates  per-forward transients (int32 positions / block ids per query token):
//                    produced by an index source, read by later layers in the same step; never
//                    persisted, never counted per token.
//   kDraftState      draft/verify bookkeeping: 0 bytes (a draft block lives one step; the
//                    DSpark stage rings are the draft stages' kWindowKv owners).
// Row values read back equal the reference's QDQ (quantize -> dequantize -> bf16) values
// bit-exactly (see kernels/quant_formats.h). Thread safety: immutable values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace strata {

enum class StateKind : uint8_t {
  kWindowKv,
  kCompressedKv,
  kIndexKeys,
  kCompressorState,
  kIndexCompressorState,
  kEngramHistory,
  kPlainKv,
  kTopk,
  kCandidates,
  kDraftState,
};
inline constexpr int kNumStateKinds = 10;
const char* state_kind_name(StateKind k);
// The kind named `name` (state_kind_name's spelling); InvalidArgument listing the names.
StatusOr<StateKind> parse_state_kind(std::string_view name);

enum class Granularity : uint8_t {
  kPerToken,          // one row per token, grows (kPlainKv, V4.1 ratio-1 compressed)
  kPerCompressedRow,  // one row per `ratio` tokens, grows
  kRing,              // fixed ring of rows_fixed rows, slot = pos mod rows_fixed
  kFixed,             // fixed rows per request (compressor tail, Engram history)
  kPerStep,           // transient, lives one forward
};
const char* granularity_name(Granularity g);

enum class RowFormat : uint8_t {
  kFp8Ue8m0,        // [n FP8 codes][n/block UE8M0]
  kFp8Ue8m0RopeBf16,// [(n-rope) FP8][(n-rope)/block UE8M0][rope x BF16]   (V4 KV)
  kFp4E4m3,         // [n/2 packed FP4][n/block E4M3 scales]               (V4.1 compressed)
  kFp4Ue8m0,        // [n/2 packed FP4][n/block UE8M0]                     (index keys)
  kF32,             // n x f32
  kBf16,            // n x bf16
  kI32,             // n x int32
};
const char* row_format_name(RowFormat f);

enum class HandoffPolicy : uint8_t { kTransfer, kRebuild, kReplay, kNone };
const char* handoff_policy_name(HandoffPolicy h);

struct StateSpec {
  StateKind kind = StateKind::kWindowKv;
  Granularity granularity = Granularity::kPerToken;
  int ratio = 1;          // tokens per row for kPerToken (1) / kPerCompressedRow (m); for
                          // compressor state the group size m (rows_fixed m: slot p mod m;
                          // rows_fixed 2m, overlapping: slots [0, m) the previous group,
                          // [m, 2m) the current one)
  int rows_fixed = 0;     // rows per request for kRing / kFixed
  int row_elems = 0;      // logical elements per row
  RowFormat format = RowFormat::kF32;
  int quant_block = 0;    // elements per scale (quantized formats)
  int rope_elems = 0;     // kFp8Ue8m0RopeBf16: trailing BF16 elements
  int64_t row_bytes = 0;  // serving-format bytes per row (computed by make_state_spec)
  int64_t transient_bytes_per_query = 0;  // kPerStep kinds: bytes per query token
  HandoffPolicy handoff = HandoffPolicy::kTransfer;
  std::string rollback;   // how a speculative rollback treats this kind
  std::string layout;     // human-readable byte layout

  bool grows() const {
    return granularity == Granularity::kPerToken || granularity == Granularity::kPerCompressedRow;
  }
  bool fixed() const { return granularity == Granularity::kRing || granularity == Granularity::kFixed; }
  bool transient() const { return granularity == Granularity::kPerStep; }
  // Per-token growth in bytes (row_bytes / ratio) for growing kinds; 0 otherwise.
  double bytes_per_token() const { return grows() ? static_cast<double>(row_bytes) / ratio : 0.0; }
  // Fixed bytes per request for ring / fixed kinds; 0 otherwise.
  int64_t bytes_per_request() const { return fixed() ? row_bytes * rows_fixed : 0; }
};

// Fills row_bytes and layout from format, row_elems, quant_block, rope_elems. CHECKs shapes.
StateSpec make_state_spec(StateSpec s);

// Row codec: stores `row_elems` floats in the serving format (row_bytes bytes) and reads them
// back. decode(encode(x)) == qdq(x) bit-exactly. kI32 stores values cast to int32.
void encode_state_row(const StateSpec& s, const float* in, uint8_t* out);
void decode_state_row(const StateSpec& s, const uint8_t* in, float* out);
// The value a reader gets back for `x`, by value arithmetic (the reference's QDQ).
void qdq_state_row(const StateSpec& s, float* inout);

}  // namespace strata
