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
constexpr int kGroup = 4;  // tiles per pass: independent FMA chains

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
    for (int64_t c = 0; c < k; ++c) d[(t * k + c) * kTile + l] = w[r * k + c];
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
  const int64_t K = w.k;
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t r = 0; r < m; ++r) {
      const float* xr = x + r * K;
      for (int l = 0; l < kTile; ++l) {
        const int64_t col = t * kTile + l;
        if (col >= w.n) break;
        float acc = 0.0f;
        for (int64_t c = 0; c < K; ++c) {
          const int64_t i = (t * K + c) * kTile + l;
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

// kGroup tiles (32 rows) x up to 2 activation rows; one FMA chain per (row, tile).
template <bool kBf16, int kRows>
STRATA_AVX2 void group_avx2(const float* x0, const void* base, int64_t K, int64_t t0, float* out0,
                            float* out1) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  const float* x1 = x0 + K;
  const int64_t s0 = (t0 + 0) * K * kTile, s1 = (t0 + 1) * K * kTile;
  const int64_t s2 = (t0 + 2) * K * kTile, s3 = (t0 + 3) * K * kTile;
  for (int64_t c = 0; c < K; ++c) {
    const int64_t o = c * kTile;
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
                                  float* out) {
  __m256 a = _mm256_setzero_ps();
  const int64_t s = t * K * kTile;
  for (int64_t c = 0; c < K; ++c) a = _mm256_fmadd_ps(_mm256_set1_ps(xr[c]), load8<kBf16>(base, s + c * kTile), a);
  _mm256_storeu_ps(out, a);
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
template <bool kBf16>
STRATA_AVX512_SEQ void group8_avx512(const float* x, const void* base, int64_t K, int64_t t0,
                                     float* out) {
  const int64_t tk = K * kTile;  // elements per tile
  const int64_t s0 = t0 * tk;
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t c = 0; c < K; ++c) {
    const int64_t o = s0 + c * kTile;
    const __m512 xb = _mm512_set1_ps(x[c]);
    a0 = _mm512_fmadd_ps(xb, load16<kBf16>(base, o, o + tk), a0);
    a1 = _mm512_fmadd_ps(xb, load16<kBf16>(base, o + 2 * tk, o + 3 * tk), a1);
    a2 = _mm512_fmadd_ps(xb, load16<kBf16>(base, o + 4 * tk, o + 5 * tk), a2);
    a3 = _mm512_fmadd_ps(xb, load16<kBf16>(base, o + 6 * tk, o + 7 * tk), a3);
  }
  _mm512_storeu_ps(out, a0);
  _mm512_storeu_ps(out + 16, a1);
  _mm512_storeu_ps(out + 32, a2);
  _mm512_storeu_ps(out + 48, a3);
}

// The last kNt < 8 tiles of a range (e.g. the 3 tiles of an mHC mix, 24 x 8192 f32) in ONE
// pass, two tiles per zmm as group8_avx512 (an odd last tile fills both halves of its zmm;
// the copy is ignored): ceil(kNt / 2) independent chains. Run one tile after the other, each
// tile was a single latency-bound chain over all of K.
template <bool kBf16, int kNt>
STRATA_AVX512_SEQ void few_avx512(const float* x, const void* base, int64_t K, int64_t t0,
                                  float* out) {
  static_assert(kNt >= 1 && kNt < 8);
  const int64_t tk = K * kTile;
  const int64_t s0 = t0 * tk;
  auto second = [tk](int i) { return i + 1 < kNt ? (i + 1) * tk : i * tk; };
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t c = 0; c < K; ++c) {
    const int64_t o = s0 + c * kTile;
    const __m512 xb = _mm512_set1_ps(x[c]);
    a0 = _mm512_fmadd_ps(xb, load16<kBf16>(base, o, o + second(0)), a0);
    if constexpr (kNt > 2)
      a1 = _mm512_fmadd_ps(xb, load16<kBf16>(base, o + 2 * tk, o + second(2)), a1);
    if constexpr (kNt > 4)
      a2 = _mm512_fmadd_ps(xb, load16<kBf16>(base, o + 4 * tk, o + second(4)), a2);
    if constexpr (kNt > 6)
      a3 = _mm512_fmadd_ps(xb, load16<kBf16>(base, o + 6 * tk, o + 6 * tk), a3);
  }
  _mm512_storeu_ps(out, a0);
  _mm512_storeu_ps(out + 16, a1);
  _mm512_storeu_ps(out + 32, a2);
  _mm512_storeu_ps(out + 48, a3);
}
template <bool kBf16>
STRATA_AVX512_SEQ void few_tiles_avx512(const float* x, const void* base, int64_t K, int64_t t0,
                                        int nt, float* out) {
  switch (nt) {
    case 1: return few_avx512<kBf16, 1>(x, base, K, t0, out);
    case 2: return few_avx512<kBf16, 2>(x, base, K, t0, out);
    case 3: return few_avx512<kBf16, 3>(x, base, K, t0, out);
    case 4: return few_avx512<kBf16, 4>(x, base, K, t0, out);
    case 5: return few_avx512<kBf16, 5>(x, base, K, t0, out);
    case 6: return few_avx512<kBf16, 6>(x, base, K, t0, out);
    default: return few_avx512<kBf16, 7>(x, base, K, t0, out);
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
  int64_t t = t0;
  if (m == 1 && avx512_active()) {
    alignas(64) float buf8[8 * kTile];
    for (; t + 8 <= t1; t += 8) {
      group8_avx512<kBf16>(x, base, K, t, buf8);
      emit(0, t, 8, buf8);
    }
    if (t < t1) {
      const int nt = static_cast<int>(t1 - t);
      few_tiles_avx512<kBf16>(x, base, K, t, nt, buf8);
      emit(0, t, nt, buf8);
      t = t1;
    }
  }
  for (; t + kGroup <= t1; t += kGroup) {
    int64_t r = 0;
    for (; r + 2 <= m; r += 2) {
      group_avx2<kBf16, 2>(x + r * K, base, K, t, buf[0], buf[1]);
      emit(r, t, kGroup, buf[0]);
      emit(r + 1, t, kGroup, buf[1]);
    }
    if (r < m) {
      group_avx2<kBf16, 1>(x + r * K, base, K, t, buf[0], buf[1]);
      emit(r, t, kGroup, buf[0]);
    }
  }
  for (; t < t1; ++t)
    for (int64_t r = 0; r < m; ++r) {
      single_tile_avx2<kBf16>(x + r * K, base, K, t, buf[0]);
      emit(r, t, 1, buf[0]);
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
  if (tiles < 2 * kGroup) {  // too few for whole groups per thread: split single tiles
    pool->parallel_for_stealing(tiles, [&](int64_t t0, int64_t t1) { run_tiles(x, m, w, y, t0, t1); });
    return;
  }
  // Ranges start on group boundaries so every thread runs whole 4-tile groups.
  const int64_t groups = (tiles + kGroup - 1) / kGroup;
  pool->parallel_for_stealing(groups, [&](int64_t g0, int64_t g1) {
    run_tiles(x, m, w, y, g0 * kGroup, std::min(tiles, g1 * kGroup));
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
