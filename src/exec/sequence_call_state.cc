// SequenceCallState (see sequence_call_state.h).
#include "exec/sequence_call_state.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "base/check.h"
#include "kernels/quant_formats.h"
#include "state/cache_manager.h"
#include "state/sequence_cache.h"
#include "state/state_graph.h"

namespace strata {

SequenceCallState::SequenceCallState(CacheManager* cm, int64_t seq, int64_t length)
    : cm_(cm), seq_(seq), length_(length) {
  STRATA_CHECK(cm != nullptr);
}

SequenceCallState::~SequenceCallState() {
  if (owned_ && in_call_) owned_->end_step();
}

int64_t SequenceCallState::bytes() const {
  if (cm_) {
    const StateGraph& g = cm_->graph();
    return g.bytes_per_request_fixed() +
           static_cast<int64_t>(g.bytes_per_token() * static_cast<double>(length_));
  }
  int64_t b = 0;
  for (const LegacyRows& l : legacy_rows_) {
    b += static_cast<int64_t>(l.window.size() + l.compressed.size() + l.index_keys.size()) * 4;
    for (int i = 0; i < 2; ++i)
      b += static_cast<int64_t>(l.comp_kv[i].size() + l.comp_score[i].size()) * 4;
  }
  return b;
}

namespace {
void read_rows(const std::vector<float>& v, int64_t g0, int64_t n, int64_t width, float* out) {
  STRATA_CHECK(static_cast<int64_t>(v.size()) >= (g0 + n) * width);
  std::copy_n(&v[g0 * width], n * width, out);
}
void append_row(std::vector<float>& v, int64_t g, int64_t width, const float* x) {
  STRATA_CHECK(static_cast<int64_t>(v.size()) == g * width);
  v.insert(v.end(), x, x + width);
}
}  // namespace

void SequenceCallState::init_legacy(
    const DeepseekConfig& c, const std::function<int64_t(int layer, bool index)>& compressor_floats) {
  head_dim_ = c.head_dim;
  index_head_dim_ = c.index_head_dim;
  window_ = c.window_size;
  // Every layer id (backbone, then draft stages: their window rings hold DSpark / MTP state).
  legacy_rows_.assign(static_cast<size_t>(c.total_layers()), LegacyRows{});
  for (int l = 0; l < c.total_layers(); ++l) {
    LegacyRows& r = legacy_rows_[l];
    r.window.assign(static_cast<size_t>(window_ * head_dim_), 0.0f);
    for (int i = 0; i < 2; ++i) {
      const int64_t n = compressor_floats(l, i == 1);
      if (n <= 0) continue;
      r.comp_kv[i].assign(static_cast<size_t>(n), 0.0f);
      r.comp_score[i].assign(static_cast<size_t>(n), -std::numeric_limits<float>::infinity());
    }
  }
}

void SequenceCallState::compressor_get(int layer, bool index, int64_t n, float* kv,
                                       float* score) const {
  if (cm_) return cm_->get_compressor_state(seq_, layer, index, kv, score);
  const LegacyRows& r = legacy_rows_[layer];
  STRATA_CHECK(static_cast<int64_t>(r.comp_kv[index].size()) == n);
  std::copy_n(r.comp_kv[index].data(), n, kv);
  std::copy_n(r.comp_score[index].data(), n, score);
}
void SequenceCallState::compressor_put(int layer, bool index, int64_t n, const float* kv,
                                       const float* score) {
  if (cm_) return cm_->set_compressor_state(seq_, layer, index, kv, score);
  LegacyRows& r = legacy_rows_[layer];
  STRATA_CHECK(static_cast<int64_t>(r.comp_kv[index].size()) == n);
  std::copy_n(kv, n, r.comp_kv[index].data());
  std::copy_n(score, n, r.comp_score[index].data());
}

void SequenceCallState::read_window_row(int layer, int64_t pos, float* out) const {
  if (cm_) return cm_->read_window_row(seq_, layer, pos, out);
  std::copy_n(&legacy_rows_[layer].window[(pos % window_) * head_dim_], head_dim_, out);
}
void SequenceCallState::write_window_row(int layer, int64_t pos, const float* x) {
  if (cm_) return cm_->write_window_row(seq_, layer, pos, x);
  std::copy_n(x, head_dim_, &legacy_rows_[layer].window[(pos % window_) * head_dim_]);
}
void SequenceCallState::read_compressed_rows(int owner, int64_t g0, int64_t n, float* out) const {
  if (n <= 0) return;
  if (cm_) return cm_->read_compressed_rows(seq_, owner, g0, n, out);
  read_rows(legacy_rows_[owner].compressed, g0, n, head_dim_, out);
}
void SequenceCallState::write_compressed_row(int owner, int64_t g, const float* x) {
  if (cm_) return cm_->write_compressed_row(seq_, owner, g, x);
  append_row(legacy_rows_[owner].compressed, g, head_dim_, x);
}
void SequenceCallState::read_index_keys(int owner, int64_t g0, int64_t n, float* out) const {
  if (n <= 0) return;
  if (cm_) return cm_->read_index_keys(seq_, owner, g0, n, out);
  read_rows(legacy_rows_[owner].index_keys, g0, n, index_head_dim_, out);
}
void SequenceCallState::index_key_codes(int owner, int64_t g0, int64_t n,
                                        std::vector<uint8_t>* scratch,
                                        const uint8_t** out) const {
  if (n <= 0) return;
  if (cm_) {
    const OwnerId o = cm_->graph().find_owner(StateKind::kIndexKeys, owner);
    STRATA_CHECK_MSG(o >= 0, "layer {} owns no index keys", owner);
    return cm_->raw_rows(seq_, o, g0, n, out);
  }
  const int64_t d = index_head_dim_, rb = d / 2 + d / 32;
  std::vector<float> rows(n * d);
  read_rows(legacy_rows_[owner].index_keys, g0, n, d, rows.data());
  scratch->resize(n * rb);
  for (int64_t i = 0; i < n; ++i) {
    uint8_t* r = &(*scratch)[i * rb];
    quant::fp4_ue8m0_quantize(&rows[i * d], static_cast<int>(d), 32, r, r + d / 2);
    out[i] = r;
  }
}

void SequenceCallState::write_index_key(int owner, int64_t g, const float* x) {
  if (cm_) return cm_->write_index_key(seq_, owner, g, x);
  append_row(legacy_rows_[owner].index_keys, g, index_head_dim_, x);
}

void SequenceCallState::truncate_length(int64_t n) {
  STRATA_CHECK_MSG(n > 0 && n <= length_, "truncate_length {} of {}", n, length_);
  length_ = n;
}

Status SequenceCallState::check_call(std::span<const int32_t> tokens, int64_t vocab,
                                     int64_t max_context) const {
  const int64_t S = static_cast<int64_t>(tokens.size());
  if (S == 0) return invalid_argument("forward: no tokens");
  for (int32_t t : tokens)
    if (t < 0 || t >= vocab) return invalid_argument("token id {} out of range [0, {})", t, vocab);
  if (length_ + S > max_context)
    return out_of_range("sequence of {} tokens exceeds the context of {}", length_ + S, max_context);
  return ok_status();
}

Status SequenceCallState::begin_call(std::span<const int32_t> tokens) {
  STRATA_CHECK_MSG(!in_call_, "sequence state: begin_call twice");
  if (owned_) {
    STRATA_RETURN_IF_ERROR(owned_->begin_step(std::vector<int32_t>(tokens.begin(), tokens.end())));
  } else if (cm_) {
    STRATA_CHECK_MSG(cm_->num_computed(seq_) >= length_ + static_cast<int64_t>(tokens.size()),
                     "seq {}: rows for [{}, {}) not committed (computed {})", seq_, length_,
                     length_ + static_cast<int64_t>(tokens.size()), cm_->num_computed(seq_));
  }
  in_call_ = true;
  return ok_status();
}

void SequenceCallState::end_call(int64_t n_tokens) {
  STRATA_CHECK_MSG(in_call_, "sequence state: end_call without begin_call");
  if (owned_) owned_->end_step();
  in_call_ = false;
  length_ += n_tokens;
}

}  // namespace strata
