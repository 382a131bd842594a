// FP8 e4m3 weight decoding for linear_fp8.cpp on RVV 1.0 with Zvfh: the byte becomes
// an fp16 by two 16-bit integer instructions and the hardware widens it to fp32.
// Defines rvvk::RVVK_NS::Fp8Weights<L>.
#pragma once

#include <riscv_vector.h>

#include <cstddef>
#include <cstdint>

#include "rvvk/detail/dispatch.h"
#include "rvvk/detail/vec.h"

#if !defined(__riscv_zvfh)
#error "rvv_zvfh/linear_fp8_isa.h needs Zvfh"
#endif

namespace rvvk::RVVK_NS {
namespace {

// int16 vector bits as fp16, per LMUL of the fp32 lanes (the intrinsic's name carries it).
template <int L>
struct Fp8Half;
#define RVVK_FP8_HALF(L, H)                                                \
  template <>                                                              \
  struct Fp8Half<L> {                                                      \
    static vfloat16##H##_t as_f16(vint16##H##_t v) {                       \
      return __riscv_vreinterpret_v_i16##H##_f16##H(v);                    \
    }                                                                      \
  };
RVVK_FP8_HALF(1, mf2)
RVVK_FP8_HALF(2, m1)
RVVK_FP8_HALF(4, m2)
RVVK_FP8_HALF(8, m4)
#undef RVVK_FP8_HALF

// Fp8Weights<L>::load(p, vl): the e4m3 bytes p[0, vl) as fp32 lanes (LMUL L) holding
// fp8 value * 2^kExponent, exactly: the signed byte times 128 (vwmulsu.vx) puts the sign
// at bits 14..15 and the 4 exponent and 3 mantissa bits at bits 7..13, clearing bit 14
// leaves an fp16 whose exponent bias 7 is read as 15 (the value times 2^-8, e4m3
// subnormals landing on fp16 subnormals), and vfwcvt.f.f.v widens it exactly: one
// instruction writing 32-bit lanes per vector, where the integer-only decode
// (rvv/linear_fp8_isa.h) needs two. 0x7f / 0xff (e4m3fn's NaN) decode as +-480, not NaN,
// as in the integer decode. load2 / load4 and mac as there.
template <int L>
struct Fp8Weights {
  using F = vec::F32<L>;
  using T = vec::rvv::Lmul<L>;
  static constexpr int kExponent = -8;
  // sum + x * w for the groups, tail-undisturbed (as rvv/linear_fp8_isa.h's: no register
  // copy after a commuted vfmadd.vf).
  static typename F::V mac(typename F::V sum, float x, typename F::V w, std::size_t vl) {
    return __riscv_vfmacc_tu(sum, x, w, vl);
  }
  static typename F::V load(const std::uint8_t* p, std::size_t vl) {
    const typename T::I8 b = T::le_i8(reinterpret_cast<const std::int8_t*>(p), vl);
    const typename T::I16 h =
        __riscv_vand(__riscv_vwmulsu(b, std::uint8_t{128}, vl), std::int16_t{-16385}, vl);
    return __riscv_vfwcvt_f(Fp8Half<L>::as_f16(h), vl);
  }
  // Two (load2) or four (load4: `stride` bytes apart) byte vectors stage by stage: one
  // vtype change per stage for all.
  template <class Fn>
  RVVK_ALWAYS_INLINE static void load2(const std::uint8_t* p0, const std::uint8_t* p1,
                                       std::size_t vl, Fn&& fn) {
    const typename T::I8 b0 = T::le_i8(reinterpret_cast<const std::int8_t*>(p0), vl);
    const typename T::I8 b1 = T::le_i8(reinterpret_cast<const std::int8_t*>(p1), vl);
    const typename T::I16 m0 = __riscv_vwmulsu(b0, std::uint8_t{128}, vl);
    const typename T::I16 m1 = __riscv_vwmulsu(b1, std::uint8_t{128}, vl);
    const typename T::I16 h0 = __riscv_vand(m0, std::int16_t{-16385}, vl);
    const typename T::I16 h1 = __riscv_vand(m1, std::int16_t{-16385}, vl);
    fn(__riscv_vfwcvt_f(Fp8Half<L>::as_f16(h0), vl),
       __riscv_vfwcvt_f(Fp8Half<L>::as_f16(h1), vl));
  }
  template <class Fn>
  RVVK_ALWAYS_INLINE static void load4(const std::uint8_t* p, std::ptrdiff_t stride,
                                       std::size_t vl, Fn&& fn) {
    const auto* q = reinterpret_cast<const std::int8_t*>(p);
    const typename T::I8 b0 = T::le_i8(q, vl);
    const typename T::I8 b1 = T::le_i8(q + stride, vl);
    const typename T::I8 b2 = T::le_i8(q + 2 * stride, vl);
    const typename T::I8 b3 = T::le_i8(q + 3 * stride, vl);
    const typename T::I16 m0 = __riscv_vwmulsu(b0, std::uint8_t{128}, vl);
    const typename T::I16 m1 = __riscv_vwmulsu(b1, std::uint8_t{128}, vl);
    const typename T::I16 m2 = __riscv_vwmulsu(b2, std::uint8_t{128}, vl);
    const typename T::I16 m3 = __riscv_vwmulsu(b3, std::uint8_t{128}, vl);
    const typename T::I16 h0 = __riscv_vand(m0, std::int16_t{-16385}, vl);
    const typename T::I16 h1 = __riscv_vand(m1, std::int16_t{-16385}, vl);
    const typename T::I16 h2 = __riscv_vand(m2, std::int16_t{-16385}, vl);
    const typename T::I16 h3 = __riscv_vand(m3, std::int16_t{-16385}, vl);
    fn(__riscv_vfwcvt_f(Fp8Half<L>::as_f16(h0), vl),
       __riscv_vfwcvt_f(Fp8Half<L>::as_f16(h1), vl),
       __riscv_vfwcvt_f(Fp8Half<L>::as_f16(h2), vl),
       __riscv_vfwcvt_f(Fp8Half<L>::as_f16(h3), vl));
  }
};

}  // namespace
}  // namespace rvvk::RVVK_NS
