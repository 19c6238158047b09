// The masking loop of ByteTokenMask (see token_mask.h).
#include "sched/token_mask.h"

#include <algorithm>
#include <limits>

namespace strata::token_mask_internal {

void mask_logits(std::span<float> logits, const std::vector<std::string>& token_bytes,
                 const std::vector<int32_t>& stop_ids, bool complete, const bool (&first_ok)[256],
                 const void* ctx, bool (*feeds)(const void* ctx, std::string_view bytes)) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const int64_t V = static_cast<int64_t>(logits.size());
  const auto is_stop = [&](int64_t t) {
    return std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end();
  };
  if (complete) {
    for (int64_t t = 0; t < V; ++t)
      if (!is_stop(t)) logits[t] = ninf;
    return;
  }
  std::vector<uint8_t> allowed(V, 0);
  bool any = false;
  for (int64_t t = 0; t < V; ++t) {
    if (t >= static_cast<int64_t>(token_bytes.size()) || token_bytes[t].empty() || is_stop(t)) continue;
    const std::string& b = token_bytes[t];
    if (!first_ok[static_cast<unsigned char>(b[0])]) continue;
    allowed[t] = b.size() == 1 || feeds(ctx, b);
    any = any || allowed[t];
  }
  for (int64_t t = 0; t < V; ++t)
    if (any ? !allowed[t] : !is_stop(t)) logits[t] = ninf;  // a dead end: only the stop ids
}

}  // namespace strata::token_mask_internal
