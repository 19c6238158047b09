#include "exec/generate.h"

#include <algorithm>

#include <chrono>
#include <optional>

namespace strata {

StatusOr<GenerateResult> generate(ModelRunner& runner, const Tokenizer& tokenizer,
                                  const std::string& prompt, const GenerateOptions& o) {
  const std::vector<int32_t> ids = tokenizer.encode(prompt);
  return generate_ids(runner, &tokenizer, ids, o);
}

StatusOr<GenerateResult> generate_ids(ModelRunner& runner, const Tokenizer* tokenizer,
                                      std::span<const int32_t> prompt_ids,
                                      const GenerateOptions& o) {
  STRATA_RETURN_IF_ERROR(validate_sampling_params(o.sampling));
  const ModelInfo& info = runner.info();
  for (int32_t id : prompt_ids)
    if (id < 0 || id >= info.vocab_size)
      return invalid_argument("prompt token id {} is outside the vocabulary [0, {})", id,
                              info.vocab_size);
  GenerateResult res;
  const int32_t bos = info.bos_id >= 0 ? info.bos_id
                      : tokenizer    ? tokenizer->bos_id().value_or(-1)
                                     : -1;
  const int32_t eos = info.eos_id >= 0 ? info.eos_id
                      : tokenizer    ? tokenizer->eos_id().value_or(-1)
                                     : -1;
  if (o.add_bos && bos >= 0) res.prompt_ids.push_back(bos);
  res.prompt_ids.insert(res.prompt_ids.end(), prompt_ids.begin(), prompt_ids.end());
  if (res.prompt_ids.empty())
    return invalid_argument("empty prompt and the model has no BOS token to start from");

  std::optional<StreamDecoder> dec;
  if (tokenizer != nullptr) {
    dec.emplace(*tokenizer);
    if (res.prompt_ids.front() == bos && bos >= 0) (void)dec->push(bos);  // sets prev = BOS
    for (size_t i = (res.prompt_ids.front() == bos ? 1 : 0); i < res.prompt_ids.size(); ++i)
      if (o.on_text) o.on_text(dec->push(res.prompt_ids[i]));
  }

  STRATA_RETURN_IF_ERROR(runner.add_sequence(o.seq));
  struct Release {
    ModelRunner& r;
    SeqId s;
    ~Release() { r.release_sequence(s); }
  } release{runner, o.seq};

  Sampler sampler(o.sampling);
  std::vector<float> logits;
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  {
    // A prefix the runner's cache (or a tier below it) holds is restored, not recomputed.
    const int64_t prompt_len = static_cast<int64_t>(res.prompt_ids.size());
    res.cached_tokens = runner.attach_cached_prefix(o.seq, res.prompt_ids);
    StepItem item{o.seq,
                  std::span<const int32_t>(res.prompt_ids).subspan(
                      static_cast<size_t>(res.cached_tokens)),
                  true, prompt_len};
    STRATA_RETURN_IF_ERROR(runner.step({&item, 1}, &logits));
  }
  auto t1 = Clock::now();
  res.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  // `logits` holds n_rows rows from the last step (1 plainly, k+1 after a verify of k
  // drafts), sampled in order from `row` on while each draw equals its draft.
  std::vector<int32_t> drafts;  // the drafts fed after `next` in the last step
  std::vector<int32_t> all(res.prompt_ids);
  int64_t row = 0;               // next row of `logits` to sample
  int64_t n_rows = 1;
  const int64_t V = info.vocab_size;
  while (static_cast<int64_t>(res.generated_ids.size()) < o.max_tokens) {
    std::span<const float> lrow(logits.data() + row * V, static_cast<size_t>(V));
    STRATA_RETURN_IF_ERROR(check_logits(lrow));
    const int32_t next = sampler.sample(lrow).id;
    const bool is_draft = row < static_cast<int64_t>(drafts.size()) && next == drafts[row];
    if (row + 1 < n_rows && !is_draft) {
      // A draft rejected: keep the positions up to `next`'s predecessor (the accepted ones).
      STRATA_RETURN_IF_ERROR(runner.truncate_sequence(
          o.seq, static_cast<int64_t>(all.size())));
    }
    if (next == bos || next == eos) {
      res.stopped_by_token = true;
      break;
    }
    res.generated_ids.push_back(next);
    all.push_back(next);
    if (dec) {
      std::string piece = dec->push(next);
      res.text += piece;
      if (o.on_text) o.on_text(piece);
    }
    const int64_t n = static_cast<int64_t>(res.generated_ids.size());
    if (n == o.max_tokens) break;
    if (is_draft && row + 1 < n_rows) {  // accepted: its row is already computed
      ++res.accepted_tokens;
      ++row;
      continue;
    }
    if (runner.token_capacity_left(o.seq) <= 0) break;
    // Feed `next` (the last row's draw, not in the state yet), with drafts when asked for.
    drafts.clear();
    if (o.propose && o.num_speculative_tokens > 0) {
      const int64_t k = std::min<int64_t>({o.num_speculative_tokens, o.max_tokens - n - 1,
                                           runner.token_capacity_left(o.seq) - 1});
      if (k > 0) drafts = o.propose(o.seq, all, static_cast<int>(k));
      if (static_cast<int64_t>(drafts.size()) > k) drafts.resize(static_cast<size_t>(k));
    }
    std::vector<int32_t> feed = {next};
    feed.insert(feed.end(), drafts.begin(), drafts.end());
    StepItem item{o.seq, feed, true, static_cast<int64_t>(res.prompt_ids.size()), !drafts.empty()};
    STRATA_RETURN_IF_ERROR(runner.step({&item, 1}, &logits));
    res.draft_tokens += static_cast<int64_t>(drafts.size());
    n_rows = static_cast<int64_t>(feed.size());
    if (drafts.empty()) n_rows = 1;
    row = 0;
  }
  if (dec) {
    std::string tail = dec->finish();
    res.text += tail;
    if (o.on_text && !tail.empty()) o.on_text(tail);
  }
  res.decode_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  return res;
}

}  // namespace strata
