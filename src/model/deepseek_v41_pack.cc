// DeepseekV41Weights::pack_for_kernels (see deepseek_v41_weights.h) and the packing helpers
// it shares with DeepseekV4Weights (model/kernel_pack.h).
#include <algorithm>
#include <atomic>
#include <functional>

#include "base/check.h"
#include "base/thread_pool.h"
#include "model/deepseek_v41_weights.h"
#include "model/kernel_pack.h"

namespace strata {

int64_t V41PackedLinear::bytes() const {
  return fp8.bytes() + fp4.bytes() + seq.bytes();
}

std::shared_ptr<const kernels::PackedSeqWeight> pack_view(const TensorView& t, int64_t n, int64_t k) {
  STRATA_CHECK(t.dtype == DType::kBF16 || t.dtype == DType::kF32);
  auto p = std::make_shared<kernels::PackedSeqWeight>(
      t.dtype == DType::kBF16 ? kernels::pack_seq_weight_bf16(t.u16(), n, k)
                              : kernels::pack_seq_weight_f32(t.f32(), n, k));
  release_view_pages(t);  // the kernels read the packed copy
  return p;
}

std::shared_ptr<const V41PackedLinear> pack_linear(const V41Linear& l) {
  auto p = std::make_shared<V41PackedLinear>();
  switch (l.kind) {
    case V41WeightKind::kFp8: {
      STRATA_CHECK(l.scale.dtype == DType::kF8_E8M0);
      kernels::Fp8BlockWeight w{l.weight.data, l.scale.data, nullptr, l.out, l.in, l.block, l.block};
      p->fp8 = kernels::pack_fp8_weight(w);
      break;
    }
    case V41WeightKind::kFp4: {
      kernels::Fp4Weight w{l.weight.data, l.scale.data, l.out, l.in, 32};
      p->fp4 = kernels::pack_fp4_weight(w);
      break;
    }
    case V41WeightKind::kBf16:
      p->seq = kernels::pack_seq_weight_bf16(l.weight.u16(), l.out, l.in);
      break;
    case V41WeightKind::kF32:
      p->seq = kernels::pack_seq_weight_f32(l.weight.f32(), l.out, l.in);
      break;
  }
  release_view_pages(l.weight);  // the kernels read the packed copy
  release_view_pages(l.scale);
  return p;
}

int64_t run_pack_jobs(const std::vector<PackJob>& jobs, ThreadPool* pool) {
  std::atomic<int64_t> total{0};
  auto run = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) total += jobs[i].pack();
  };
  if (pool != nullptr && pool->num_threads() > 1) {
    pool->parallel_for(static_cast<int64_t>(jobs.size()), run);
  } else {
    run(0, static_cast<int64_t>(jobs.size()));
  }
  return total.load();
}

namespace {

// w1 over w3 ([2*inter, dim]) in the stored format, packed; null when the two cannot be
// stacked (different kinds, or FP8 block rows that would straddle the seam).
std::shared_ptr<const V41PackedLinear> pack_stacked(const V41Linear& a, const V41Linear& b) {
  if (a.kind != b.kind || a.in != b.in || a.out != b.out) return nullptr;
  const int64_t n = a.out, k = a.in;
  auto p = std::make_shared<V41PackedLinear>();
  auto release = [&] {  // the kernels read the packed copy
    for (const V41Linear* l : {&a, &b}) {
      release_view_pages(l->weight);
      release_view_pages(l->scale);
    }
  };
  if (a.kind == V41WeightKind::kFp4) {
    p->fp4 = kernels::pack_fp4_weight_stacked({a.weight.data, a.scale.data, n, k, 32},
                                              {b.weight.data, b.scale.data, n, k, 32});
    release();
    return p;
  }
  if (a.kind == V41WeightKind::kFp8 && a.block == 32 && b.block == 32 && n % 32 == 0 &&
      a.scale.dtype == DType::kF8_E8M0 && b.scale.dtype == DType::kF8_E8M0) {
    p->fp8 = kernels::pack_fp8_weight_stacked({a.weight.data, a.scale.data, nullptr, n, k, 32, 32},
                                              {b.weight.data, b.scale.data, nullptr, n, k, 32, 32});
    release();
    return p;
  }
  return nullptr;
}

}  // namespace

void DeepseekV41Weights::pack_for_kernels(ThreadPool* pool, int layer_begin, int layer_end,
                                          ExpertShare experts, PackedWeightCache* cache) {
  // Collect the jobs first (each writes its own distinct shared_ptr slots), then run them
  // (or restore their slots from the cache).
  std::vector<PackJob> jobs;
  auto add_linear = [&](V41Linear& l) {
    if (!l.present()) return;
    // FP8 kernels need the activation block (32 in V4.1) to equal the weight's K block.
    if (l.kind == V41WeightKind::kFp8 && l.block != 32) return;
    jobs.push_back({[&l] {
                      l.packed = pack_linear(l);
                      return l.packed->bytes();
                    },
                    {{&l.packed, l.out, l.in}}});
  };
  const int64_t D = config_.dim, hc = config_.hc_mult;
  std::vector<V41BlockWeights*> blocks;
  for (int l = std::max(0, layer_begin); l < std::min<int>(layer_end, layers_.size()); ++l)
    blocks.push_back(&layers_[l]);
  for (V41BlockWeights& b : drafts_) blocks.push_back(&b);
  for (V41BlockWeights* bp : blocks) {
    V41BlockWeights& b = *bp;
    V41AttentionWeights& a = b.attn;
    for (V41Linear* l : {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_a, &a.wo_b, &a.compressor.wkv,
                         &a.compressor.wgate, &a.indexer.wq_b, &a.indexer.weights_proj,
                         &a.indexer.wk, &b.engram.wkv, &b.main_proj})
      add_linear(*l);
    auto add_expert = [&](V41ExpertWeights& e) {
      add_linear(e.w2);
      if (!e.w1.present() || !e.w3.present()) return;
      jobs.push_back({[&e] {
                        e.w13_packed = pack_stacked(e.w1, e.w3);
                        if (e.w13_packed) return e.w13_packed->bytes();
                        int64_t bytes = 0;  // not stackable: each on its own (FP8 only with
                                            // 32-wide blocks)
                        for (V41Linear* l : {&e.w1, &e.w3}) {
                          if (l->kind == V41WeightKind::kFp8 && l->block != 32) continue;
                          l->packed = pack_linear(*l);
                          bytes += l->packed->bytes();
                        }
                        return bytes;
                      },
                      {{&e.w13_packed, 2 * e.w1.out, e.w1.in},
                       {&e.w1.packed, e.w1.out, e.w1.in},
                       {&e.w3.packed, e.w3.out, e.w3.in}}});
    };
    const int64_t E = static_cast<int64_t>(b.ffn.experts.size());
    const bool backbone = bp >= layers_.data() && bp < layers_.data() + layers_.size();
    for (int64_t e = 0; e < E; ++e)
      if (!backbone || experts.owns(e, E)) add_expert(b.ffn.experts[e]);
    add_expert(b.ffn.shared);
    V41MoeWeights* moe = &b.ffn;
    if (moe->gate_weight.data) {
      const int64_t E = moe->gate_weight.shape[0];
      jobs.push_back({[moe, E, D] {
                        moe->gate_packed = pack_view(moe->gate_weight, E, D);
                        return moe->gate_packed->bytes();
                      },
                      {{&moe->gate_packed, E, D}}});
    }
    for (V41MhcWeights* m : {&b.hc_attn, &b.hc_ffn}) {
      if (!m->fn.data) continue;
      const int64_t nmix = m->fn.shape[0];
      jobs.push_back({[m, nmix, hc, D] {
                        m->fn_packed = pack_view(m->fn, nmix, hc * D);
                        return m->fn_packed->bytes();
                      },
                      {{&m->fn_packed, nmix, hc * D}}});
    }
  }
  jobs.push_back({[this, D] {
                    head_packed_ = pack_view(head_, config_.vocab_size, D);
                    return head_packed_->bytes();
                  },
                  {{&head_packed_, config_.vocab_size, D}}});
  packed_bytes_ = cache != nullptr ? cache->pack(jobs, pool) : run_pack_jobs(jobs, pool);
}

}  // namespace strata
