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
    std::vector<float> window, compressed, index_keys;
    V4CompressorState comp, index;  // kv / score only (rows live in compressed / index_keys)
  };
  std::vector<Layer> layers;
};

V4SequenceState::V4SequenceState(const DeepseekConfig& c)
    : config_(&c), legacy_(std::make_unique<Legacy>()) {
  legacy_->layers.assign(c.n_layers, Legacy::Layer{});
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerSchedule& ls = c.layers[l];
    Legacy::Layer& s = legacy_->layers[l];
    s.window.assign(static_cast<size_t>(c.window_size) * c.head_dim, 0.0f);
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
  if (cm_) return cm_->read_window_row(seq_, layer, pos, out);
  const int64_t hd = config_->head_dim;
  std::copy_n(&legacy_->layers[layer].window[(pos % config_->window_size) * hd], hd, out);
}
void V4SequenceState::write_window_row(int layer, int64_t pos, const float* x) {
  if (cm_) return cm_->write_window_row(seq_, layer, pos, x);
  const int64_t hd = config_->head_dim;
  std::copy_n(x, hd, &legacy_->layers[layer].window[(pos % config_->window_size) * hd]);
}

void V4SequenceState::read_compressed_rows(int layer, int64_t g0, int64_t n, float* out) const {
  if (n <= 0) return;
  if (cm_) return cm_->read_compressed_rows(seq_, layer, g0, n, out);
  legacy_read_rows(legacy_->layers[layer].compressed, g0, n, config_->head_dim, out);
}
void V4SequenceState::write_compressed_row(int layer, int64_t g, const float* x) {
  if (cm_) return cm_->write_compressed_row(seq_, layer, g, x);
  legacy_append_row(legacy_->layers[layer].compressed, g, config_->head_dim, x);
}

void V4SequenceState::read_index_keys(int layer, int64_t g0, int64_t n, float* out) const {
  if (n <= 0) return;
  if (cm_) return cm_->read_index_keys(seq_, layer, g0, n, out);
  legacy_read_rows(legacy_->layers[layer].index_keys, g0, n, config_->index_head_dim, out);
}
void V4SequenceState::write_index_key(int layer, int64_t g, const float* x) {
  if (cm_) return cm_->write_index_key(seq_, layer, g, x);
  legacy_append_row(legacy_->layers[layer].index_keys, g, config_->index_head_dim, x);
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
  int64_t b = 0;
  for (const auto& l : legacy_->layers)
    b += static_cast<int64_t>(l.window.size() + l.compressed.size() + l.index_keys.size() +
                              l.comp.kv.size() + l.comp.score.size() + l.index.kv.size() +
                              l.index.score.size()) * 4;
  return b;
}

}  // namespace strata
