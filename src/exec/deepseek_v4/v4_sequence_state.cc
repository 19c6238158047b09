// V4SequenceState; see v4_sequence_state.h.
#include "exec/deepseek_v4/v4_sequence_state.h"

#include <algorithm>

#include "base/check.h"
#include "state/cache_manager.h"
#include "state/sequence_cache.h"
#include "state/state_graph.h"

namespace strata {

V4SequenceState::V4SequenceState(const DeepseekConfig& c) : config_(&c) {
  // The pre-port f32 mirror (reference form), kept for A/B checks.
  init_legacy(c, [&c](int l, bool index) -> int64_t {
    const LayerSchedule& ls = c.layers[l];
    if (ls.ratio <= 0 || (index && !ls.has_indexer)) return 0;
    const int64_t coff = ls.overlap_compressor ? 2 : 1;
    return coff * ls.ratio * coff * (index ? c.index_head_dim : c.head_dim);
  });
}

StatusOr<std::unique_ptr<V4SequenceState>> V4SequenceState::create(const DeepseekConfig& c,
                                                                   const StateGraph& graph,
                                                                   int64_t max_tokens, RowShard dcp,
                                                                   StageLayers stage) {
  return create_owned<V4SequenceState>(c, graph, max_tokens, dcp, stage);
}

V4SequenceState::V4SequenceState(const DeepseekConfig& c, CacheManager* cm, int64_t seq,
                                 int64_t length)
    : SequenceCallState(cm, seq, length), config_(&c) {}

V4SequenceState::~V4SequenceState() = default;

void V4SequenceState::load_compressor(int layer, bool index, V4CompressorState* st) const {
  const LayerSchedule& ls = config_->layers[layer];
  STRATA_CHECK(ls.ratio > 0 && (!index || ls.has_indexer));
  st->init(ls.ratio, ls.overlap_compressor, index ? config_->index_head_dim : config_->head_dim);
  compressor_get(layer, index, static_cast<int64_t>(st->kv.size()), st->kv.data(), st->score.data());
}
void V4SequenceState::store_compressor(int layer, bool index, const V4CompressorState& st) {
  STRATA_CHECK(st.kv.size() == st.score.size());
  compressor_put(layer, index, static_cast<int64_t>(st.kv.size()), st.kv.data(), st.score.data());
}

bool V4SequenceState::has_mtp_carry() const {
  if (!cm_) return false;
  const OwnerId o = cm_->graph().find_owner(StateKind::kDraftState, config_->n_layers);
  return o >= 0 && cm_->graph().owner(o).spec.rows_fixed == 1;
}
void V4SequenceState::read_mtp_carry(float* out) const {
  STRATA_CHECK(has_mtp_carry());
  cm_->read_row(seq_, cm_->graph().find_owner(StateKind::kDraftState, config_->n_layers), 0, out);
}
void V4SequenceState::write_mtp_carry(const float* x) {
  STRATA_CHECK(has_mtp_carry());
  cm_->write_row(seq_, cm_->graph().find_owner(StateKind::kDraftState, config_->n_layers), 0, x);
}

}  // namespace strata
