// Test-only (kernels/block_gemm*_test.cc): scalar transcription of the FP4 block GEMM's
// reference loop (kernel_cpu.py _block_scaled_gemm; order in kernels/block_gemm.h), from the
// format definitions, independent of the kernels' decoders.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/act_quant.h"

namespace strata::kernels::testref {

inline float e2m1(uint8_t c) {
  static const float t[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  return (c & 8) ? -t[c & 7] : t[c & 7];
}

// y [M, N] = bf16 of the block-sequential FP4 GEMM of E4M3 activations q [M, K] (scales s
// [M, K/act_block]) and E2M1 weights w [N, K/2] (scales ws [N, K/32] UE8M0 bytes).
inline void ref_fp4(const std::vector<float>& q, const std::vector<float>& s, int64_t M, int64_t K,
                    int act_block, const std::vector<uint8_t>& w, const std::vector<uint8_t>& ws,
                    int64_t N, std::vector<float>* y) {
  const int64_t nkb = K / 32;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0;
      for (int64_t kb = 0; kb < nkb; ++kb) {
        float p = 0;
        for (int k = 0; k < 32; ++k) {
          const int64_t kk = kb * 32 + k;
          const uint8_t byte = w[n * (K / 2) + kk / 2];
          const uint8_t code = (kk % 2 == 0) ? (byte & 0xf) : (byte >> 4);
          p = std::fma(q[m * K + kk], e2m1(code), p);
        }
        const float sa = s[m * (K / act_block) + (kb * 32) / act_block];
        acc = acc + (p * sa) * std::ldexp(1.0f, ws[n * nkb + kb] - 127);
      }
      (*y)[m * N + n] = round_bf16(acc);
    }
}

}  // namespace strata::kernels::testref
