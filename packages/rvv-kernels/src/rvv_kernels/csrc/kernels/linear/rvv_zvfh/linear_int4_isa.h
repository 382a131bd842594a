// INT4 linear micro-kernels on RVV 1.0 with Zvfh: rvv/linear_int4_isa.h's kernels plus
// a W4A16 kernel for bf16 / fp16 activations that multiplies in fp16 and accumulates in
// fp32 (w4a16h_rows; linear_int4.cpp uses it when RVVK_INT4_W4A16_HALF is defined and
// the activations are not fp32 - fp32 activations keep the fp32 kernel).
//
// The driver hands it each row's activations as fp16 x' = x * 2^e (one power of two per
// row, chosen so that max|x'| lies in [2^14, 2^15): bf16 values convert exactly down to
// max|x| * 2^-31, smaller ones within 2^-25 in x' units), the group sums X_g = sum of
// the group's x' (rounded once to fp32) and the rows' 2^-e. Per byte row of the panel:
// one byte vector, its low (vand 15) and high (vsrl 4) nibbles, each widened to fp16 by
// vfwcvt.f.xu.v (exact: 0..15), then per row vfwmacc.vf x'_k * nibble into the group's
// fp32 sums S (the products of an 11-bit and a 4-bit significand are exact in fp32);
// a strip filling the panel's registers loads and unpacks four byte rows at once (LMUL
// x 4), the others go byte row by byte row. The zero point enters once per group: S starts at -z X_g (vfmul.vf), then y' +=
// scale * S (vfmacc.vv) into the rows' scaled sums y' (cx.ybuf); at the end
// out = y' * 2^-e + bias (one fused rounding).
//
// Against the fp32 kernel: two instructions write 32-bit lanes per nibble there
// (vfwcvt to fp32, vfmacc), one here (vfwmacc), the conversion writes 16-bit lanes.
// The results differ only by fp32 summation order (-z X_g + sum x q) and the
// conversion of activations below max|x| * 2^-31 (bf16) to fp16.
#pragma once

#include <riscv_vector.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "../rvv/linear_int4_isa.h"

#if !defined(__riscv_zvfh)
#error "rvv_zvfh/linear_int4_isa.h needs Zvfh"
#endif

#define RVVK_INT4_W4A16_HALF 1

namespace rvvk::RVVK_NS {
namespace int4isa {

// H<L32>: a strip's byte (L32 / 4), fp16 (L32 / 2) and fp32 (L32) vectors.
template <int L32>
struct H;
// Also four byte rows at once (U8x4, F16x4: four times the LMUL) and the fp16 vector of
// byte row j of them (part<j>: a register of the group, no instruction).
#define RVVK_INT4_H(L32, E8, E16, E32, E8X4, E16X4)                                          \
  template <>                                                                                \
  struct H<L32> {                                                                            \
    using U8 = vuint8##E8##_t;                                                               \
    using F16 = vfloat16##E16##_t;                                                           \
    using F = vfloat32##E32##_t;                                                             \
    using U8x4 = vuint8##E8X4##_t;                                                           \
    using F16x4 = vfloat16##E16X4##_t;                                                       \
    static U8x4 load8x4(const std::uint8_t* p, std::size_t vl4) {                            \
      return __riscv_vle8_v_u8##E8X4(p, vl4);                                                \
    }                                                                                        \
    template <int J>                                                                         \
    static F16 part(F16x4 v) {                                                               \
      return __riscv_vget_v_f16##E16X4##_f16##E16(v, J);                                     \
    }                                                                                        \
    static F loadf(const float* p, std::size_t vl) { return __riscv_vle32_v_f32##E32(p, vl); } \
    static F splatf(float x, std::size_t vl) { return __riscv_vfmv_v_f_f32##E32(x, vl); }    \
    /* bytes 0..255 as fp32, exactly (zero points) */                                        \
    static F bytes_f32(U8 b, std::size_t vl) {                                               \
      return __riscv_vfwcvt_f(__riscv_vfwcvt_f(b, vl), vl);                                  \
    }                                                                                        \
  };
RVVK_INT4_H(2, mf2, m1, m2, m2, m4)
RVVK_INT4_H(4, m1, m2, m4, m4, m8)
#undef RVVK_INT4_H

// Rows [0, MR) of a register block times one panel. xh: the rows' fp16 activations
// x' (element (k, i) at xh[k * MR + i], zero past k); xsum: X_g per row (row stride
// cx.groups); unscale: the rows' 2^-e.
template <int L32, int MR, class OutT>
void w4a16h_block(const Int4Ctx& cx, const std::uint8_t* panel, const _Float16* xh,
                  const float* xsum, const float* unscale, std::int64_t n0, OutT* out,
                  std::int64_t out_stride) {
  using T = Q<L32>;
  using V = H<L32>;
  using F = vec::F32<L32>;
  // Four byte rows per step where their eight nibble vectors fit beside the sums.
  constexpr bool kQuads = MR * L32 + 4 * L32 <= 20;
  const std::int64_t nr = cx.panel, cols_left = std::min(nr, cx.n - n0);
  for (std::int64_t c = 0; c < cols_left;) {
    const std::size_t vl = T::setvl(static_cast<std::size_t>(cols_left - c));
    {
      const typename V::F zero = V::splatf(0.0f, vl);
      for (int r = 0; r < MR; ++r) __riscv_vse32(cx.ybuf + r * nr + c, zero, vl);
    }
    for (std::int64_t g = 0; g < cx.groups; ++g) {
      // S starts at -z X_g (the zero points' term), so that the group ends with
      // y' += scale * S: no separate zeroing and subtraction.
      const typename V::F z = V::bytes_f32(T::load8(cx.zeros + g * cx.n + n0 + c, vl), vl);
#define RVVK_DECL(i) \
  typename V::F s##i = __riscv_vfmul(z, MR > i ? -xsum[i * cx.groups + g] : 0.0f, vl);
      RVVK_ROWS(RVVK_DECL)
#undef RVVK_DECL
      const std::int64_t ge = cx.group_end(g);
      const std::uint8_t* w = panel + cx.group_begin(g) * nr + c;
      const _Float16* xk = xh + 2 * cx.group_begin(g) * MR;
      // Tail-undisturbed widening FMAs (vl is the same throughout, so no lane differs):
      // they tie the accumulator to the destination, as in the fp32 kernel.
#define RVVK_MAC(i, f, off) \
  if constexpr (MR > i) s##i = __riscv_vfwmacc_tu(s##i, xk[(off) + i], f, vl);
#define RVVK_MAC0L(i) RVVK_MAC(i, l0, 0)
#define RVVK_MAC0H(i) RVVK_MAC(i, h0, MR)
#define RVVK_MAC1L(i) RVVK_MAC(i, l1, 2 * MR)
#define RVVK_MAC1H(i) RVVK_MAC(i, h1, 3 * MR)
#define RVVK_MAC2L(i) RVVK_MAC(i, l2, 4 * MR)
#define RVVK_MAC2H(i) RVVK_MAC(i, h2, 5 * MR)
#define RVVK_MAC3L(i) RVVK_MAC(i, l3, 6 * MR)
#define RVVK_MAC3H(i) RVVK_MAC(i, h3, 7 * MR)
      // Every row's FMAs with four byte rows' nibble vectors (l0 h0 ... l3 h3).
#define RVVK_MACS4                                                                    \
  RVVK_ROWS(RVVK_MAC0L) RVVK_ROWS(RVVK_MAC0H) RVVK_ROWS(RVVK_MAC1L) RVVK_ROWS(RVVK_MAC1H) \
  RVVK_ROWS(RVVK_MAC2L) RVVK_ROWS(RVVK_MAC2H) RVVK_ROWS(RVVK_MAC3L) RVVK_ROWS(RVVK_MAC3H)
      // A byte row's two fp16 nibble vectors.
#define RVVK_NIBBLES(j, p)                                                    \
  const typename V::U8 b##j = T::load8(p, vl);                                \
  const typename V::F16 l##j = __riscv_vfwcvt_f(__riscv_vand(b##j, 15, vl), vl); \
  const typename V::F16 h##j = __riscv_vfwcvt_f(__riscv_vsrl(b##j, 4, vl), vl);
      std::int64_t kb = cx.group_begin(g);
      // Four (kQuads) or two byte rows per step: their byte ops and conversions (one
      // vtype: SEW 8), then the widening FMAs (SEW 16): two vtypes per step.
      if constexpr (kQuads) {
        // A strip as wide as the panel (vl == nr) has its four byte rows in 4 vl
        // consecutive bytes: one load and one instruction per step for all four, at four
        // times the LMUL; when vl also fills the fp16 registers (vlmax, as for the panels
        // packed for this CPU), byte row j is register group j of the result.
        if (static_cast<std::int64_t>(vl) == nr && vl == F::vlmax()) {
          const std::size_t vl4 = 4 * vl;
          for (; kb + 4 <= ge; kb += 4, w += 4 * nr, xk += 8 * MR) {
            const typename V::U8x4 b = V::load8x4(w, vl4);
            const typename V::F16x4 lo = __riscv_vfwcvt_f(__riscv_vand(b, 15, vl4), vl4);
            const typename V::F16x4 hi = __riscv_vfwcvt_f(__riscv_vsrl(b, 4, vl4), vl4);
            const typename V::F16 l0 = V::template part<0>(lo), h0 = V::template part<0>(hi);
            const typename V::F16 l1 = V::template part<1>(lo), h1 = V::template part<1>(hi);
            const typename V::F16 l2 = V::template part<2>(lo), h2 = V::template part<2>(hi);
            const typename V::F16 l3 = V::template part<3>(lo), h3 = V::template part<3>(hi);
            RVVK_MACS4
          }
        }
        for (; kb + 4 <= ge; kb += 4, w += 4 * nr, xk += 8 * MR) {
          RVVK_NIBBLES(0, w)
          RVVK_NIBBLES(1, w + nr)
          RVVK_NIBBLES(2, w + 2 * nr)
          RVVK_NIBBLES(3, w + 3 * nr)
          RVVK_MACS4
        }
      }
      for (; kb + 2 <= ge; kb += 2, w += 2 * nr, xk += 4 * MR) {
        RVVK_NIBBLES(0, w)
        RVVK_NIBBLES(1, w + nr)
        RVVK_ROWS(RVVK_MAC0L)
        RVVK_ROWS(RVVK_MAC0H)
        RVVK_ROWS(RVVK_MAC1L)
        RVVK_ROWS(RVVK_MAC1H)
      }
      if (kb < ge) {  // an odd byte row left
        RVVK_NIBBLES(0, w)
        RVVK_ROWS(RVVK_MAC0L)
        RVVK_ROWS(RVVK_MAC0H)
      }
#undef RVVK_NIBBLES
#undef RVVK_MACS4
#undef RVVK_MAC2L
#undef RVVK_MAC2H
#undef RVVK_MAC3L
#undef RVVK_MAC3H
#undef RVVK_MAC0L
#undef RVVK_MAC0H
#undef RVVK_MAC1L
#undef RVVK_MAC1H
#undef RVVK_MAC
      const typename V::F sc = V::loadf(cx.scales + g * cx.n + n0 + c, vl);
      // y' += scale * (S - z X_g)
#define RVVK_EPI(i)                                                                \
  if constexpr (MR > i) {                                                          \
    float* y = cx.ybuf + i * nr + c;                                               \
    __riscv_vse32(y, __riscv_vfmacc(V::loadf(y, vl), sc, s##i, vl), vl);           \
  }
      RVVK_ROWS(RVVK_EPI)
#undef RVVK_EPI
    }
    // out = y' * 2^-e + bias
    const typename V::F b = cx.bias ? V::loadf(cx.bias + n0 + c, vl) : V::splatf(0.0f, vl);
    for (int r = 0; r < MR; ++r) {
      const typename V::F y = __riscv_vfmacc(b, unscale[r], V::loadf(cx.ybuf + r * nr + c, vl), vl);
      F::store(out + n0 + r * out_stride + c, y, vl);
    }
    c += static_cast<std::int64_t>(vl);
  }
}

// Register budget: per row one fp32 sum (L32) plus four or eight fp16 nibble vectors
// (L32 / 2 each).
template <class OutT>
void w4a16h_rows(int mr, const Int4Ctx& cx, const std::uint8_t* panel, const _Float16* xh,
                 const float* xsum, const float* unscale, std::int64_t n0, OutT* out,
                 std::int64_t out_stride) {
  switch (mr) {
#define RVVK_CASE(R, L)                                                                  \
  case R:                                                                                \
    return w4a16h_block<L, R, OutT>(cx, panel, xh, xsum, unscale, n0, out, out_stride);
    RVVK_CASE(1, 4) RVVK_CASE(2, 4) RVVK_CASE(3, 4) RVVK_CASE(4, 2)
    RVVK_CASE(5, 2) RVVK_CASE(6, 2) RVVK_CASE(7, 2) RVVK_CASE(8, 2)
#undef RVVK_CASE
  }
}

}  // namespace int4isa
}  // namespace rvvk::RVVK_NS
