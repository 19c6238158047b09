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
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "dist/dcp_comm.h"
#include "state/block_pool.h"
#include "base/status.h"
#include "model/deepseek_config.h"
#include "state/sequence_cache.h"

namespace strata {

// The RowShard (state/block_pool.h) of a DCP communicator: this rank's share of the
// compressed rows and index keys; null or one rank: every row.
inline RowShard dcp_shard(const DcpComm* c) {
  return c != nullptr && c->size() > 1 ? RowShard{c->rank(), c->size(), c->interleave()}
                                       : RowShard{};
}

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
  // External-manager backend, after CacheManager::truncate(seq, n) cut the rows back: the
  // state now holds positions [0, n) (0 < n <= length). CHECKs outside a call.
  void truncate_length(int64_t n);
  // The checks both DeepSeek forwards make before a call: InvalidArgument for no tokens or a
  // token id outside [0, vocab), OutOfRange when length + n exceeds max_context. Nothing
  // changes.
  Status check_call(std::span<const int32_t> tokens, int64_t vocab, int64_t max_context) const;
  // Reserves rows for positions [length, length + n) (owned cache); call once per forward.
  Status begin_call(std::span<const int32_t> tokens);
  // Ends the call and advances length by the call's tokens.
  void end_call(int64_t n_tokens);
  // Bytes held by this sequence: the graph's per-kind formulas at the current length (fixed
  // per request + per token x length) on the state-module backends, the mirror's f32 bytes
  // on the legacy backend.
  int64_t bytes() const;

 protected:
  SequenceCallState() = default;  // legacy backend
  SequenceCallState(CacheManager* cm, int64_t seq, int64_t length);
  ~SequenceCallState();
  // The adapters' create(): a T over an owned SequenceCache of `graph` (which must outlive
  // it) with capacity `max_tokens` positions; T(c, cm, seq, 0) must be accessible.
  template <class T>
  static StatusOr<std::unique_ptr<T>> create_owned(const DeepseekConfig& c, const StateGraph& graph,
                                                   int64_t max_tokens, RowShard dcp = {},
                                                   StageLayers stage = {}) {
    STRATA_ASSIGN_OR_RETURN(auto sc, SequenceCache::create(graph, max_tokens, dcp, stage));
    std::unique_ptr<T> s(new T(c, &sc->cache(), sc->seq(), 0));
    s->owned_ = std::move(sc);
    return s;
  }
  // The row kinds both DeepSeek adapters store alike (an adapter exposes them with `using`,
  // or wraps one with its own rule of the same name): the window ring of `layer` (head_dim
  // rows, slot pos mod window) and the growing compressed-KV (head_dim) / index-key
  // (index_head_dim) rows of an owner layer; through the CacheManager on the state-module
  // backends, else in the legacy f32 mirror below (rows appended in order; reads CHECK that
  // the rows exist, appends that the row is the next one).
  void read_window_row(int layer, int64_t pos, float* out) const;
  void write_window_row(int layer, int64_t pos, const float* x);
  void read_compressed_rows(int owner, int64_t g0, int64_t n, float* out) const;
  void write_compressed_row(int owner, int64_t g, const float* x);
  void read_index_keys(int owner, int64_t g0, int64_t n, float* out) const;
  // The same rows in their stored FP4 form ([d/2 E2M1 codes][d/32 UE8M0], the kIndexKeys
  // serving format): out[i] points into the cache (state-module backends; valid until the
  // state changes) or, on the legacy backend, into `scratch` (the f32 rows re-encoded, exact).
  void index_key_codes(int owner, int64_t g0, int64_t n, std::vector<uint8_t>* scratch,
                       const uint8_t** out) const;
  void write_index_key(int owner, int64_t g, const float* x);
  // A compressor's partial state (`index`: the CSA indexer's compressor, V4 only): kv and
  // score, n floats each (the layer's size, which the legacy mirror CHECKs), through the
  // CacheManager or the mirror.
  void compressor_get(int layer, bool index, int64_t n, float* kv, float* score) const;
  void compressor_put(int layer, bool index, int64_t n, const float* kv, const float* score);
  // Legacy backend: allocates the mirror for `c`: zero window rings, no rows, and for each
  // (layer, index) where compressor_floats(layer, index) > 0 a fresh partial state (kv 0,
  // score -inf) of that many floats each.
  void init_legacy(const DeepseekConfig& c,
                   const std::function<int64_t(int layer, bool index)>& compressor_floats);

  std::unique_ptr<SequenceCache> owned_;
  CacheManager* cm_ = nullptr;
  int64_t seq_ = 0;
  bool in_call_ = false;
  int64_t length_ = 0;

 private:
  struct LegacyRows {
    std::vector<float> window, compressed, index_keys;
    std::vector<float> comp_kv[2], comp_score[2];  // [index]: main, indexer compressor
  };
  std::vector<LegacyRows> legacy_rows_;
  int64_t head_dim_ = 0, index_head_dim_ = 0, window_ = 0;
};

}  // namespace strata
