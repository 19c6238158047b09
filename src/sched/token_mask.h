// Constrained decoding over a vocabulary: TokenConstraint is what a request's sampler asks
// (mask the logits, advance by the sampled token, has the constrained text ended?);
// ByteTokenMask<Checker> implements it for any incremental byte checker (JsonPrefix for
// response_format json_object, JsonSchemaState for json_schema).
//
// A Checker is a copyable value with `bool feed(char)` / `bool feed(std::string_view)`
// (true while the text stays a valid prefix; false may leave the state unspecified) and
// `bool complete() const` (the constrained text has ended; only stop ids may follow).
//
// token_bytes[i] is what token i adds to the text (empty for special tokens, which are never
// allowed inside the constrained text). stop_ids may be sampled only once the checker is
// complete, and then only they may. When no token may come next (a dead end: no token of the
// vocabulary spells a valid continuation) the stop ids stay allowed so the request can end.
//
// Thread safety: values; one request's sampler uses its own instance.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets logits[t] = -inf for every token t that may not come next.
  virtual void apply(std::span<float> logits) const = 0;
  // Advances the state by the sampled token.
  virtual void accept(int32_t token) = 0;
  virtual bool complete() const = 0;
};

namespace token_mask_internal {
// The masking loop shared by every checker: `feeds(t)` says whether token t's bytes keep
// the text valid; `first_ok[b]` is false for a first byte b no token may start with (those
// tokens are skipped without feeding them).
void mask_logits(std::span<float> logits, const std::vector<std::string>& token_bytes,
                 const std::vector<int32_t>& stop_ids, bool complete, const bool (&first_ok)[256],
                 const void* ctx, bool (*feeds)(const void* ctx, std::string_view bytes));
}  // namespace token_mask_internal

template <class Checker>
class ByteTokenMask final : public TokenConstraint {
 public:
  ByteTokenMask(std::shared_ptr<const std::vector<std::string>> token_bytes,
                std::vector<int32_t> stop_ids, Checker initial = Checker())
      : bytes_(std::move(token_bytes)), stop_ids_(std::move(stop_ids)), state_(std::move(initial)) {}

  void apply(std::span<float> logits) const override {
    bool first_ok[256] = {};
    if (!state_.complete())
      for (int b = 0; b < 256; ++b) {
        Checker next = state_;
        first_ok[b] = next.feed(static_cast<char>(b));
      }
    token_mask_internal::mask_logits(logits, *bytes_, stop_ids_, state_.complete(), first_ok, &state_,
                                     [](const void* ctx, std::string_view bytes) {
                                       Checker next = *static_cast<const Checker*>(ctx);
                                       return next.feed(bytes);
                                     });
  }
  void accept(int32_t token) override {
    if (token >= 0 && token < static_cast<int32_t>(bytes_->size())) (void)state_.feed((*bytes_)[token]);
  }
  bool complete() const override { return state_.complete(); }

 private:
  std::shared_ptr<const std::vector<std::string>> bytes_;
  std::vector<int32_t> stop_ids_;
  Checker state_;
};

}  // namespace strata
