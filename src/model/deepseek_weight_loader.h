// DeepseekWeightLoader (internal to model/): the checkpoint reads both DeepSeek weight loaders
// (deepseek_v41_weights.cc, deepseek_v4_weights.cc) share. get() checks a tensor's dtype and
// shape (SafetensorsCheckpoint::get: errors name the tensor and file) and records it as used;
// the linear helpers build V41Linear views (zero-copy) in the released formats:
//   fp8_linear  `X.weight` F8_E4M3 [out, in] + `X.scale` F8_E8M0 [ceil(out/b), ceil(in/b)]
//               (or BF16 [out, in] when the file stores it so);
//   fp4_linear  `X.weight` I8/U8 [out, in/2] (two E2M1 per byte, even K low) + `X.scale`
//               F8_E8M0 [out, in/32]; FailedPrecondition when in % 32 != 0;
//   bf16_linear `X.weight` BF16 [out, in].
// Source: the V4 / V4.1 reference convert.py layouts (docs/models.md). Not thread-safe.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "model/deepseek_config.h"
#include "model/deepseek_v41_weights.h"
#include "model/safetensors.h"

namespace strata {

class DeepseekWeightLoader {
 public:
  explicit DeepseekWeightLoader(const SafetensorsCheckpoint& ckpt) : ckpt_(ckpt) {}
  virtual ~DeepseekWeightLoader() = default;

  StatusOr<TensorView> get(const std::string& name, DType dt, std::vector<int64_t> shape) {
    STRATA_ASSIGN_OR_RETURN(TensorView v, ckpt_.get(name, dt, shape));
    if (used_.insert(v.name).second) on_first_use(v);
    return v;
  }
  StatusOr<V41Linear> fp8_linear(const std::string& base, int64_t out, int64_t in, int block) {
    V41Linear l;
    l.out = out;
    l.in = in;
    l.block = block;
    STRATA_ASSIGN_OR_RETURN(TensorView probe, ckpt_.get(base + ".weight"));
    if (probe.dtype == DType::kBF16) {
      l.kind = V41WeightKind::kBf16;
      STRATA_ASSIGN_OR_RETURN(l.weight, get(base + ".weight", DType::kBF16, {out, in}));
      return l;
    }
    l.kind = V41WeightKind::kFp8;
    STRATA_ASSIGN_OR_RETURN(l.weight, get(base + ".weight", DType::kF8_E4M3, {out, in}));
    STRATA_ASSIGN_OR_RETURN(l.scale, get(base + ".scale", DType::kF8_E8M0,
                                         {ceil_div(out, block), ceil_div(in, block)}));
    return l;
  }
  StatusOr<V41Linear> fp4_linear(const std::string& base, int64_t out, int64_t in) {
    V41Linear l;
    l.kind = V41WeightKind::kFp4;
    l.out = out;
    l.in = in;
    l.block = 32;
    if (in % 32 != 0)
      return failed_precondition("{}: FP4 in-features {} not a multiple of 32", base, in);
    STRATA_ASSIGN_OR_RETURN(TensorView probe, ckpt_.get(base + ".weight"));
    const DType dt = probe.dtype == DType::kU8 ? DType::kU8 : DType::kI8;
    STRATA_ASSIGN_OR_RETURN(l.weight, get(base + ".weight", dt, {out, in / 2}));
    STRATA_ASSIGN_OR_RETURN(l.scale, get(base + ".scale", DType::kF8_E8M0, {out, in / 32}));
    return l;
  }
  StatusOr<V41Linear> bf16_linear(const std::string& base, int64_t out, int64_t in) {
    V41Linear l;
    l.kind = V41WeightKind::kBf16;
    l.out = out;
    l.in = in;
    STRATA_ASSIGN_OR_RETURN(l.weight, get(base + ".weight", DType::kBF16, {out, in}));
    return l;
  }
  // Distinct tensors read so far.
  int64_t used() const { return static_cast<int64_t>(used_.size()); }

  // What every V4 / V4.1 block has alike under prefix `p` ("layers.N." / "mtp.N."): the two
  // norms, the attention and FFN mHC mixes (`hc_{attn,ffn}_{fn,base,scale}` F32
  // [(2+hc)·hc, hc·dim], [(2+hc)·hc], [3]) and the attention's core (attn_sink F32 [H];
  // wq_a, wq_b, wkv, wo_a, wo_b FP8 with `blk` blocks; q_norm, kv_norm BF16). Block: a
  // V41BlockWeights or V4BlockWeights (same field names).
  template <class Block>
  Status load_block_core(const DeepseekConfig& c, const std::string& p, int blk, Block* b) {
    const int64_t D = c.dim, hc = c.hc_mult, mix = (2 + hc) * hc;
    STRATA_ASSIGN_OR_RETURN(b->attn_norm, get(p + "attn_norm.weight", DType::kBF16, {D}));
    STRATA_ASSIGN_OR_RETURN(b->ffn_norm, get(p + "ffn_norm.weight", DType::kBF16, {D}));
    for (auto [n, m] : {std::pair{"hc_attn", &b->hc_attn}, std::pair{"hc_ffn", &b->hc_ffn}}) {
      const std::string q = p + n;
      STRATA_ASSIGN_OR_RETURN(m->fn, get(q + "_fn", DType::kF32, {mix, hc * D}));
      STRATA_ASSIGN_OR_RETURN(m->base, get(q + "_base", DType::kF32, {mix}));
      STRATA_ASSIGN_OR_RETURN(m->scale, get(q + "_scale", DType::kF32, {3}));
    }
    const int64_t H = c.n_heads, hd = c.head_dim, ql = c.q_lora_rank;
    const int64_t lo = int64_t{c.o_groups} * c.o_lora_rank;
    const std::string a = p + "attn.";
    auto& at = b->attn;
    STRATA_ASSIGN_OR_RETURN(at.attn_sink, get(a + "attn_sink", DType::kF32, {H}));
    STRATA_ASSIGN_OR_RETURN(at.wq_a, fp8_linear(a + "wq_a", ql, D, blk));
    STRATA_ASSIGN_OR_RETURN(at.q_norm, get(a + "q_norm.weight", DType::kBF16, {ql}));
    STRATA_ASSIGN_OR_RETURN(at.wq_b, fp8_linear(a + "wq_b", H * hd, ql, blk));
    STRATA_ASSIGN_OR_RETURN(at.wkv, fp8_linear(a + "wkv", hd, D, blk));
    STRATA_ASSIGN_OR_RETURN(at.kv_norm, get(a + "kv_norm.weight", DType::kBF16, {hd}));
    STRATA_ASSIGN_OR_RETURN(at.wo_a, fp8_linear(a + "wo_a", lo, H * hd / c.o_groups, blk));
    STRATA_ASSIGN_OR_RETURN(at.wo_b, fp8_linear(a + "wo_b", D, lo, blk));
    return ok_status();
  }

  // The routed experts `f`experts.E.w{1,2,3} (E in [0, count)): FP4 when c.expert_dtype is "fp4",
  // else FP8 with `blk` blocks; w1/w3 [moe_inter_dim, dim], w2 [dim, moe_inter_dim].
  Status load_routed_experts(const DeepseekConfig& c, const std::string& f, int64_t count, int blk,
                             std::vector<V41ExpertWeights>* experts) {
    const int64_t D = c.dim, I = c.moe_inter_dim;
    const bool fp4 = c.expert_dtype == "fp4";
    experts->resize(count);
    for (int64_t e = 0; e < count; ++e) {
      const std::string x = fmt::format("{}experts.{}.", f, e);
      V41ExpertWeights& ew = (*experts)[e];
      for (auto [n, w, o, i] : {std::tuple{"w1", &ew.w1, I, D}, std::tuple{"w2", &ew.w2, D, I},
                                std::tuple{"w3", &ew.w3, I, D}}) {
        const std::string name = x + n;
        if (fp4) {
          STRATA_ASSIGN_OR_RETURN(*w, fp4_linear(name, o, i));
        } else {
          STRATA_ASSIGN_OR_RETURN(*w, fp8_linear(name, o, i, blk));
        }
      }
    }
    return ok_status();
  }
  // The one shared expert `f`shared_experts.w{1,2,3} (FP8, `blk` blocks); FailedPrecondition
  // unless c.n_shared_experts == 1 (both references require it; `model` names the family).
  Status load_shared_expert(const DeepseekConfig& c, const std::string& f, int blk,
                            const char* model, V41ExpertWeights* shared) {
    if (c.n_shared_experts != 1)
      return failed_precondition("n_shared_experts = {}: the {} reference requires 1",
                                 c.n_shared_experts, model);
    const int64_t D = c.dim, I = c.moe_inter_dim;
    STRATA_ASSIGN_OR_RETURN(shared->w1, fp8_linear(f + "shared_experts.w1", I, D, blk));
    STRATA_ASSIGN_OR_RETURN(shared->w2, fp8_linear(f + "shared_experts.w2", D, I, blk));
    STRATA_ASSIGN_OR_RETURN(shared->w3, fp8_linear(f + "shared_experts.w3", I, D, blk));
    return ok_status();
  }

 protected:
  static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
  // Called once per tensor the first time get() returns it (byte accounting).
  virtual void on_first_use(const TensorView& v) {}
  const SafetensorsCheckpoint& ckpt_;
  std::set<std::string> used_;
};

}  // namespace strata
