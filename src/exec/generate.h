// generate(): single-sequence text generation through the ModelRunner interface (the path
// `strata generate` and the golden tests use).
//
// Procedure (llama2.c run.c semantics): the sequence starts with BOS (when the model has
// one) followed by the prompt ids; the whole prompt is prefilled in one step; then tokens
// are sampled one at a time. Generation stops when a sampled token is BOS or EOS (that token
// is not emitted), after `max_tokens` tokens, or when the context is full. Text is streamed
// through a StreamDecoder (UTF-8 completed across tokens); the first piece after BOS loses
// its leading space (SentencePiece convention, handled by the tokenizer).
// Errors: the runner's step errors, InvalidArgument for bad sampling params.
// Thread safety: uses the runner exclusively for the duration of the call.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "exec/model_runner.h"
#include "exec/sampler.h"
#include "model/tokenizer.h"

namespace strata {

struct GenerateOptions {
  int64_t max_tokens = 256;
  SamplingParams sampling;
  bool add_bos = true;
  SeqId seq{0};
  // Called with each newly completed piece of generated text (may be empty).
  std::function<void(const std::string&)> on_text;
  // Speculative decoding (docs/speculative-decoding.md): when set, before each decode step
  // up to num_speculative_tokens drafts are asked for (arguments: the sequence, every token
  // so far with the next one last -- it is not fed yet -- and the most drafts wanted) and
  // verified in one step (StepItem::all_logits); the sampler draws each row in order while
  // its draw equals the draft, so the output equals generation without it, token for token.
  // Rejected positions are cut back with ModelRunner::truncate_sequence (its error is
  // returned).
  std::function<std::vector<int32_t>(SeqId, std::span<const int32_t>, int)> propose;
  int num_speculative_tokens = 0;
};

struct GenerateResult {
  std::vector<int32_t> prompt_ids;     // including BOS
  std::vector<int32_t> generated_ids;  // excluding the stop token
  std::string text;                    // generated text
  bool stopped_by_token = false;
  double prefill_seconds = 0;
  double decode_seconds = 0;           // for generated_ids.size() - 1 decode steps
  int64_t draft_tokens = 0;            // speculative: drafts verified
  int64_t accepted_tokens = 0;         // speculative: drafts accepted
  int64_t cached_tokens = 0;           // prompt tokens restored from the prefix cache
};

StatusOr<GenerateResult> generate(ModelRunner& runner, const Tokenizer& tokenizer,
                                  const std::string& prompt, const GenerateOptions& options);

// The same from prompt token ids (BOS is prepended when options.add_bos and the model has
// one). `tokenizer` may be null (a checkpoint without one): then no text is produced
// (on_text is not called, result.text stays empty) and the caller reads generated_ids.
// Errors: as above, plus InvalidArgument for an id outside [0, vocab_size).
StatusOr<GenerateResult> generate_ids(ModelRunner& runner, const Tokenizer* tokenizer,
                                      std::span<const int32_t> prompt_ids,
                                      const GenerateOptions& options);

}  // namespace strata
