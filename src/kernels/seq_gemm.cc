// Sequential-FMA GEMM over packed BF16 / F32 weights (see seq_gemm.h).
#include "kernels/seq_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/phase_profile.h"
#include "base/thread_pool.h"
#include "kernels/avx2_common.h"
#include "kernels/cpu_features.h"

namespace strata::kernels {
namespace {

constexpr int kTile = 8;
constexpr int kGroup = 4;  // tiles per AVX2 pass: independent FMA chains
constexpr int kBlock = 8;  // tiles per layout block (64 rows; one AVX-512 pass)

// Layout (seq_gemm.h): blocks of kBlock tiles; block b holds nb = min(kBlock, tiles - b·kBlock)
// tiles as [K][nb][kTile], so for each k its nb·8 rows are contiguous and a pass over the
// block reads one address stream (eight [K][8] tile streams read side by side streamed from
// DRAM at ~74 % of the bandwidth the FP8 layout reaches at one thread).
// Element (row 8t + l, k) is at tile_base(t) + k·block_stride(t) + l.
inline int64_t block_tiles(int64_t t, int64_t tiles) {
  return std::min<int64_t>(kBlock, tiles - t / kBlock * kBlock);
}
inline int64_t block_stride(int64_t t, int64_t tiles) { return block_tiles(t, tiles) * kTile; }
inline int64_t tile_base(int64_t t, int64_t K) {
  return t / kBlock * kBlock * K * kTile + t % kBlock * kTile;
}

inline float bf16f(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <typename T>
PackedSeqWeight pack(const T* w, int64_t n, int64_t k) {
  PackedSeqWeight p;
  p.n = n;
  p.k = k;
  const int64_t tiles = (n + kTile - 1) / kTile;
  std::vector<T> d(static_cast<size_t>(tiles * k * kTile), T{});
  for (int64_t r = 0; r < n; ++r) {
    const int64_t t = r / kTile, l = r % kTile;
    const int64_t base = tile_base(t, k) + l, stride = block_stride(t, tiles);
    for (int64_t c = 0; c < k; ++c) d[base + c * stride] = w[r * k + c];
  }
  if constexpr (sizeof(T) == 2) {
    p.bf16 = true;
    p.data16 = std::move(d);
  } else {
    p.bf16 = false;
    p.data32 = std::move(d);
  }
  return p;
}

// Scalar path over the packed layout, tiles [t0, t1).
void cols_scalar(const float* x, int64_t m, const PackedSeqWeight& w, float* y, int64_t t0,
                 int64_t t1) {
  const int64_t K = w.k, tiles = (w.n + kTile - 1) / kTile;
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t r = 0; r < m; ++r) {
      const float* xr = x + r * K;
      const int64_t base = tile_base(t, K), stride = block_stride(t, tiles);
      for (int l = 0; l < kTile; ++l) {
        const int64_t col = t * kTile + l;
        if (col >= w.n) break;
        float acc = 0.0f;
        for (int64_t c = 0; c < K; ++c) {
          const int64_t i = base + c * stride + l;
          const float wv = w.bf16 ? bf16f(w.data16[i]) : w.data32[i];
          acc = std::fma(xr[c], wv, acc);
        }
        y[r * w.n + col] = acc;
      }
    }
}

template <bool kBf16>
STRATA_AVX2 inline __m256 load8(const void* base, int64_t i) {
  if constexpr (kBf16) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    return _mm256_loadu_ps(static_cast<const float*>(base) + i);
  }
}

// kGroup tiles (32 rows, t0 % kGroup == 0: inside one block) x up to 2 activation rows; one
// FMA chain per (row, tile). `stride`: the block's block_stride.
template <bool kBf16, int kRows>
STRATA_AVX2 void group_avx2(const float* x0, const void* base, int64_t K, int64_t t0,
                            int64_t stride, float* out0, float* out1) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  const float* x1 = x0 + K;
  const int64_t s0 = tile_base(t0, K), s1 = s0 + kTile, s2 = s0 + 2 * kTile, s3 = s0 + 3 * kTile;
  for (int64_t c = 0; c < K; ++c) {
    const int64_t o = c * stride;
    const __m256 w0 = load8<kBf16>(base, s0 + o), w1 = load8<kBf16>(base, s1 + o);
    const __m256 w2 = load8<kBf16>(base, s2 + o), w3 = load8<kBf16>(base, s3 + o);
    const __m256 xb = _mm256_set1_ps(x0[c]);
    a0 = _mm256_fmadd_ps(xb, w0, a0);
    a1 = _mm256_fmadd_ps(xb, w1, a1);
    a2 = _mm256_fmadd_ps(xb, w2, a2);
    a3 = _mm256_fmadd_ps(xb, w3, a3);
    if constexpr (kRows == 2) {
      const __m256 yb = _mm256_set1_ps(x1[c]);
      b0 = _mm256_fmadd_ps(yb, w0, b0);
      b1 = _mm256_fmadd_ps(yb, w1, b1);
      b2 = _mm256_fmadd_ps(yb, w2, b2);
      b3 = _mm256_fmadd_ps(yb, w3, b3);
    }
  }
  _mm256_storeu_ps(out0 + 0, a0);
  _mm256_storeu_ps(out0 + 8, a1);
  _mm256_storeu_ps(out0 + 16, a2);
  _mm256_storeu_ps(out0 + 24, a3);
  if constexpr (kRows == 2) {
    _mm256_storeu_ps(out1 + 0, b0);
    _mm256_storeu_ps(out1 + 8, b1);
    _mm256_storeu_ps(out1 + 16, b2);
    _mm256_storeu_ps(out1 + 24, b3);
  }
}

template <bool kBf16>
STRATA_AVX2 void single_tile_avx2(const float* xr, const void* base, int64_t K, int64_t t,
                                  int64_t stride, float* out) {
  __m256 a = _mm256_setzero_ps();
  const int64_t s = tile_base(t, K);
  for (int64_t c = 0; c < K; ++c) a = _mm256_fmadd_ps(_mm256_set1_ps(xr[c]), load8<kBf16>(base, s + c * stride), a);
  _mm256_storeu_ps(out, a);
}

// One tile x kR activation rows (xr: row-major [kR][K]): kR independent FMA chains, one per
// row, each lane the same scalar chain as single_tile_avx2 (narrow weights in prefill, e.g.
// the mHC mixes' 3 tiles, are otherwise one latency-bound chain at a time). out [kR][8].
template <bool kBf16, int kR>
STRATA_AVX2 void tile_rows_avx2(const float* xr, const void* base, int64_t K, int64_t t,
                                int64_t stride, float* out) {
  __m256 a[kR];
  for (int r = 0; r < kR; ++r) a[r] = _mm256_setzero_ps();
  const int64_t s = tile_base(t, K);
  for (int64_t c = 0; c < K; ++c) {
    const __m256 w = load8<kBf16>(base, s + c * stride);
    for (int r = 0; r < kR; ++r) a[r] = _mm256_fmadd_ps(_mm256_set1_ps(xr[r * K + c]), w, a[r]);
  }
  for (int r = 0; r < kR; ++r) _mm256_storeu_ps(out + r * kTile, a[r]);
}

// AVX-512, one activation row: 8 tiles (64 rows) per pass, two tiles per zmm (lanes 0-7 =
// tile A's rows, 8-15 = tile B's), so a lane still holds one output row and runs the scalar
// chain (bit-identical); 4 independent FMA chains. BF16 weights are widened in registers.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define STRATA_AVX512_SEQ __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
template <bool kBf16>
STRATA_AVX512_SEQ inline __m512 load16(const void* base, int64_t a, int64_t b) {
  if constexpr (kBf16) {
    const uint16_t* w = static_cast<const uint16_t*>(base);
    const __m256i h = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + a))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + b)), 1);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    const float* w = static_cast<const float*>(base);
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(w + a)),
                              _mm256_loadu_ps(w + b), 1);
  }
}
// 16 contiguous elements (two tiles' rows at one k), widened to f32.
template <bool kBf16>
STRATA_AVX512_SEQ inline __m512 load16c(const void* base, int64_t a) {
  if constexpr (kBf16) {
    const __m256i h = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + a));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    return _mm512_loadu_ps(static_cast<const float*>(base) + a);
  }
}
// A whole block (t0 % kBlock == 0, 8 tiles): for each k its 64 rows are contiguous.
template <bool kBf16>
STRATA_AVX512_SEQ void group8_avx512(const float* x, const void* base, int64_t K, int64_t t0,
                                     float* out) {
  const int64_t s0 = tile_base(t0, K);
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t c = 0; c < K; ++c) {
    const int64_t o = s0 + c * (kBlock * kTile);
    const __m512 xb = _mm512_set1_ps(x[c]);
    a0 = _mm512_fmadd_ps(xb, load16c<kBf16>(base, o), a0);
    a1 = _mm512_fmadd_ps(xb, load16c<kBf16>(base, o + 16), a1);
    a2 = _mm512_fmadd_ps(xb, load16c<kBf16>(base, o + 32), a2);
    a3 = _mm512_fmadd_ps(xb, load16c<kBf16>(base, o + 48), a3);
  }
  _mm512_storeu_ps(out, a0);
  _mm512_storeu_ps(out + 16, a1);
  _mm512_storeu_ps(out + 32, a2);
  _mm512_storeu_ps(out + 48, a3);
}

// kNt < 8 tiles t0.. of one block (e.g. the 3 tiles of an mHC mix, 24 x 8192 f32) in ONE
// pass, two tiles per zmm as group8_avx512 (an odd last tile fills both halves of its zmm;
// the copy is ignored): ceil(kNt / 2) independent chains. Run one tile after the other, each
// tile was a single latency-bound chain over all of K. `stride`: the block's block_stride.
template <bool kBf16, int kNt>
STRATA_AVX512_SEQ void few_avx512(const float* x, const void* base, int64_t K, int64_t t0,
                                  int64_t stride, float* out) {
  static_assert(kNt >= 1 && kNt < 8);
  const int64_t s0 = tile_base(t0, K);
  // tiles (i, i+1) are adjacent in a row of the block; a lone last tile is loaded twice
  auto pair = [base](int64_t o, int i) __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma"))) {
    return i + 1 < kNt ? load16c<kBf16>(base, o + i * kTile)
                       : load16<kBf16>(base, o + i * kTile, o + i * kTile);
  };
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t c = 0; c < K; ++c) {
    const int64_t o = s0 + c * stride;
    const __m512 xb = _mm512_set1_ps(x[c]);
    a0 = _mm512_fmadd_ps(xb, pair(o, 0), a0);
    if constexpr (kNt > 2) a1 = _mm512_fmadd_ps(xb, pair(o, 2), a1);
    if constexpr (kNt > 4) a2 = _mm512_fmadd_ps(xb, pair(o, 4), a2);
    if constexpr (kNt > 6) a3 = _mm512_fmadd_ps(xb, pair(o, 6), a3);
  }
  _mm512_storeu_ps(out, a0);
  _mm512_storeu_ps(out + 16, a1);
  _mm512_storeu_ps(out + 32, a2);
  _mm512_storeu_ps(out + 48, a3);
}
template <bool kBf16>
STRATA_AVX512_SEQ void few_tiles_avx512(const float* x, const void* base, int64_t K, int64_t t0,
                                        int nt, int64_t stride, float* out) {
  switch (nt) {
    case 1: return few_avx512<kBf16, 1>(x, base, K, t0, stride, out);
    case 2: return few_avx512<kBf16, 2>(x, base, K, t0, stride, out);
    case 3: return few_avx512<kBf16, 3>(x, base, K, t0, stride, out);
    case 4: return few_avx512<kBf16, 4>(x, base, K, t0, stride, out);
    case 5: return few_avx512<kBf16, 5>(x, base, K, t0, stride, out);
    case 6: return few_avx512<kBf16, 6>(x, base, K, t0, stride, out);
    default: return few_avx512<kBf16, 7>(x, base, K, t0, stride, out);
  }
}
#pragma GCC diagnostic pop

template <bool kBf16>
STRATA_AVX2 void cols_avx2(const float* x, int64_t m, const PackedSeqWeight& w, float* y,
                           int64_t t0, int64_t t1) {
  const int64_t K = w.k, N = w.n;
  const void* base = kBf16 ? static_cast<const void*>(w.data16.data())
                           : static_cast<const void*>(w.data32.data());
  alignas(32) float buf[2][kGroup * kTile];
  auto emit = [&](int64_t r, int64_t tfirst, int ntiles, const float* src) {
    for (int64_t i = 0; i < ntiles * kTile; ++i) {
      const int64_t col = tfirst * kTile + i;
      if (col < N) y[r * N + col] = src[i];
    }
  };
  const int64_t tiles = (N + kTile - 1) / kTile;
  int64_t t = t0;
  if (m == 1 && avx512_active()) {
    // Block by block: whole blocks in one pass each, a part of a block in one few-tile pass.
    alignas(64) float buf8[kBlock * kTile];
    while (t < t1) {
      const int64_t bend = std::min(t1, t / kBlock * kBlock + block_tiles(t, tiles));
      const int nt = static_cast<int>(bend - t);
      if (nt == kBlock) {
        group8_avx512<kBf16>(x, base, K, t, buf8);
      } else {
        few_tiles_avx512<kBf16>(x, base, K, t, nt, block_stride(t, tiles), buf8);
      }
      emit(0, t, nt, buf8);
      t = bend;
    }
  }
  while (t < t1) {
    const int64_t stride = block_stride(t, tiles);
    const int64_t bend = std::min(t1, t / kBlock * kBlock + block_tiles(t, tiles));
    // kGroup-aligned groups inside the block, then single tiles
    for (; t % kGroup == 0 && t + kGroup <= bend; t += kGroup) {
      int64_t r = 0;
      for (; r + 2 <= m; r += 2) {
        group_avx2<kBf16, 2>(x + r * K, base, K, t, stride, buf[0], buf[1]);
        emit(r, t, kGroup, buf[0]);
        emit(r + 1, t, kGroup, buf[1]);
      }
      if (r < m) {
        group_avx2<kBf16, 1>(x + r * K, base, K, t, stride, buf[0], buf[1]);
        emit(r, t, kGroup, buf[0]);
      }
    }
    for (; t < bend && !(t % kGroup == 0 && t + kGroup <= bend); ++t) {
      int64_t r = 0;
      alignas(32) float rows8[8 * kTile];
      for (; r + 8 <= m; r += 8) {
        tile_rows_avx2<kBf16, 8>(x + r * K, base, K, t, stride, rows8);
        for (int i = 0; i < 8; ++i) emit(r + i, t, 1, rows8 + i * kTile);
      }
      for (; r < m; ++r) {
        single_tile_avx2<kBf16>(x + r * K, base, K, t, stride, buf[0]);
        emit(r, t, 1, buf[0]);
      }
    }
  }
}

void run_tiles(const float* x, int64_t m, const PackedSeqWeight& w, float* y, int64_t t0,
               int64_t t1) {
  if (active_isa() == Isa::kAvx2) {
    if (w.bf16) {
      cols_avx2<true>(x, m, w, y, t0, t1);
    } else {
      cols_avx2<false>(x, m, w, y, t0, t1);
    }
  } else {
    cols_scalar(x, m, w, y, t0, t1);
  }
}

}  // namespace

PackedSeqWeight pack_seq_weight_bf16(const uint16_t* w, int64_t n, int64_t k) {
  STRATA_CHECK(w != nullptr && n > 0 && k > 0);
  return pack(w, n, k);
}

PackedSeqWeight pack_seq_weight_f32(const float* w, int64_t n, int64_t k) {
  STRATA_CHECK(w != nullptr && n > 0 && k > 0);
  return pack(w, n, k);
}

void seq_gemm_packed(const float* x, int64_t m, const PackedSeqWeight& w, float* y,
                     ThreadPool* pool) {
  STRATA_CHECK(m >= 0 && w.n > 0 && w.k > 0);
  if (m == 0) return;
  const int64_t tiles = (w.n + kTile - 1) / kTile;
  profile::PhaseScope phase(w.n < 2 * kGroup * kTile ? "bf16/f32 gemm, n < 64"
                                                     : "bf16/f32 gemm",
                            static_cast<double>(w.bytes()));
  // Below ~256K multiply-adds and 256 KiB of weights a pool dispatch (several us) costs more
  // than it saves. (A few rows over a long K, like the mHC mixes' 24 x 8192 f32, are few
  // multiply-adds but 768 KiB to stream: they are split too.)
  const bool small = m * w.n * w.k < (int64_t{1} << 18) && w.bytes() < (int64_t{256} << 10);
  if (pool == nullptr || pool->num_threads() <= 1 || tiles < 2 || small) {
    run_tiles(x, m, w, y, 0, tiles);
    return;
  }
  // One activation row over fewer than 8 tiles (the mHC mixes: 24 x 8192 f32) is one
  // AVX-512 pass on this thread (few_avx512): split 2 : 1 over two threads it took 46 us per
  // mix inside the decode, on this thread 29 us (docs/PERFORMANCE.md, session 9).
  if (tiles < 2 * kGroup && m == 1 && avx512_active()) {
    run_tiles(x, m, w, y, 0, tiles);
    return;
  }
  if (tiles < 2 * kGroup && m >= 4 * pool->num_threads()) {
    // Few tiles, many rows (a prefill through the mHC mixes, 24 columns): split the rows, so
    // the threads get equal shares (3 tiles split 2 : 1 did not); each row's sums are the
    // same in any row range.
    const int64_t K = w.k, N = w.n;
    pool->parallel_for(m, [&](int64_t r0, int64_t r1) {
      run_tiles(x + r0 * K, r1 - r0, w, y + r0 * N, 0, tiles);
    }, 2);
    return;
  }
  if (tiles < 2 * kGroup) {  // too few for whole groups per thread: split single tiles
    pool->parallel_for_stealing(tiles, [&](int64_t t0, int64_t t1) { run_tiles(x, m, w, y, t0, t1); });
    return;
  }
  // Ranges start on block boundaries so every thread runs whole blocks (one stream each).
  const int64_t blocks = (tiles + kBlock - 1) / kBlock;
  pool->parallel_for_stealing(blocks, [&](int64_t b0, int64_t b1) {
    run_tiles(x, m, w, y, b0 * kBlock, std::min(tiles, b1 * kBlock));
  });
}

namespace ref {
void seq_gemm_cols(const float* x, int64_t m, const uint16_t* w_bf16, const float* w_f32,
                   int64_t n, int64_t k, float* y, int64_t n_begin, int64_t n_end) {
  STRATA_CHECK((w_bf16 != nullptr) != (w_f32 != nullptr));
  for (int64_t col = n_begin; col < n_end; ++col)
    for (int64_t r = 0; r < m; ++r) {
      float acc = 0.0f;
      for (int64_t c = 0; c < k; ++c) {
        const float wv = w_bf16 ? bf16f(w_bf16[col * k + c]) : w_f32[col * k + c];
        acc = std::fma(x[r * k + c], wv, acc);
      }
      y[r * n + col] = acc;
    }
}
}  // namespace ref

}  // namespace strata::kernels
