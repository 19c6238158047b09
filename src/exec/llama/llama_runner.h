// LlamaRunner: the ModelRunner for Llama/GQA models (LlamaForCausalLM).
//
// Forward pass per token (Touvron et al. 2023; same math as llama2.c run.c and HF
// modeling_llama.py): x = embed[tok]; per layer: h = x + Wo·attn(rope(Wq·n), rope(Wk·n),
// Wv·n) with n = rmsnorm(x); x = h + Wdown·(silu(Wgate·m) ⊙ Wup·m) with m = rmsnorm(h);
// logits = lm_head·rmsnorm(x). RoPE pairing per config (rope_interleaved).
//
// A step stacks every token of every item into one [M, d] batch for the matmuls; RoPE, KV
// writes and attention are per token (each token attends to its own sequence's positions
// 0..pos). All kernels are batch- and thread-count-invariant, so a token's logits are
// bit-identical whether it is decoded alone, in a batch or inside a prefill chunk.
// Decode context parallelism (process_dcp_comm(), `mpirun -np D ... --decode-context-parallel-size
// D`): each rank stores the KV of its position records and the ranks merge their attention
// chunk partials (exec/llama/llama_dcp_attention.h): logits bit-identical to one rank.
// Pipeline parallelism (process_pipe_comm(), `--pipeline-parallel-size P`): stage r runs layers
// [pp_layer_begin(r), pp_layer_begin(r + 1)) over microbatches of the step's rows; what
// crosses a boundary is the residual rows x (positions and token ids: every stage runs the same
// call); the last stage's rows reach every rank, which runs the final norm and head. A
// stage's KV holds only its layers (StageLayers); weights of other stages stay unread in the
// mapping.
// KV lives in the state graph's CacheManager (plain_kv owner per layer) through
// LlamaKvState (exec/llama/llama_kv_state.h), read in place by the attention kernels; the prefix
// cache shares full blocks of `prefix_alignment()` tokens between requests (refcounted).
//
// Errors: step() validates everything (unknown/duplicate sequence, empty item, token id out
// of range, context or KV capacity exceeded) before touching any state; on error no
// sequence advances. Thread safety: not thread-safe (model_runner.h).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "dist/dcp_comm.h"
#include "dist/pipe_comm.h"
#include "exec/model_runner.h"
#include "exec/llama/llama_kv_state.h"
#include "exec/runner_factory.h"
#include "model/llama_model.h"

namespace strata {

class LlamaRunner : public ModelRunner {
 public:
  static StatusOr<std::unique_ptr<LlamaRunner>> create(const std::string& dir,
                                                       const RunnerOptions& options);
  LlamaRunner(std::unique_ptr<LlamaModel> model, const RunnerOptions& options);

  const ModelInfo& info() const override { return info_; }
  Status add_sequence(SeqId seq) override;
  void release_sequence(SeqId seq) override;
  int64_t sequence_length(SeqId seq) const override;
  int64_t token_capacity_left(SeqId seq) const override;
  int64_t prefix_cache_bytes_per_unit() const override {
    return prefix_alignment() * kv_.bytes_per_token();
  }
  Status step(std::span<const StepItem> items, std::vector<float>* logits) override;
  std::vector<CacheUsage> cache_usage() const override;
  int64_t attach_cached_prefix(SeqId seq, std::span<const int32_t> tokens) override;
  // Exact and cheap: drops the KV rows past new_len (LlamaKvState::truncate).
  Status truncate_sequence(SeqId seq, int64_t new_len) override;
  int64_t prefix_alignment() const override;
  const StateGraph* state_graph() const override { return &kv_.graph(); }
  int64_t peek_cached_prefix(std::span<const int32_t> tokens) const override {
    return kv_.peek_prefix(tokens);
  }
  void prefetch_cached_prefix(std::span<const int32_t> tokens) override {
    kv_.prefetch_prefix(tokens);
  }
  Status export_handoff(SeqId seq, int64_t from_pos, std::span<const int32_t> ids,
                        HandoffState* out) const override {
    return kv_.export_state(seq.value, from_pos, ids, out);
  }
  Status import_handoff(SeqId seq, std::span<const int32_t> tokens, const HandoffState& st,
                        int64_t* held) override {
    return kv_.import_state(seq.value, tokens, st, held);
  }

  const LlamaModel& model() const { return *model_; }
  const LlamaKvState& kv_state() const { return kv_; }
  ThreadPool& pool() { return *pool_; }
  // Bytes of weights + KV read by one decode step of a sequence of length `len`.
  int64_t decode_bytes_read(int64_t len) const override;
  int64_t prefill_flops_per_token() const override;

 private:
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<ThreadPool> pool_;
  LlamaKvState kv_;
  std::shared_ptr<DcpComm> dcp_;  // decode context parallelism (null: one rank)
  std::shared_ptr<PipeComm> pipe_;  // pipeline parallelism (null: one stage)
  // Pipeline boundary: x_ rows [r0, r1) before layer next_layer (checked on receipt).
  std::vector<uint8_t> put_rows(int64_t r0, int64_t r1, int next_layer) const;
  void take_rows(std::vector<uint8_t> bytes, int64_t r0, int64_t r1, int next_layer);
  ModelInfo info_;
  // Step scratch (grown on demand).
  std::vector<float> dcp_buf_;
  std::vector<float> x_, xn_, q_, k_, v_, att_, tmp_, gate_, up_, rope_cos_, rope_sin_;
};

}  // namespace strata
