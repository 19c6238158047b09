// DeepseekV4Weights::pack_for_kernels (see deepseek_v4_weights.h).
#include <algorithm>
#include <functional>
#include <vector>

#include "base/thread_pool.h"
#include "model/deepseek_v4_weights.h"
#include "model/kernel_pack.h"

namespace strata {

void DeepseekV4Weights::pack_for_kernels(ThreadPool* pool, int layer_begin, int layer_end,
                                         ExpertShare experts, PackedWeightCache* cache) {
  std::vector<PackJob> jobs;
  auto add_linear = [&](V41Linear& l) {
    if (!l.present()) return;
    // The packed FP8 kernel quantizes activations per weight block (V4: act block = block).
    if (l.kind == V41WeightKind::kFp8 &&
        (l.block % 8 != 0 || l.in % l.block != 0 || l.scale.dtype != DType::kF8_E8M0))
      return;
    if (l.kind == V41WeightKind::kFp4 && l.in % 32 != 0) return;
    jobs.push_back({[&l] {
                      l.packed = pack_linear(l);
                      return l.packed->bytes();
                    },
                    {{&l.packed, l.out, l.in}}});
  };
  auto add_view = [&](const TensorView& t, std::shared_ptr<const kernels::PackedSeqWeight>* dst) {
    if (!t.data || t.shape.size() != 2) return;
    jobs.push_back({[&t, dst] {
                      *dst = pack_view(t, t.shape[0], t.shape[1]);
                      return (*dst)->bytes();
                    },
                    {{dst, t.shape[0], t.shape[1]}}});
  };
  std::vector<V4BlockWeights*> blocks;
  for (int l = std::max(0, layer_begin); l < std::min<int>(layer_end, layers_.size()); ++l)
    blocks.push_back(&layers_[l]);
  for (V4BlockWeights& b : mtp_) {
    blocks.push_back(&b);
    add_linear(b.e_proj);
    add_linear(b.h_proj);
  }
  for (V4BlockWeights* bp : blocks) {
    V4BlockWeights& b = *bp;
    V4AttentionWeights& a = b.attn;
    for (V41Linear* l : {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_a, &a.wo_b, &a.indexer.wq_b,
                         &a.indexer.weights_proj})
      add_linear(*l);
    for (V4CompressorWeights* c : {&a.compressor, &a.indexer.compressor}) {
      if (!c->present) continue;
      add_view(c->wkv, &c->wkv_packed);
      add_view(c->wgate, &c->wgate_packed);
    }
    auto add_expert = [&](V41ExpertWeights& e) {
      for (V41Linear* l : {&e.w1, &e.w2, &e.w3}) add_linear(*l);
    };
    add_expert(b.ffn.shared);
    const int64_t E = static_cast<int64_t>(b.ffn.experts.size());
    const bool backbone = bp >= layers_.data() && bp < layers_.data() + layers_.size();
    for (int64_t e = 0; e < E; ++e)
      if (!backbone || experts.owns(e, E)) add_expert(b.ffn.experts[e]);
    add_view(b.ffn.gate_weight, &b.ffn.gate_packed);
    add_view(b.hc_attn.fn, &b.hc_attn.fn_packed);
    add_view(b.hc_ffn.fn, &b.hc_ffn.fn_packed);
  }
  add_view(head_, &head_packed_);
  packed_bytes_ = cache != nullptr ? cache->pack(jobs, pool) : run_pack_jobs(jobs, pool);
}

}  // namespace strata
