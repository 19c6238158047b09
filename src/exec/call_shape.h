// CallShape: the numeric form a DeepSeek forward computes its rows in (issue 22; docs/state.md
// "Numeric form").
//
//   kCanonical  (serving; the default) every position is computed with the shapes of a
//               one-token decode step at that position: window list of W entries with the
//               unreachable ones leading, indexer score rows of (p+1)/ratio entries and a
//               top-k of min(index_topk, (p+1)/ratio), torch's scalar-tail elementwise ops as
//               in a 1-token tensor, and each index source scoring its own key owner's keys.
//               So a position's state and logits are a function of the model, the cache
//               formats and the token ids up to it only: chunking, batching, prefix hits,
//               preemption and recompute do not change a bit. Prompt rows still run as one
//               multi-row call (the GEMMs are row-independent), so prefill keeps its speed.
//   kReference  (validation only: `strata validate golden --call-shape reference`) the
//               reference's call-shape-dependent numerics: a prompt as rows of one
//               whole-prompt call (list widths and tail positions from the prompt length)
//               and decode steps with its shared index-key quirk. Never used for serving
//               state.
//
// The form is part of the cache identity: the prefix-cache salt mixes it in
// (call_shape_salt), so entries computed in one form are never read by the other.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace strata {

enum class CallShape : uint8_t { kCanonical, kReference };

inline std::string_view call_shape_name(CallShape s) {
  return s == CallShape::kCanonical ? "canonical" : "reference";
}
inline std::optional<CallShape> parse_call_shape(std::string_view s) {
  if (s == "canonical") return CallShape::kCanonical;
  if (s == "reference") return CallShape::kReference;
  return std::nullopt;
}
// A salt term that separates prefix-cache entries of the two forms.
inline uint64_t call_shape_salt(CallShape s) {
  return s == CallShape::kCanonical ? 0x63616e6f6e6963ull : 0x7265666572656eull;
}

}  // namespace strata
