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

V41SequenceState::V41SequenceState(const DeepseekConfig& c) : config_(&c) {
  // The pre-port f32 mirror (reference form), kept for A/B checks.
  init_legacy(c, [&c](int l, bool index) -> int64_t {
    const LayerSchedule& ls = c.layers[l];
    return !index && ls.has_compressor && ls.ratio > 1 ? int64_t{ls.ratio} * c.head_dim : 0;
  });
}

StatusOr<std::unique_ptr<V41SequenceState>> V41SequenceState::create(const DeepseekConfig& c,
                                                                     const StateGraph& graph,
                                                                     int64_t max_tokens, RowShard dcp,
                                                                     StageLayers stage) {
  STRATA_ASSIGN_OR_RETURN(auto s, create_owned<V41SequenceState>(c, graph, max_tokens, dcp, stage));
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
  SequenceCallState::read_window_row(layer, pos, out);
}
void V41SequenceState::read_window_rows(int layer, int64_t pos0, int64_t n, float* out) const {
  const int64_t hd = config_->head_dim;
  const int64_t fresh = std::clamp<int64_t>(window_floor_ - pos0, 0, n);  // see read_window_row
  std::fill_n(out, fresh * hd, 0.0f);
  if (fresh == n) return;
  if (cm_) return cm_->read_window_rows(seq_, layer, pos0 + fresh, n - fresh, out + fresh * hd);
  for (int64_t i = fresh; i < n; ++i) read_window_row(layer, pos0 + i, out + i * hd);
}
void V41SequenceState::write_compressed_row(int owner, int64_t g, const float* x) {
  if ((g + 1) * config_->layers[owner].ratio <= shared_prefix_end_) return;  // shared, exact
  SequenceCallState::write_compressed_row(owner, g, x);
}

void V41SequenceState::write_index_key(int owner, int64_t g, const float* x) {
  if ((g + 1) * config_->layers[owner].ratio <= shared_prefix_end_) return;  // shared, exact
  SequenceCallState::write_index_key(owner, g, x);
}

void V41SequenceState::get_compressor_state(int layer, float* kv, float* score) const {
  compressor_get(layer, /*index=*/false, int64_t{config_->layers[layer].ratio} * config_->head_dim,
                 kv, score);
}
void V41SequenceState::set_compressor_state(int layer, const float* kv, const float* score) {
  compressor_put(layer, /*index=*/false, int64_t{config_->layers[layer].ratio} * config_->head_dim,
                 kv, score);
}

std::vector<int64_t> V41SequenceState::engram_history() const {
  if (!cm_) return legacy_engram_history_;
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
    legacy_engram_history_ = hist;
    return;
  }
  const int h = config_->engram_max_ngram_size - 1;
  if (h <= 0) return;
  STRATA_CHECK(static_cast<int>(hist.size()) <= h);
  std::vector<int32_t> ids(h, kBeforeStart);
  std::copy(hist.begin(), hist.end(), ids.end() - static_cast<int64_t>(hist.size()));
  cm_->set_engram_history(seq_, ids.data());
}

}  // namespace strata
