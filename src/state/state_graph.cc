// StateGraph construction and validation. See state_graph.h.
#include "state/state_graph.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <set>

#include <fmt/format.h>

#include "base/check.h"

namespace strata {

const char* stage_name(Stage s) {
  switch (s) {
    case Stage::kBackbone: return "backbone";
    case Stage::kDraft: return "draft";
  }
  return "?";
}

// ---------------- builder ----------------

StateGraphBuilder::StateGraphBuilder(std::string model_name, int n_layers_total) {
  g_.model_name_ = std::move(model_name);
  g_.layers_.resize(n_layers_total);
  for (int i = 0; i < n_layers_total; ++i) g_.layers_[i].layer = i;
}

OwnerId StateGraphBuilder::add_owner(StateKind kind, int layer, Stage stage,
                                     const StateSpec& spec) {
  StateOwnerInfo o;
  o.id = static_cast<OwnerId>(g_.owners_.size());
  o.kind = kind;
  o.layer = layer;
  o.stage = stage;
  o.spec = spec;
  o.label = layer >= 0 ? fmt::format("{}@L{}", state_kind_name(kind), layer)
                       : fmt::format("{}@request", state_kind_name(kind));
  g_.owners_.push_back(std::move(o));
  return g_.owners_.back().id;
}

void StateGraphBuilder::set_layer_stage(int layer, Stage stage) {
  g_.layers_.at(layer).stage = stage;
}

void StateGraphBuilder::add_write(int layer, OwnerId owner) { writes_.push_back({layer, owner}); }

void StateGraphBuilder::add_read(int layer, OwnerId owner, int consumer_ratio) {
  reads_.push_back({layer, owner, consumer_ratio});
}

StatusOr<StateGraph> StateGraphBuilder::build() {
  const int n_layers = static_cast<int>(g_.layers_.size());
  const int n_owners = static_cast<int>(g_.owners_.size());
  std::vector<int> writers(n_owners, 0);
  for (auto [layer, owner] : writes_) {
    if (layer < 0 || layer >= n_layers)
      return invalid_argument("state graph: write from layer {} out of range [0, {})", layer,
                              n_layers);
    if (owner < 0 || owner >= n_owners)
      return invalid_argument("state graph: layer {} writes owner {} which does not exist", layer,
                              owner);
    if (g_.owners_[owner].layer != layer)
      return invalid_argument("state graph: layer {} writes {}, owned by layer {}", layer,
                              g_.owners_[owner].label, g_.owners_[owner].layer);
    ++writers[owner];
    g_.layers_[layer].writes.push_back(owner);
  }
  // Dependency edges between layers: owner layer -> consumer layer.
  std::vector<std::set<int>> edges(n_layers);
  for (const Read& r : reads_) {
    if (r.layer < 0 || r.layer >= n_layers)
      return invalid_argument("state graph: read from layer {} out of range [0, {})", r.layer,
                              n_layers);
    if (r.owner < 0 || r.owner >= n_owners)
      return invalid_argument("state graph: layer {} consumes an owner ({}) that does not exist",
                              r.layer, r.owner);
    const StateOwnerInfo& o = g_.owners_[r.owner];
    if (r.ratio >= 0 && (o.spec.grows() || o.spec.transient()) && o.spec.ratio != r.ratio)
      return invalid_argument(
          "state graph: ratio mismatch: layer {} runs at ratio {} but reads {} of ratio {}",
          r.layer, r.ratio, o.label, o.spec.ratio);
    if (o.spec.transient() && o.layer > r.layer)
      return invalid_argument(
          "state graph: layer {} reads transient {} produced later in the step (layer {})",
          r.layer, o.label, o.layer);
    if (o.layer >= 0 && o.layer != r.layer) edges[o.layer].insert(r.layer);
    g_.owners_[r.owner].consumer_layers.push_back(r.layer);
    g_.layers_[r.layer].reads.push_back(r.owner);
  }
  for (const auto& o : g_.owners_) {
    if (o.layer >= 0 && writers[o.id] == 0)
      return invalid_argument("state graph: owner {} has no writer", o.label);
    if (o.consumer_layers.empty() && !o.spec.transient() && o.kind != StateKind::kDraftState)
      return invalid_argument("state graph: owner {} has no consumer", o.label);
  }
  // Cycle detection (DFS with colors).
  std::vector<int> color(n_layers, 0);
  std::vector<int> path;
  std::function<bool(int)> dfs = [&](int u) {
    color[u] = 1;
    path.push_back(u);
    for (int v : edges[u]) {
      if (color[v] == 1) {
        path.push_back(v);
        return true;
      }
      if (color[v] == 0 && dfs(v)) return true;
    }
    color[u] = 2;
    path.pop_back();
    return false;
  };
  for (int u = 0; u < n_layers; ++u) {
    if (color[u] == 0 && dfs(u)) {
      std::string cyc;
      for (int x : path) cyc += fmt::format("{}L{}", cyc.empty() ? "" : " -> ", x);
      return invalid_argument("state graph: dependency cycle between layers: {}", cyc);
    }
  }
  for (auto& o : g_.owners_) {
    std::sort(o.consumer_layers.begin(), o.consumer_layers.end());
    o.consumer_layers.erase(std::unique(o.consumer_layers.begin(), o.consumer_layers.end()),
                            o.consumer_layers.end());
  }
  return g_;
}

// ---------------- queries ----------------

OwnerId StateGraph::find_owner(StateKind kind, int layer) const {
  for (const auto& o : owners_)
    if (o.kind == kind && o.layer == layer) return o.id;
  return -1;
}

OwnerId StateGraph::owner_read_by(int layer, StateKind kind) const {
  if (layer < 0 || layer >= static_cast<int>(layers_.size())) return -1;
  for (OwnerId id : layers_[layer].reads)
    if (owners_[id].kind == kind) return id;
  return -1;
}

double StateGraph::bytes_per_token(Stage stage) const {
  double t = 0;
  for (const auto& o : owners_)
    if (o.stage == stage) t += o.spec.bytes_per_token();
  return t;
}
double StateGraph::bytes_per_token() const {
  return bytes_per_token(Stage::kBackbone) + bytes_per_token(Stage::kDraft);
}
int64_t StateGraph::bytes_per_request_fixed(Stage stage) const {
  int64_t t = 0;
  for (const auto& o : owners_)
    if (o.stage == stage) t += o.spec.bytes_per_request();
  return t;
}
int64_t StateGraph::bytes_per_request_fixed() const {
  return bytes_per_request_fixed(Stage::kBackbone) + bytes_per_request_fixed(Stage::kDraft);
}
double StateGraph::bytes_per_token(StateKind kind) const {
  double t = 0;
  for (const auto& o : owners_)
    if (o.kind == kind) t += o.spec.bytes_per_token();
  return t;
}
int64_t StateGraph::bytes_per_request_fixed(StateKind kind) const {
  int64_t t = 0;
  for (const auto& o : owners_)
    if (o.kind == kind) t += o.spec.bytes_per_request();
  return t;
}
int64_t StateGraph::transient_bytes(OwnerId id, int64_t query_tokens) const {
  return owners_.at(id).spec.transient_bytes_per_query * query_tokens;
}
std::vector<int> StateGraph::growth_ratios() const {
  std::set<int> r;
  for (const auto& o : owners_)
    if (o.spec.grows()) r.insert(o.spec.ratio);
  return {r.begin(), r.end()};
}

// ---------------- factories ----------------

namespace {

StateSpec window_spec(const DeepseekConfig& c) {
  StateSpec s;
  s.kind = StateKind::kWindowKv;
  s.granularity = Granularity::kRing;
  s.rows_fixed = c.window_size;
  s.row_elems = c.head_dim;
  s.quant_block = c.kv_fp8_block();
  if (c.is_v41()) {
    s.format = RowFormat::kFp8Ue8m0;
  } else {
    s.format = RowFormat::kFp8Ue8m0RopeBf16;
    s.rope_elems = c.rope_head_dim;
  }
  s.handoff = HandoffPolicy::kTransfer;
  s.rollback = "restore the slots overwritten by rejected positions (snapshot before verify)";
  return make_state_spec(s);
}

StateSpec compressed_spec(const DeepseekConfig& c, int ratio) {
  StateSpec s;
  s.kind = StateKind::kCompressedKv;
  s.granularity = ratio == 1 ? Granularity::kPerToken : Granularity::kPerCompressedRow;
  s.ratio = ratio;
  s.row_elems = c.head_dim;
  if (c.is_v41()) {
    s.format = RowFormat::kFp4E4m3;
    s.quant_block = 16;
  } else {
    s.format = RowFormat::kFp8Ue8m0RopeBf16;
    s.quant_block = c.kv_fp8_block();
    s.rope_elems = c.rope_head_dim;
  }
  s.handoff = HandoffPolicy::kTransfer;
  s.rollback = "truncate to floor(accepted_end / ratio) rows";
  return make_state_spec(s);
}

StateSpec index_key_spec(const DeepseekConfig& c, int ratio) {
  StateSpec s;
  s.kind = StateKind::kIndexKeys;
  s.granularity = ratio == 1 ? Granularity::kPerToken : Granularity::kPerCompressedRow;
  s.ratio = ratio;
  s.row_elems = c.index_head_dim;
  s.format = RowFormat::kFp4Ue8m0;
  s.quant_block = 32;
  s.handoff = HandoffPolicy::kTransfer;
  s.rollback = "truncate like the compressed KV";
  return make_state_spec(s);
}

StateSpec compressor_spec(StateKind kind, int ratio, int rows, int width) {
  StateSpec s;
  s.kind = kind;
  s.granularity = Granularity::kFixed;
  s.ratio = ratio;  // group size; rows == 2 x ratio: overlapping (previous group, then current)
  s.rows_fixed = rows;
  s.row_elems = 2 * width;  // [kv(width) | score(width)] per slot
  s.format = RowFormat::kF32;
  s.handoff = HandoffPolicy::kTransfer;
  s.rollback = "snapshot before a verify that can complete a group; restore on reject";
  StateSpec r = make_state_spec(s);
  r.layout = fmt::format("{} slots x [kv {} x f32 | score {} x f32]; fresh: kv 0, score -inf",
                         rows, width, width);
  return r;
}

StateSpec transient_spec(StateKind kind, int ratio, int64_t bytes_per_query, int elems) {
  StateSpec s;
  s.kind = kind;
  s.granularity = Granularity::kPerStep;
  s.ratio = ratio;
  s.row_elems = elems;
  s.format = RowFormat::kI32;
  s.transient_bytes_per_query = bytes_per_query;
  s.handoff = HandoffPolicy::kNone;
  s.rollback = "none (recomputed every forward)";
  return make_state_spec(s);
}

}  // namespace

StatusOr<StateGraph> StateGraph::from_deepseek(const DeepseekConfig& c) {
  if (static_cast<int>(c.layers.size()) != c.total_layers())
    return failed_precondition("DeepseekConfig not finalized (call finalize())");
  StateGraphBuilder b(fmt::format("deepseek-{}", deepseek_version_name(c.version)),
                      c.total_layers());
  const StateSpec win = window_spec(c);
  // Pass 1: owners, in layer order.
  std::vector<OwnerId> ckv(c.total_layers(), -1), keys(c.total_layers(), -1),
      topk(c.total_layers(), -1), cand(c.total_layers(), -1);
  for (const LayerSchedule& L : c.layers) {
    const Stage st = L.is_draft ? Stage::kDraft : Stage::kBackbone;
    b.set_layer_stage(L.layer_id, st);
    OwnerId w = b.add_owner(StateKind::kWindowKv, L.layer_id, st, win);
    b.add_write(L.layer_id, w);
    b.add_read(L.layer_id, w);
    if (L.has_compressor) {
      ckv[L.layer_id] = b.add_owner(StateKind::kCompressedKv, L.layer_id, st,
                                    compressed_spec(c, L.ratio));
      b.add_write(L.layer_id, ckv[L.layer_id]);
      if (L.ratio > 1) {
        const int rows = L.overlap_compressor ? 2 * L.ratio : L.ratio;
        const int width = L.overlap_compressor ? 2 * c.head_dim : c.head_dim;
        OwnerId cs = b.add_owner(StateKind::kCompressorState, L.layer_id, st,
                                 compressor_spec(StateKind::kCompressorState, L.ratio, rows, width));
        b.add_write(L.layer_id, cs);
        b.add_read(L.layer_id, cs);
      }
    }
    if (L.owns_index_keys) {
      keys[L.layer_id] =
          b.add_owner(StateKind::kIndexKeys, L.layer_id, st, index_key_spec(c, L.ratio));
      b.add_write(L.layer_id, keys[L.layer_id]);
      if (!c.is_v41()) {  // V4 CSA: separate overlapping index compressor (width 2*ihd)
        OwnerId ic = b.add_owner(
            StateKind::kIndexCompressorState, L.layer_id, st,
            compressor_spec(StateKind::kIndexCompressorState, L.ratio, 2 * L.ratio,
                            2 * c.index_head_dim));
        b.add_write(L.layer_id, ic);
        b.add_read(L.layer_id, ic);
      }
    }
    if (L.has_indexer) {
      topk[L.layer_id] = b.add_owner(StateKind::kTopk, L.layer_id, st,
                                     transient_spec(StateKind::kTopk, L.ratio,
                                                    4LL * c.index_topk, c.index_topk));
      b.add_write(L.layer_id, topk[L.layer_id]);
    }
    if (L.is_candidate_source) {
      cand[L.layer_id] = b.add_owner(
          StateKind::kCandidates, L.layer_id, st,
          transient_spec(StateKind::kCandidates, L.ratio, 4LL * c.candidate_topk_blocks,
                         c.candidate_topk_blocks));
      b.add_write(L.layer_id, cand[L.layer_id]);
    }
  }
  // Pass 2: reads of shared owners.
  for (const LayerSchedule& L : c.layers) {
    if (L.ratio == 0) continue;
    if (L.kv_owner >= 0) {
      if (ckv[L.kv_owner] < 0)
        return invalid_argument("layer {} reads compressed KV of layer {}, which owns none",
                                L.layer_id, L.kv_owner);
      b.add_read(L.layer_id, ckv[L.kv_owner], L.ratio);
    }
    if (L.has_indexer) {
      if (L.index_key_owner < 0 || keys[L.index_key_owner] < 0)
        return invalid_argument("layer {} has an indexer but no index-key owner", L.layer_id);
      b.add_read(L.layer_id, keys[L.index_key_owner], L.ratio);
    }
    if (L.topk_owner >= 0) {
      if (topk[L.topk_owner] < 0)
        return invalid_argument("layer {} reads top-k of layer {}, which has no indexer",
                                L.layer_id, L.topk_owner);
      b.add_read(L.layer_id, topk[L.topk_owner], L.ratio);
    }
    if (L.uses_candidates) b.add_read(L.layer_id, cand[L.candidate_owner], L.ratio);
  }
  if (!c.engram_layer_ids.empty()) {
    StateSpec e;
    e.kind = StateKind::kEngramHistory;
    e.granularity = Granularity::kFixed;
    e.rows_fixed = 1;
    e.row_elems = c.engram_max_ngram_size - 1;
    e.format = RowFormat::kI32;
    e.handoff = HandoffPolicy::kRebuild;
    e.rollback = "truncate (rebuild from the accepted token ids)";
    e = make_state_spec(e);
    e.layout = fmt::format("[{} x i32 mapped token id, newest last; -1 DEAD, -2 before start]",
                           e.row_elems);
    OwnerId eo = b.add_owner(StateKind::kEngramHistory, -1, Stage::kBackbone, e);
    for (int l : c.engram_layer_ids) b.add_read(l, eo);
  }
  if (c.n_draft_layers > 0) {
    StateSpec d;
    d.kind = StateKind::kDraftState;
    d.granularity = Granularity::kFixed;
    if (c.is_v41()) {
      d.rows_fixed = 0;
      d.row_elems = 0;
      d.format = RowFormat::kF32;
      d.handoff = HandoffPolicy::kRebuild;
      d.rollback = "discard drafts; rings keep only accepted positions";
    } else {
      // V4 MTP: the MTP layer's ring row of position j needs the backbone's hidden streams
      // at j AND token j+1, so the last position's streams are carried to the next call.
      d.rows_fixed = 1;
      d.row_elems = c.hc_mult * c.dim;
      d.format = RowFormat::kBf16;
      d.handoff = HandoffPolicy::kTransfer;
      d.rollback = "restore the row of the last accepted position (undo record)";
    }
    d = make_state_spec(d);
    d.layout = c.is_v41()
        ? "none per request: a draft block lives one step (the DSpark rings are the draft "
          "stages' window_kv owners)"
        : fmt::format("[{} x {} bf16]: the hidden streams after the last backbone block at the "
                      "last computed position (the MTP layer's h input)", c.hc_mult, c.dim);
    OwnerId dd = b.add_owner(StateKind::kDraftState, c.n_layers, Stage::kDraft, d);
    b.add_write(c.n_layers, dd);
  }
  return b.build();
}

StatusOr<StateGraph> StateGraph::from_llama(const LlamaStateDesc& d) {
  if (d.n_layers <= 0 || d.n_kv_heads <= 0 || d.head_dim <= 0)
    return invalid_argument("LlamaStateDesc: n_layers {}, n_kv_heads {}, head_dim {} must be > 0",
                            d.n_layers, d.n_kv_heads, d.head_dim);
  if (d.kv_format != RowFormat::kF32 && d.kv_format != RowFormat::kBf16)
    return invalid_argument("LlamaStateDesc: kv_format must be f32 or bf16");
  StateGraphBuilder b(d.name, d.n_layers);
  StateSpec s;
  s.kind = StateKind::kPlainKv;
  s.granularity = Granularity::kPerToken;
  s.ratio = 1;
  s.row_elems = 2 * d.n_kv_heads * d.head_dim;
  s.format = d.kv_format;
  s.handoff = HandoffPolicy::kTransfer;
  s.rollback = "truncate to the accepted length";
  s = make_state_spec(s);
  s.layout = fmt::format("[K {} x {}][V {} x {}] (heads-major)", d.n_kv_heads * d.head_dim,
                         row_format_name(d.kv_format), d.n_kv_heads * d.head_dim,
                         row_format_name(d.kv_format));
  for (int l = 0; l < d.n_layers; ++l) {
    OwnerId o = b.add_owner(StateKind::kPlainKv, l, Stage::kBackbone, s);
    b.add_write(l, o);
    b.add_read(l, o, 1);
  }
  return b.build();
}

}  // namespace strata
