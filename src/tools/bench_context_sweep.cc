// bench_context_sweep (see bench_context_sweep.h).
#include "tools/bench_context_sweep.h"

#include <algorithm>
#include <chrono>
#include <random>

#include <fmt/format.h>

namespace strata::tools {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int32_t first_max(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

StatusOr<std::vector<ContextSweepRow>> bench_context_sweep(ModelRunner& runner,
                                                           const std::vector<int64_t>& lengths,
                                                           int64_t decode_tokens, int repeats) {
  const ModelInfo& info = runner.info();
  for (int64_t len : lengths)
    if (len < 1 || len + decode_tokens > info.max_context)
      return invalid_argument("--context-sweep length {} (+ {} decode tokens) outside [1, {}]", len,
                              decode_tokens, info.max_context);
  std::vector<ContextSweepRow> out;
  std::vector<float> logits;
  int64_t next_seq = 1 << 20;
  for (int64_t len : lengths) {
    std::mt19937_64 rng(1234 + len);
    std::vector<int32_t> prompt(len);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % info.vocab_size);
    if (info.bos_id >= 0) prompt[0] = info.bos_id;
    std::vector<double> tpot, prefill;
    for (int rep = 0; rep <= repeats; ++rep) {  // rep 0 warms up
      fmt::print(stderr, "[bench model] context {}: {} {}/{}\n", len,
                 rep == 0 ? "warm-up" : "run", rep == 0 ? 1 : rep, rep == 0 ? 1 : repeats);
      const SeqId seq{next_seq++};
      STRATA_RETURN_IF_ERROR(runner.add_sequence(seq));
      const auto t0 = Clock::now();
      StepItem item{seq, prompt, true};
      STRATA_RETURN_IF_ERROR(runner.step({&item, 1}, &logits));
      const auto t1 = Clock::now();
      for (int64_t i = 0; i < decode_tokens; ++i) {
        const int32_t next = first_max(logits);
        StepItem d{seq, std::span<const int32_t>(&next, 1), true};
        STRATA_RETURN_IF_ERROR(runner.step({&d, 1}, &logits));
      }
      const auto t2 = Clock::now();
      runner.release_sequence(seq);
      if (rep == 0) continue;
      prefill.push_back(static_cast<double>(len) / std::chrono::duration<double>(t1 - t0).count());
      tpot.push_back(1e3 * std::chrono::duration<double>(t2 - t1).count() /
                     static_cast<double>(decode_tokens));
    }
    out.push_back({len, median(tpot), median(prefill),
                   runner.decode_bytes_read(len + decode_tokens / 2)});
  }
  return out;
}

}  // namespace strata::tools
