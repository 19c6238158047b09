// V4SequenceState; see v4_sequence_state.h.
#include "exec/deepseek_v4/v4_sequence_state.h"

#include <algorithm>

#include "base/check.h"
#include "state/cache_manager.h"
#include "state/sequence_cache.h"
#include "state/state_graph.h"

namespace strata {

// The pre-port f32 mirror (reference form), kept for A/B checks.
struct V4SequenceState::Legacy {
  struct Layer {
    // kv / score only (the rows live in SequenceCallState's row store)
    V4CompressorState comp, index;
  };
  std::vector<Layer> layers;
};

V4SequenceState::V4SequenceState(const DeepseekConfig& c)
    : config_(&c), legacy_(std::make_unique<Legacy>()) {
  legacy_->layers.assign(c.n_layers, Legacy::Layer{});
  init_legacy_rows(c.n_layers, c.head_dim, c.index_head_dim, c.window_size);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerSchedule& ls = c.layers[l];
    Legacy::Layer& s = legacy_->layers[l];
    if (ls.ratio > 0) s.comp.init(ls.ratio, ls.overlap_compressor, c.head_dim);
    if (ls.has_indexer) s.index.init(ls.ratio, ls.overlap_compressor, c.index_head_dim);
  }
}

StatusOr<std::unique_ptr<V4SequenceState>> V4SequenceState::create(const DeepseekConfig& c,
                                                                   const StateGraph& graph,
                                                                   int64_t max_tokens) {
  STRATA_ASSIGN_OR_RETURN(auto sc, SequenceCache::create(graph, max_tokens));
  std::unique_ptr<V4SequenceState> s(new V4SequenceState(c, &sc->cache(), sc->seq(), 0));
  s->adopt(std::move(sc));
  return s;
}

V4SequenceState::V4SequenceState(const DeepseekConfig& c, CacheManager* cm, int64_t seq,
                                 int64_t length)
    : SequenceCallState(cm, seq, length), config_(&c) {}

V4SequenceState::~V4SequenceState() = default;

void V4SequenceState::read_window_row(int layer, int64_t pos, float* out) const {
  window_row_get(layer, pos, out);
}
void V4SequenceState::write_window_row(int layer, int64_t pos, const float* x) {
  window_row_put(layer, pos, x);
}
void V4SequenceState::read_compressed_rows(int layer, int64_t g0, int64_t n, float* out) const {
  compressed_rows_get(layer, g0, n, out);
}
void V4SequenceState::write_compressed_row(int layer, int64_t g, const float* x) {
  compressed_row_put(layer, g, x);
}
void V4SequenceState::read_index_keys(int layer, int64_t g0, int64_t n, float* out) const {
  index_keys_get(layer, g0, n, out);
}
void V4SequenceState::write_index_key(int layer, int64_t g, const float* x) {
  index_key_put(layer, g, x);
}

void V4SequenceState::load_compressor(int layer, bool index, V4CompressorState* st) const {
  const LayerSchedule& ls = config_->layers[layer];
  STRATA_CHECK(ls.ratio > 0 && (!index || ls.has_indexer));
  st->init(ls.ratio, ls.overlap_compressor, index ? config_->index_head_dim : config_->head_dim);
  if (cm_) return cm_->get_compressor_state(seq_, layer, index, st->kv.data(), st->score.data());
  const V4CompressorState& s = index ? legacy_->layers[layer].index : legacy_->layers[layer].comp;
  STRATA_CHECK(s.kv.size() == st->kv.size());
  st->kv = s.kv;
  st->score = s.score;
}
void V4SequenceState::store_compressor(int layer, bool index, const V4CompressorState& st) {
  if (cm_) return cm_->set_compressor_state(seq_, layer, index, st.kv.data(), st.score.data());
  V4CompressorState& s = index ? legacy_->layers[layer].index : legacy_->layers[layer].comp;
  STRATA_CHECK(s.kv.size() == st.kv.size() && s.score.size() == st.score.size());
  s.kv = st.kv;
  s.score = st.score;
}

int64_t V4SequenceState::bytes() const {
  if (cm_) return graph_bytes();
  int64_t b = legacy_row_bytes();
  for (const auto& l : legacy_->layers)
    b += static_cast<int64_t>(l.comp.kv.size() + l.comp.score.size() + l.index.kv.size() +
                              l.index.score.size()) * 4;
  return b;
}

}  // namespace strata
