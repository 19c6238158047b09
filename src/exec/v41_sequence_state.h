// V41SequenceState: all per-sequence inference state of one DeepSeek-V4.1 request, organised
// by the state kinds of the state-graph issue (spec v41-architecture.md §3.1):
//   window KV ring      every layer, [W, head_dim], slot p mod W (QDQ FP8 values)
//   compressed KV       kv-source layers only, one row per `ratio` tokens (QDQ FP4/E4M3-16)
//   index keys          index-key owners only, one row per compressed row (QDQ FP4/E8M0-32)
//   compressor partial  ratio>1 kv sources: kv/score [ratio, head_dim] fp32 (fresh: 0 / -inf)
//   engram history      the last max_ngram-1 mapped token ids
// Consumers never copy: a Reuse/Reindex layer reads its owner's entries through the
// LayerSchedule owner ids (kv_owner, index_key_owner). Per-forward transients (top-k lists,
// candidate masks) are not stored here.
//
// Storage is the reference's form (f32 copies of QDQ'd bf16 values), which is numerically
// identical to the serving format when the same group scales are kept (spec §3.0). This is
// an interim mirror of the state module's per-sequence storage API (src/state/), to be
// swapped for it when it lands; the accessors below are the only way the forward touches
// state, to keep the switch local.
// Thread safety: owned by one sequence; not thread-safe.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "model/deepseek_config.h"

namespace strata {

struct V41LayerState {
  std::vector<float> window;       // [W * head_dim]
  std::vector<float> compressed;   // [rows * head_dim]
  std::vector<float> index_keys;   // [rows * index_head_dim]
  std::vector<float> comp_kv;      // [ratio * head_dim] fp32 partial group (ratio > 1)
  std::vector<float> comp_score;   // [ratio * head_dim]
};

class V41SequenceState {
 public:
  explicit V41SequenceState(const DeepseekConfig& c) : config_(&c) { reset(); }

  void reset() {
    const DeepseekConfig& c = *config_;
    length_ = 0;
    engram_history_.clear();
    published_index_owner_ = -1;
    layers_.assign(c.n_layers, V41LayerState{});
    for (int l = 0; l < c.n_layers; ++l) {
      const LayerSchedule& ls = c.layers[l];
      V41LayerState& s = layers_[l];
      s.window.assign(static_cast<size_t>(c.window_size) * c.head_dim, 0.0f);
      if (ls.has_compressor && ls.ratio > 1) {
        s.comp_kv.assign(static_cast<size_t>(ls.ratio) * c.head_dim, 0.0f);
        s.comp_score.assign(static_cast<size_t>(ls.ratio) * c.head_dim,
                            -std::numeric_limits<float>::infinity());
      }
    }
  }

  int64_t length() const { return length_; }
  void set_length(int64_t n) { length_ = n; }

  // Window ring row of `layer` holding position `pos` (slot pos mod W).
  float* window_row(int layer, int64_t pos) {
    return &layers_[layer].window[static_cast<size_t>(pos % config_->window_size) * config_->head_dim];
  }
  // Compressed KV rows of owner layer (append-only).
  int64_t compressed_rows(int owner) const {
    return static_cast<int64_t>(layers_[owner].compressed.size()) / config_->head_dim;
  }
  const float* compressed_row(int owner, int64_t row) const {
    return &layers_[owner].compressed[static_cast<size_t>(row) * config_->head_dim];
  }
  void append_compressed(int owner, const float* row) {
    auto& v = layers_[owner].compressed;
    v.insert(v.end(), row, row + config_->head_dim);
  }
  int64_t index_key_rows(int owner) const {
    return static_cast<int64_t>(layers_[owner].index_keys.size()) / config_->index_head_dim;
  }
  const float* index_key_row(int owner, int64_t row) const {
    return &layers_[owner].index_keys[static_cast<size_t>(row) * config_->index_head_dim];
  }
  void append_index_key(int owner, const float* row) {
    auto& v = layers_[owner].index_keys;
    v.insert(v.end(), row, row + config_->index_head_dim);
  }
  // Compressor partial state slot (fp32 [head_dim]) for ratio > 1 kv sources.
  float* comp_kv_slot(int owner, int slot) {
    return &layers_[owner].comp_kv[static_cast<size_t>(slot) * config_->head_dim];
  }
  float* comp_score_slot(int owner, int slot) {
    return &layers_[owner].comp_score[static_cast<size_t>(slot) * config_->head_dim];
  }
  std::vector<int64_t>& engram_history() { return engram_history_; }
  // The index-key owner that most recently emitted keys (the reference's module-global
  // shared_attn.index_k, which persists across calls); -1 = none yet. See
  // V41ForwardOptions::decode_step.
  int published_index_owner() const { return published_index_owner_; }
  void set_published_index_owner(int l) { published_index_owner_ = l; }

  // Bytes held (reference f32 form), for cache_usage().
  int64_t bytes() const {
    int64_t b = 0;
    for (const auto& l : layers_)
      b += static_cast<int64_t>(l.window.size() + l.compressed.size() + l.index_keys.size() +
                                l.comp_kv.size() + l.comp_score.size()) * 4;
    return b;
  }

 private:
  const DeepseekConfig* config_;
  int64_t length_ = 0;
  std::vector<V41LayerState> layers_;
  std::vector<int64_t> engram_history_;
  int published_index_owner_ = -1;
};

}  // namespace strata
