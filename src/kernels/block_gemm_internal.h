// Internal to kernels/block_gemm*.cc (not a public header): the weight-source descriptor the
// block-scaled GEMM paths share, and the AVX-512 decode entry point that lives in its own
// translation unit (kernels/block_gemm_avx512.cc). Formats, layouts and the reduction order
// are documented in kernels/block_gemm.h.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/act_quant.h"
#include "kernels/block_gemm.h"

namespace strata::kernels::detail {

inline constexpr int kTile = 8;  // weight rows per tile of the packed layouts

inline float round_out(float v, OutRound out) { return out == OutRound::kF32 ? v : round_bf16(v); }

// One packed tile's (or group's) scales of one K block, in whichever form the weight keeps
// them (block_gemm.h): exactly one pointer is set. UE8M0 bytes are in 1..254 and widen to the
// f32 bits b << 23 (2^(b-127), exact).
struct ScaleRef {
  const float* f32 = nullptr;
  const uint8_t* e8m0 = nullptr;
  float at(int i) const {
    if (f32 != nullptr) return f32[i];
    const uint32_t bits = static_cast<uint32_t>(e8m0[i]) << 23;
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
  }
  const void* addr() const { return f32 != nullptr ? static_cast<const void*>(f32) : e8m0; }
  int bytes_per_scale() const { return f32 != nullptr ? 4 : 1; }
};
template <class PackedWeight>
ScaleRef packed_scale_ref(const PackedWeight& w, int64_t t, int64_t kb, int64_t nkb) {
  const int64_t o = packed_scale_offset(t, kb, nkb);
  if (!w.scales_e8m0.empty()) return ScaleRef{nullptr, w.scales_e8m0.data() + o};
  return ScaleRef{w.scales.data() + o, nullptr};
}

// Where the weights come from.
struct Src {
  enum Kind { kFp8Raw, kFp8Packed, kFp4Raw, kFp4Packed } kind;
  const uint8_t* codes = nullptr;
  const uint8_t* scales_e8m0 = nullptr;  // raw layouts
  const float* scales_f32 = nullptr;     // raw FP8 with f32 scales, or packed f32 (per row)
  const uint8_t* pscales_e8m0 = nullptr; // packed UE8M0 byte form (per row)
  const uint8_t* fp8_subnormal = nullptr; // PackedFp8Weight::subnormal_blocks, or null
  int64_t n = 0, k = 0;
  int bk = 32;       // K block of the weight scales (FP4: 32)
  int block_n = 1;   // raw FP8 scale rows
  bool fp4() const { return kind == kFp4Raw || kind == kFp4Packed; }
  // Packed layouts: tile t's K block kb (see block_gemm.h).
  const uint8_t* pcodes(int64_t t, int64_t kb) const {
    const int64_t bpk = fp4() ? kTile / 2 : kTile;
    return codes + packed_code_offset(t, kb, k / bk, bk, bpk);
  }
  ScaleRef pscales(int64_t t, int64_t kb) const {
    const int64_t o = packed_scale_offset(t, kb, k / bk);
    if (pscales_e8m0 != nullptr) return ScaleRef{nullptr, pscales_e8m0 + o};
    return ScaleRef{scales_f32 + o, nullptr};
  }
};

// Activation-side data of the AVX-512 extension paths (kernels::avx512_ext_active()),
// made once per GEMM call before the pool dispatch and then only read, by every thread:
//   FP8 dot path: x as bf16 pairs, pairs[m][j] = K index 2j in the HIGH half of the dword,
//   2j+1 in the low half (fp8_dot: every x is a bf16 value and the CPU's VDPBF16PS passed
//   dpbf16_is_sequential);
//   FP4 dot path: x as bf16 pairs of K indices two apart, quad[m][2c] = K index 4c in the low
//   half of the dword and 4c + 2 in the high half, quad[m][2c + 1] = 4c + 1 and 4c + 3, and
//   per 32-wide K block whether fp4_block_sums_exact holds (fp4_dot);
//   FP8 shift decode (K blocks without subnormal weight codes): pairs112, the same pairs of
//   x·2^112 (exact: E4M3 values times a power of two stay normal bf16 values).
//   prefill panel path (a.m > 4, FP8 or FP4, bk even): pairs as for the FP8 dot path
//   (panel_dot: every x is a bf16 value and VDPBF16PS passed dpbf16_is_sequential).
struct ExtActs {
  bool fp4_dot = false;
  bool fp8_dot = false;
  bool panel_dot = false;
  std::vector<uint32_t> pairs;     // [M][K/2]
  std::vector<uint32_t> pairs112;  // [M][K/2], when fp8_dot and the weights flag subnormals
  std::vector<uint32_t> quad;   // [M][K/4][2]
  std::vector<uint8_t> exact;   // [M][K/32]
};
// Fills *d for GEMMs of activations `a` over packed weights `s` (every flag stays false when
// the extension paths are off or the weights are not packed; fp4_dot / fp8_dot only for
// a.m <= 4, panel_dot only for a.m > 4).
void prepare_ext_acts(const QuantActs& a, const Src& s, ExtActs* d);

// Decode over packed weights with AVX-512 (caller checks avx512_active(), a.m <= 4, s.bk
// even): rows [n_begin, n_end) must start on a group boundary (kPackGroup tiles); returns the
// first row it did not handle (a ragged last group is left to the AVX2 path). y is [a.m, s.n].
// `ext` from prepare_ext_acts(a, s, ...), or null (then the plain AVX-512 paths run).
int64_t gemm_cols_avx512(const QuantActs& a, const Src& s, const ExtActs* ext, float* y,
                         OutRound out, int64_t n_begin, int64_t n_end);

// Prefill (M > 4) over one group of 4 full tiles (32 rows) and K block kb, all M rows:
//   acc[m][32] += ((Σ_k sequential fma x[m][kb·bk + k]·panel32[k][r]) · sx[m]) · sws[r]
// panel32 [bk][32] (decoded weights, row r = tile·8 + lane), sws [32], acc [M][32]: the same
// arithmetic per lane as the AVX2 panel path, 16 rows per zmm and 4 activation rows at a time.
// Caller checks avx512_active().
void accumulate_panel32_avx512(const float* panel32, const float* sws, int bk,
                               const QuantActs& a, int64_t kb, float* acc);
// The same result bit for bit on VDPBF16PS (caller checks d.panel_dot): panel32's values
// (decoded E4M3 / E2M1 codes, times a power of two: bf16 values) as bf16 pairs of K indices
// 2j (high word) and 2j + 1 (low word) into `pairs` [bk/2][32], against the activation pairs
// d.pairs; each lane's addition order is the sequential chain's (dpbf16_is_sequential), the
// products are exact and no partial sum is subnormal (every product is a nonzero multiple of
// at least 2^-26 or zero), so DAZ/FTZ change nothing. Half the multiply instructions.
void accumulate_panel_pairs_avx512(const float* panel32, const float* sws, int bk,
                                   const QuantActs& a, const ExtActs& d, int64_t kb,
                                   uint32_t* pairs, float* acc);

// True when every partial sum of Σ_k x[k]·w[k] over these 32 activations is exactly
// representable in f32 for EVERY E2M1 weight vector w (so any summation order, including
// the reference's sequential FMA chain, gives the same bits). x must be bf16-representable
// (E4M3 values are). Proof: each nonzero x[k] is a multiple of its lowest set bit, every
// E2M1 value is a multiple of 0.5 with |w| ≤ 6, so all partial sums are multiples of
// G = 0.5·min_k lsb(x[k]) bounded by B = 6·Σ|x[k]|; they are exact when B ≤ 2^24·G.
bool fp4_block_sums_exact(const float* x32);

// True when this CPU's VDPBF16PS adds its two products one after the other, odd (high) word
// first, each addition rounded to f32 (RNE), as the Intel SDM defines it: then the FP8 dot
// path is exactly the scalar sequential-FMA chain. Probed once on the first call; call only
// when kernels::avx512_ext_active().
bool dpbf16_is_sequential();

}  // namespace strata::kernels::detail
