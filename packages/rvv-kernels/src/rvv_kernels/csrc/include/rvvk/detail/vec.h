// The vector layer: the only place that knows the ISA.
//
// Kernels are written once against rvvk::vec::F32<LMUL> (and friends) and
// compiled once per variant. On RISC-V with V the traits map to RVV 1.0
// intrinsics (VLEN-agnostic: every loop is strip-mined with setvl); in the
// x86_avx512, x86_avx512_bf16 and x86_amx variants to AVX-512 intrinsics acting
// as a VLEN-512 unit (vec_avx512.h; x86_avx512_bf16 also gives decode attention
// bf16 dot products, x86_amx extend attention AMX tiles); in
// x86_avx2 to AVX2 + FMA + F16C acting as a VLEN-256 unit (vec_avx2.h; both x86
// layers are vec_x86.h's F32<L> over their register traits);
// elsewhere, and for the scalar "-march=rv64gc" build, to a portable emulation
// of a vector unit in plain C++.
//
// RVV types are sizeless, so the layer is a set of traits with static member
// functions templated on LMUL, never a class holding a vector.
//
// Conventions shared by every implementation:
//  - `vl` is the active length returned by setvl(); lanes >= vl of a result are
//    unspecified (tail agnostic) unless the function ends in `_tu`, which leaves
//    lanes >= vl of its first argument unchanged.
//  - load<T>/store<T> convert between storage type T (float, bf16, f16) and
//    fp32 lanes; rounding to bf16/f16 is round-to-nearest-even.
//  - load_strided<T>/store_strided<T> do the same for elements `stride`
//    elements apart (float, bf16, f16).
//  - exp, tanh and erf are fp32 approximations on RVV, AVX-512 and AVX2 (a few
//    ulp), written once in vec_math.h over each ISA's register traits, and the C
//    library's functions in the portable layer.
//    exp_nonpositive is exp for x <= 0 only (a softmax's score minus its max;
//    x > 0 unspecified), fewer instructions where the layer has a cheaper form;
//    both give exactly 0 below -87.33654.
#pragma once

#include "rvvk/detail/scalar.h"

// For the unrolled steps of the kernels' inner loops (lambdas): an out-of-line
// step passes its vectors through memory.
#define RVVK_ALWAYS_INLINE __attribute__((always_inline))

#define RVVK_CONCAT_(a, b) a##b
#define RVVK_CONCAT(a, b) RVVK_CONCAT_(a, b)
#ifndef RVVK_VARIANT
#error "RVVK_VARIANT must name the variant being compiled (portable, rvv, rvv_zvfh, x86_avx2, x86_avx512, x86_avx512_bf16, x86_amx)"
#endif
// Namespace that holds this translation unit's variant of every kernel and of
// the vector layer itself (the variants' inline functions must not merge at
// link time).
#define RVVK_NS RVVK_CONCAT(v_, RVVK_VARIANT)

#if defined(__riscv_v_intrinsic)
#include "rvvk/detail/vec_rvv.h"
#else
#if defined(RVVK_VEC_AVX512)
#include "rvvk/detail/vec_avx512.h"
#elif defined(RVVK_VEC_AVX2)
#include "rvvk/detail/vec_avx2.h"
#else
#include "rvvk/detail/vec_portable.h"
#endif

namespace rvvk::RVVK_NS::vec {
// Every layer but RVV's acts as a vector unit of a fixed VLEN (its kVlenBits)
// without Zvfh.
inline constexpr bool kIsRvv = false;
inline constexpr bool kHasZvfh = false;
inline std::size_t vlen_bits() { return kVlenBits; }
}  // namespace rvvk::RVVK_NS::vec
#endif
