// SequenceCallState: the forward-call lifecycle shared by the DeepSeek per-sequence state
// adapters (V41SequenceState, V4SequenceState): which CacheManager sequence the state lives
// in (or none: the legacy f32 mirror), an optionally owned SequenceCache, the computed
// length, and begin_call / end_call around each forward.
//
// begin_call(tokens): with an owned SequenceCache, reserves rows for [length, length + n)
// (ResourceExhausted past its capacity); with an external manager, CHECKs that the caller
// committed those rows already (the runner plans and commits the step). end_call(n) ends the
// step and advances length by n. Calling begin_call twice or end_call without begin_call is
// a broken invariant (CHECK).
// Thread safety: owned by one sequence; not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include <vector>

#include "base/status.h"

namespace strata {

class CacheManager;
class SequenceCache;

class SequenceCallState {
 public:
  SequenceCallState(const SequenceCallState&) = delete;
  SequenceCallState& operator=(const SequenceCallState&) = delete;

  bool uses_state_graph() const { return cm_ != nullptr; }
  // The manager and sequence id (null for the legacy backend).
  CacheManager* cache_manager() const { return cm_; }
  int64_t cache_seq() const { return seq_; }

  int64_t length() const { return length_; }
  // The checks both DeepSeek forwards make before a call: InvalidArgument for no tokens or a
  // token id outside [0, vocab), OutOfRange when length + n exceeds max_context. Nothing
  // changes.
  Status check_call(std::span<const int32_t> tokens, int64_t vocab, int64_t max_context) const;
  // Reserves rows for positions [length, length + n) (owned cache); call once per forward.
  Status begin_call(std::span<const int32_t> tokens);
  // Ends the call and advances length by the call's tokens.
  void end_call(int64_t n_tokens);

 protected:
  SequenceCallState() = default;  // legacy backend
  SequenceCallState(CacheManager* cm, int64_t seq, int64_t length);
  ~SequenceCallState();
  // Takes ownership of the cache the state lives in (create()).
  void adopt(std::unique_ptr<SequenceCache> owned);
  // State-module backends: bytes held at the current length (the graph's per-kind formulas:
  // fixed per request + per token x length).
  int64_t graph_bytes() const;
  // The row kinds both DeepSeek adapters store alike: the window ring of `layer` (head_dim
  // rows, slot pos mod window) and the growing compressed-KV (head_dim) / index-key
  // (index_head_dim) rows of an owner layer; through the CacheManager on the state-module
  // backends, else in the legacy f32 mirror below (rows appended in order; reads CHECK that
  // the rows exist, appends that the row is the next one).
  void window_row_get(int layer, int64_t pos, float* out) const;
  void window_row_put(int layer, int64_t pos, const float* x);
  void compressed_rows_get(int owner, int64_t g0, int64_t n, float* out) const;
  void compressed_row_put(int owner, int64_t g, const float* x);
  void index_keys_get(int owner, int64_t g0, int64_t n, float* out) const;
  void index_key_put(int owner, int64_t g, const float* x);
  // Legacy backend: allocates the mirror (zero rings) for n_layers layers.
  void init_legacy_rows(int n_layers, int64_t head_dim, int64_t index_head_dim, int64_t window);
  // Legacy backend: bytes of the mirror's rows.
  int64_t legacy_row_bytes() const;

  std::unique_ptr<SequenceCache> owned_;
  CacheManager* cm_ = nullptr;
  int64_t seq_ = 0;
  bool in_call_ = false;
  int64_t length_ = 0;

 private:
  struct LegacyRows {
    std::vector<float> window, compressed, index_keys;
  };
  std::vector<LegacyRows> legacy_rows_;
  int64_t head_dim_ = 0, index_head_dim_ = 0, window_ = 0;
};

}  // namespace strata
