// bench_speculative (see bench_spec.h).
#include "tools/bench_spec.h"

#include <algorithm>
#include <chrono>

#include "sched/engine.h"

namespace strata::tools {
namespace {

using Clock = std::chrono::steady_clock;

struct OneRun {
  std::vector<int32_t> tokens;
  double decode_tok_s = 0;
  EngineStats stats;
};

StatusOr<OneRun> run_once(ModelRunner& runner, std::span<const int32_t> prompt, int64_t n,
                          const SpeculativeConfig& sc) {
  EngineOptions eo;
  eo.scheduler = {.max_num_seqs = 1, .max_num_batched_tokens = 2048, .chunk_size = 2048};
  eo.speculative = sc;
  Engine engine(&runner, nullptr, eo);
  GenerationParams g;
  g.temperature = 0;
  g.max_tokens = n;
  g.ignore_eos = true;
  STRATA_ASSIGN_OR_RETURN(auto stream,
                          engine.submit(std::vector<int32_t>(prompt.begin(), prompt.end()), g));
  OneRun out;
  std::optional<Clock::time_point> first;
  Clock::time_point last{};
  while (true) {
    engine.step_once();
    bool finished = false;
    while (!finished) {
      auto e = stream->next(std::chrono::milliseconds(0));
      if (!e) break;
      if (!e->tokens.empty()) {
        if (!first) first = Clock::now();
        last = Clock::now();
      }
      out.tokens.insert(out.tokens.end(), e->tokens.begin(), e->tokens.end());
      if (e->finished) {
        if (e->finish_reason == FinishReason::kError) return e->error;
        finished = true;
      }
    }
    if (finished) break;
  }
  const double s = first ? std::chrono::duration<double>(last - *first).count() : 0;
  out.decode_tok_s = s > 0 ? (static_cast<double>(out.tokens.size()) - 1) / s : 0;
  out.stats = engine.stats();
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

StatusOr<SpecBenchResult> bench_speculative(ModelRunner& runner, std::span<const int32_t> prompt,
                                            int64_t decode_tokens, int repeats,
                                            const SpeculativeConfig& config) {
  SpecBenchResult r;
  std::vector<double> plain, spec;
  std::vector<int32_t> plain_ids, spec_ids;
  for (int rep = 0; rep <= repeats; ++rep) {  // rep 0 warms up both
    STRATA_ASSIGN_OR_RETURN(OneRun a, run_once(runner, prompt, decode_tokens, {}));
    STRATA_ASSIGN_OR_RETURN(OneRun b, run_once(runner, prompt, decode_tokens, config));
    if (rep == 0) continue;
    plain.push_back(a.decode_tok_s);
    spec.push_back(b.decode_tok_s);
    plain_ids = a.tokens;
    spec_ids = b.tokens;
    r.drafts += b.stats.spec_decode_num_drafts;
    r.draft_tokens += b.stats.spec_decode_num_draft_tokens;
    r.accepted_tokens += b.stats.spec_decode_num_accepted_tokens;
  }
  r.plain_tok_s = median(plain);
  r.spec_tok_s = median(spec);
  r.mean_acceptance_length = r.drafts > 0 ? 1.0 + static_cast<double>(r.accepted_tokens) / r.drafts : 1.0;
  r.draft_acceptance_rate = r.draft_tokens > 0 ? static_cast<double>(r.accepted_tokens) / r.draft_tokens : 0;
  r.outputs_equal = plain_ids == spec_ids;
  return r;
}

}  // namespace strata::tools
