// StateGraph: WHO owns and who consumes each piece of per-request state. For every logical
// layer (backbone and draft stages) it records which physical owner it writes and which it
// reads, per StateKind. Built from a DeepseekConfig (V4.1: shared owners kv/index/candidate
// sources; V4: one owner per compressed layer), from a LlamaStateDesc (one plain-KV owner per
// layer), or by hand with StateGraphBuilder (tests, future models). Validated at build:
//   * a consumer whose owner id does not exist / has another kind   -> InvalidArgument
//   * consumer ratio != owner ratio (compressed kinds)              -> InvalidArgument
//   * a dependency cycle between layers (owner layer -> consumer)   -> InvalidArgument
//   * a consumer reading a persistent owner of a LATER layer is only legal across steps; a
//     transient (top-k / candidates) must be produced by an earlier-or-same layer.
// Owners are counted once in every byte total ("owners once"): per-token growth is the sum
// over growing owners of row_bytes / ratio; the fixed per-request part is the sum over ring /
// fixed owners of rows x row_bytes, split by stage (backbone vs draft).
// Thread safety: immutable after build; share freely.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/deepseek_config.h"
#include "state/state_spec.h"

namespace strata {

// Generic Llama/GQA description (kept here so state/ does not depend on a Llama config type).
struct LlamaStateDesc {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  RowFormat kv_format = RowFormat::kF32;  // kF32 or kBf16
  std::string name = "llama";
};

enum class Stage : uint8_t { kBackbone, kDraft };
const char* stage_name(Stage s);

using OwnerId = int;  // index into StateGraph::owners()

struct StateOwnerInfo {
  OwnerId id = -1;
  StateKind kind = StateKind::kWindowKv;
  int layer = -1;         // the physical owner's layer id (-1 = request-global, e.g. Engram)
  Stage stage = Stage::kBackbone;
  StateSpec spec;
  std::vector<int> consumer_layers;  // layers that read it (including the owner if it reads)
  std::string label;      // e.g. "compressed_kv@L20"
};

// One logical layer's accesses, as owner ids.
struct LayerStateAccess {
  int layer = 0;
  Stage stage = Stage::kBackbone;
  std::vector<OwnerId> writes;
  std::vector<OwnerId> reads;
};

class StateGraph {
 public:
  static StatusOr<StateGraph> from_deepseek(const DeepseekConfig& cfg);
  static StatusOr<StateGraph> from_llama(const LlamaStateDesc& desc);

  const std::string& model_name() const { return model_name_; }
  const std::vector<StateOwnerInfo>& owners() const { return owners_; }
  const std::vector<LayerStateAccess>& layers() const { return layers_; }
  const StateOwnerInfo& owner(OwnerId id) const { return owners_.at(id); }
  // The owner of `kind` physically at `layer`, or -1.
  OwnerId find_owner(StateKind kind, int layer) const;
  // The owner that `layer` reads for `kind` (its own or a source's), or -1.
  OwnerId owner_read_by(int layer, StateKind kind) const;

  // Owners-once totals. `stage` filters; totals over both stages when omitted.
  double bytes_per_token(Stage stage) const;
  double bytes_per_token() const;
  int64_t bytes_per_request_fixed(Stage stage) const;
  int64_t bytes_per_request_fixed() const;
  double bytes_per_token(StateKind kind) const;          // both stages
  int64_t bytes_per_request_fixed(StateKind kind) const; // both stages
  // Bytes a transient owner needs for one step of `query_tokens` tokens.
  int64_t transient_bytes(OwnerId id, int64_t query_tokens) const;
  // Every compression ratio of growing owners (1 for plain per-token kinds).
  std::vector<int> growth_ratios() const;

 private:
  friend class StateGraphBuilder;
  std::string model_name_;
  std::vector<StateOwnerInfo> owners_;
  std::vector<LayerStateAccess> layers_;
};

// Assembles and validates a graph. add_* return the new owner id.
class StateGraphBuilder {
 public:
  explicit StateGraphBuilder(std::string model_name, int n_layers_total);
  OwnerId add_owner(StateKind kind, int layer, Stage stage, const StateSpec& spec);
  void set_layer_stage(int layer, Stage stage);
  void add_write(int layer, OwnerId owner);
  // `consumer_ratio` is the ratio the consumer layer runs at (checked against the owner's).
  void add_read(int layer, OwnerId owner, int consumer_ratio = -1);
  StatusOr<StateGraph> build();

 private:
  struct Read {
    int layer;
    OwnerId owner;
    int ratio;
  };
  StateGraph g_;
  std::vector<Read> reads_;
  std::vector<std::pair<int, OwnerId>> writes_;
};

}  // namespace strata
