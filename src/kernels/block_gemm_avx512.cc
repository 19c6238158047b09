// AVX-512 decode paths of the block-scaled GEMMs (packed weights, M <= 4, one whole group of
// kPackGroup tiles = 64 rows at a time; reduction order in kernels/block_gemm.h).
//
// Chain path (FP8 and FP4): two tiles share a zmm (lanes 0-7 = tile A's 8 rows, lanes 8-15 =
// tile B's), so a lane holds one output row and runs exactly the scalar sequential-FMA chain
// over each K block (bit-identical); 8 tiles = 4 zmm chains per activation row, and the
// group's K blocks are one sequential stream.
//
// FP8 dot path (CPUs with AVX512_BF16 + AVX512_VBMI, kernels::avx512_ext_active(), whose
// VDPBF16PS passes dpbf16_is_sequential): VDPBF16PS adds two products per lane one after the
// other with one rounding each, and products of bf16 values are exact, so with K index k in
// the high word and k + 1 in the low word it runs two steps of the scalar chain, bit for bit.
// Two VPERMT2B table lookups give each E4M3 code's bf16 low and top bytes (subnormals
// normalized, sign ORed back in), two more interleave them into (k, k+1) word pairs of a tile
// pair's 16 rows: 5 shuffles + 2 VDPBF16PS per 64 weights (dot_block_fp8), against 6 + 4
// FMAs for the GF2P8AFFINEQB extension chain it replaced (1.1-1.6x from cache).
//
// FP4 dot path (CPUs with AVX512_BF16 + AVX512_VBMI, kernels::avx512_ext_active()): on a K
// block whose activations pass fp4_block_sums_exact, every partial sum of the block's dot
// products is exact in f32 whatever the order, so the chain's result equals the exact sum.
// There the kernel regroups each 64 bytes of codes with one VPERMB, maps every nibble to its
// bf16 value with a VPERMW per 32 weights, and lets VDPBF16PS multiply-add two K indices per
// lane (products of bf16 values are exact in f32; the instruction's DAZ/FTZ never triggers:
// every product and partial sum is a nonzero multiple of >= 2^-10 or zero): about two vector
// ops per 32 weights instead of ~13 on the chain path (dot_block). Blocks that fail the test
// (a nonzero activation whose lowest set bit is tiny next to the block's sum of magnitudes:
// 0.25 % of the blocks in the bench model's decode) take the chain path, so results stay
// bit-identical to the scalar reference on every input.
#include <immintrin.h>

#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/block_gemm_internal.h"
#include "kernels/cpu_features.h"
#include "kernels/quant_formats.h"
#include "kernels/simd_decode.h"

namespace strata::kernels::detail {

bool fp4_block_sums_exact(const float* x32) {
  double sum = 0.0;
  int min_lsb = 1 << 20;  // exponent of the smallest lowest-set-bit over nonzero values
  for (int k = 0; k < 32; ++k) {
    uint32_t bits;
    std::memcpy(&bits, &x32[k], sizeof bits);
    if ((bits & 0xFFFFu) != 0) return false;  // not bf16-representable
    const int e = static_cast<int>((bits >> 23) & 0xFFu);
    const uint32_t mant = bits & 0x7FFFFFu;
    if (e == 0) {
      if (mant != 0) return false;  // subnormal f32: never produced by act_quant
      continue;                     // ±0 contributes nothing
    }
    if (e == 255) return false;
    const int lsb = e - 150 + __builtin_ctz(mant | 0x800000u);
    if (lsb < min_lsb) min_lsb = lsb;
    sum += std::fabs(static_cast<double>(x32[k]));
  }
  if (sum == 0.0) return true;
  // B = 6·Σ|x| <= 2^24·G with G = 2^(min_lsb - 1)
  return 6.0 * sum <= std::ldexp(1.0, min_lsb + 23);
}

namespace {

#define STRATA_AVX512 STRATA_TARGET_AVX512
#define STRATA_AVX512_EXT STRATA_TARGET_AVX512_EXT
#define STRATA_INLINE inline __attribute__((always_inline))
// GCC 12's avx512fintrin.h trips -Wmaybe-uninitialized on its own _mm512_undefined_* use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// One K block's partial sums: p* = activation row 0 (tile pairs 0..3), q* = row 1.
// (Named members, not an array: GCC keeps arrays of vectors on the stack.)
struct Partials {
  __m512 p0, p1, p2, p3, q0, q1, q2, q3;
};

// One K index of the 4 tile-pair chains: P.p* += x0[k] * w*, and P.q* += x1[k] * w* for a
// second activation row.
template <int kRows>
STRATA_AVX512 STRATA_INLINE void fma_step(Partials& P, const float* x0, const float* x1,
                                          int64_t k, __m512 w0, __m512 w1, __m512 w2,
                                          __m512 w3) {
  const __m512 xa = _mm512_set1_ps(x0[k]);
  P.p0 = _mm512_fmadd_ps(xa, w0, P.p0);
  P.p1 = _mm512_fmadd_ps(xa, w1, P.p1);
  P.p2 = _mm512_fmadd_ps(xa, w2, P.p2);
  P.p3 = _mm512_fmadd_ps(xa, w3, P.p3);
  if constexpr (kRows == 2) {
    const __m512 xb = _mm512_set1_ps(x1[k]);
    P.q0 = _mm512_fmadd_ps(xb, w0, P.q0);
    P.q1 = _mm512_fmadd_ps(xb, w1, P.q1);
    P.q2 = _mm512_fmadd_ps(xb, w2, P.q2);
    P.q3 = _mm512_fmadd_ps(xb, w3, P.q3);
  }
}

// Sequential-FMA partials of the group's K block at `base`; the weights decode
// to value x 2^-8 (simd_decode.h), so the partials are 2^-8 times the scalar path's.
template <bool kFp4, int kRows>
STRATA_AVX512 STRATA_INLINE Partials chain_block(const uint8_t* base, int bk, const float* x0,
                                                 const float* x1) {
  constexpr int bpk = kFp4 ? kTile / 2 : kTile;
  const __m512 zero = _mm512_setzero_ps();
  Partials P{zero, zero, zero, zero, zero, zero, zero, zero};
  constexpr int64_t ts = kPackChunkK * bpk;  // next tile of a chunk
  const uint8_t* c0 = base;
  const uint8_t* c1 = base + 2 * ts;
  const uint8_t* c2 = base + 4 * ts;
  const uint8_t* c3 = base + 6 * ts;
  for (int k = 0; k < bk; k += 2) {
    __m512 w00, w01, w10, w11, w20, w21, w30, w31;
    if constexpr (kFp4) {  // tile chunks in the transposed FP4 order (block_gemm.h)
      const int64_t off = packed_k_offset(k - k % kPackChunkK, bpk);
      auto pair = [k](const uint8_t* c, __m512* a, __m512* b) __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"))) {
        simd::decode_pair512_fp4(simd::fp4_pair_bytes(c, k), simd::fp4_pair_bytes(c + ts, k), a, b);
      };
      pair(c0 + off, &w00, &w01);
      pair(c1 + off, &w10, &w11);
      pair(c2 + off, &w20, &w21);
      pair(c3 + off, &w30, &w31);
    } else {
      const int64_t off = packed_k_offset(k, bpk);
      simd::decode_pair512_fp8(c0 + off, c0 + ts + off, &w00, &w01);
      simd::decode_pair512_fp8(c1 + off, c1 + ts + off, &w10, &w11);
      simd::decode_pair512_fp8(c2 + off, c2 + ts + off, &w20, &w21);
      simd::decode_pair512_fp8(c3 + off, c3 + ts + off, &w30, &w31);
    }
    fma_step<kRows>(P, x0, x1, k, w00, w10, w20, w30);
    fma_step<kRows>(P, x0, x1, k + 1, w01, w11, w21, w31);
  }
  return P;
}

STRATA_AVX512 STRATA_INLINE __m512 scales16(const ScaleRef& r, int i) {
  return simd::load_scales16(r.f32 != nullptr ? r.f32 + i : nullptr,
                             r.e8m0 != nullptr ? r.e8m0 + i : nullptr);
}

// acc += (p * sx) * sw, in that order (block_gemm.h), for both activation rows.
template <int kRows>
STRATA_AVX512 STRATA_INLINE void scale_add(const Partials& P, const ScaleRef& sc, __m512 fold,
                                           float sx0, float sx1, __m512& a0, __m512& a1,
                                           __m512& a2, __m512& a3, __m512& b0, __m512& b1,
                                           __m512& b2, __m512& b3) {
  const __m512 sw0 = _mm512_mul_ps(scales16(sc, 0), fold);
  const __m512 sw1 = _mm512_mul_ps(scales16(sc, 16), fold);
  const __m512 sw2 = _mm512_mul_ps(scales16(sc, 32), fold);
  const __m512 sw3 = _mm512_mul_ps(scales16(sc, 48), fold);
  const __m512 s0 = _mm512_set1_ps(sx0);
  a0 = _mm512_add_ps(a0, _mm512_mul_ps(_mm512_mul_ps(P.p0, s0), sw0));
  a1 = _mm512_add_ps(a1, _mm512_mul_ps(_mm512_mul_ps(P.p1, s0), sw1));
  a2 = _mm512_add_ps(a2, _mm512_mul_ps(_mm512_mul_ps(P.p2, s0), sw2));
  a3 = _mm512_add_ps(a3, _mm512_mul_ps(_mm512_mul_ps(P.p3, s0), sw3));
  if constexpr (kRows == 2) {
    const __m512 s1 = _mm512_set1_ps(sx1);
    b0 = _mm512_add_ps(b0, _mm512_mul_ps(_mm512_mul_ps(P.q0, s1), sw0));
    b1 = _mm512_add_ps(b1, _mm512_mul_ps(_mm512_mul_ps(P.q1, s1), sw1));
    b2 = _mm512_add_ps(b2, _mm512_mul_ps(_mm512_mul_ps(P.q2, s1), sw2));
    b3 = _mm512_add_ps(b3, _mm512_mul_ps(_mm512_mul_ps(P.q3, s1), sw3));
  }
}

// The group's row scales of K block kb (the codes are left to the hardware prefetchers,
// simd_decode.h).
STRATA_AVX512 STRATA_INLINE void prefetch_scales(const Src& s, int64_t t0, int64_t kb) {
  const ScaleRef r = s.pscales(t0, kb);
  const char* sc = static_cast<const char*>(r.addr());
  for (int off = 0; off < 64 * r.bytes_per_scale(); off += 64) _mm_prefetch(sc + off, _MM_HINT_T0);
}

template <int kRows>
STRATA_AVX512 STRATA_INLINE void store_out(float* out, __m512 a0, __m512 a1, __m512 a2,
                                           __m512 a3, __m512 b0, __m512 b1, __m512 b2,
                                           __m512 b3) {
  _mm512_storeu_ps(out + 0, a0);
  _mm512_storeu_ps(out + 16, a1);
  _mm512_storeu_ps(out + 32, a2);
  _mm512_storeu_ps(out + 48, a3);
  if constexpr (kRows == 2) {
    _mm512_storeu_ps(out + 64, b0);
    _mm512_storeu_ps(out + 80, b1);
    _mm512_storeu_ps(out + 96, b2);
    _mm512_storeu_ps(out + 112, b3);
  }
}

// Two-group variant of scale_add: P.p* are group t0's partials of K block kb, P.q* group
// t1's, both against activation row 0 (scale sx); a* and c* are the groups' accumulators.
STRATA_AVX512 STRATA_INLINE void scale_add_2g(const Partials& P, const Src& s, int64_t t0,
                                              int64_t t1, int64_t kb, __m512 fold, float sx,
                                              __m512& a0, __m512& a1, __m512& a2, __m512& a3,
                                              __m512& c0, __m512& c1, __m512& c2, __m512& c3) {
  __m512 unused = fold;
  scale_add<1>(P, s.pscales(t0, kb), fold, sx, 0.0f, a0, a1, a2, a3, unused, unused, unused,
               unused);
  const Partials Q{P.q0, P.q1, P.q2, P.q3, P.q0, P.q1, P.q2, P.q3};
  scale_add<1>(Q, s.pscales(t1, kb), fold, sx, 0.0f, c0, c1, c2, c3, unused, unused, unused,
               unused);
}

// K blocks of scale prefetch. Groups are contiguous in the packed layouts, so prefetching
// block kb + kAhead of a group's last blocks reads the next group's first ones (the next call
// of a row range); past the array's end it is a no-op (prefetches never fault).
constexpr int kAhead = 8;

// FP4 decode with one activation row reads two groups at once on the dot path
// (group512_fp4_dot_2g): one core then streams two address ranges, and the hardware
// prefetchers keep more lines in flight than for one stream (+11-13 % without software
// prefetch; FP8 reads one group, where two were 1-4 % slower: docs/PERFORMANCE.md, sessions 9
// and 11). The codes get no software prefetch (see simd_decode.h); only the small scale
// arrays do (prefetch_scales).

// Rows [g0, g0 + 64) (tiles t0..t0+7, t0 % 8 == 0), activation rows m0..m0+kRows-1; chain
// path on every block.
template <bool kFp4, int kRows>
STRATA_AVX512 void group512(const QuantActs& a, const Src& s, int64_t t0, int64_t m0,
                            float* out /*[kRows][64]*/) {
  const int bk = s.bk;
  const int64_t K = s.k, nkb = K / bk;
  const int64_t act_per = a.block / bk, ldsx = K / a.block;
  const __m512 zero = _mm512_setzero_ps();
  __m512 a0 = zero, a1 = zero, a2 = zero, a3 = zero;  // row 0, tile pairs 0..3
  __m512 b0 = zero, b1 = zero, b2 = zero, b3 = zero;  // row 1
  const __m512 fold = _mm512_set1_ps(256.0f);         // see decode16_e4m3
  const float* xr0 = a.q + m0 * K;
  const float* xr1 = xr0 + K;
  const float* sx0 = a.scales + m0 * ldsx;
  const float* sx1 = sx0 + ldsx;
  for (int64_t kb = 0, ab = 0, ai = 0; kb < nkb; ++kb) {
    prefetch_scales(s, t0, kb + kAhead);  // runs on into the next group
    const Partials P =
        chain_block<kFp4, kRows>(s.pcodes(t0, kb), bk, xr0 + kb * bk, xr1 + kb * bk);
    scale_add<kRows>(P, s.pscales(t0, kb), fold, sx0[ab], kRows == 2 ? sx1[ab] : 0.0f, a0, a1,
                     a2, a3, b0, b1, b2, b3);
    if (++ai == act_per) {  // activation scale index kb / act_per without a division
      ai = 0;
      ++ab;
    }
  }
  store_out<kRows>(out, a0, a1, a2, a3, b0, b1, b2, b3);
}

// ---- FP8 dot path ----
// E4M3 values (weights and activations, subnormals included) are normal bf16 numbers, and
// every nonzero product or partial sum is a multiple of 2^-18: the instruction's DAZ/FTZ
// never trigger. So this path gives the chain's bits on every input (tested against the
// scalar reference in block_gemm_ext_test.cc). The partials are true values (no 2^-8 factor).
struct Fp8DotTables {
  alignas(64) uint8_t lo[128];    // bf16 low byte of the E4M3 magnitude code c (0..127)
  alignas(64) uint8_t top[128];   // bf16 top byte (sign clear)
  alignas(64) uint8_t idx[2][64]; // K pairs (0,1) and (2,3) of a joined 4-K chunk
  Fp8DotTables() {
    for (int c = 0; c < 128; ++c) {
      const float v = c == 0x7F ? 480.0f : quant::e4m3_decode(static_cast<uint8_t>(c));
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      lo[c] = static_cast<uint8_t>(bits >> 16);
      top[c] = static_cast<uint8_t>(bits >> 24);
    }
    for (int p = 0; p < 2; ++p)
      for (int b = 0; b < 64; ++b) {
        const int l = b / 4, sub = b % 4;
        const int k = 2 * p + (sub < 2 ? 1 : 0);  // low word: k+1, high word: k
        idx[p][b] = static_cast<uint8_t>((sub % 2) * 64 + (l / 8) * 32 + k * 8 + l % 8);
      }
  }
};
const Fp8DotTables& fp8_dot_tables() {
  static const Fp8DotTables t;
  return t;
}

// Exact partials (true values) of one K block (bk % 4 == 0). kRows == 2: activation rows
// xp0 / xp1 (bf16 pairs, ExtActs::pairs) against the group at base. (FP8 decode reads one
// group at a time: without software prefetch, reading two groups in turn as FP4 does was
// 1-4 % slower, docs/PERFORMANCE.md session 11.)
// The FP8 dot loop over one K block (bk % 4 == 0): per chunk of 4 K indices, `decode` turns
// each tile pair's 64 codes at p into the bf16 pairs w01 (K0 high, K1 low word of row l's
// dword) and w23 (K2, K3), and two VDPBF16PS add them to row l's lane in K order, against
// activation rows xp0 / xp1 (kRows == 2) as bf16 pairs (ExtActs::pairs or pairs112).
template <int kRows, class Decode>
STRATA_AVX512_EXT STRATA_INLINE Partials fp8_dot_loop(const uint8_t* base, int bk,
                                                      const uint32_t* xp0, const uint32_t* xp1,
                                                      const Decode& decode) {
  const __m512 zero = _mm512_setzero_ps();
  // locals, not Partials members: GCC kept the members on the stack across iterations
  __m512 p0 = zero, p1 = zero, p2 = zero, p3 = zero, q0 = zero, q1 = zero, q2 = zero, q3 = zero;
  for (int c = 0; c < bk; c += 4) {
    const __m512bh xa01 = (__m512bh)_mm512_set1_epi32(static_cast<int>(xp0[c / 2]));
    const __m512bh xa23 = (__m512bh)_mm512_set1_epi32(static_cast<int>(xp0[c / 2 + 1]));
    __m512bh xb01 = xa01, xb23 = xa23;
    if constexpr (kRows == 2) {
      xb01 = (__m512bh)_mm512_set1_epi32(static_cast<int>(xp1[c / 2]));
      xb23 = (__m512bh)_mm512_set1_epi32(static_cast<int>(xp1[c / 2 + 1]));
    }
    const uint8_t* a = base + packed_k_offset(c, kTile);  // the chunk: 8 tiles x 32 bytes
#define STRATA_FP8_DOT(acc, accb, t2)                                          \
  {                                                                            \
    __m512bh w01, w23;                                                         \
    decode(a + (t2) * 64, w01, w23);                                           \
    acc = _mm512_dpbf16_ps(_mm512_dpbf16_ps(acc, w01, xa01), w23, xa23);       \
    if constexpr (kRows == 2)                                                  \
      accb = _mm512_dpbf16_ps(_mm512_dpbf16_ps(accb, w01, xb01), w23, xb23);   \
  }
    STRATA_FP8_DOT(p0, q0, 0)
    STRATA_FP8_DOT(p1, q1, 1)
    STRATA_FP8_DOT(p2, q2, 2)
    STRATA_FP8_DOT(p3, q3, 3)
#undef STRATA_FP8_DOT
  }
  return Partials{p0, p1, p2, p3, q0, q1, q2, q3};
}

// Table decode (any code): the bf16 low and top bytes of the magnitude from two 128-entry
// tables, the sign ORed into the top byte, then the bytes interleaved into (K0, K1) and
// (K2, K3) words.
struct Fp8TableDecode {
  __m512i lo0, lo1, tp0, tp1, i01, i23, sign;
  STRATA_AVX512_EXT explicit Fp8TableDecode(const Fp8DotTables& T)
      : lo0(_mm512_load_si512(T.lo)), lo1(_mm512_load_si512(T.lo + 64)),
        tp0(_mm512_load_si512(T.top)), tp1(_mm512_load_si512(T.top + 64)),
        i01(_mm512_load_si512(T.idx[0])), i23(_mm512_load_si512(T.idx[1])),
        sign(_mm512_set1_epi8(static_cast<char>(0x80))) {}
  STRATA_AVX512_EXT STRATA_INLINE void operator()(const uint8_t* p, __m512bh& w01,
                                                  __m512bh& w23) const {
    const __m512i j = _mm512_loadu_si512(p);
    const __m512i lob = _mm512_permutex2var_epi8(lo0, j, lo1);
    const __m512i top =
        _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(tp0, j, tp1), j, sign, 0xF8);
    w01 = (__m512bh)_mm512_permutex2var_epi8(lob, i01, top);
    w23 = (__m512bh)_mm512_permutex2var_epi8(lob, i23, top);
  }
};

template <int kRows>
STRATA_AVX512_EXT STRATA_INLINE Partials dot_block_fp8(const uint8_t* base, int bk,
                                                       const uint32_t* xp0, const uint32_t* xp1,
                                                       const Fp8DotTables& T) {
  return fp8_dot_loop<kRows>(base, bk, xp0, xp1, Fp8TableDecode(T));
}

// The same partials (true values) by the shift decode, for K blocks whose weight codes hold
// no E4M3 subnormal (Src::fp8_subnormal) against activations x·2^112 (ExtActs::pairs112).
// One VPERMB puts a tile pair's 4 K indices of row l in dword l as bytes (K1, K3, K0, K2);
// then per 16-bit word, (w << 8) >>a 4 & 0x87F0 of the low bytes and w >>a 4 & 0x87F0 of the
// high bytes are the bf16 bits of value·2^-120 (sign; exponent and mantissa bits moved down
// by 4, so the bf16 exponent field is the E4M3 one): K0 / K1 in the high / low word of the
// first, K2 / K3 of the second, VDPBF16PS's order. Every such bf16 with a nonzero value is
// normal (subnormal codes are excluded: VDPBF16PS would read them as zero), and so are the
// products x·2^112·v·2^-120 = x·v·2^-8 and their partial sums (nonzero ones are multiples of
// 2^-33 for the activations prepare_ext_acts admits), where rounding commutes with the 2^-8:
// the chain's partials times 2^-8, scaled back exactly at the end. NaN codes (0x7F) decode as
// 480, as the table path's (the scalar path would give NaN: callers pass no NaN codes).
struct Fp8ShiftTables {
  alignas(64) uint8_t order[64];
  Fp8ShiftTables() {
    constexpr int kOf[4] = {1, 3, 0, 2};  // byte 4l + j holds K index kOf[j] of row l
    for (int b = 0; b < 64; ++b) {
      const int l = b / 4;
      order[b] = static_cast<uint8_t>((l / 8) * 32 + kOf[b % 4] * 8 + l % 8);
    }
  }
};
const Fp8ShiftTables& fp8_shift_tables() {
  static const Fp8ShiftTables t;
  return t;
}

struct Fp8ShiftDecode {
  __m512i order, keep;
  STRATA_AVX512_EXT explicit Fp8ShiftDecode(__m512i o)
      : order(o), keep(_mm512_set1_epi16(static_cast<short>(0x87F0))) {}
  STRATA_AVX512_EXT STRATA_INLINE void operator()(const uint8_t* p, __m512bh& w01,
                                                  __m512bh& w23) const {
    const __m512i j = _mm512_permutexvar_epi8(order, _mm512_loadu_si512(p));
    w01 = (__m512bh)_mm512_and_si512(_mm512_srai_epi16(_mm512_slli_epi16(j, 8), 4), keep);
    w23 = (__m512bh)_mm512_and_si512(_mm512_srai_epi16(j, 4), keep);
  }
};

template <int kRows>
STRATA_AVX512_EXT STRATA_INLINE Partials dot_block_fp8_shift(const uint8_t* base, int bk,
                                                             const uint32_t* xp0,
                                                             const uint32_t* xp1,
                                                             __m512i order) {
  const Partials P = fp8_dot_loop<kRows>(base, bk, xp0, xp1, Fp8ShiftDecode(order));
  const __m512 up = _mm512_set1_ps(256.0f);  // exact: back to true values
  return Partials{_mm512_mul_ps(P.p0, up), _mm512_mul_ps(P.p1, up), _mm512_mul_ps(P.p2, up),
                  _mm512_mul_ps(P.p3, up), _mm512_mul_ps(P.q0, up), _mm512_mul_ps(P.q1, up),
                  _mm512_mul_ps(P.q2, up), _mm512_mul_ps(P.q3, up)};
}

template <int kRows>
STRATA_AVX512_EXT void group512_fp8_dot(const QuantActs& a, const Src& s, int64_t t0,
                                        int64_t m0, const ExtActs& d, float* out) {
  const int bk = s.bk;
  const int64_t K = s.k, nkb = K / bk;
  const int64_t act_per = a.block / bk, ldsx = K / a.block;
  const Fp8DotTables& T = fp8_dot_tables();
  const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
  __m512 a0 = zero, a1 = zero, a2 = zero, a3 = zero;
  __m512 b0 = zero, b1 = zero, b2 = zero, b3 = zero;
  const uint32_t* xp0 = d.pairs.data() + m0 * (K / 2);
  const uint32_t* xp1 = xp0 + K / 2;
  // the shift decode's flags and activations, or null (every block on the tables)
  const uint8_t* sub = d.pairs112.empty() ? nullptr : s.fp8_subnormal + (t0 / kPackGroup) * nkb;
  const uint32_t* xs0 = sub != nullptr ? d.pairs112.data() + m0 * (K / 2) : nullptr;
  const uint32_t* xs1 = xs0 != nullptr ? xs0 + K / 2 : nullptr;
  const __m512i order = _mm512_load_si512(fp8_shift_tables().order);
  const float* sx0 = a.scales + m0 * ldsx;
  const float* sx1 = sx0 + ldsx;
  for (int64_t kb = 0, ab = 0, ai = 0; kb < nkb; ++kb) {
    prefetch_scales(s, t0, kb + kAhead);  // runs on into the next group
    const Partials P =
        sub != nullptr && sub[kb] == 0
            ? dot_block_fp8_shift<kRows>(s.pcodes(t0, kb), bk, xs0 + kb * bk / 2,
                                         xs1 + kb * bk / 2, order)
            : dot_block_fp8<kRows>(s.pcodes(t0, kb), bk, xp0 + kb * bk / 2, xp1 + kb * bk / 2, T);
    scale_add<kRows>(P, s.pscales(t0, kb), one, sx0[ab], kRows == 2 ? sx1[ab] : 0.0f, a0, a1,
                     a2, a3, b0, b1, b2, b3);
    if (++ai == act_per) {
      ai = 0;
      ++ab;
    }
  }
  store_out<kRows>(out, a0, a1, a2, a3, b0, b1, b2, b3);
}

// ---- FP4 dot path ----

// The exact-block path reads a chunk (4 K indices x 8 tiles = 128 bytes; per tile 16 bytes
// stored transposed, block_gemm.h: byte j = rows 2j (low nibble) and 2j+1 (high nibble) of
// K index q at 4j + q) as two 64-byte halves of 4 tiles. Dword lane (tile T, j) of a half is
// byte j of K 0..3: its low word holds rows 2j / 2j+1 at K0 and K1 in nibbles 0-3, its high
// word the same at K2 and K3. VPERMW on the dword and on the dword shifted right by 4 bits
// (the table repeats every 16 codes, so the bits above the nibble do not matter) maps nibble
// 0 / 1 of each word to its bf16 value: rows 2j / 2j+1 at (K0, K2). The same 64 bytes loaded
// again one byte later are the dwords shifted right by 8 bits (the byte that enters at the
// top is only in bits VPERMW ignores), so VPERMW on that load and on it shifted by 4 gives
// rows 2j / 2j+1 at (K1, K3). VDPBF16PS against the activation dwords (x[K0] | x[K2] << 16)
// and (x[K1] | x[K3] << 16) adds both K indices of a row per lane: per 128 weights 2 shifts,
// 4 VPERMW and 4 VDPBF16PS, which share this CPU's vector pipes (Zen 4: ~1.27 of these
// per cycle). The transposed layout saves the VPERMB that gathered these dwords and the
// reload the 8-bit shift: 10 ops instead of 12, 60 -> 74 G weights/s for the inner loop from
// L1 (docs/PERFORMANCE.md, session 14). (The broadcast + VPMULTISHIFTQB + VPERMW per 32 of an
// earlier version decoded 1.27x slower from L2.) On an exact block every partial sum is exact,
// so this order gives the chain's value. Even and odd rows accumulate apart and are
// interleaved back into tile order at the end.
struct DotTables {
  // bf16 bits of the E2M1 values, indexed by the low 5 bits of a word (the 16 codes repeat).
  alignas(64) uint16_t value[32];
  alignas(64) int32_t rows[2][16];  // VPERMT2PS: tiles (2h, 2h+1) from the (even, odd) lanes
  DotTables() {
    for (int c = 0; c < 32; ++c) {
      const float v = quant::e2m1_decode(static_cast<uint8_t>(c & 15));
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      value[c] = static_cast<uint16_t>(bits >> 16);
    }
    for (int h = 0; h < 2; ++h)
      for (int r = 0; r < 8; ++r) {
        rows[h][r] = (r % 2 ? 16 : 0) + h * 8 + r / 2;
        rows[h][8 + r] = (r % 2 ? 16 : 0) + h * 8 + 4 + r / 2;
      }
  }
};
const DotTables& dot_tables() {
  static const DotTables t;
  return t;
}

// The bf16 pairs of half a chunk at p (4 tiles x 4 K x 8 rows): w0 / w1 = even / odd rows at
// (K0, K2), w2 / w3 = even / odd rows at (K1, K3).
STRATA_AVX512_EXT STRATA_INLINE void dot_weights(const uint8_t* p, __m512i table, __m512bh& w0,
                                                 __m512bh& w1, __m512bh& w2, __m512bh& w3) {
  const __m512i W = _mm512_loadu_si512(p);      // dword lane (T, j): byte j at K0..K3
  const __m512i V = _mm512_loadu_si512(p + 1);  // the same shifted right by 8 bits
  w0 = (__m512bh)_mm512_permutexvar_epi16(W, table);
  w1 = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi32(W, 4), table);
  w2 = (__m512bh)_mm512_permutexvar_epi16(V, table);
  w3 = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi32(V, 4), table);
}

// Exact partials (true values, no 2^-8 factor) of one 32-wide K block by VDPBF16PS, for
// activation rows xp0 / xp1 (ExtActs::quad: 2 dwords per 4 K indices). kTwoGroups
// (kRows == 1): activation row xp0 against the groups at base (partials p*) and base2
// (partials q*), their chunks read in turn.
template <int kRows, bool kTwoGroups = false>
STRATA_AVX512_EXT STRATA_INLINE Partials dot_block(const uint8_t* base, const uint8_t* base2,
                                                   const uint32_t* xp0, const uint32_t* xp1,
                                                   const DotTables& T) {
  static_assert(!kTwoGroups || kRows == 1);
  const __m512i table = _mm512_load_si512(T.value);
  const __m512 z = _mm512_setzero_ps();
  // First row or group: e/o = even/odd rows, 0/1 = tiles 0-3 / 4-7, a/b = (K0, K2) / (K1, K3).
  __m512 e0a = z, e0b = z, o0a = z, o0b = z, e1a = z, e1b = z, o1a = z, o1b = z;
  __m512 f0 = z, g0 = z, f1 = z, g1 = z;  // second row or group: even / odd, tiles 0-3 / 4-7
  for (int c = 0; c < 8; ++c) {
    const uint8_t* ch = base + c * 128;  // packed_k_offset(4c, kTile / 2)
    const uint8_t* ch2 = kTwoGroups ? base2 + c * 128 : ch;
    const __m512bh xa = (__m512bh)_mm512_set1_epi32(static_cast<int>(xp0[2 * c]));
    const __m512bh xb = (__m512bh)_mm512_set1_epi32(static_cast<int>(xp0[2 * c + 1]));
    __m512bh ya = xa, yb = xb;
    if constexpr (kRows == 2) {
      ya = (__m512bh)_mm512_set1_epi32(static_cast<int>(xp1[2 * c]));
      yb = (__m512bh)_mm512_set1_epi32(static_cast<int>(xp1[2 * c + 1]));
    }
#define STRATA_DOT(h, ea, eb, oa, ob, f, g)                                        \
  {                                                                                \
    __m512bh w0, w1, w2, w3;                                                       \
    dot_weights(ch + 64 * (h), table, w0, w1, w2, w3);                     \
    ea = _mm512_dpbf16_ps(ea, w0, xa);                                             \
    oa = _mm512_dpbf16_ps(oa, w1, xa);                                             \
    eb = _mm512_dpbf16_ps(eb, w2, xb);                                             \
    ob = _mm512_dpbf16_ps(ob, w3, xb);                                             \
    if constexpr (kTwoGroups) dot_weights(ch2 + 64 * (h), table, w0, w1, w2, w3); \
    if constexpr (kRows == 2 || kTwoGroups) {                                      \
      f = _mm512_dpbf16_ps(_mm512_dpbf16_ps(f, w0, ya), w2, yb);                   \
      g = _mm512_dpbf16_ps(_mm512_dpbf16_ps(g, w1, ya), w3, yb);                   \
    }                                                                              \
  }
    STRATA_DOT(0, e0a, e0b, o0a, o0b, f0, g0)
    STRATA_DOT(1, e1a, e1b, o1a, o1b, f1, g1)
#undef STRATA_DOT
  }
  const __m512i r0 = _mm512_load_si512(T.rows[0]), r1 = _mm512_load_si512(T.rows[1]);
  const __m512 e0 = _mm512_add_ps(e0a, e0b), o0 = _mm512_add_ps(o0a, o0b);
  const __m512 e1 = _mm512_add_ps(e1a, e1b), o1 = _mm512_add_ps(o1a, o1b);
  Partials P{_mm512_permutex2var_ps(e0, r0, o0), _mm512_permutex2var_ps(e0, r1, o0),
             _mm512_permutex2var_ps(e1, r0, o1), _mm512_permutex2var_ps(e1, r1, o1), z, z, z, z};
  if constexpr (kRows == 2 || kTwoGroups) {
    P.q0 = _mm512_permutex2var_ps(f0, r0, g0);
    P.q1 = _mm512_permutex2var_ps(f0, r1, g0);
    P.q2 = _mm512_permutex2var_ps(f1, r0, g1);
    P.q3 = _mm512_permutex2var_ps(f1, r1, g1);
  }
  return P;
}

template <int kRows>
STRATA_AVX512_EXT void group512_fp4_dot(const QuantActs& a, const Src& s, int64_t t0,
                                        int64_t m0, const ExtActs& d,
                                        float* out /*[kRows][64]*/) {
  constexpr int bk = 32;
  const int64_t K = s.k, nkb = K / bk;
  const int64_t act_per = a.block / bk, ldsx = K / a.block;
  const DotTables& T = dot_tables();
  const __m512 zero = _mm512_setzero_ps();
  __m512 a0 = zero, a1 = zero, a2 = zero, a3 = zero;
  __m512 b0 = zero, b1 = zero, b2 = zero, b3 = zero;
  const __m512 fold = _mm512_set1_ps(256.0f), one = _mm512_set1_ps(1.0f);
  const float* xr0 = a.q + m0 * K;
  const float* xr1 = xr0 + K;
  const uint32_t* xq0 = d.quad.data() + m0 * (K / 2);
  const uint32_t* xq1 = xq0 + K / 2;
  const uint8_t* ex0 = d.exact.data() + m0 * nkb;
  const uint8_t* ex1 = ex0 + nkb;
  const float* sx0 = a.scales + m0 * ldsx;
  const float* sx1 = sx0 + ldsx;
  for (int64_t kb = 0, ab = 0, ai = 0; kb < nkb; ++kb) {
    prefetch_scales(s, t0, kb + kAhead);  // runs on into the next group
    const uint8_t* base = s.pcodes(t0, kb);
    const bool exact = ex0[kb] != 0 && (kRows == 1 || ex1[kb] != 0);
    if (exact) {
      const Partials P = dot_block<kRows>(base, nullptr, xq0 + kb * 16, xq1 + kb * 16, T);
      scale_add<kRows>(P, s.pscales(t0, kb), one, sx0[ab], kRows == 2 ? sx1[ab] : 0.0f, a0,
                       a1, a2, a3, b0, b1, b2, b3);
    } else {
      const Partials P = chain_block<true, kRows>(base, bk, xr0 + kb * bk, xr1 + kb * bk);
      scale_add<kRows>(P, s.pscales(t0, kb), fold, sx0[ab], kRows == 2 ? sx1[ab] : 0.0f, a0,
                       a1, a2, a3, b0, b1, b2, b3);
    }
    if (++ai == act_per) {
      ai = 0;
      ++ab;
    }
  }
  store_out<kRows>(out, a0, a1, a2, a3, b0, b1, b2, b3);
}

// FP4 groups t0 and t0 + kPackGroup (rows [g0, g0 + 128)) against activation row m0: exact
// blocks read both groups' chunks in turn (dot_block's kTwoGroups); other blocks take the
// chain path group by group. Each group's accumulation is the one-group path's, bit for bit.
// out: [2][64] (group t0, then t0 + kPackGroup).
STRATA_AVX512_EXT void group512_fp4_dot_2g(const QuantActs& a, const Src& s, int64_t t0,
                                           int64_t m0, const ExtActs& d, float* out) {
  constexpr int bk = 32;
  const int64_t K = s.k, nkb = K / bk;
  const int64_t act_per = a.block / bk, ldsx = K / a.block;
  const int64_t t1 = t0 + kPackGroup;
  const DotTables& T = dot_tables();
  const __m512 zero = _mm512_setzero_ps();
  __m512 a0 = zero, a1 = zero, a2 = zero, a3 = zero;  // group t0
  __m512 c0 = zero, c1 = zero, c2 = zero, c3 = zero;  // group t1
  const __m512 fold = _mm512_set1_ps(256.0f), one = _mm512_set1_ps(1.0f);
  const float* xr0 = a.q + m0 * K;
  const uint32_t* xq0 = d.quad.data() + m0 * (K / 2);
  const uint8_t* ex0 = d.exact.data() + m0 * nkb;
  const float* sx0 = a.scales + m0 * ldsx;
  for (int64_t kb = 0, ab = 0, ai = 0; kb < nkb; ++kb) {
    prefetch_scales(s, t0, kb + kAhead);
    prefetch_scales(s, t1, kb + kAhead);
    if (ex0[kb] != 0) {
      const Partials P = dot_block<1, true>(s.pcodes(t0, kb), s.pcodes(t1, kb),
                                                               xq0 + kb * 16, nullptr, T);
      scale_add_2g(P, s, t0, t1, kb, one, sx0[ab], a0, a1, a2, a3, c0, c1, c2, c3);
    } else {  // the chain path, one group after the other
      const Partials A = chain_block<true, 1>(s.pcodes(t0, kb), bk, xr0 + kb * bk, nullptr);
      const Partials B = chain_block<true, 1>(s.pcodes(t1, kb), bk, xr0 + kb * bk, nullptr);
      const Partials P{A.p0, A.p1, A.p2, A.p3, B.p0, B.p1, B.p2, B.p3};
      scale_add_2g(P, s, t0, t1, kb, fold, sx0[ab], a0, a1, a2, a3, c0, c1, c2, c3);
    }
    if (++ai == act_per) {
      ai = 0;
      ++ab;
    }
  }
  store_out<2>(out, a0, a1, a2, a3, c0, c1, c2, c3);
}

#pragma GCC diagnostic pop

}  // namespace

// The FP8 dot path relies on VDPBF16PS computing acc = (acc + hi·hi) + lo·lo with one RNE
// rounding per addition, as the Intel SDM's pseudo-code defines it. Checked once against that
// definition (std::fma on exact products) on random operands where the orders and a single
// rounding of both products differ; a CPU that disagrees keeps the chain path.
STRATA_AVX512_EXT bool dpbf16_sequential_probe() {
  uint64_t r = 0x243F6A8885A308D3ull;
  auto next = [&r] {
    r ^= r << 13;
    r ^= r >> 7;
    r ^= r << 17;
    return r;
  };
  auto bf16 = [](uint64_t v) {  // normal bf16, exponent 2^-15..2^14, random sign/mantissa
    return static_cast<uint16_t>(((v & 1) << 15) | ((112 + (v >> 1) % 30) << 7) | ((v >> 8) & 0x7F));
  };
  auto f32 = [](uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  };
  for (int i = 0; i < 4096; ++i) {
    const uint16_t a0 = bf16(next()), a1 = bf16(next()), b0 = bf16(next()), b1 = bf16(next());
    const uint64_t v = next();
    const float acc = f32(static_cast<uint32_t>(((v & 1) << 31) | ((110 + (v >> 1) % 40) << 23) |
                                                ((v >> 8) & 0x7FFFFF)));
    const __m512bh A = (__m512bh)_mm512_set1_epi32(static_cast<int>(a0 | (uint32_t{a1} << 16)));
    const __m512bh B = (__m512bh)_mm512_set1_epi32(static_cast<int>(b0 | (uint32_t{b1} << 16)));
    const float got = _mm512_cvtss_f32(_mm512_dpbf16_ps(_mm512_set1_ps(acc), A, B));
    const float p1 = f32(uint32_t{a1} << 16) * f32(uint32_t{b1} << 16);  // exact
    const float p0 = f32(uint32_t{a0} << 16) * f32(uint32_t{b0} << 16);
    const float want = std::fma(1.0f, p0, acc + p1);
    if (std::memcmp(&got, &want, 4) != 0) return false;
  }
  return true;
}

bool dpbf16_is_sequential() {
  static const bool ok = dpbf16_sequential_probe();
  return ok;
}

}  // namespace strata::kernels::detail

namespace strata::kernels {
const char* fp8_decode_multiply() {
  if (active_isa() != Isa::kAvx2) return "scalar";
  if (avx512_ext_active() && detail::dpbf16_is_sequential()) return "vdpbf16ps";
  return "fma chain";
}
}  // namespace strata::kernels

namespace strata::kernels::detail {

// The FP8 dot path's activation pairs of x[0, n) (n even): pairs[j] = bf16(x[2j]) << 16 |
// bf16(x[2j+1]), and when p112 is non-null the same of x·2^112: each nonzero bf16 word's
// exponent field + 112 (exact); *in_range says whether every x is 0 or 2^-9 <= |x| <= 2^15
// (E4M3 values are), as the shift decode needs. Returns whether every x is a bf16 value (low
// 16 bits zero). 32 x per step: one VPERMT2W gathers the high words of 16 pairs.
static STRATA_AVX512_EXT bool fp8_pairs(const float* x, int64_t n, uint32_t* pairs,
                                        uint32_t* p112, bool* in_range) {
  alignas(64) uint16_t idx[32];
  for (int j = 0; j < 16; ++j) {
    idx[2 * j] = static_cast<uint16_t>(4 * j + 3);      // low word: x[2j+1]'s high word
    idx[2 * j + 1] = static_cast<uint16_t>(4 * j + 1);  // high word: x[2j]'s high word
  }
  const __m512i gather = _mm512_load_si512(idx);
  const __m512i low16 = _mm512_set1_epi32(0xFFFF), mag = _mm512_set1_epi16(0x7FFF);
  const __m512i lo = _mm512_set1_epi16(0x3B00), hi = _mm512_set1_epi16(0x4700);
  const __m512i bias = _mm512_set1_epi16(0x3800);
  __m512i low_bits = _mm512_setzero_si512();
  __mmask32 bad = 0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i A = _mm512_loadu_si512(x + i), B = _mm512_loadu_si512(x + i + 16);
    low_bits = _mm512_or_si512(low_bits, _mm512_and_si512(_mm512_or_si512(A, B), low16));
    const __m512i P = _mm512_permutex2var_epi16(A, gather, B);
    _mm512_storeu_si512(pairs + i / 2, P);
    if (p112 != nullptr) {
      const __m512i m = _mm512_and_si512(P, mag);
      const __mmask32 nz = _mm512_test_epi16_mask(m, m);
      bad |= nz & (_mm512_cmplt_epu16_mask(m, lo) | _mm512_cmpgt_epu16_mask(m, hi));
      _mm512_storeu_si512(p112 + i / 2, _mm512_mask_add_epi16(P, nz, P, bias));
    }
  }
  bool ok = _mm512_test_epi32_mask(low_bits, low_bits) == 0;
  bool range = bad == 0;
  for (; i < n; i += 2) {  // the tail, as above one pair at a time
    uint32_t even, odd;
    std::memcpy(&even, &x[i], 4);
    std::memcpy(&odd, &x[i + 1], 4);
    ok = ok && ((even | odd) & 0xFFFFu) == 0;
    const uint32_t w = (even & 0xFFFF0000u) | (odd >> 16);
    pairs[i / 2] = w;
    if (p112 != nullptr) {
      uint32_t out = 0;
      for (int h = 0; h < 32; h += 16) {
        const uint32_t m = (w >> h) & 0x7FFFu;
        range = range && (m == 0 || (m >= 0x3B00u && m <= 0x4700u));
        out |= (((w >> h) & 0xFFFFu) + (m != 0 ? 0x3800u : 0u)) << h;
      }
      p112[i / 2] = out;
    }
  }
  *in_range = range;
  return ok;
}

void prepare_ext_acts(const QuantActs& a, const Src& s, ExtActs* d) {
  d->fp4_dot = d->fp8_dot = d->panel_dot = false;
  if (!avx512_ext_active()) return;
  const int64_t K = a.k;
  if (a.m > 4) {  // prefill: the panel path's activation pairs
    if (s.bk % 2 != 0 || K % 2 != 0 || !dpbf16_is_sequential()) return;
    d->pairs.resize(static_cast<size_t>(a.m * K / 2));
    bool in_range = true;
    d->panel_dot = fp8_pairs(a.q, a.m * K, d->pairs.data(), nullptr, &in_range);
    return;
  }
  if (s.kind == Src::kFp4Packed) {
    const int64_t nkb = K / 32;
    d->quad.resize(static_cast<size_t>(a.m * K / 2));
    d->exact.resize(static_cast<size_t>(a.m * nkb));
    for (int64_t m = 0; m < a.m; ++m) {
      const float* x = a.q + m * K;
      uint32_t* q = d->quad.data() + m * (K / 2);
      for (int64_t c = 0; c < K / 4; ++c) {  // (x[4c] | x[4c+2] << 16), (x[4c+1] | x[4c+3] << 16)
        uint32_t b[4];
        std::memcpy(b, &x[4 * c], sizeof b);
        q[2 * c] = (b[0] >> 16) | (b[2] & 0xFFFF0000u);
        q[2 * c + 1] = (b[1] >> 16) | (b[3] & 0xFFFF0000u);
      }
      for (int64_t kb = 0; kb < nkb; ++kb)
        d->exact[static_cast<size_t>(m * nkb + kb)] = fp4_block_sums_exact(x + kb * 32) ? 1 : 0;
    }
    d->fp4_dot = true;
  } else if (s.kind == Src::kFp8Packed && s.bk % 4 == 0 && dpbf16_is_sequential()) {
    // bf16 pairs: K index 2j in the high word (VDPBF16PS adds it first), 2j+1 in the low.
    // E4M3 values are bf16 values; anything else (a contract violation) takes the chain path.
    d->pairs.resize(static_cast<size_t>(a.m * K / 2));
    d->pairs112.resize(s.fp8_subnormal != nullptr ? d->pairs.size() : 0);
    bool in_range = true;
    d->fp8_dot = fp8_pairs(a.q, a.m * K, d->pairs.data(),
                           d->pairs112.empty() ? nullptr : d->pairs112.data(), &in_range);
    if (!in_range) d->pairs112.clear();
  }
}

namespace {
// acc[m0 + r][0, 32) += (c * sx[m0 + r]) * sw for the kRows rows' block partials c0 / c1.
template <int kRows>
STRATA_AVX512 __attribute__((always_inline)) inline void panel_scale_add(
    const __m512* c0, const __m512* c1, __m512 sw0, __m512 sw1, const QuantActs& a, int64_t kb,
    int64_t m0, int64_t ldsx, int64_t act_per, float* acc) {
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) {
    const __m512 sx = _mm512_set1_ps(a.scales[(m0 + r) * ldsx + kb / act_per]);
    float* ac = acc + (m0 + r) * 32;
    _mm512_storeu_ps(ac, _mm512_add_ps(_mm512_loadu_ps(ac), _mm512_mul_ps(_mm512_mul_ps(c0[r], sx), sw0)));
    _mm512_storeu_ps(ac + 16, _mm512_add_ps(_mm512_loadu_ps(ac + 16), _mm512_mul_ps(_mm512_mul_ps(c1[r], sx), sw1)));
  }
}

// kRows activation rows x 32 panel rows over one K block: 2*kRows independent FMA chains, each
// (row, lane) a sequential fma over k from zero, then acc += (p * sx) * sw, as the 1-row loop.
// Per k: 2 panel loads and kRows broadcasts feed 2*kRows FMAs (12 rows: 24 accumulators in
// the 32 zmm registers; the old 4-row block spent 6 loads on 8 FMAs).
template <int kRows>
STRATA_AVX512 __attribute__((always_inline)) inline void panel32_rows(
    const float* panel32, __m512 sw0, __m512 sw1, int bk, const QuantActs& a, int64_t kb,
    int64_t m0, int64_t ldsx, int64_t act_per, float* acc) {
  const int64_t K = a.k;
  const float* x = a.q + m0 * K + kb * bk;
  __m512 c0[kRows], c1[kRows];
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) c0[r] = c1[r] = _mm512_setzero_ps();
  for (int k = 0; k < bk; ++k) {
    const __m512 w0 = _mm512_loadu_ps(panel32 + k * 32), w1 = _mm512_loadu_ps(panel32 + k * 32 + 16);
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
      const __m512 xr = _mm512_set1_ps(x[r * K + k]);
      c0[r] = _mm512_fmadd_ps(xr, w0, c0[r]);
      c1[r] = _mm512_fmadd_ps(xr, w1, c1[r]);
    }
  }
  panel_scale_add<kRows>(c0, c1, sw0, sw1, a, kb, m0, ldsx, act_per, acc);
}
}  // namespace

STRATA_AVX512 void accumulate_panel32_avx512(const float* panel32, const float* sws, int bk,
                                             const QuantActs& a, int64_t kb, float* acc) {
  const int64_t act_per = a.block / bk, ldsx = a.k / a.block;
  const __m512 sw0 = _mm512_loadu_ps(sws), sw1 = _mm512_loadu_ps(sws + 16);
  int64_t m = 0;
  for (; m + 12 <= a.m; m += 12) panel32_rows<12>(panel32, sw0, sw1, bk, a, kb, m, ldsx, act_per, acc);
  for (; m + 4 <= a.m; m += 4) panel32_rows<4>(panel32, sw0, sw1, bk, a, kb, m, ldsx, act_per, acc);
  for (; m < a.m; ++m) panel32_rows<1>(panel32, sw0, sw1, bk, a, kb, m, ldsx, act_per, acc);
}

namespace {
// panel_pairs_rows: kRows activation rows x 32 panel rows over one K block on VDPBF16PS,
// 2*kRows chains (one per row and 16 panel rows), each lane's additions in K order.
template <int kRows>
STRATA_AVX512_EXT __attribute__((always_inline)) inline void panel_pairs_rows(
    const uint32_t* pp, __m512 sw0, __m512 sw1, int bk, const QuantActs& a, const uint32_t* xp,
    int64_t kb, int64_t m0, int64_t ldsx, int64_t act_per, float* acc) {
  const int64_t K2 = a.k / 2;
  const uint32_t* x = xp + m0 * K2 + kb * (bk / 2);
  __m512 c0[kRows], c1[kRows];
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) c0[r] = c1[r] = _mm512_setzero_ps();
  for (int j = 0; j < bk / 2; ++j) {
    const __m512bh w0 = (__m512bh)_mm512_loadu_si512(pp + j * 32);
    const __m512bh w1 = (__m512bh)_mm512_loadu_si512(pp + j * 32 + 16);
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
      const __m512bh xr = (__m512bh)_mm512_set1_epi32(static_cast<int>(x[r * K2 + j]));
      c0[r] = _mm512_dpbf16_ps(c0[r], xr, w0);
      c1[r] = _mm512_dpbf16_ps(c1[r], xr, w1);
    }
  }
  panel_scale_add<kRows>(c0, c1, sw0, sw1, a, kb, m0, ldsx, act_per, acc);
}
}  // namespace

// GCC 12 warns that _mm512_srli_epi32's internal undefined source "may be used
// uninitialized" (a false positive of the intrinsic's header).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
STRATA_AVX512_EXT void accumulate_panel_pairs_avx512(const float* panel32, const float* sws,
                                                     int bk, const QuantActs& a,
                                                     const ExtActs& d, int64_t kb,
                                                     uint32_t* pairs, float* acc) {
  const __m512i hi = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int j = 0; j < bk / 2; ++j)
    for (int h = 0; h < 32; h += 16) {
      const __m512i e = _mm512_loadu_si512(panel32 + (2 * j) * 32 + h);
      const __m512i o = _mm512_loadu_si512(panel32 + (2 * j + 1) * 32 + h);
      _mm512_storeu_si512(pairs + j * 32 + h,
                          _mm512_or_si512(_mm512_and_si512(e, hi), _mm512_srli_epi32(o, 16)));
    }
  const int64_t act_per = a.block / bk, ldsx = a.k / a.block;
  const __m512 sw0 = _mm512_loadu_ps(sws), sw1 = _mm512_loadu_ps(sws + 16);
  const uint32_t* xp = d.pairs.data();
  int64_t m = 0;
  for (; m + 12 <= a.m; m += 12)
    panel_pairs_rows<12>(pairs, sw0, sw1, bk, a, xp, kb, m, ldsx, act_per, acc);
  for (; m + 4 <= a.m; m += 4) panel_pairs_rows<4>(pairs, sw0, sw1, bk, a, xp, kb, m, ldsx, act_per, acc);
  for (; m < a.m; ++m) panel_pairs_rows<1>(pairs, sw0, sw1, bk, a, xp, kb, m, ldsx, act_per, acc);
}
#pragma GCC diagnostic pop

int64_t gemm_cols_avx512(const QuantActs& a, const Src& s, const ExtActs* ext, float* y,
                         OutRound out, int64_t n_begin, int64_t n_end) {
  constexpr int64_t kRowsPerGroup = kPackGroup * kTile;
  if (n_begin % kRowsPerGroup != 0) return n_begin;
  alignas(64) float buf[2 * kRowsPerGroup];
  const bool fp4 = s.kind == Src::kFp4Packed;
  const bool dot = fp4 && ext != nullptr && ext->fp4_dot;
  const bool dot8 = !fp4 && ext != nullptr && ext->fp8_dot;
  int64_t g0 = n_begin;
  // FP4 decode (one activation row) on the dot path: groups in pairs, two streams per core.
  if (a.m == 1 && dot)
    for (; g0 + 2 * kRowsPerGroup <= n_end; g0 += 2 * kRowsPerGroup) {
      group512_fp4_dot_2g(a, s, g0 / kTile, 0, *ext, buf);
      for (int64_t i = 0; i < 2 * kRowsPerGroup; ++i) y[g0 + i] = round_out(buf[i], out);
    }
  for (; g0 + kRowsPerGroup <= n_end; g0 += kRowsPerGroup) {
    for (int64_t m0 = 0; m0 < a.m; m0 += 2) {
      const int rows = m0 + 2 <= a.m ? 2 : 1;
      const int64_t t0 = g0 / kTile;
      if (dot) {
        if (rows == 2) group512_fp4_dot<2>(a, s, t0, m0, *ext, buf);
        else group512_fp4_dot<1>(a, s, t0, m0, *ext, buf);
      } else if (dot8) {
        if (rows == 2) group512_fp8_dot<2>(a, s, t0, m0, *ext, buf);
        else group512_fp8_dot<1>(a, s, t0, m0, *ext, buf);
      } else if (fp4) {
        if (rows == 2) group512<true, 2>(a, s, t0, m0, buf);
        else group512<true, 1>(a, s, t0, m0, buf);
      } else {
        if (rows == 2) group512<false, 2>(a, s, t0, m0, buf);
        else group512<false, 1>(a, s, t0, m0, buf);
      }
      for (int r = 0; r < rows; ++r)
        for (int64_t i = 0; i < kRowsPerGroup; ++i)
          y[(m0 + r) * s.n + g0 + i] = round_out(buf[r * kRowsPerGroup + i], out);
    }
  }
  return g0;
}

}  // namespace strata::kernels::detail
