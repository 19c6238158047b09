#include "exec/generate.h"

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
    const int64_t prompt_len = static_cast<int64_t>(res.prompt_ids.size());
    StepItem item{o.seq, res.prompt_ids, true, prompt_len};
    STRATA_RETURN_IF_ERROR(runner.step({&item, 1}, &logits));
  }
  auto t1 = Clock::now();
  res.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  for (int64_t n = 0; n < o.max_tokens; ++n) {
    STRATA_RETURN_IF_ERROR(check_logits(logits));
    const int32_t next = sampler.sample(logits).id;
    if (next == bos || next == eos) {
      res.stopped_by_token = true;
      break;
    }
    res.generated_ids.push_back(next);
    if (dec) {
      std::string piece = dec->push(next);
      res.text += piece;
      if (o.on_text) o.on_text(piece);
    }
    if (n + 1 == o.max_tokens || runner.token_capacity_left(o.seq) <= 0) break;
    StepItem item{o.seq, std::span<const int32_t>(&res.generated_ids.back(), 1), true,
                  static_cast<int64_t>(res.prompt_ids.size())};
    STRATA_RETURN_IF_ERROR(runner.step({&item, 1}, &logits));
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
