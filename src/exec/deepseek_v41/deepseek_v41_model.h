// DeepseekV41Model: the DeepSeek-V4.1 text forward pass on CPU, following DeepSeek's reference
// inference/model.py + engram.py (HF deepseek-ai/DeepSeek-V4.1-Flash rev dba1be0a) with the
// rounding points of its kernels (Tenstorrent kernel_cpu.py port); spec
// docs/v41-architecture.md §2.
//
// forward(seq, tokens) runs tokens at positions [seq.length(), seq.length() + n): prefill of
// any length at 0, a later prefill chunk, or one-token decode; chunked prefill computes the
// same values as one chunk (every op is row-independent with a fixed reduction order, and
// window / compressor / indexer visibility follows the absolute position only).
// Per call: Engram hashing -> embedding into hc_mult streams -> for each layer (Engram before
// its layer, lagged mHC pre, attention with sliding window + CSA2 compressed KV / indexer /
// candidate blocks / top-k, MoE) -> collapse with the last FFN pre -> norm -> head (fp32).
//
// Routes (for golden validation): per call, MoE expert ids per backbone layer per token
// (gate top-k order) and, per index-source layer, the compressed positions the indexer kept
// per token (ascending; the indexer's unreachable picks dropped; empty when it did not run).
//
// State: every read/write of per-sequence state goes through V41SequenceState, an adapter
// over the state module's CacheManager storage API (serving format; see
// v41_sequence_state.h), with owners from state_graph() (StateGraph::from_deepseek).
//
// Errors: load() returns the config / checkpoint / Engram / state-graph errors; forward()
// InvalidArgument for token ids out of range, OutOfRange past max context,
// ResourceExhausted past the sequence's state capacity.
// Thread safety: the model is immutable after load and may serve many sequences, one call at
// a time per sequence.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "exec/call_shape.h"
#include "exec/deepseek_v41/v41_ops.h"
#include "exec/deepseek_v41/v41_sequence_state.h"
#include "model/deepseek_config.h"
#include "model/deepseek_v41_weights.h"
#include "model/engram_hash.h"
#include "exec/deepseek_v41/v41_engram_table.h"
#include "dist/dcp_comm.h"
#include "dist/expert_comm.h"
#include "dist/pipe_comm.h"
#include "model/safetensors.h"
#include "state/state_graph.h"

namespace strata {

struct StageCarry;  // exec/stage_carry.h

struct V41Routes {
  // moe[layer][t] expert ids; index[slot][t] kept compressed positions (slot follows
  // config.index_source_layers order).
  std::vector<std::vector<std::vector<int32_t>>> moe;
  std::vector<std::vector<std::vector<int32_t>>> index;
};

// Debug tap: called with activations named like the golden per-layer dumps ("embed",
// "layerKK.engram_out", "layerKK.attn_out", "layerKK.ffn_out", "layerKK.block_out",
// "layerKK.block_out.pre_mix", "final_norm_out"); data is [n_tokens, ...] row-major f32.
using V41DumpFn = std::function<void(const std::string& name, const float* data,
                                     const std::vector<int64_t>& shape)>;

struct V41ForwardOptions {
  bool all_logits = false;      // logits for every token (default: last token only)
  V41Routes* routes = nullptr;  // filled when non-null
  V41DumpFn dump;               // optional
  // Numeric form (exec/call_shape.h). kCanonical (serving): every row computed as a
  // one-token decode step at its position; decode_step and prompt_len are ignored.
  // kReference (validation): the two fields below reproduce the reference's call shapes.
  CallShape call_shape = CallShape::kCanonical;
  // kReference only. True for a one-token generation step. Reproduces the reference decode path exactly:
  // there an index source scores against `shared_attn.index_k`, which an index-key owner
  // republishes only in a call where its compressor emits a row. At a decode position where
  // a ratio-2 owner emits nothing, its indexer (and later ones) read the keys of the last
  // owner that did emit, possibly in the previous call (e.g. the ratio-1 source), sliced to
  // (pos+1)/ratio rows (zeros past its end). Prompt chunks (false) always use their own
  // owner's keys, as the reference whole-prompt prefill does, so chunked == whole prefill.
  bool decode_step = false;
  // kReference only. For prompt chunks: the length of the whole prompt, when the caller knows it. The
  // reference runs a prompt as one call whose list widths depend on its length (window list
  // min(L, W) entries, top-k width min(index_topk, L/m), index score rows of L/m entries, the
  // -inf padding of which steers torch.topk's tie order). A chunk given prompt_len lays out
  // every list exactly as that one call would, so chunked prefill is bit-identical to whole
  // prefill. 0 = unknown: widths follow the chunk's own end (identical values up to
  // last-bit reduction-order and exact-tie effects).
  int64_t prompt_len = 0;
};

// One DSpark draft block (reference Transformer.forward_spec at start_pos P, V4.1 DSpark;
// spec docs spec-tiers.md §1.1).
struct V41DsparkDraft {
  std::vector<int32_t> ids;        // [block + 1]: ids[0] the input token t_{P+1}, then the
                                   // drafts for positions P+2 .. P+1+block (greedy)
  std::vector<float> logits;       // [block, vocab] fp32, Markov bias added
  std::vector<float> confidence;   // [block] raw confidence logits (sigmoid = p(accept))
  // moe[stage][row]: the expert ids each stage's gate picked per block row (top-k order).
  std::vector<std::vector<std::vector<int32_t>>> moe;
};

struct V41LoadOptions {
  // Engram compressed-token map: a file (safetensors "engram.token_map" or JSON array)
  // injected instead of building it from the model's tokenizer.json.
  std::string engram_token_map_path;
  std::vector<int64_t> engram_token_map;  // takes precedence when non-empty
  int64_t max_context = 0;                // 0 = config max_position_embeddings
  // Positions one sequence's state can hold (new_sequence()'s SequenceCache is allocated
  // eagerly at this size); 0 = min(max_context, 32768).
  int64_t state_max_tokens = 0;
  // Old path: keep sequences in the interim f32 mirror instead of the state module.
  bool legacy_state = false;
  bool progress = false;
  // Compute threads for the forward (GEMMs split over output features, attention over
  // heads; results are identical for every thread count). 0 = the CPUs this process may use, 1 = caller only.
  int threads = 0;
  // Run the scalar reference loops instead of the repacked vector kernels (same results
  // bit for bit; for A/B tests and debugging). No extra weight copy is made.
  bool scalar_reference = false;
  // Attention of one query over the pool only when heads x KV rows x head_dim reaches this
  // many multiply-adds (below, a dispatch costs more than it saves); tests lower it to run
  // the pooled paths on tiny models.
  int64_t min_parallel_attention_macs = int64_t{1} << 16;
  // Where the Engram tables are read from (v41_engram_table.h): the checkpoint's mapping
  // (default), a resident copy, or the file on demand through a hot-row cache of
  // engram_cache_bytes (0: 64 MiB).
  EngramPlacement engram_placement = EngramPlacement::kMmap;
  int64_t engram_cache_bytes = 0;
  // Expert parallelism (dist/expert_comm.h, exec/ep_moe.h): tokens dispatched in FP8 to the
  // ranks owning their experts, outputs combined at their origin; null = the process's
  // (process_expert_comm()), which is null on one rank.
  std::shared_ptr<ExpertComm> expert_comm;
  // Decode context parallelism (dist/dcp_comm.h): compressed KV rows and index keys are
  // owner-sharded over the group; null = the process's (process_dcp_comm()), null on one rank.
  std::shared_ptr<DcpComm> dcp_comm;
  // Pipeline parallelism (dist/pipe_comm.h): this rank runs its stage's layers, the stage
  // boundaries cross between ranks (exec/stage_carry.h); null = the process's
  // (process_pipe_comm()), null on one rank.
  std::shared_ptr<PipeComm> pipe_comm;
};

class DeepseekV41Model {
 public:
  // Loads config.json (or inference-config.json), the safetensors checkpoint and the Engram
  // token map from `dir`.
  static StatusOr<std::unique_ptr<DeepseekV41Model>> load(const std::string& dir,
                                                          const V41LoadOptions& options);

  const DeepseekConfig& config() const { return config_; }
  const DeepseekV41Weights& weights() const { return *weights_; }
  // The Engram compressed-token map the load used (injected, from a file, or built from the
  // model's tokenizer); null for a model without Engram layers.
  const std::vector<int64_t>* engram_token_map() const {
    return engram_hasher_ ? &engram_hasher_->token_map() : nullptr;
  }
  // Engram table placement and its counters (null: the model has no Engram layers).
  const EngramTableStore* engram_tables() const { return engram_tables_.get(); }
  // Compute pool of the forward (null when loaded with threads == 1).
  ThreadPool* pool() const { return pool_.get(); }
  int64_t max_context() const { return max_context_; }
  // The state graph (owners and consumers per layer) sequences are stored through.
  const StateGraph& state_graph() const { return *state_graph_; }
  // Positions one new_sequence() can hold (<= max_context()).
  int64_t state_max_tokens() const { return state_max_tokens_; }

  // A fresh sequence: state in the serving format through the state module (an owned
  // SequenceCache of state_max_tokens() positions), or the f32 mirror when loaded with
  // legacy_state.
  std::unique_ptr<V41SequenceState> new_sequence() const;
  // This rank's pipeline stage as the state module sees it (CacheOptions::stage; {} without
  // pipeline parallelism): its sequences and caches store only the state its layers use.
  StageLayers stage_layers() const {
    if (!pipe_comm_) return {};
    const PipeStage st = pipe_stage(pipe_comm_.get(), config_.n_layers);
    return {st.begin, st.end, config_.n_layers};
  }
  // Always the f32 mirror (A/B checks of the port).
  std::unique_ptr<V41SequenceState> new_legacy_sequence() const {
    return std::make_unique<V41SequenceState>(config_);
  }

  // Runs `tokens` for `seq` and advances it. logits: [vocab] (last token) or [n, vocab].
  // With DSpark stages loaded (has_dspark()), every forward also writes each stage's window
  // ring for its rows (spec-tiers.md §1.1 "prefill seeds the ring", "decode writes
  // ring[s0 mod W]"): main_x = main_norm(main_proj(main_hidden)), main_hidden the bf16 mean
  // of the hc streams entering each dspark_target_layer_ids layer, then per stage
  // QDQ_fp8(RoPE(kv_norm(wkv(main_x)))) at the row's position. Rows are independent, so the
  // rings are a function of the prefix like every other state kind (prefix hits, chunking and
  // recompute restore them with the other rings).
  Status forward(V41SequenceState* seq, std::span<const int32_t> tokens,
                 const V41ForwardOptions& options, std::vector<float>* logits) const;

  // True when the checkpoint's DSpark stages are loaded (config dspark_block_size > 0).
  bool has_dspark() const;
  int dspark_block_size() const { return has_dspark() ? config_.dspark_block_size : 0; }
  // The DSpark draft after the committed prefix of `seq` (positions [0, P], P =
  // seq.length() - 1 >= 1) given the target's next token `token` (t_{P+1}, not yet in any
  // cache): the 3 stages over [token, noise x (block-1)] at positions P+1.., attending to
  // their rings (slots [0, min(W, P+1)) in slot order, then the block's own rows,
  // bidirectionally), the tied head, the sequential Markov refinement (greedy) and the
  // confidence head -- reference model.py DSparkAttention / DSparkBlock.forward_head /
  // Transformer.forward_spec. Reads `seq`, changes nothing. The block's rows are laid out as
  // the reference's one block-sized call (CallRows::reference(0, block)) in every call shape.
  // Errors: FailedPrecondition without DSpark stages or when P < 1 (the reference's
  // get_dspark_topk_idxs needs start_pos > 0); InvalidArgument for a token out of range.
  Status dspark_draft(const V41SequenceState& seq, int32_t token, V41DsparkDraft* out) const;

 private:
  DeepseekV41Model() = default;
  struct Ctx;  // per-call scratch (defined in the .cc files)

  void engram(int layer, Ctx& c) const;
  // Pipeline parallelism: the stage boundary of a forward (exec/stage_carry.h) built from its
  // context, and taken into it (CHECK-fails when it is not this call's: the stages diverged).
  StageCarry make_carry(const Ctx& c, int next_layer, const std::vector<float>& pre,
                        const std::vector<float>& taps, int tap_slot) const;
  void take_carry(StageCarry k, int next_layer, Ctx& c, std::vector<float>* pre,
                  std::vector<float>* taps, int* tap_slot) const;
  // Layers [L0, L1) over the call's rows: the body of forward's layer loop.
  void run_layers(Ctx& c, int L0, int L1, std::vector<float>* pre_prev,
                  std::vector<float>* main_hidden, int* tap_slot,
                  const V41ForwardOptions& opt) const;
  // A split call in the canonical form as `m` microbatches of rows through the stages (each
  // stage runs microbatch k + 1 while the next runs k), then the last stage's results to
  // every rank; c.h, *pre_prev, *main_hidden, *tap_slot and the routes end as if the call had
  // run whole.
  void pipeline_microbatches(Ctx& c, const PipeStage& st, int64_t m, std::vector<float>* pre_prev,
                             std::vector<float>* main_hidden, int* tap_slot,
                             const V41ForwardOptions& opt) const;
  void attention(int layer, const float* x, Ctx& c, float* out) const;
  void compress(int layer, const float* x, Ctx& c, std::vector<float>* latent,
                std::vector<int64_t>* latent_rows) const;
  // q: the indexer's wq_b(qr) [S, index_n_heads * index_head_dim], computed by the caller
  // together with the attention's wq_b (one dispatch); RoPE and FP4 QDQ are applied to it in
  // place.
  void indexer(int layer, const float* x, float* q, Ctx& c) const;
  // DSpark (v41_dspark.cc): the stage rings of a call's rows, from the tapped main_hidden
  // [S, n_targets * dim]; one stage's attention over its ring + the draft block.
  void write_dspark_rings(Ctx& c, const float* main_hidden) const;
  void dspark_attention(int layer, const float* x, const V41SequenceState& seq, int64_t P,
                        Ctx& c, float* out) const;
  // MoE (v41_moe.cc).
  void moe(int layer, const float* x, Ctx& c, float* out) const;
  void expert(const V41ExpertWeights& w, const float* x, int64_t M, const float* route_w,
              float* out) const;
  // The activation block of an expert whose w1|w3 are packed stacked (w13_packed), 0 if not.
  static int expert_act_block(const V41ExpertWeights& w);
  // expert() on rows already quantized for w1|w3 (a.block == expert_act_block(w) > 0: the
  // expert-parallel dispatch, exec/ep_moe.h), bit-identical to expert() on the float rows;
  // expert_tail is both's SwiGLU and down-projection of the up-projections g, u [M, I].
  void expert_q(const V41ExpertWeights& w, const kernels::QuantActs& a, const float* route_w,
                float* out) const;
  void expert_tail(const V41ExpertWeights& w, std::vector<float>& g, const std::vector<float>& u,
                   int64_t M, const float* route_w, float* out) const;
  // One expert applied to some rows of the MoE input x [S, dim].
  struct ExpertCall {
    const V41ExpertWeights* w = nullptr;
    std::vector<int64_t> toks;     // rows of x, ascending
    std::vector<float> rw;         // route weight per row (empty for the shared expert)
    const float* route_w = nullptr;  // rw.data(), or null for the shared expert
    float* out = nullptr;          // [toks.size(), dim]
  };
  // All calls as two batched GEMM dispatches; false (nothing written) when some weight is
  // not packed as FP8/FP4.
  bool experts_batched(const std::vector<ExpertCall>& calls, const float* x, int64_t S) const;

  DeepseekConfig config_;
  std::unique_ptr<SafetensorsCheckpoint> checkpoint_;
  std::unique_ptr<DeepseekV41Weights> weights_;
  std::optional<EngramHasher> engram_hasher_;
  std::unique_ptr<EngramTableStore> engram_tables_;
  std::shared_ptr<ExpertComm> expert_comm_;  // null or size 1: every expert here
  std::shared_ptr<DcpComm> dcp_comm_;        // null: every compressed row / index key here
  std::shared_ptr<PipeComm> pipe_comm_;      // null: every layer here
  std::vector<v41::RopeTable> rope_;  // per layer id (backbone, then draft stages)
  int64_t max_context_ = 0;
  int64_t min_parallel_attention_macs_ = int64_t{1} << 16;
  std::optional<StateGraph> state_graph_;
  int64_t state_max_tokens_ = 0;
  bool legacy_state_ = false;
  std::unique_ptr<ThreadPool> pool_;  // null: single-threaded
};

}  // namespace strata
