// FP8 e4m3 weight decoding for linear_fp8.cpp on RVV 1.0 (no fp8 or fp16 arithmetic
// needed). Defines rvvk::RVVK_NS::Fp8Weights<L>.
#pragma once

#include <riscv_vector.h>

#include <cstddef>
#include <cstdint>

#include "rvvk/detail/dispatch.h"
#include "rvvk/detail/vec.h"

namespace rvvk::RVVK_NS {
namespace {

// Fp8Weights<L> decodes e4m3 bytes into fp32 lanes (LMUL L) holding fp8 value *
// 2^kExponent, exactly: the byte sign-extended to 32 bits and shifted left by 20 (sign at
// bit 31, the 4 exponent and 3 mantissa bits at bits 20..26: an fp32 whose exponent bias
// 7 is read as 127, so the value times 2^-120, e4m3 subnormals landing on fp32
// subnormals), with the sign copies in bits 27..30 cleared. 0x7f / 0xff (e4m3fn's NaN)
// decode as +-480, not NaN.
//  - load(p, vl): bytes p[0, vl) in one element width (vsext.vf4, vsll.vi, vand.vx: no
//    vtype change).
//  - load2(p0, p1, vl, fn) / load4(p, stride, vl, fn): fn(decoded vectors) for two / four
//    byte vectors (load4's `stride` bytes apart), the sign-extend-and-shift done as two
//    widening multiplies, signed byte x 64 into 16 bits and that x 2^14 into 32 bits
//    (vwmul.vx): the first works on half-width lanes, so it costs half a vsext.vf4 or
//    vsll.vi on the 32-bit lanes. All vectors go through each stage together, so the
//    element width changes once per stage for the group; the mask is tail-undisturbed
//    like mac, so the 32-bit stage runs under one vtype.
//  - mac(sum, x, w, vl): sum + x * w for the groups, tail-undisturbed: the compiler then
//    keeps vfmacc.vf in sum's registers (not vfmadd.vf into the decoded weight's, which
//    a group pays with a register copy).
template <int L>
struct Fp8Weights {
  using F = vec::F32<L>;
  using T = vec::rvv::Lmul<L>;
  static constexpr int kExponent = -120;
  static constexpr auto kMask = static_cast<std::int32_t>(0x87f00000u);

  static typename F::V load(const std::uint8_t* p, std::size_t vl) {
    const typename T::I8 b = T::le_i8(reinterpret_cast<const std::int8_t*>(p), vl);
    const typename T::I w = __riscv_vsll(__riscv_vsext_vf4(b, vl), 20, vl);
    return T::as_f(__riscv_vand(w, kMask, vl));
  }
  static typename T::I16 widen16(const std::uint8_t* p, std::size_t vl) {
    const typename T::I8 b = T::le_i8(reinterpret_cast<const std::int8_t*>(p), vl);
    return __riscv_vwmul(b, std::int8_t{64}, vl);
  }
  static typename T::I widen32(typename T::I16 h, std::size_t vl) {
    return __riscv_vwmul(h, std::int16_t{16384}, vl);
  }
  static typename F::V mask(typename T::I i, std::size_t vl) {
    return T::as_f(__riscv_vand_tu(i, i, kMask, vl));
  }
  template <class Fn>
  RVVK_ALWAYS_INLINE static void load2(const std::uint8_t* p0, const std::uint8_t* p1,
                                       std::size_t vl, Fn&& fn) {
    const typename T::I16 h0 = widen16(p0, vl), h1 = widen16(p1, vl);
    const typename T::I i0 = widen32(h0, vl), i1 = widen32(h1, vl);
    fn(mask(i0, vl), mask(i1, vl));
  }
  template <class Fn>
  RVVK_ALWAYS_INLINE static void load4(const std::uint8_t* p, std::ptrdiff_t stride,
                                       std::size_t vl, Fn&& fn) {
    const typename T::I16 h0 = widen16(p, vl), h1 = widen16(p + stride, vl),
                          h2 = widen16(p + 2 * stride, vl), h3 = widen16(p + 3 * stride, vl);
    const typename T::I i0 = widen32(h0, vl), i1 = widen32(h1, vl), i2 = widen32(h2, vl),
                        i3 = widen32(h3, vl);
    fn(mask(i0, vl), mask(i1, vl), mask(i2, vl), mask(i3, vl));
  }
  static typename F::V mac(typename F::V sum, float x, typename F::V w, std::size_t vl) {
    return __riscv_vfmacc_tu(sum, x, w, vl);
  }
};

}  // namespace
}  // namespace rvvk::RVVK_NS
