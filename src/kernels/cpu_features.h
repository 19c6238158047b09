// CPU feature detection and kernel-ISA selection.
//
// Every kernel has a plain scalar reference and (where it matters) an AVX2/FMA version
// compiled with __attribute__((target("avx2,fma"))), selected at run time. The scalar
// references emulate the exact 8-lane FMA accumulation order of the AVX2 versions, so the
// two produce bit-identical results: a model's numerics do not depend on which CPU runs it.
//
// Thread safety: detection is done once; force_isa() is for tests/benchmarks only and must
// not race with running kernels.
#pragma once

namespace strata::kernels {

enum class Isa { kScalar, kAvx2 };

// True when the CPU supports AVX2 and FMA.
bool cpu_has_avx2_fma();
// The ISA kernels use now (kAvx2 when available, unless forced).
Isa active_isa();
// Forces an ISA (kAvx2 is ignored when the CPU lacks it). For tests and benchmarks.
void force_isa(Isa isa);
const char* isa_name(Isa isa);
// AVX-512 (F, BW, VL, DQ) decode kernels (kernels/block_gemm.cc, kernels/fp8_einsum.cc), used
// on top of the AVX2 ISA when the CPU has them and they are enabled (default: enabled, unless
// the environment sets STRATA_AVX512=0). Results are bit-identical either way; tests switch
// them off to compare.
bool avx512_enabled();
// The CPU has AVX-512 F, BW, VL and DQ (and F16C), as the AVX-512 kernels require.
bool cpu_has_avx512();
// The AVX-512 decode kernels run: AVX2 ISA active, AVX-512 enabled, and the CPU has it.
bool avx512_active();
void set_avx512_enabled(bool on);
// AVX-512 extension paths of the decode kernels (kernels/block_gemm_avx512.cc), on top of
// avx512_active() when the CPU has AVX512_VBMI and AVX512_BF16: FP8 weights multiplied by
// VDPBF16PS in the chain's order (kernels/block_gemm_avx512.cc), FP4 weights multiplied by
// VDPBF16PS on activation blocks whose partial sums are provably exact. Default enabled unless the environment sets
// STRATA_AVX512_EXT=0; results are bit-identical either way.
bool cpu_has_avx512_ext();
bool avx512_ext_active();
void set_avx512_ext_enabled(bool on);

}  // namespace strata::kernels
