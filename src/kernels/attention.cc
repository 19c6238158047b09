#include "kernels/attention.h"

#include <cmath>

#include "kernels/activation.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"

namespace strata::kernels {

void attention_head(const float* q, const KvBlocks& kv, int kv_head, int head_dim, int64_t T,
                    float* scratch, float* out) {
  if (active_isa() == Isa::kAvx2) {
    avx2::attention_head(q, kv, kv_head, head_dim, T, scratch, out);
  } else {
    ref::attention_head(q, kv, kv_head, head_dim, T, scratch, out);
  }
}

namespace ref {
void attention_head(const float* q, const KvBlocks& kv, int g, int hd, int64_t T, float* sc,
                    float* out) {
  const float denom = std::sqrt(static_cast<float>(hd));
  for (int64_t t = 0; t < T; ++t) sc[t] = ref::dot(q, kv.k(t, g, hd), hd) / denom;
  ref::softmax(sc, T);
  for (int d = 0; d < hd; ++d) {
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t t = 0; t < T; ++t) s[t & 3] = std::fma(sc[t], kv.v(t, g, hd)[d], s[t & 3]);
    out[d] = (s[0] + s[1]) + (s[2] + s[3]);
  }
}
}  // namespace ref

}  // namespace strata::kernels
