// V41SequenceState; see v41_sequence_state.h.
#include "exec/deepseek_v41/v41_sequence_state.h"

#include <algorithm>
#include <limits>

#include "base/check.h"
#include "state/cache_manager.h"
#include "state/sequence_cache.h"
#include "state/state_graph.h"

namespace strata {

namespace {
constexpr int32_t kBeforeStart = -2;  // state module's Engram "before start" marker
}  // namespace

// The pre-port f32 mirror (reference form), kept for A/B checks.
struct V41SequenceState::Legacy {
  struct Layer {
    std::vector<float> comp_kv, comp_score;  // rows: SequenceCallState's row store
  };
  std::vector<Layer> layers;
  std::vector<int64_t> engram_history;
};

V41SequenceState::V41SequenceState(const DeepseekConfig& c)
    : config_(&c), legacy_(std::make_unique<Legacy>()) {
  legacy_->layers.assign(c.n_layers, Legacy::Layer{});
  init_legacy_rows(c.n_layers, c.head_dim, c.index_head_dim, c.window_size);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerSchedule& ls = c.layers[l];
    Legacy::Layer& s = legacy_->layers[l];
    if (ls.has_compressor && ls.ratio > 1) {
      s.comp_kv.assign(static_cast<size_t>(ls.ratio) * c.head_dim, 0.0f);
      s.comp_score.assign(static_cast<size_t>(ls.ratio) * c.head_dim,
                          -std::numeric_limits<float>::infinity());
    }
  }
}

StatusOr<std::unique_ptr<V41SequenceState>> V41SequenceState::create(const DeepseekConfig& c,
                                                                     const StateGraph& graph,
                                                                     int64_t max_tokens) {
  STRATA_ASSIGN_OR_RETURN(auto sc, SequenceCache::create(graph, max_tokens));
  std::unique_ptr<V41SequenceState> s(new V41SequenceState(c, &sc->cache(), sc->seq(), 0));
  s->adopt(std::move(sc));
  s->max_tokens_ = max_tokens;
  return s;
}

V41SequenceState::V41SequenceState(const DeepseekConfig& c, CacheManager* cm, int64_t seq,
                                   int64_t length)
    : SequenceCallState(cm, seq, length), config_(&c) {}

V41SequenceState::~V41SequenceState() = default;

void V41SequenceState::read_window_row(int layer, int64_t pos, float* out) const {
  if (pos < window_floor_) {  // before a bounded replay's start: a fresh ring row
    std::fill_n(out, config_->head_dim, 0.0f);
    return;
  }
  window_row_get(layer, pos, out);
}
void V41SequenceState::read_window_rows(int layer, int64_t pos0, int64_t n, float* out) const {
  const int64_t hd = config_->head_dim;
  const int64_t fresh = std::clamp<int64_t>(window_floor_ - pos0, 0, n);  // see read_window_row
  std::fill_n(out, fresh * hd, 0.0f);
  if (fresh == n) return;
  if (cm_) return cm_->read_window_rows(seq_, layer, pos0 + fresh, n - fresh, out + fresh * hd);
  for (int64_t i = fresh; i < n; ++i) read_window_row(layer, pos0 + i, out + i * hd);
}
void V41SequenceState::write_window_row(int layer, int64_t pos, const float* x) {
  window_row_put(layer, pos, x);
}

void V41SequenceState::read_compressed_rows(int owner, int64_t g0, int64_t n, float* out) const {
  compressed_rows_get(owner, g0, n, out);
}
void V41SequenceState::write_compressed_row(int owner, int64_t g, const float* x) {
  if ((g + 1) * config_->layers[owner].ratio <= shared_prefix_end_) return;  // shared, exact
  compressed_row_put(owner, g, x);
}

void V41SequenceState::read_index_keys(int owner, int64_t g0, int64_t n, float* out) const {
  index_keys_get(owner, g0, n, out);
}
void V41SequenceState::write_index_key(int owner, int64_t g, const float* x) {
  if ((g + 1) * config_->layers[owner].ratio <= shared_prefix_end_) return;  // shared, exact
  index_key_put(owner, g, x);
}

void V41SequenceState::get_compressor_state(int layer, float* kv, float* score) const {
  if (cm_) return cm_->get_compressor_state(seq_, layer, /*index=*/false, kv, score);
  const auto& s = legacy_->layers[layer];
  std::copy(s.comp_kv.begin(), s.comp_kv.end(), kv);
  std::copy(s.comp_score.begin(), s.comp_score.end(), score);
}
void V41SequenceState::set_compressor_state(int layer, const float* kv, const float* score) {
  if (cm_) return cm_->set_compressor_state(seq_, layer, /*index=*/false, kv, score);
  auto& s = legacy_->layers[layer];
  std::copy_n(kv, s.comp_kv.size(), s.comp_kv.begin());
  std::copy_n(score, s.comp_score.size(), s.comp_score.begin());
}

std::vector<int64_t> V41SequenceState::engram_history() const {
  if (!cm_) return legacy_->engram_history;
  const int h = config_->engram_max_ngram_size - 1;
  std::vector<int32_t> ids(std::max(h, 0));
  std::vector<int64_t> out;
  if (h <= 0) return out;
  cm_->get_engram_history(seq_, ids.data());
  for (int32_t v : ids)
    if (v != kBeforeStart) out.push_back(v);
  return out;
}
void V41SequenceState::set_engram_history(const std::vector<int64_t>& hist) {
  if (!cm_) {
    legacy_->engram_history = hist;
    return;
  }
  const int h = config_->engram_max_ngram_size - 1;
  if (h <= 0) return;
  STRATA_CHECK(static_cast<int>(hist.size()) <= h);
  std::vector<int32_t> ids(h, kBeforeStart);
  std::copy(hist.begin(), hist.end(), ids.end() - static_cast<int64_t>(hist.size()));
  cm_->set_engram_history(seq_, ids.data());
}

int64_t V41SequenceState::bytes() const {
  if (cm_) return graph_bytes();
  int64_t b = legacy_row_bytes();
  for (const auto& l : legacy_->layers)
    b += static_cast<int64_t>(l.comp_kv.size() + l.comp_score.size()) * 4;
  return b;
}

}  // namespace strata
