// V4.1 forward-pass primitives with the reference's rounding points (scalar, batch-invariant).
//
// Temporary home (prefix v41_) until kernels/act_quant.h, kernels/block_gemm.h and
// kernels/yarn_rope.h land; to be consolidated there. Every function is a pure function of
// its inputs and computes each output row independently (same reduction order whatever M
// or the chunking), so chunked prefill == whole prefill bit-exactly.
//
// Conventions: activations are f32 arrays; "bf16 tensor" means every value is exactly a
// bf16 (rounded with round_to_bf16 at the reference's rounding points). Weights are
// V41Linear views (model/deepseek_v41_weights.h).
//
// Sources (numerics): DeepSeek V4.1 inference/model.py (linear, RMSNorm, Gate, Expert,
// Block.hc_*, apply_rotary_emb, precompute_freqs_cis) and the Tenstorrent CPU port of its
// kernels, kernel_cpu.py (act_quant, fp4_act_quant, fp8_gemm, fp4_gemm, sparse_attn,
// hc_split_sinkhorn); spec v41-architecture.md §2.1–§2.3, §2.7.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/quant_formats.h"
#include "model/deepseek_v41_weights.h"

namespace strata::v41 {

// Where a call's rows sit in the torch tensors whose element index decides SLEEF vs libm
// (torch_scalar_tail): row i of the call is token tok(i) of an n-token reference call.
//   * canonical (serving) form: every row is token 0 of a one-token call at its own
//     position ({0, 0, 1}): the shapes of a decode step, whatever the call's length, so a
//     position's numerics depend on its position and the tokens before it only;
//   * reference emulation: row i is token base + i of the reference's whole-prompt call of
//     n tokens ({base, 1, n}; docs/v41-parity.md "torch's scalar tail").
struct CallRows {
  int64_t base = 0;
  int64_t step = 0;
  int64_t n = 1;
  int64_t tok(int64_t i) const { return base + i * step; }
  static CallRows canonical() { return {0, 0, 1}; }
  static CallRows reference(int64_t base, int64_t n) { return {base, 1, n}; }
};

// The scalar FP8 / FP4 codec is kernels/quant_formats.h's (one implementation).
using quant::e2m1_decode;
using quant::e4m3_decode;
// 2^ceil(log2(x)) on the fp32 bit pattern (exponent field + 1 if mantissa != 0).
using quant::pow2_ceil;
// fp32 -> nearest E4M3 value (RNE, saturating at +-448), returned as f32; NaN passes through.
inline float round_e4m3(float x) { return x != x ? x : quant::e4m3_round(x); }
// fp32 in [-6, 6] -> nearest E2M1 value (RNE on the code grid), sign of zero kept.
inline float round_e2m1(float x) { return quant::e2m1_round(x); }

// FP8 activation quant of one row (block `block` along K): writes the E4M3 values q[k]
// (unscaled) and one power-of-two scale per block. x must hold bf16 values.
void act_quant_row(const float* x, int64_t K, int block, float* q, float* scales);
// In-place QDQ to FP8 (ue8m0 scales, block 32): x <- bf16(q * s). act_quant(inplace=True).
void qdq_fp8(float* x, int64_t n, int block);
// In-place QDQ to FP4: E8M0 power-of-two scale per `block` (indexer, block 32) or E4M3 scale
// per `block` (compressed KV, block 16). fp4_act_quant(inplace=True).
void qdq_fp4_e8m0(float* x, int64_t n, int block);
void qdq_fp4_e4m3(float* x, int64_t n, int block);

// y[M, out] = linear(x[M, in]) as model.py `linear` does it:
//   FP8 weight: act_quant(x) then block-scaled GEMM (fp32 partial per 32-wide K block, scaled
//               partials added in K order), output rounded to bf16.
//   FP4 weight: same with E2M1 weights and per-row-per-32 scales.
//   BF16 weight: F.linear in bf16 (fp32 accumulate, output rounded to bf16).
// When `w.packed` is set (DeepseekV41Weights::pack_for_kernels) the vector kernels of
// kernels/block_gemm.h and kernels/seq_gemm.h run it, split over output features on `pool`
// (may be null); they use the same reduction order, so results are bit-identical.
void linear(const float* x, int64_t M, const V41Linear& w, float* y, ThreadPool* pool = nullptr);
// The attention's grouped low-rank output projection (V4 and V4.1 Attention, einsum
// "bsgd,grd->bsgr" over the bf16-dequantized wo_a, as convert.py prepares it): for each of
// `groups` groups g, u[s, g*R + r] = bf16(f64 sum over k of o[s, g*Dg + k] * wo_a[g*R + r, k])
// with Dg = K / groups and R = wo_a rows / groups. o: [S, K]; u: [S, wo_a rows]. FP8 weights
// packed for the kernels (R % 8 == 0) run kernels::fp8_dequant_gemm_f64_grouped (same bits);
// otherwise the scalar loop over FP8 or BF16 wo_a. Thread safety: pure.
void grouped_wo_a(const float* o, int64_t S, int64_t K, const V41Linear& wo_a, int64_t groups,
                  int64_t R, float* u, ThreadPool* pool = nullptr);
// Points `job` at a packed FP8/FP4 weight and sets the activation block linear() quantizes
// x in for it (FP8: the weight's block_k; FP4: 32); false (job untouched) when `p` is null
// or the kind is BF16/F32.
bool packed_gemm_job(const V41PackedLinear* p, V41WeightKind kind, kernels::PackedGemmJob* job,
                     int* block);
// linear() of several weights on the same x [M, in]: y[i] = linear(x, w[i]). When every
// weight is packed FP8 or FP4, x is quantized once per activation block size and all the
// GEMMs run as one pool dispatch (kernels::gemm_packed_batch); otherwise one linear() per
// weight. Bit-identical to calling linear() for each (same quantization, same kernels).
// Shapes: every w[i].in equal to x's width; y[i] [M, w[i].out]; n <= 8.
void linear_batch(const float* x, int64_t M, const V41Linear* const* w, float* const* y, int n,
                  ThreadPool* pool = nullptr);
// F.linear with the weight promoted to fp32 (x f32), output left in fp32 (no rounding).
// Used for compressor wkv/wgate (ratio > 1), the MoE gate, the mHC mixes and the LM head.
// `packed`: the same weight repacked (kernels/seq_gemm.h), used when non-null.
void linear_f32(const float* x, int64_t M, const TensorView& w_bf16_or_f32, int64_t out,
                int64_t in, float* y, const kernels::PackedSeqWeight* packed = nullptr,
                ThreadPool* pool = nullptr);

// Sum of n fp32 values in the order of torch's CPU reduction kernel for a contiguous inner
// dimension (aten SumKernel.cpp vectorized_inner_sum / row_sum / multi_row_sum: `lanes`-wide
// vector accumulators, 4-way ILP, 4-level cascade; scalar tail, then the lanes in order).
// lanes = 8 (AVX2 build of the reference) by default; 16 for AVX-512. V41_SUM_LANES overrides.
float torch_sum(const float* x, int64_t n);
int torch_sum_lanes();

// torch.topk(largest=True) on one CPU row, reproducing its tie order: (value, index) pairs
// in index order, then std::partial_sort when k*64 <= n, else std::nth_element at k-1
// (+ std::sort of the first k-1 when `sorted`), comparator `a.value > b.value` only
// (aten/src/ATen/native/cpu/SortingKernel.cpp topk_impl_loop). Returns the k indices in the
// resulting queue order. The partial_sort case scans the row with a vector compare against
// the heap's current worst entry and runs libstdc++'s heap steps only for the entries that
// replace it (same heap operations in the same order, hence the same result: v41_topk_test
// compares with std::partial_sort on rows full of ties, -inf and NaN). Thread safety: pure.
// (v41_topk.cc)
std::vector<int32_t> torch_topk(const float* v, int64_t n, int64_t k, bool sorted);
// torch_topk of the row of n entries that are -inf except v[idx[j]] = val[j] for j < m (idx
// ascending, < n) -- the indexer's row masked to its candidates -- without building the row
// when k * 64 <= n (an -inf entry past the first k never enters the heap). Same result as
// torch_topk on that row (v41_topk_test). Thread safety: pure. (v41_topk.cc)
std::vector<int32_t> torch_topk_sparse(int64_t n, const int32_t* idx, const float* val, int64_t m,
                                       int64_t k, bool sorted);

// RMSNorm: y = bf16(w * (x * rsqrt(mean(x^2) + eps))), per row of n. w BF16 [n] (or null).
void rms_norm(const float* x, int64_t rows, int64_t n, const TensorView* w, double eps, float* y);

// Rotary tables for one layer: complex exponentials per position, pairs (cos, sin) as f32,
// exactly as precompute_freqs_cis (YaRN when original_seq_len > 0).
class RopeTable {
 public:
  RopeTable() = default;
  RopeTable(int rope_dim, double theta, int64_t original_seq_len, double factor,
            double beta_fast, double beta_slow);
  // Rotates the last rope_dim values of x (pairs 2i, 2i+1) at position pos; inverse
  // conjugates. Result rounded to bf16 (the reference rotates bf16 tensors in place).
  void apply(float* x_tail, int64_t pos, bool inverse) const {
    apply_heads(x_tail, 1, 0, pos, inverse);
  }
  // apply() to n vectors at x_tail + h * stride (h < n), all at position pos: the cos / sin of
  // the position computed once for all of them (the same values apply() uses).
  void apply_heads(float* x_tail, int64_t n, int64_t stride, int64_t pos, bool inverse) const;
  int rope_dim() const { return rope_dim_; }

 private:
  int rope_dim_ = 0;
  std::vector<float> freqs_;  // [rope_dim/2]
};

// One sparse-attention query (one head): K = V rows `kv[idx[t]]` (nullptr entries are
// invalid, the kernel's -1), online softmax over blocks of 64 list entries with bf16
// probabilities in the PV product, fp32 denominator, attention sink. out[d] rounded to bf16.
// `qh` = reference query * n_heads + head and `SH` = reference queries * n_heads locate the
// exps in torch's tensors (scalar tail, see torch_exp_at); SH = 0: SLEEF everywhere.
// `scores`: the n_rows scaled scores of this head precomputed by qk_scores_heads (null: they
// are computed here, with the same arithmetic).
void sparse_attn_head(const float* q, const float* const* rows, int64_t n_rows, int64_t d,
                      float sink, float scale, float* out, int64_t qh = 0, int64_t SH = 0,
                      const float* scores = nullptr);
// sparse_attn_head for heads [0, n_heads) of one query against one shared list of rows (MQA):
// head h reads q[h*d..], sinks[h], scores + h*n_rows (required, from qk_scores_heads) and
// writes out[h*d..]; its reference position is qh0 + h. The same arithmetic per head, in the
// same order, as sparse_attn_head (bit-identical), but the PV products of 8 heads at a time
// load each KV row once (sparse_attn_head streams every row once per head).
void sparse_attn_heads(const float* const* rows, int64_t n_rows, int64_t d, int64_t n_heads,
                       const float* sinks, const float* scores, float* out, int64_t qh0,
                       int64_t SH);
// The scores of every head against one shared list of rows (MQA: one KV head), for
// sparse_attn_head's `scores` argument: out[h * n_rows + t] = scale * (sequential fma over
// i of qT[i * n_heads + h] * rows[t][i]), -inf for null rows. Vectorized over heads (same
// bits as the per-head loop). qT: [d][n_heads] f32, rows [t0, t1) only.
void qk_scores_heads(const float* qT, const float* const* rows, int64_t n_rows, int64_t d,
                     int64_t n_heads, float scale, float* out, int64_t t0, int64_t t1);

// Indexer dot products of one key against every head: out[h] = sum over j in order of
// qT[j * n_heads + h] * key[j], accumulated in f64 (each f64 product of two f32 values is
// exact, so the fused and unfused steps agree). Vectorized over heads: same bits as the
// scalar loop. qT: [d][n_heads] f64, key: [d] f32, out: [n_heads] f64.
void index_dots(const double* qT, const float* key, int64_t d, int64_t n_heads, double* out);
// index_dots for n_keys keys at once: out[r * n_heads + h] for keys[r] (each [d] f32; a null
// key counts as all zeros). Same bits as n_keys index_dots calls; on AVX-512 CPUs 4 keys run
// together (8 independent f64 FMA chains at 16 heads instead of 2: the single-key loop is
// bound by FMA latency). Thread safety: pure.
void index_dots_keys(const double* qT, const float* const* keys, int64_t n_keys, int64_t d,
                     int64_t n_heads, double* out);

// The indexer's dots from FP4 codes (v41_index_fp4.cc). The query (n_heads rows of d values,
// already FP4-QDQ'd with UE8M0 scales per 32, as the indexer's query is) in the stored
// index-key format: per head d/2 packed E2M1 bytes (even element in the low nibble) and d/32
// UE8M0 scales.
struct IndexQueryFp4 {
  int64_t n_heads = 0, d = 0;
  std::vector<uint8_t> codes, scales;
  void set(const float* q, int64_t n_heads, int64_t d);  // re-encoding QDQ'd values is exact
};
// out[r * n_heads + h] = sum over blocks b = 0..d/32-1, in order, in f64 (from 0.0), of
// I_b * 2^(eq_b + ek_b - 256), I_b = the exact integer sum over the block's 32 elements of
// (2 q_j / sq_b) * (2 k_j / sk_b). Each I_b term is exact, so this equals the exact dot
// product (and the sequential f64 FMA chain of index_dots, term for term) whenever the
// block exponents differ by less than ~39 binades -- always for the indexer's rotated rows --
// and is the defined rounding otherwise. keys[r]: a stored index-key row ([d/2 codes][d/32
// scales]); null = zeros. On AVX2 CPUs with d = 64 or 128 and n_heads % 4 == 0 the integer sums
// run in maddubs / hadd (same bits; v41_ops_test). Thread safety: pure.
void index_dots_fp4(const IndexQueryFp4& q, const uint8_t* const* keys, int64_t n_keys,
                    double* out);
namespace ref {
void index_dots_fp4(const IndexQueryFp4& q, const uint8_t* const* keys, int64_t n_keys,
                    double* out);
}
// The indexer's key scores straight from the codes: index_weighted_scores(index_dots_fp4(...))
// for keys[0 .. n_keys), w [n_heads] (bf16 values), score [n_keys] -- the same bits. On CPUs
// with AVX-512 VNNI (AVX-512 on, d = 64 or 128) 16 keys run at once: key bytes transposed to
// lanes, products by VPDPBUSD (exact integer block sums), then per lane the reference's f64
// block order -- or, for d = 64 where both block products are normal f32 values, one f32 FMA
// of the two exact products, which rounds to the same f32 (v41_index_vnni.cc) -- and the
// weighting as the reference (v41_ops_test compares bit patterns). Thread safety: pure.
void index_scores_fp4(const IndexQueryFp4& q, const uint8_t* const* keys, int64_t n_keys,
                      const float* w, float* score);

// The indexer's per-key score from its per-head dots (reference Indexer.forward: relu of the
// bf16 dots, times the bf16 head weights, summed over heads, bf16): for r < n_keys,
//   score[r] = bf16(sum over h = 0.. in order, f32, of bf16(max(bf16(float(dots[r*n_heads+h])),
//              0) * w[h])),
// max keeping a NaN dot. On AVX2 CPUs 8 keys run in the lanes of one vector, each lane the
// scalar sequence (same bits; v41_ops_test). dots [n_keys, n_heads] f64, w [n_heads] (bf16
// values), score [n_keys]. Thread safety: pure. (v41_index_scores.cc)
void index_weighted_scores(const double* dots, int64_t n_keys, int64_t n_heads, const float* w,
                           float* score);
namespace ref {
void index_weighted_scores(const double* dots, int64_t n_keys, int64_t n_heads, const float* w,
                           float* score);
}

// expf with SLEEF xexpf (u10, FMA) arithmetic, as torch's AVX2 vectorized exp.
float sleef_expf(float x);
// The experts' SwiGLU on one row of n values, as the reference's Expert.forward:
// h[k] = bf16(w · ((g'/(1 + sleef_expf(-g'))) · u')) with g' = min(g[k], lim) and
// u' = clamp(u[k], -lim, lim) when `clamp` (else g, u as they are), w = *route_w (no factor
// when null). On AVX-512 CPUs 16 lanes run the scalar operations in the same order (same bits,
// NaN and infinities included). h may alias g or u. Thread safety: pure.
void swiglu_bf16(const float* g, const float* u, int64_t n, float lim, bool clamp,
                 const float* route_w, float* h);
// powf for x > 0 as SLEEF's xpowf (u10, FMA; ATen's AVX2 Vectorized<float>::pow), used for
// the RoPE base frequencies theta^(2i/d) (precompute_freqs_cis).
float sleef_powf(float x, float y);

// mHC: pre [hc], post [hc], comb [hc*hc] (row i = source stream, column j = destination)
// from the mixes row [(2+hc)*hc] (hc_split_sinkhorn).
// `tok` / `ntok`: this token's index in the reference call and that call's token count (the
// pre/post sigmoids run over [ntok, hc] tensors; see torch_exp_at). ntok = 0: SLEEF only.
void hc_split_sinkhorn(const float* mixes, const float* scale, const float* base, int hc,
                       int iters, float eps, float* pre, float* post, float* comb,
                       int64_t tok = 0, int64_t ntok = 0);

// torch's elementwise CPU loops (cpu_kernel_vec -> vectorized_loop) run 2*Vec::size() = 16
// fp32 elements per step with the vectorized op and the last (n mod 16) elements of a
// contiguous n-element tensor with the scalar op. For exp / sigmoid / softplus the vector op
// is SLEEF (expf_u10, log1pf_u10) and the scalar op libm (expf, log1pf). So a decode step
// (1-token call: [1, hc] mHC mixes, [1, E] gate, [1, H] attention rescale / sink) computes
// these with libm, and the last rows of an odd-sized prompt call too. True when element e of
// an n-element tensor is in the scalar tail (n = 0: unknown, treated as vectorized).
inline bool torch_scalar_tail(int64_t e, int64_t n) { return n > 0 && e >= (n / 16) * 16; }
// torch.exp / the exp inside torch.sigmoid for element e of an n-element fp32 tensor.
float torch_exp_at(float x, int64_t e, int64_t n);
// F.softplus (beta 1, threshold 20) for element e of an n-element fp32 tensor.
float torch_softplus_at(float x, int64_t e, int64_t n);

}  // namespace strata::v41
