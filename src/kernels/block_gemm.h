// Block-scaled GEMMs of DeepSeek-V4 / V4.1: y[M,N] = x[M,K] · W[N,K]^T with
//   * FP8 E4M3 weights [N,K] + one UE8M0 (or f32) scale per block_n × block_k tile
//     (V4.1-tiny golden: 32×32; released V4/V4.1: 128×128), activations FP8-quantized per
//     block_k along K (act_quant, ue8m0 scales);
//   * FP4 E2M1 weights packed [N, K/2] (even K index in the low nibble) + one UE8M0 scale per
//     row per 32 along K (routed experts), activations FP8-quantized per `act_block`
//     (V4.1: 32, V4: 128; a multiple of 32);
//   * BF16 weights (plain F.linear in the reference).
//
// Reduction order (bit-exact target: tt-metal kernel_cpu.py _block_scaled_gemm, which mirrors
// the tilelang fp8_gemm/fp4_gemm): for every output (m, n)
//     acc = 0 (f32)
//     for kb in 0 .. K/32-or-block_k - 1 (in order):
//         p   = sum over the kb-th K block of qx[m,k]*qw[n,k] in f32, sequential k with FMA
//               (p = fma(qx, qw, p) starting from +0: the per-element order of a BLAS sgemm
//               micro-kernel; the products are exact, so only the partial-sum roundings
//               inside one block can differ from the reference's BLAS call)
//         acc = acc + (p * sx[m,kb]) * sw[n,kb]      (each step rounded to f32)
//     y = bf16(acc)   (OutRound::kBf16; the reference returns torch's default dtype, bf16)
// The FP4 GEMM walks K in blocks of 32 (the weight group); the activation scale of column
// block kb is sx[m, kb / (act_block/32)].
// The same code runs for every M, every N split and every thread count: batch-invariant and
// thread-count-invariant (work is split over N only, never over K).
//
// BF16 linear: y = Σ_k x[k]*w[k] in f32 with the canonical 8-lane order of kernels/matmul.h,
// then optional bf16 rounding. NOT bit-exact w.r.t. torch's CPU bf16 F.linear (oneDNN, order
// unknown); expect ~1 bf16 ulp differences.
//
// Performance: decode (M = 1..4) should use the packed weights (pack_*_weight at load time):
// the kernels decode FP8 via F16C and FP4 via a byte shuffle straight into registers, one
// sequential memory stream per group of 64 rows. On AVX-512 CPUs (F/BW/VL, chosen at run
// time, kernels/cpu_features.h) two 8-row tiles share a zmm (kernels/block_gemm_avx512.cc);
// with VBMI/BF16/GFNI too (kernels::avx512_ext_active()) FP8 runs on VDPBF16PS in the
// chain's exact order and FP4 uses VDPBF16PS on provably exact activation blocks, still
// bit-identical. Prefill (M > 4) decodes each 32-row x block_k panel once and, with those
// extensions, multiplies it as bf16 pairs on VDPBF16PS (each lane's additions in the chain's
// order: detail::accumulate_panel_pairs_avx512), FP8 and FP4 alike.
// Measured per core on the dev VM (`strata bench gemv`, docs/PERFORMANCE.md): fp8 ~22 and fp4
// ~37 G weights/s streaming from DRAM (AVX-512 without the extensions: ~18 / ~21; AVX2 alone:
// ~9). The raw checkpoint layout needs 8x8 transposes (~3 GB/s FP8).
// E4M3 NaN codes (0x7F/0xFF) are not expected in weights and decode as 480 on the vector
// paths.
//
// Errors: shape mismatches are broken invariants (STRATA_CHECK): K % block_k == 0,
// act block == block_k for FP8, K % 32 == 0 and act_block % 32 == 0 for FP4.
// Thread safety: pure functions of their inputs; `pool` may be null (caller thread only).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/act_quant.h"
#include "kernels/weight_buffer.h"

namespace strata {
class ThreadPool;
}

namespace strata::kernels {

enum class OutRound : uint8_t { kBf16, kF32 };

// FP8 E4M3 weight with block scales. Exactly one of scales_e8m0 / scales_f32 is set.
struct Fp8BlockWeight {
  const uint8_t* codes = nullptr;        // [N, K] E4M3 bytes
  const uint8_t* scales_e8m0 = nullptr;  // [ceil(N/block_n), ceil(K/block_k)] UE8M0 bytes
  const float* scales_f32 = nullptr;     // same shape, f32
  int64_t n = 0;                         // N (output features)
  int64_t k = 0;                         // K (input features)
  int block_n = 128;
  int block_k = 128;
};

// FP4 E2M1 weight, two codes per byte, with a UE8M0 scale per row per `group` along K.
struct Fp4Weight {
  const uint8_t* packed = nullptr;       // [N, K/2]
  const uint8_t* scales_e8m0 = nullptr;  // [N, K/group]
  int64_t n = 0;
  int64_t k = 0;
  int group = 32;                        // only 32 is used by DeepSeek (CHECKed)
};

// FP8-quantized activations (output of act_quant_fp8 with q_vals): values as f32.
struct QuantActs {
  const float* q = nullptr;       // [M, K] E4M3 values (exact in f32)
  const float* scales = nullptr;  // [M, K/block]
  int64_t m = 0;
  int64_t k = 0;
  int block = 128;
};

// y [M, N] f32 (bf16-rounded when out == kBf16).
void fp8_gemm(const QuantActs& a, const Fp8BlockWeight& w, float* y, OutRound out,
              ThreadPool* pool);
void fp4_gemm(const QuantActs& a, const Fp4Weight& w, float* y, OutRound out, ThreadPool* pool);

// The reference's linear() for quantized weights: act_quant (ue8m0, block = w.block_k for
// FP8, `act_block` for FP4) of x [M, K] (bf16-valued f32), then the GEMM, bf16 output.
void linear_fp8(const float* x, int64_t m, const Fp8BlockWeight& w, float* y, ThreadPool* pool);
void linear_fp4(const float* x, int64_t m, const Fp4Weight& w, int act_block, float* y,
                ThreadPool* pool);
// BF16 weight [N, K] (raw bf16 bits), x [M, K] f32; y [M, N].
void linear_bf16(const float* x, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y,
                 OutRound out, ThreadPool* pool);

// ---- Repacked weights (fast path) ----
// The same FP8 / FP4 bytes, reordered once (e.g. at model load) so that the kernels read
// 8 output rows ("a tile") per K index contiguously (FP8: one byte per row; FP4: 4 bytes per
// K index, row 2j in the low nibble of byte j), and so that decode (M = 1..4), which walks the
// kPackGroup tiles of a group together, reads memory in address order:
//   codes  [ceil(tiles/8)][K/block_k][block_k/4 chunks][8 tiles][4 K][8 rows]
//          (tiles padded to 8: zero rows; a chunk is 256 bytes for FP8, 128 for FP4).
//          FP4 stores each tile's 16 bytes of a chunk transposed, [4 bytes j][4 K]: byte j
//          (rows 2j, 2j+1) of K index q at 4j + q, so a dword holds one row pair at the
//          chunk's 4 K indices (what the AVX-512 dot path multiplies; packed_fp4_byte), and
//          the codes end with 64 bytes of zero padding (that path reads 64 bytes at p + 1).
//   scales [ceil(tiles/8)][K/block_k][8 tiles][8 rows]            (one per row per K block)
// (Interleaving the tiles every 4 K indices matters: a core reading 8 tiles that are each a
// separate 1 KB run streams ~20 GB/s on the dev VM against ~28 GB/s in address order.)
// The scales are kept as UE8M0 bytes (scales_e8m0, 1 byte each) when the checkpoint's are
// UE8M0 and every byte is in 1..254 (a normal f32 power of two: the kernels widen a byte b to
// the f32 bits b << 23), else as f32 (scales). At 32-wide K blocks this is 1/32 byte per
// weight instead of 1/8: FP8 weights take 1.03 bytes instead of 1.125, FP4 0.53 instead of
// 0.625. Address with packed_code_offset + packed_k_offset and packed_scale_offset. Weights
// stay 1 byte (FP8) or 1/2 byte (FP4) per element: nothing is expanded to f32 in memory.
// Results are bit-identical to the unpacked kernels, with either scale form.
inline constexpr int kPackGroup = 8;
inline constexpr int kPackChunkK = 4;  // K indices per tile per chunk
struct PackedFp8Weight {
  int64_t n = 0, k = 0;
  int block_k = 128;
  WeightBuffer<uint8_t> codes;
  WeightBuffer<float> scales;          // f32 form (empty when scales_e8m0 is used)
  WeightBuffer<uint8_t> scales_e8m0;   // UE8M0 form, bytes in 1..254 (empty when f32)
  // [ceil(tiles/8)][K/block_k]: 1 where some code of the group's 64 rows in that K block is an
  // E4M3 subnormal (exponent 0, mantissa != 0), else 0. The AVX-512 decode's shift path skips
  // those blocks (docs/v41-parity.md, "FP8 decode"); empty: every block is treated as flagged.
  WeightBuffer<uint8_t> subnormal_blocks;
  int64_t bytes() const {
    return static_cast<int64_t>(codes.size() + 4 * scales.size() + scales_e8m0.size() +
                                subnormal_blocks.size());
  }
};
struct PackedFp4Weight {
  int64_t n = 0, k = 0;
  WeightBuffer<uint8_t> codes;
  WeightBuffer<float> scales;          // as PackedFp8Weight
  WeightBuffer<uint8_t> scales_e8m0;
  int64_t bytes() const {
    return static_cast<int64_t>(codes.size() + 4 * scales.size() + scales_e8m0.size());
  }
};
// Scale form of the packed layouts: kAuto as described above; kF32 always f32 (the
// previous layout, kept for comparisons and benchmarks).
enum class PackedScales : uint8_t { kAuto, kF32 };
// Offsets in codes (`bytes_per_k` = 8 for FP8, 4 for FP4): packed_code_offset is where tile
// `t`'s K block `kb` starts (its first chunk; block_k K indices × 8 rows), packed_k_offset the
// offset from there of K index k of the block (0 <= k < block_k): the byte of (t, kb·block_k
// + k, row l) is codes[packed_code_offset(..) + packed_k_offset(k, ..) + l] for FP8 (FP4:
// + packed_fp4_byte(k, l), nibble l % 2). For FP8 two consecutive K indices 2j, 2j+1 of a tile
// are contiguous, and so are a chunk's 4 (for FP4 a chunk's 16 bytes of a tile). A group's K block is one contiguous run of kPackGroup·block_k·bytes_per_k
// bytes starting at packed_code_offset(t, kb, ..) for t % kPackGroup == 0.
inline int64_t packed_code_offset(int64_t t, int64_t kb, int64_t nkb, int64_t block_k,
                                  int64_t bytes_per_k) {
  return ((t / kPackGroup) * nkb + kb) * kPackGroup * block_k * bytes_per_k +
         (t % kPackGroup) * kPackChunkK * bytes_per_k;
}
inline int64_t packed_k_offset(int64_t k, int64_t bytes_per_k) {
  return (k / kPackChunkK) * kPackGroup * kPackChunkK * bytes_per_k + (k % kPackChunkK) * bytes_per_k;
}
// FP4: the byte holding (K index k of the block, row l) of a tile, from the tile's K-block
// start (packed_code_offset); the row is in nibble l % 2.
inline int64_t packed_fp4_byte(int64_t k, int64_t l) {
  return packed_k_offset(k - k % kPackChunkK, 4) + (l / 2) * kPackChunkK + k % kPackChunkK;
}
inline constexpr int64_t kPackedFp4Padding = 64;
inline int64_t packed_scale_offset(int64_t t, int64_t kb, int64_t nkb) {
  return (((t / kPackGroup) * nkb + kb) * kPackGroup + t % kPackGroup) * 8;
}
// Pack once at load (O(N·K), single-threaded; the result is read-only and shareable across
// threads). bytes() is the resident size. Errors: STRATA_CHECK on the shape rules above
// (FP8: block_k % 8 == 0, K % block_k == 0; FP4: group 32, K % 32 == 0).
PackedFp8Weight pack_fp8_weight(const Fp8BlockWeight& w, PackedScales form = PackedScales::kAuto);
// The packing of [top; bottom] (same k, block_k, block_n and scale kind; top.n a multiple of
// block_n so no scale block straddles the seam) without first copying them into one array:
// the same result as pack_fp8_weight on that array.
PackedFp8Weight pack_fp8_weight_stacked(const Fp8BlockWeight& top, const Fp8BlockWeight& bottom,
                                        PackedScales form = PackedScales::kAuto);
PackedFp4Weight pack_fp4_weight(const Fp4Weight& w, PackedScales form = PackedScales::kAuto);
// The packing of the rows of `top` followed by those of `bottom` (same k and group), e.g. an
// expert's w1 over its w3, without first copying them into one [top.n + bottom.n, K/2] array:
// the same result as pack_fp4_weight on that array.
PackedFp4Weight pack_fp4_weight_stacked(const Fp4Weight& top, const Fp4Weight& bottom,
                                        PackedScales form = PackedScales::kAuto);
void fp8_gemm_packed(const QuantActs& a, const PackedFp8Weight& w, float* y, OutRound out,
                     ThreadPool* pool);
void fp4_gemm_packed(const QuantActs& a, const PackedFp4Weight& w, float* y, OutRound out,
                     ThreadPool* pool);
// Several packed GEMMs in ONE pool dispatch (e.g. the w1/w3 GEMMs of every expert a token
// routes to, then their w2 GEMMs): y_j = a_j · W_j^T for each job j, with exactly one of
// fp8 / fp4 set (a_j.block = fp8->block_k, or a multiple of 32 for fp4; a_j.k = W_j.k).
//
// Split: the jobs' 64-row groups (kPackGroup tiles), in job order, are cut into one
// contiguous home range per thread, balanced by an estimated time per group: weights ×
// activation rows, × fp4_weight_cost for FP4 (an FP4 weight is half the bytes but the
// kernel decodes it at a similar per-weight rate, so bytes alone misjudge it). A thread
// takes groups from the front of its own range and, once that is empty, from the back of
// the others', so a misjudged cost or a slower thread leaves no thread idle for long.
// Every group is computed by one thread exactly as fp8_gemm_packed / fp4_gemm_packed
// computes its rows (same code path and order): bit-identical to calling those one job at
// a time, for any thread count, cost and interleaving. Errors: STRATA_CHECK on the shape
// rules above. Thread safety: as the single-GEMM calls; the jobs' outputs must not overlap.
struct PackedGemmJob {
  QuantActs a;
  const PackedFp8Weight* fp8 = nullptr;
  const PackedFp4Weight* fp4 = nullptr;
  float* y = nullptr;  // [a.m, N]
  OutRound out = OutRound::kBf16;
};
// Time of an FP4 weight relative to an FP8 one in the home split. Measured on the 2-core
// Zen 4 VM (V4.1 decode, routed FP4 experts batched with the FP8 shared expert): by bytes
// (0.5) the FP4-heavy thread's busy time was 34 % above the other's, at 0.9 within 10 %
// either way (docs/PERFORMANCE.md, session 7). Stealing evens out what remains.
inline constexpr double kFp4WeightCost = 0.85;
struct BatchOptions {
  double fp4_weight_cost = kFp4WeightCost;  // > 0
  // Below this many multiply-adds in all the batch runs on the calling thread (a dispatch
  // costs more); tests set 0 to run small batches on the pool.
  int64_t min_parallel_macs = int64_t{1} << 18;
  bool home_on_last_thread = false;  // tests: every group starts in the last thread's range
  int64_t* stolen_groups = nullptr;  // out (optional): groups taken from another's range
};
void gemm_packed_batch(const PackedGemmJob* jobs, int64_t n_jobs, ThreadPool* pool,
                       const BatchOptions& options = {});

void linear_fp8_packed(const float* x, int64_t m, const PackedFp8Weight& w, float* y,
                       ThreadPool* pool);
void linear_fp4_packed(const float* x, int64_t m, const PackedFp4Weight& w, int act_block,
                       float* y, ThreadPool* pool);

// Which multiply the packed FP8 decode kernels (M <= 4) use on this CPU right now:
// "vdpbf16ps" (AVX512_BF16 whose VDPBF16PS passed the sequential-rounding probe), "fma chain"
// (AVX-512 or AVX2 without it), or "scalar". Every choice gives the same bits. Thread-safe.
const char* fp8_decode_multiply();

namespace ref {
// Single-threaded scalar references of the above over output columns [n_begin, n_end).
void fp8_gemm_cols(const QuantActs& a, const Fp8BlockWeight& w, float* y, OutRound out,
                   int64_t n_begin, int64_t n_end);
void fp4_gemm_cols(const QuantActs& a, const Fp4Weight& w, float* y, OutRound out,
                   int64_t n_begin, int64_t n_end);
}  // namespace ref

}  // namespace strata::kernels
