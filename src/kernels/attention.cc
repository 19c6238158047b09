#include "kernels/attention.h"

#include <algorithm>
#include <cmath>

#include "kernels/activation.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"

namespace strata::kernels {

void attention_chunk_partial(const float* q, const KvBlocks& kv, int g, int hd, int64_t r0,
                             int64_t n, float* part) {
  if (active_isa() == Isa::kAvx2) {
    avx2::attention_chunk_partial(q, kv, g, hd, r0, n, part);
  } else {
    ref::attention_chunk_partial(q, kv, g, hd, r0, n, part);
  }
}

void attention_merge(const float* parts, int64_t n_chunks, int64_t stride, int hd, float* out) {
  if (active_isa() == Isa::kAvx2) {
    avx2::attention_merge(parts, n_chunks, stride, hd, out);
  } else {
    ref::attention_merge(parts, n_chunks, stride, hd, out);
  }
}

void attention_head(const float* q, const KvBlocks& kv, int g, int hd, int64_t T, float* scratch,
                    float* out) {
  if (active_isa() == Isa::kAvx2) {
    avx2::attention_head(q, kv, g, hd, T, scratch, out);
  } else {
    ref::attention_head(q, kv, g, hd, T, scratch, out);
  }
}

namespace ref {
void attention_chunk_partial(const float* q, const KvBlocks& kv, int g, int hd, int64_t r0,
                             int64_t n, float* part) {
  const float denom = std::sqrt(static_cast<float>(hd));
  float e[kAttnChunk] = {};
  float m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    e[j] = ref::dot(q, kv.k(r0 + j, g, hd), hd) / denom;
    m = std::max(m, e[j]);
  }
  for (int64_t j = 0; j < n; ++j) e[j] = exp_canonical(e[j] - m);
  float a[8];
  for (int l = 0; l < 8; ++l) a[l] = e[l] + e[l + 8];
  part[0] = m;
  part[1] = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
  for (int d = 0; d < hd; ++d) {
    float acc[2] = {0.0f, 0.0f};
    for (int64_t j = 0; j < n; ++j)
      acc[j & 1] = std::fma(e[j], kv.v(r0 + j, g, hd)[d], acc[j & 1]);
    part[2 + d] = acc[0] + acc[1];
  }
}

void attention_merge(const float* parts, int64_t n_chunks, int64_t stride, int hd, float* out) {
  float M = -INFINITY;
  for (int64_t c = 0; c < n_chunks; ++c) M = std::max(M, parts[c * stride]);
  float Z = 0.0f;
  for (int d = 0; d < hd; ++d) out[d] = 0.0f;
  for (int64_t c = 0; c < n_chunks; ++c) {
    const float* p = parts + c * stride;
    const float w = exp_canonical(p[0] - M);
    Z = std::fma(w, p[1], Z);
    for (int d = 0; d < hd; ++d) out[d] = std::fma(w, p[2 + d], out[d]);
  }
  for (int d = 0; d < hd; ++d) out[d] /= Z;
}

void attention_head(const float* q, const KvBlocks& kv, int g, int hd, int64_t T, float* scratch,
                    float* out) {
  const int64_t nc = attention_chunks(T), stride = hd + 2;
  for (int64_t c = 0; c < nc; ++c)
    ref::attention_chunk_partial(q, kv, g, hd, c * kAttnChunk,
                                 std::min(kAttnChunk, T - c * kAttnChunk), scratch + c * stride);
  ref::attention_merge(scratch, nc, stride, hd, out);
}
}  // namespace ref

}  // namespace strata::kernels
