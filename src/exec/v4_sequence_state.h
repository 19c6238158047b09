// V4SequenceState: all per-sequence inference state of one DeepSeek-V4 request, one owner per
// layer (V4 shares nothing across layers; spec v41-architecture.md §3.2):
//   window KV ring        every layer, [W, head_dim], slot p mod W; nope dims FP8-QDQ (block
//                         64), RoPE tail bf16
//   compressed KV         ratio > 0 layers, one row per `ratio` tokens (same QDQ as window)
//   index keys            CSA layers, one row per 4 tokens, Hadamard-rotated, FP4-QDQ (E8M0/32)
//   compressor partial    main (and CSA indexer) compressor: kv / score fp32
//                         [coff*ratio, coff*width] (coff = 2 for the overlapping ratio-4
//                         compressor: rows 0..m-1 previous group, m..2m-1 current group;
//                         coff = 1 otherwise); fresh: kv 0, score -inf
// Storage is the reference's form (f32 copies of QDQ'd bf16 values). This is an interim
// mirror of the state module's per-sequence storage (src/state/), like V41SequenceState;
// the forward touches state only through these accessors.
// Thread safety: owned by one sequence; not thread-safe.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "model/deepseek_config.h"

namespace strata {

struct V4CompressorState {
  int ratio = 0;
  bool overlap = false;
  int64_t width = 0;          // d_c
  std::vector<float> kv;      // [coff*ratio, coff*width]
  std::vector<float> score;   // same
  std::vector<float> rows;    // emitted rows [n, width]
  int64_t cols() const { return (overlap ? 2 : 1) * width; }
  int64_t n_rows() const { return width ? static_cast<int64_t>(rows.size()) / width : 0; }
  const float* row(int64_t g) const { return &rows[static_cast<size_t>(g * width)]; }
  void init(int r, bool ov, int64_t w) {
    ratio = r;
    overlap = ov;
    width = w;
    const size_t n = static_cast<size_t>((ov ? 2 : 1) * r) * static_cast<size_t>(cols());
    kv.assign(n, 0.0f);
    score.assign(n, -std::numeric_limits<float>::infinity());
    rows.clear();
  }
  int64_t bytes() const { return static_cast<int64_t>(kv.size() + score.size() + rows.size()) * 4; }
};

struct V4LayerState {
  std::vector<float> window;   // [W * head_dim]
  V4CompressorState comp;      // main compressor (ratio > 0)
  V4CompressorState index;     // indexer compressor (CSA)
};

class V4SequenceState {
 public:
  explicit V4SequenceState(const DeepseekConfig& c) : config_(&c) { reset(); }

  void reset() {
    const DeepseekConfig& c = *config_;
    length_ = 0;
    layers_.assign(c.n_layers, V4LayerState{});
    for (int l = 0; l < c.n_layers; ++l) {
      const LayerSchedule& ls = c.layers[l];
      V4LayerState& s = layers_[l];
      s.window.assign(static_cast<size_t>(c.window_size) * c.head_dim, 0.0f);
      if (ls.ratio > 0) s.comp.init(ls.ratio, ls.overlap_compressor, c.head_dim);
      if (ls.has_indexer) s.index.init(ls.ratio, ls.overlap_compressor, c.index_head_dim);
    }
  }

  int64_t length() const { return length_; }
  void set_length(int64_t n) { length_ = n; }
  float* window_row(int layer, int64_t pos) {
    return &layers_[layer].window[static_cast<size_t>(pos % config_->window_size) * config_->head_dim];
  }
  V4CompressorState& comp(int layer) { return layers_[layer].comp; }
  V4CompressorState& index(int layer) { return layers_[layer].index; }

  int64_t bytes() const {
    int64_t b = 0;
    for (const auto& l : layers_)
      b += static_cast<int64_t>(l.window.size()) * 4 + l.comp.bytes() + l.index.bytes();
    return b;
  }

 private:
  const DeepseekConfig* config_;
  int64_t length_ = 0;
  std::vector<V4LayerState> layers_;
};

}  // namespace strata
