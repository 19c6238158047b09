// DeepseekV4Model: the DeepSeek-V4 (V4-Flash / V4-Pro) text forward pass on CPU, following
// DeepSeek's reference inference/model.py of V4-Flash (HF deepseek-ai/DeepSeek-V4-Flash; copy
// Mockingjay1316/deepseek-v4-flash-spark @0825add) with the rounding points of its kernels
// (golden v4flash-tiny PATCHES.md: 128 blocks for FP8 GEMM / act quant, per-128 activation
// scales for FP4, -inf initial running max in sparse_attn); spec docs/v41-architecture.md
// §2.0, §2.3–§2.5, §2.7, §2.8.
//
// forward(seq, tokens) runs tokens at positions [seq.length(), seq.length() + n): prefill of
// any length at 0, a later prefill chunk, or one-token decode. Per call: embedding into
// hc_mult streams -> for each layer (mHC pre from its own mixes, attention with sliding window
// + compressed KV (CSA ratio 4: overlapping compressor + indexer with Hadamard and FP4 keys;
// HCA any other ratio: all visible compressed rows), mHC post; the same for the MoE with
// hash routing (tid2eid) in the first n_hash_layers) -> hc_head -> norm -> head (fp32).
// Chunked prefill: every op is row-independent; compressor rows are pooled when the group's
// last token arrives whatever call it is in; query p sees window positions p-W+1..p and
// compressed rows g < (p+1)/ratio. The reference itself supports only whole prefill at 0
// and one-token decode; chunks use its decode list layout per query.
//
// State: every read/write of per-sequence state goes through V4SequenceState, by default an
// adapter over the state module (StateGraph::from_deepseek owners, serving-format rows; see
// v4_sequence_state.h); the pre-port f32 mirror stays behind load(..., legacy_state = true)
// or new_legacy_sequence() for A/B checks.
// Routes: per call, MoE expert ids per backbone layer per token (gate order) and, per CSA
// layer (in layer order), the compressed positions the indexer kept per token.
// MTP (speculative decoding, v4_mtp.cc): the MTP layer's row of position j pairs the
// backbone's hidden streams at j with token j+1 (MTPBlock.forward: e_proj(enorm(embed(t)))
// + h_proj(hnorm(h)) into a full Block, window attention only, then its own hc_head / norm and
// the shared head), at RoPE position j as vLLM / SGLang run DeepSeek MTP. Every forward
// writes, for the positions it completes, the MTP layer's window-ring rows (kv path only) and
// the draft_state carry (the streams of its last position, for the next call's first row), so
// the draft state is a function of the token ids like every other ring; mtp_draft only reads.
// Errors: load() returns config / checkpoint / state-graph errors; forward() InvalidArgument
// for token ids out of range, OutOfRange past max context, ResourceExhausted past the state
// capacity (state_max_tokens()).
// Thread safety: immutable after load; one call at a time per sequence.
#pragma once

#include "dist/dcp_comm.h"
#include "dist/expert_comm.h"
#include "dist/pipe_comm.h"
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "exec/deepseek_v41/deepseek_v41_model.h"
#include "exec/deepseek_v41/v41_ops.h"
#include "exec/deepseek_v4/v4_sequence_state.h"
#include "model/deepseek_config.h"
#include "model/deepseek_v4_weights.h"
#include "model/safetensors.h"
#include "state/state_graph.h"

namespace strata {

struct V4ForwardOptions {
  bool all_logits = false;     // logits for every token (default: last token only)
  V41Routes* routes = nullptr; // moe[layer][t]; index[csa_slot][t]
  V41DumpFn dump;              // "embed", "layerKK.attn_out|ffn_out|block_out", "final_norm_out"
  // Numeric form (exec/call_shape.h). kCanonical (serving): every row computed as a
  // one-token decode step at its position (prompt_len ignored). kReference (validation):
  // the reference's call shapes, below.
  CallShape call_shape = CallShape::kCanonical;
  // kReference only. Length of the whole prompt when this call is a chunk of it and the length is known (0 =
  // unknown). The reference's CPU numerics depend on the call's shape (torch's elementwise
  // loops switch to scalar libm / bf16 code for the last elements of a tensor, and the
  // attention index lists of a prefill are sized by the call); with prompt_len set, every
  // prompt chunk computes its rows exactly as rows of one whole-prompt call at position 0,
  // so chunked prefill reproduces whole prefill bit for bit.
  int64_t prompt_len = 0;
};

class DeepseekV4Model {
 public:
  // state_max_tokens: positions one new_sequence() can hold (0 = min(max_context, 32768)).
  // threads: compute threads of the forward (GEMMs split over output features; results are
  // identical for every count), 0 = the CPUs this process may use, 1 = the caller only. scalar_reference: keep
  // the checkpoint layout and run the scalar loops instead of the repacked vector kernels
  // (DeepseekV4Weights::pack_for_kernels); same results, for A/B checks. pipe_comm: this
  // rank's pipeline stage (dist/pipe_comm.h; null = the process's, process_pipe_comm()).
  // Errors: FailedPrecondition for an unsupported config or more stages than layers.
  static StatusOr<std::unique_ptr<DeepseekV4Model>> load(const std::string& dir,
                                                         int64_t max_context = 0,
                                                         bool legacy_state = false,
                                                         int64_t state_max_tokens = 0,
                                                         int threads = 1,
                                                         bool scalar_reference = false,
                                                         std::shared_ptr<PipeComm> pipe_comm = nullptr);

  const DeepseekConfig& config() const { return config_; }
  const DeepseekV4Weights& weights() const { return *weights_; }
  int64_t max_context() const { return max_context_; }
  // Layer ids of the CSA layers (the index route slots), ascending.
  const std::vector<int>& index_layers() const { return index_layers_; }

  // The state graph (one owner per layer and kind) sequences are stored through.
  const StateGraph& state_graph() const { return *state_graph_; }
  int64_t state_max_tokens() const { return state_max_tokens_; }
  // A fresh sequence over the state module (or the legacy f32 mirror when loaded with
  // legacy_state).
  std::unique_ptr<V4SequenceState> new_sequence() const;
  // This rank's pipeline stage as the state module sees it (CacheOptions::stage; {} without
  // pipeline parallelism): its sequences and caches store only the state its layers use.
  StageLayers stage_layers() const {
    if (!pipe_comm_) return {};
    const PipeStage st = pipe_stage(pipe_comm_.get(), config_.n_layers);
    return {st.begin, st.end, config_.n_layers};
  }
  std::unique_ptr<V4SequenceState> new_legacy_sequence() const {
    return std::make_unique<V4SequenceState>(config_);
  }

  Status forward(V4SequenceState* seq, std::span<const int32_t> tokens,
                 const V4ForwardOptions& options, std::vector<float>* logits) const;

  // Whether the checkpoint has an MTP block (mtp.0.*) to draft with.
  bool has_mtp() const;
  // Most drafts one mtp_draft call chains (the one MTP layer reused per step, as vLLM does
  // when num_speculative_tokens exceeds the model's MTP layers).
  static constexpr int kMtpMaxDrafts = 16;
  // k greedy drafts after `seq` (positions [0, P] computed, P = length()-1) given `token`, the
  // target's next token (position P+1, not yet fed): step i (0-based) runs the MTP block as a
  // one-token decode at position P+i on (streams, token) = (the carry, `token`) for i = 0,
  // else (step i-1's output streams, draft i-1); its window holds the ring's rows before P
  // and the draft's own rows from P on; draft i = the first argmax of its logits. Reads state
  // only (the draft's rows never reach the ring). `logits` (may be null) gets [k, vocab].
  // FailedPrecondition without an MTP block, on the legacy state backend or with no position
  // in state; InvalidArgument for a token out of range or k outside [1, kMtpMaxDrafts].
  Status mtp_draft(const V4SequenceState& seq, int32_t token, int k, std::vector<int32_t>* ids,
                   std::vector<float>* logits = nullptr) const;
  // Validation path: the MTP block as one call of n rows on `scratch` (a sequence of its own
  // whose only state used is the MTP layer's window ring, rows from scratch->length() on),
  // through the general attention() / moe() code, every row in the canonical one-token form.
  // Row i takes streams hidden[i] [hc, dim] and token tokens[i]; returns logits [n, vocab]
  // and the block's output streams [n, hc, dim]. mtp_draft's step 0 at position P equals row
  // P of this over the pairs (backbone streams at j, token j+1), j = 0..P (tests check it).
  Status mtp_forward(V4SequenceState* scratch, std::span<const int32_t> tokens,
                     const float* hidden, std::vector<float>* logits,
                     std::vector<float>* streams) const;

  struct Call;  // per-call context (v4_attention.cc / deepseek_v4_model.cc)

 private:
  DeepseekV4Model() = default;
  void attention(int layer, const float* x, Call& c, float* out) const;
  // Pieces of attention() the MTP draft shares: queries qr [S, q_lora], q [S, H, head_dim]
  // (RoPE at s0+i); window KV rows [S, head_dim] (RoPE at s0+i, FP8 QDQ); the grouped
  // low-rank output of o [S, H*head_dim] into out [S, dim].
  void attention_queries(int layer, const float* x, int64_t S, int64_t s0,
                         const v41::CallRows& vrows, float* qr, float* q) const;
  void window_kv(int layer, const float* x, int64_t S, int64_t s0, float* kv) const;
  void attention_output(int layer, const float* o, int64_t S, float* out) const;
  // MTP (v4_mtp.cc). The block input streams x [n, hc, dim] of n (token, streams) pairs, and
  // its attention input: post [n, hc], comb [n, hc, hc], xn = attn_norm(hc_pre(x)) [n, dim].
  void mtp_attn_in(const int32_t* toks, const float* hidden, int64_t n, float* x, float* post,
                   float* comb, float* xn) const;
  // The MTP block's logits [S, vocab] from its output streams h [S, hc, dim]: its own hc_head
  // and norm, then the shared vocabulary projection.
  void mtp_head(const float* h, int64_t S, const v41::CallRows& vrows, float* logits) const;
  // After the backbone of a call: the MTP ring rows it completes and the carry (h [S, hc, dim]).
  void write_mtp_rows(Call& c, const float* h) const;
  void moe(int layer, const float* x, Call& c, float* out) const;
  // Block.forward's second half on the hc streams h [S, hc, dim] (updated in place): mHC pre
  // from the ffn mixes, ffn_norm, MoE (its output into f [S, dim]), mHC post.
  void ffn_sublayer(int layer, Call& c, float* h, float* f) const;
  void expert(const V41ExpertWeights& w, const float* x, int64_t M, const float* route_w,
              bool clamp, float* out) const;
  // expert() on rows already quantized for w1 / w3 (a.block == v4::act_block(w.w1): the
  // expert-parallel dispatch, exec/ep_moe.h); FP8 / FP4 experts only. Bit-identical to
  // expert() on the float rows. The up-projections of both then go through expert_tail.
  void expert_q(const V41ExpertWeights& w, const kernels::QuantActs& a, const float* route_w,
                bool clamp, float* out) const;
  void expert_tail(const V41ExpertWeights& w, std::vector<float>& g, const std::vector<float>& u,
                   int64_t M, const float* route_w, bool clamp, float* out) const;
  // Feeds S tokens' x [S, D] to a compressor; appends the rows it emits to st.rows.
  void compress(const V4CompressorWeights& cw, V4CompressorState& st, bool rotate, int layer,
                const float* x, int64_t s0, int64_t S) const;
  // CSA indexer: per token the kept compressed rows in the reference's list order (score-
  // descending, unreachable entries as -1), list width k = min(index_topk, (s0+S)/ratio).
  void indexer(int layer, const float* x, const float* qr, Call& c,
               std::vector<std::vector<int32_t>>* lists) const;

  DeepseekConfig config_;
  std::unique_ptr<SafetensorsCheckpoint> checkpoint_;
  std::unique_ptr<DeepseekV4Weights> weights_;
  std::vector<v41::RopeTable> rope_;  // per backbone layer
  std::vector<int> index_layers_;
  int64_t max_context_ = 0;
  std::optional<StateGraph> state_graph_;
  int64_t state_max_tokens_ = 0;
  bool legacy_state_ = false;
  std::unique_ptr<ThreadPool> pool_;  // null: single-threaded
  // Expert parallelism (dist/expert_comm.h): the process's communicator at load; null or
  // size 1 = every expert here.
  std::shared_ptr<ExpertComm> expert_comm_;
  // Decode context parallelism (dist/dcp_comm.h): the process's communicator at load; null =
  // every compressed row and index key here.
  std::shared_ptr<DcpComm> dcp_comm_;
  // Pipeline parallelism (dist/pipe_comm.h): the process's communicator at load; null = every
  // layer on this rank.
  std::shared_ptr<PipeComm> pipe_comm_;
};

}  // namespace strata
